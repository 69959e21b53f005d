"""Two processes under torchrun on the CPU: DDP over gloo, the all-reduce check, one report."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from rocmlab_testutil import REPO

from rocmlab.smoke.report import REPORT_SCHEMA


def test_two_process_gloo_run(real_data: dict[str, Path], tmp_path: Path) -> None:
    report_path = tmp_path / "report.json"
    result = subprocess.run(
        [
            sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
            "-m", "rocmlab", "smoke", "--data", str(real_data["mnist"]), "--device", "cpu",
            "--epochs", "1", "--json", str(report_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(report_path.read_text())
    jsonschema.validate(report, REPORT_SCHEMA)
    assert report["passed"] is True
    assert report["world_size"] == 2
    assert [r["rank"] for r in report["ranks"]] == [0, 1]
    assert [r["host"] for r in report["ranks"]] == [socket.gethostname()] * 2
    allreduce = [c for c in report["checks"] if c["name"] == "allreduce"]
    assert [(c["rank"], c["passed"]) for c in allreduce] == [(0, True), (1, True)]
    assert "gloo all_reduce(SUM) over 2 ranks: max |diff| 0" in allreduce[0]["detail"]
    numeric = [c for c in report["checks"] if c["name"] == "numeric"]
    assert [c["rank"] for c in numeric] == [0, 1] and all(c["passed"] for c in numeric)
    # Each rank trains on its half; the report counts both halves.
    assert report["samples_per_second"] * report["train_seconds"] == pytest.approx(60000)
    assert report["test_accuracy"] >= report["min_accuracy"]
    # One report, printed once (by rank 0).
    assert result.stdout.count("rocmlab smoke: PASSED") == 1
    assert "per process x 2" in result.stdout
