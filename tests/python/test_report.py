"""The JSON report: schema, non-finite numbers, atomic writing, summary."""

from __future__ import annotations

import json
import math
from pathlib import Path

import jsonschema
import pytest

from rocmlab.smoke.report import REPORT_SCHEMA, new_report, summary_lines, write_report

OPTIONS = {
    "dataset": "mnist",
    "data_dir": "/data",
    "epochs": 1,
    "batch_size": 128,
    "optimizer": "adam",
    "lr": 0.001,
    "momentum": 0.0,
    "seed": 0,
    "amp": "auto",
}

# The fields the issue requires at least.
REQUIRED = [
    "host", "backend", "device_name", "gfx_arch", "torch_version", "hip_version", "cuda_version",
    "dataset", "epochs", "batch_size", "train_seconds", "samples_per_second", "test_accuracy",
    "amp_dtype", "gpu_cpu_max_abs_diff", "matmul_tflops", "checks", "passed",
]  # fmt: skip


def test_schema_requires_the_documented_fields() -> None:
    jsonschema.Draft202012Validator.check_schema(REPORT_SCHEMA)
    assert set(REQUIRED) <= set(REPORT_SCHEMA["required"])


def test_a_fresh_report_is_valid_and_failed(tmp_path: Path) -> None:
    report = new_report(OPTIONS, world_size=1)
    report["exit_code"] = 3
    path = tmp_path / "out" / "report.json"
    path.parent.mkdir()  # a report's directory is never created
    write_report(report, path)
    loaded = json.loads(path.read_text())
    jsonschema.validate(loaded, REPORT_SCHEMA)
    assert loaded["passed"] is False
    assert loaded["test_accuracy"] is None
    assert list(tmp_path.joinpath("out").iterdir()) == [path]  # no temporary file left


def test_non_finite_numbers_become_null(tmp_path: Path) -> None:
    report = new_report(OPTIONS, world_size=1)
    report.update(exit_code=1, loss_first=math.nan, gpu_cpu_max_abs_diff=math.inf)
    write_report(report, tmp_path / "r.json")
    loaded = json.loads((tmp_path / "r.json").read_text())  # strict JSON: no NaN tokens
    assert loaded["loss_first"] is None and loaded["gpu_cpu_max_abs_diff"] is None


def test_unknown_keys_and_wrong_types_are_invalid() -> None:
    report = new_report(OPTIONS, world_size=1)
    report["exit_code"] = 0
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**report, "surprise": 1}, REPORT_SCHEMA)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**report, "backend": "hip"}, REPORT_SCHEMA)


def test_summary_lists_every_check() -> None:
    report = new_report(OPTIONS, world_size=1)
    report["checks"] = [
        {"name": "numeric", "passed": True, "detail": "ok", "rank": None},
        {"name": "allreduce", "passed": False, "detail": "bad", "rank": 1},
    ]
    lines = summary_lines(report)
    assert lines[0] == "rocmlab smoke: FAILED"
    assert "  [PASS] numeric: ok" in lines
    assert "  [FAIL] allreduce[rank 1]: bad" in lines


def test_schema_2_to_4_keys_of_the_contract() -> None:
    assert REPORT_SCHEMA["properties"]["schema_version"] == {"const": 4}
    assert {
        "doctor", "model", "techniques", "amp_speedup", "profile", "system", "rocm_wheels"
    } <= set(REPORT_SCHEMA["required"])  # fmt: skip
    report = new_report({**OPTIONS, "model": "cnn", "techniques": ["amp", "profile"]}, 1)
    report.update(
        exit_code=143,
        amp_speedup=1.8,
        profile={
            "trace": "smoke.trace.json",
            "top_kernels": [{"name": "Cijk_Ailk_Bljk", "device_time_us": 812.5, "calls": 40}],
        },
        ranks=[
            {"rank": 0, "host": "lab-01", "device": "cuda:0", "device_name": "AMD Instinct",
             "gfx_arch": "gfx90a", "gpu_cpu_max_abs_diff": 1e-7},
        ],
    )  # fmt: skip
    jsonschema.validate(report, REPORT_SCHEMA)
    for bad in (
        {"techniques": ["quantization"]},
        {"model": "resnet"},
        {"exit_code": 137},
        {"profile": {"trace": "t.json"}},
        {"ranks": [{**report["ranks"][0], "host": None}]},
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({**report, **bad}, REPORT_SCHEMA)
