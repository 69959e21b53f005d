"""``rocmlab smoke`` end to end on the CPU with real data: every exit code and the JSON report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import torch
from rocmlab_testutil import copy_dataset, run_cli

from rocmlab.smoke.report import REPORT_SCHEMA

needs_no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="this host has a GPU")


def smoke(data: Path, json_path: Path, *args: str) -> tuple[int, str, str, dict[str, Any] | None]:
    result = run_cli("smoke", "--data", str(data), "--json", str(json_path), *args)
    report = json.loads(json_path.read_text()) if json_path.exists() else None
    if report is not None:
        jsonschema.validate(report, REPORT_SCHEMA)
    return result.returncode, result.stdout, result.stderr, report


@pytest.fixture(scope="module")
def mnist_one_epoch(
    real_data: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> tuple[int, str, str, dict[str, Any]]:
    out = tmp_path_factory.mktemp("smoke") / "report.json"
    code, stdout, stderr, report = smoke(
        real_data["mnist"], out, "--epochs", "1", "--device", "cpu"
    )
    assert report is not None, stderr
    return code, stdout, stderr, report


def test_one_epoch_on_real_mnist_passes_its_gate(mnist_one_epoch: tuple) -> None:
    code, stdout, stderr, report = mnist_one_epoch
    assert code == 0, stdout + stderr
    assert report["passed"] is True and report["exit_code"] == 0
    assert report["min_accuracy"] == 0.94  # default recipe, 1 epoch
    assert report["test_accuracy"] >= 0.94
    assert "epoch 1/1  loss" in stdout
    assert "rocmlab smoke: PASSED" in stdout


def test_report_fields(mnist_one_epoch: tuple) -> None:
    report = mnist_one_epoch[3]
    assert report["backend"] == "cpu" and report["torch_build"] == "cpu"
    assert report["device"] == "cpu" and report["device_name"]
    assert report["gfx_arch"] is None and report["hip_version"] is None
    assert report["torch_version"] == torch.__version__
    assert set(report["gpu_env"]) >= {"HSA_OVERRIDE_GFX_VERSION", "ROCR_VISIBLE_DEVICES"}
    assert (report["dataset"], report["epochs"], report["batch_size"]) == ("mnist", 1, 128)
    assert report["amp_dtype"] is None  # auto is off on the CPU
    assert report["world_size"] == 1 and report["ranks"] == []
    assert report["train_seconds"] > 0
    assert report["samples_per_second"] == pytest.approx(60000 / report["train_seconds"])
    assert len(report["epoch_stats"]) == 1
    assert report["epoch_stats"][0]["test_accuracy"] == report["test_accuracy"]
    assert report["loss_last"] < report["loss_first"]
    assert 0 <= report["gpu_cpu_max_abs_diff"] < 1e-4
    assert report["numeric_tolerance"] == {"float32": {"atol": 1e-9, "rtol": 1e-4}}
    assert report["matmul_tflops"]["float32"] > 0
    names = [check["name"] for check in report["checks"]]
    assert names == ["device", "numeric", "matmul", "loss_falls", "accuracy"]
    assert all(check["passed"] for check in report["checks"])
    assert "GPU-vs-CPU comparison not applicable" in report["checks"][0]["detail"]
    assert (report["model"], report["techniques"]) == ("mlp", [])
    assert report["amp_speedup"] is None and report["profile"] is None
    assert report["doctor"] is None
    assert report["checks"][1]["detail"].startswith("cpu float32 vs cpu float64")


def test_cnn_reaches_its_gate_on_real_fashion_mnist(
    real_data: dict[str, Path], tmp_path: Path
) -> None:
    # One epoch on the whole training set: the gate is about training, which a subset would not
    # prove; ~20-40 s on this CPU. The checkpoint technique adds a few seconds.
    code, stdout, stderr, report = smoke(
        real_data["fashion-mnist"], tmp_path / "r.json", "--dataset", "fashion-mnist",
        "--model", "cnn", "--device", "cpu", "--epochs", "1", "--techniques", "checkpoint",
    )  # fmt: skip
    assert code == 0, stdout + stderr
    assert report is not None and report["model"] == "cnn"
    assert report["min_accuracy"] == 0.855  # the CNN's own gate, above the MLP's 0.83
    assert report["test_accuracy"] >= 0.855
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["numeric"]["passed"] and "45 tensors" in checks["numeric"]["detail"]
    assert checks["checkpoint"]["passed"]
    assert "4 blocks under torch.utils.checkpoint" in checks["checkpoint"]["detail"]
    assert (
        "default for cnn, fashion-mnist, 1 epoch(s), default recipe"
        in (checks["accuracy"]["detail"])
    )


def test_tutorial_recipe_with_its_exact_flags(real_data: dict[str, Path], tmp_path: Path) -> None:
    code, stdout, stderr, report = smoke(
        real_data["mnist"], tmp_path / "r.json", "--device", "cpu", "--epochs", "1",
        "--optimizer", "sgd", "--lr", "0.01", "--momentum", "0", "--batch-size", "64",
    )  # fmt: skip
    assert code == 0, stdout + stderr
    assert report is not None
    assert (report["optimizer"], report["lr"], report["batch_size"]) == ("sgd", 0.01, 64)
    assert report["min_accuracy"] == 0.85  # the gate for non-default hyperparameters
    assert "non-default hyperparameters" in report["checks"][-1]["detail"]


def test_fashion_mnist_gzipped_with_bf16_autocast(
    real_data: dict[str, Path], tmp_path: Path
) -> None:
    code, stdout, stderr, report = smoke(
        real_data["fashion-mnist"], tmp_path / "r.json",
        "--dataset", "fashion-mnist", "--device", "cpu", "--epochs", "1", "--amp", "bf16",
    )  # fmt: skip
    assert code == 0, stdout + stderr
    assert report is not None
    assert report["amp_dtype"] == "bfloat16"
    assert report["test_accuracy"] >= 0.83
    assert [c["name"] for c in report["checks"]][:3] == ["device", "numeric", "numeric_amp"]
    assert set(report["matmul_tflops"]) == {"float32", "bfloat16"}
    assert set(report["numeric_tolerance"]) == {"float32", "bfloat16"}


def test_failed_accuracy_gate_exits_1(real_data: dict[str, Path], tmp_path: Path) -> None:
    code, stdout, _, report = smoke(
        real_data["mnist"], tmp_path / "r.json", "--device", "cpu", "--epochs", "1",
        "--min-accuracy", "1.0",
    )  # fmt: skip
    assert code == 1
    assert report is not None and report["passed"] is False and report["exit_code"] == 1
    failed = [c["name"] for c in report["checks"] if not c["passed"]]
    assert failed == ["accuracy"]
    assert "gate >= 1.0000 (--min-accuracy)" in report["checks"][-1]["detail"]
    assert "rocmlab smoke: FAILED" in stdout


@needs_no_gpu
@pytest.mark.parametrize("flags", [["--require-gpu"], ["--device", "cuda"]])
def test_gpu_required_but_absent_exits_4(
    real_data: dict[str, Path], tmp_path: Path, flags: list[str]
) -> None:
    code, _, stderr, report = smoke(real_data["mnist"], tmp_path / "r.json", *flags)
    assert code == 4
    assert "no GPU" in stderr or "would be on the CPU" in stderr
    assert report is not None
    assert report["exit_code"] == 4 and report["passed"] is False
    assert report["error"] and report["test_accuracy"] is None


def test_missing_data_exits_3(tmp_path: Path) -> None:
    code, _, stderr, report = smoke(tmp_path / "absent", tmp_path / "r.json", "--device", "cpu")
    assert code == 3
    assert "absent: not a directory" in stderr
    assert report is not None and report["exit_code"] == 3


def test_truncated_file_exits_3_naming_it(real_data: dict[str, Path], tmp_path: Path) -> None:
    data = copy_dataset(real_data["mnist"], tmp_path / "data")
    victim = data / "t10k-images-idx3-ubyte"
    victim.write_bytes(victim.read_bytes()[:-784])
    code, _, stderr, report = smoke(data, tmp_path / "r.json", "--device", "cpu")
    assert code == 3
    assert f"{victim}: truncated" in stderr
    assert "expected t10k-images-idx3-ubyte" in stderr
    assert report is not None and str(victim) in report["error"]


def test_altered_file_exits_3_naming_it(real_data: dict[str, Path], tmp_path: Path) -> None:
    data = copy_dataset(real_data["mnist"], tmp_path / "data")
    victim = data / "train-labels-idx1-ubyte"
    content = bytearray(victim.read_bytes())
    content[-1] = (content[-1] + 1) % 10  # one label changed
    victim.write_bytes(bytes(content))
    code, _, stderr, _ = smoke(data, tmp_path / "r.json", "--device", "cpu")
    assert code == 3
    assert f"{victim}: SHA-256" in stderr and "does not match" in stderr


def test_a_crashing_gpu_stack_is_a_failed_check_with_a_hint(
    real_data: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rocmlab.smoke import checks as smoke_module
    from rocmlab.smoke import job

    def crash(*args: object, **kwargs: object) -> None:
        raise RuntimeError("HIP error: hipErrorNoBinaryForGpu: Unable to find code object")

    monkeypatch.setattr(smoke_module, "train", crash)
    options = job.SmokeOptions(
        data=real_data["mnist"], dataset="mnist", device="cpu", require_gpu=False, epochs=1,
        batch_size=128, optimizer="adam", lr=1e-3, momentum=0.0, amp="auto", min_accuracy=None,
        seed=0, json_path=tmp_path / "r.json",
    )  # fmt: skip
    assert job.run_smoke(options) == 1
    report = json.loads((tmp_path / "r.json").read_text())
    jsonschema.validate(report, REPORT_SCHEMA)
    assert report["exit_code"] == 1 and report["passed"] is False
    assert report["error"].startswith("RuntimeError: HIP error: hipErrorNoBinaryForGpu")
    assert "set HSA_OVERRIDE_GFX_VERSION" in report["error"]
