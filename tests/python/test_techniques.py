"""The technique checks (--techniques) pass on the real computation and fail on a perturbed one.

The gradient checks run on 64 real Fashion-MNIST test images (the claim is about the gradients of
one batch, so a small one proves it); the end-to-end run trains the MLP for one epoch on real
MNIST, the cheapest run that still reaches a gate.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import torch
from rocmlab_testutil import run_cli

from rocmlab.datasets.datadir import load_dataset
from rocmlab.smoke.interrupt import Phase
from rocmlab.smoke.model import build_model
from rocmlab.smoke.report import REPORT_SCHEMA
from rocmlab.smoke.techniques import (
    MICRO_BATCHES,
    TechniqueSetup,
    accumulation_gradients,
    checkpoint_gradients,
    compare_precisions,
)
from rocmlab.smoke.train import (
    DeviceData,
    TrainConfig,
    images_tensor,
    labels_tensor,
    normalise,
    to_device,
)
from rocmlab.torchjob.distenv import DistContext

MODELS = ["mlp", "cnn"]


@pytest.fixture(scope="module")
def batch(real_data: dict[str, Path]) -> tuple[torch.Tensor, torch.Tensor]:
    dataset = load_dataset(real_data["fashion-mnist"], "fashion-mnist")
    x = images_tensor(dataset.arrays["test_images"])[:64]
    y = labels_tensor(dataset.arrays["test_labels"])[:64]
    return normalise(x, dataset.spec.mean, dataset.spec.std), y


@pytest.mark.parametrize("kind", MODELS)
@pytest.mark.parametrize(
    "check", [accumulation_gradients, checkpoint_gradients], ids=["accumulation", "checkpoint"]
)
def test_honest_gradients_agree(
    batch: tuple[torch.Tensor, torch.Tensor], kind: str, check: Any
) -> None:
    # accumulation: micro-batches accumulated = one batch; checkpoint: recomputed = kept.
    result = check(build_model(0, kind), *batch)
    assert result.passed, result.describe()
    assert result.ratio < 0.1  # rounding only: far inside the bound


@pytest.mark.parametrize("kind", MODELS)
@pytest.mark.parametrize(
    "weight",
    [
        lambda part, whole: 1.0,  # forgot to divide: k times the gradient
        lambda part, whole: 1.0 / (MICRO_BATCHES + 1),  # divided by the wrong count
        lambda part, whole: part / whole * 1.001,  # off by one per mille
    ],
    ids=["not divided", "wrong count", "0.1% off"],
)
def test_a_wrong_accumulation_scale_fails(
    batch: tuple[torch.Tensor, torch.Tensor], kind: str, weight: Any
) -> None:
    result = accumulation_gradients(build_model(0, kind), *batch, weight=weight)
    assert not result.passed, result.describe()


def test_the_model_is_left_as_it_was(batch: tuple[torch.Tensor, torch.Tensor]) -> None:
    model = build_model(3, "cnn")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    accumulation_gradients(model, *batch)
    checkpoint_gradients(model, *batch)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())


def jitter(out: torch.Tensor, size: float = 0.01) -> torch.Tensor:
    """Multiplicative noise (fixed seed) of ``size``: neither a uniform scale nor a shift, which
    batch-norm or a following ReLU could legitimately absorb."""
    noise = torch.randn(out.shape, generator=torch.Generator().manual_seed(0))
    return out * (1 + size * noise)


class ChangesOnRecompute:
    """A checkpointed step whose output differs when torch.utils.checkpoint recomputes it in the
    backward pass (as a step with unseeded randomness would): the forward pass is untouched.
    Both calls run the same operations (noise of size 0, then 0.01), so that checkpoint's own
    check of what the recomputation saves (count, shapes, dtypes) does not notice."""

    def __init__(self, step: str) -> None:
        self.step, self.calls = step, 0

    def __call__(self, name: str, out: torch.Tensor) -> torch.Tensor:
        if name != self.step:
            return out
        self.calls += 1
        return jitter(out, 0.01 if self.calls > 1 else 0.0)


# The first step of a block in each model, and one deeper inside.
STEPS = [("mlp", "z:fc1"), ("mlp", "z:fc2"), ("cnn", "conv1"), ("cnn", "bn2")]


@pytest.mark.parametrize(("kind", "step"), STEPS)
def test_a_checkpointed_function_that_changes_its_output_fails(
    batch: tuple[torch.Tensor, torch.Tensor], kind: str, step: str
) -> None:
    hook = ChangesOnRecompute(step)
    result = checkpoint_gradients(build_model(0, kind), *batch, hook)
    assert hook.calls == 2  # forward, then the recomputation
    assert not result.passed, result.describe()


@pytest.mark.parametrize(("kind", "step"), STEPS)
def test_a_checkpointed_function_with_a_different_output_fails(
    batch: tuple[torch.Tensor, torch.Tensor], kind: str, step: str
) -> None:
    def always(name: str, out: torch.Tensor) -> torch.Tensor:
        return jitter(out) if name == step else out

    result = checkpoint_gradients(build_model(0, kind), *batch, always)
    assert not result.passed, result.describe()


@pytest.fixture(scope="module")
def with_techniques(
    real_data: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Any, dict[str, Any], Path]:
    out = tmp_path_factory.mktemp("techniques") / "smoke.json"
    result = run_cli(
        "smoke", "--data", str(real_data["mnist"]), "--device", "cpu", "--epochs", "1",
        "--techniques", "profile,accumulation,checkpoint,amp", "--json", str(out),
    )  # fmt: skip
    report = json.loads(out.read_text())
    jsonschema.validate(report, REPORT_SCHEMA)
    return result, report, out


def test_every_technique_is_a_passed_check_named_after_it(with_techniques: tuple) -> None:
    result, report, _ = with_techniques
    assert result.returncode == 0, result.stdout + result.stderr
    assert report["techniques"] == ["profile", "accumulation", "checkpoint", "amp"]
    checks = {c["name"]: c for c in report["checks"]}
    assert all(checks[name]["passed"] for name in report["techniques"])
    accumulation = checks["accumulation"]["detail"]
    assert f"{MICRO_BATCHES} accumulated micro-batches of 64 vs one batch of 256" in accumulation
    assert "1 epoch with 4 micro-batches of <= 32 per step of 128: test accuracy" in accumulation
    assert "gate >= 0.9400" in accumulation
    assert "3 blocks under torch.utils.checkpoint" in checks["checkpoint"]["detail"]


def test_amp_is_not_applicable_on_the_cpu(with_techniques: tuple) -> None:
    report = with_techniques[1]
    amp = next(c for c in report["checks"] if c["name"] == "amp")
    assert amp["passed"] and amp["detail"].startswith("not applicable on the CPU")
    assert report["amp_speedup"] is None


def test_profile_writes_a_chrome_trace_beside_the_report(with_techniques: tuple) -> None:
    _, report, path = with_techniques
    assert report["profile"]["trace"] == "smoke.trace.json"
    trace = json.loads((path.parent / "smoke.trace.json").read_text())
    events = trace["traceEvents"]
    assert len(events) > 100
    assert any(e.get("name", "").startswith("aten::addmm") for e in events)
    top = report["profile"]["top_kernels"]
    assert 0 < len(top) <= 10
    assert [k["device_time_us"] for k in top] == sorted(
        (k["device_time_us"] for k in top), reverse=True
    )
    assert all(k["name"].startswith("aten::") and k["calls"] > 0 for k in top)
    profile = next(c for c in report["checks"] if c["name"] == "profile")
    assert "operators by CPU self time" in profile["detail"]
    assert sorted(p.name for p in path.parent.iterdir()) == ["smoke.json", "smoke.trace.json"]


def small_setup(real_data: dict[str, Path], shuffle_labels: bool) -> TechniqueSetup:
    """MNIST's first 6,000 training images (one epoch learns ~0.9 from them) on the CPU."""
    data = to_device(load_dataset(real_data["mnist"], "mnist"), torch.device("cpu"))
    labels = data.train_y[:6000]
    if shuffle_labels:  # the perturbed computation: training that cannot learn
        labels = labels[torch.randperm(6000, generator=torch.Generator().manual_seed(0))]
    data = DeviceData(data.train_x[:6000], labels, data.test_x[:2000], data.test_y[:2000])
    return TechniqueSetup(
        kind="mlp", seed=0, device=torch.device("cpu"), data=data,
        config=TrainConfig(1, 128, "adam", 1e-3, 0.0, 0), amp_dtype=torch.bfloat16,
        run_amp_dtype=None, ctx=DistContext(), gate=0.8, gate_source="test", x=data.test_x[:64],
        y=data.test_y[:64], trace_path=None,
    )  # fmt: skip


@pytest.mark.parametrize("shuffle_labels", [False, True], ids=["learns", "cannot learn"])
def test_the_precision_comparison_measures_both_and_gates_both(
    real_data: dict[str, Path], shuffle_labels: bool
) -> None:
    # What the amp check does on a GPU, run here with the CPU's bf16 autocast: the code path and
    # its verdict, not a GPU's speed (the smoke job reports no CPU figure).
    passed, detail, speedup = compare_precisions(small_setup(real_data, shuffle_labels), Phase())
    assert speedup > 0
    assert "float32" in detail and "autocast bfloat16" in detail and "speed-up" in detail
    assert passed is not shuffle_labels, detail
