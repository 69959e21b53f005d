"""Faults around a smoke run: an output path that cannot be written (refused before torch is even
imported), SIGTERM/SIGINT in the middle of training (a real subprocess, a failed report), and the
--doctor-json document."""

from __future__ import annotations

import copy
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from rocmlab_testutil import REPO, without_torch

from rocmlab.common.errors import UsageError
from rocmlab.common.outputs import writable_output
from rocmlab.fleet.fields import RecordError
from rocmlab.fleet.records import read_doctor
from rocmlab.smoke.interrupt import Interrupted, Phase, interruptible
from rocmlab.smoke.report import (
    REPORT_SCHEMA,
    load_doctor_document,
    new_report,
    write_report,
)

# A `rocmlab doctor --json` document in the format the doctor command writes (schema_version 1).
DOCTOR = {
    "schema_version": 1,
    "tool": "rocmlab doctor",
    "rocmlab_version": "0.1.0",
    "host": "lab-07",
    "created": "2025-01-01T00:00:00Z",
    "user": "researcher",
    "verdict": "warn",
    "exit_code": 0,
    "checks": [
        {
            "name": "render_group",
            "status": "pass",
            "saw": "researcher is in render, video",
            "fix": None,
            "evidence": [],
        }
    ],
}


def files_in(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


# --- the output path, checked before anything heavy ------------------------------------------


def refused_before_torch(data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``smoke`` in a Python without torch: exit 2 (not torch's exit 1) proves the order."""
    result = without_torch("smoke", "--data", str(data), *args)
    assert result.returncode == 2, result.stderr
    return result


def test_json_path_that_is_a_directory_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "reports"
    target.mkdir()
    result = refused_before_torch(tmp_path, "--json", str(target))
    assert f"--json {target}: is a directory; give a file name" in result.stderr
    assert files_in(target) == []


def test_json_path_under_a_file_is_refused(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    path = blocker / "sub" / "r.json"
    result = refused_before_torch(tmp_path, "--json", str(path))
    assert f"--json {path}: {blocker} is not a directory" in result.stderr
    assert files_in(tmp_path) == ["not-a-dir"]


@pytest.mark.skipif(not Path("/sys/kernel").is_dir(), reason="needs Linux sysfs")
def test_json_path_in_a_directory_nobody_may_write_is_refused(tmp_path: Path) -> None:
    # sysfs refuses new files even to root, so this holds whoever runs the tests.
    result = refused_before_torch(tmp_path, "--json", "/sys/kernel/rocmlab-smoke.json")
    assert "--json /sys/kernel/rocmlab-smoke.json: cannot write in the directory /sys/kernel" in (
        result.stderr
    )
    result = refused_before_torch(tmp_path, "--json", "/sys/kernel/rocmlab/r.json")
    assert "the directory /sys/kernel/rocmlab does not exist (it is not created)" in result.stderr


def test_json_path_in_a_read_only_directory_is_refused(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root writes into a mode 0555 directory (the sysfs test covers root)")
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    try:
        result = refused_before_torch(tmp_path, "--json", str(locked / "r.json"))
    finally:
        locked.chmod(0o755)
    assert f"cannot write in the directory {locked} (Permission denied)" in result.stderr


def test_a_missing_parent_is_refused_not_created_and_the_probe_leaves_nothing(
    tmp_path: Path,
) -> None:
    with pytest.raises(UsageError, match="does not exist"):
        writable_output("--json", tmp_path / "a" / "b" / "r.json")
    assert files_in(tmp_path) == []
    writable_output("--json", tmp_path / "r.json")
    assert files_in(tmp_path) == []


def test_a_failed_write_leaves_no_temporary_file(tmp_path: Path) -> None:
    report = new_report({"dataset": "mnist"}, world_size=1)
    target = tmp_path / "r.json"
    target.mkdir()  # appeared after the check: os.replace onto a directory fails
    with pytest.raises(OSError):
        write_report(report, target)
    assert files_in(tmp_path) == ["r.json"] and files_in(target) == []


def test_without_torch_the_report_is_still_written(tmp_path: Path) -> None:
    path = tmp_path / "new" / "r.json"
    path.parent.mkdir()  # --json never creates it
    doctor = tmp_path / "doctor.json"
    doctor.write_text(json.dumps(DOCTOR))
    result = without_torch(
        "smoke", "--data", str(tmp_path), "--json", str(path), "--doctor-json", str(doctor)
    )
    assert result.returncode == 1
    assert "PyTorch is not importable" in result.stderr
    report = json.loads(path.read_text())
    jsonschema.validate(report, REPORT_SCHEMA)
    assert report["exit_code"] == 1 and report["passed"] is False
    assert "PyTorch is not importable" in report["error"]
    assert report["doctor"] == DOCTOR  # verbatim
    assert files_in(path.parent) == ["r.json"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read it (No such file or directory)"),
        ("{not json", "not JSON (Expecting property name"),
        ('{"tool": "rocmlab smoke"}', "not a `rocmlab doctor --json` document"),
        ("[1, 2]", 'not a `rocmlab doctor --json` document (expected a JSON object with "tool"'),
        # Deeper than Python's parser goes: a clear refusal, not a RecursionError.
        (
            "[" * 100_000 + "]" * 100_000,
            "not a `rocmlab doctor --json` document: arrays and objects nested deeper than any "
            "doctor document (16)",
        ),
        (
            json.dumps({**DOCTOR, "checks": [{"evidence": [[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]}]}),
            "not a `rocmlab doctor --json` document: arrays and objects nested deeper than any "
            "doctor document (16)",
        ),
        (
            json.dumps({**DOCTOR, "checks": "all fine"}),
            "not a `rocmlab doctor --json` document: 'checks' is not an array",
        ),
        (
            json.dumps({**DOCTOR, "checks": [{**DOCTOR["checks"][0], "status": "ok"}]}),
            "not a `rocmlab doctor --json` document: 'checks[0]' is not a check (an object with "
            "strings 'name' and 'saw', 'status' one of",
        ),
        (
            json.dumps({**DOCTOR, "verdict": None}),
            "not a `rocmlab doctor --json` document: 'verdict' is None, expected 'pass'",
        ),
    ],
)
def test_a_bad_doctor_document_is_refused_before_torch(
    tmp_path: Path, content: str | None, message: str
) -> None:
    doctor = tmp_path / "doctor.json"
    if content is not None:
        doctor.write_text(content)
    result = refused_before_torch(
        tmp_path, "--doctor-json", str(doctor), "--json", str(tmp_path / "r.json")
    )
    assert f"--doctor-json {doctor}: {message}" in result.stderr
    assert not (tmp_path / "r.json").exists()


# --- signals ----------------------------------------------------------------------------------


def test_interruptible_raises_once_with_the_phase_and_restores_handlers() -> None:
    before = signal.getsignal(signal.SIGTERM)
    phase = Phase("training")
    phase.at("epoch 2/3")
    with pytest.raises(Interrupted) as caught, interruptible(phase):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler interrupts this at once
    assert caught.value.exit_code == 143
    assert str(caught.value) == "interrupted by SIGTERM while training (epoch 2/3)"
    assert signal.getsignal(signal.SIGTERM) is before


def read_lines(stream: Any, lines: queue.Queue[str | None]) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)


def wait_for(lines: queue.Queue[str | None], needle: str, seconds: float) -> list[str]:
    """Lines read until one contains ``needle``; fails after ``seconds`` or at end of output."""
    seen: list[str] = []
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        try:
            line = lines.get(timeout=left)
        except queue.Empty:
            break
        if line is None:
            break
        seen.append(line)
        if needle in line:
            return seen
    pytest.fail(f"no line with {needle!r} within {seconds} s; got:\n{''.join(seen)}")


def default_sigint() -> None:
    # A shell's background job starts with SIGINT ignored, which the job respects; the test wants
    # the interactive case, so the child starts with the default disposition.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize(
    ("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)], ids=["SIGTERM", "SIGINT"]
)
def test_a_signal_mid_training_writes_a_failed_report(
    real_data: dict[str, Path], tmp_path: Path, signum: int, code: int
) -> None:
    name = signal.Signals(signum).name
    report_path = tmp_path / "out" / "r.json"
    report_path.parent.mkdir()  # --json never creates it
    doctor = tmp_path / "doctor.json"
    doctor.write_text(json.dumps(DOCTOR))
    command = [
        sys.executable, "-m", "rocmlab", "smoke", "--data", str(real_data["mnist"]),
        "--device", "cpu", "--epochs", "500", "--json", str(report_path),
        "--doctor-json", str(doctor),
    ]  # fmt: skip
    proc = subprocess.Popen(
        command,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_sigint,
    )
    lines: queue.Queue[str | None] = queue.Queue()
    reader = threading.Thread(target=read_lines, args=(proc.stdout, lines), daemon=True)
    reader.start()
    try:
        wait_for(lines, "epoch 1/500  loss", seconds=300)  # training is under way
        proc.send_signal(signum)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stderr = proc.stderr.read() if proc.stderr else ""
    reader.join(timeout=10)
    assert proc.returncode == code, stderr
    assert f"interrupted by {name} while training (epoch " in stderr
    assert f"report (passed: false) written to {report_path}" in stderr
    report = json.loads(report_path.read_text())
    jsonschema.validate(report, REPORT_SCHEMA)
    assert report["passed"] is False and report["exit_code"] == code
    assert report["error"].startswith(f"interrupted by {name} while training (epoch ")
    assert report["test_accuracy"] is None  # the run did not finish
    assert report["doctor"] == DOCTOR
    assert files_in(report_path.parent) == ["r.json"]  # no temporary file


def test_the_smoke_job_takes_the_doctor_documents_the_fleet_report_reads(tmp_path: Path) -> None:
    """load_doctor_document refuses a document exactly when the fleet report could not read the
    smoke report embedding it (rocmlab.fleet.records.read_doctor): every key of the document and
    of its check deleted or given another type."""
    odd = (None, "x", 1, True, [], {}, ["x"], [1])
    variants = [DOCTOR]
    for path in ((), ("checks", 0)):
        target = DOCTOR
        for step in path:
            target = target[step]
        for key in target:
            for value in (*odd, "<delete>"):
                changed = copy.deepcopy(DOCTOR)
                inner = changed
                for step in path:
                    inner = inner[step]
                if value == "<delete>":
                    del inner[key]
                else:
                    inner[key] = value
                variants.append(changed)
    for index, document in enumerate(variants):
        if document.get("tool") != "rocmlab doctor":
            continue  # not a doctor document at all: refused by its tool, before the keys
        try:
            read_doctor(document)
            fleet_reads = True
        except RecordError:
            fleet_reads = False
        path = tmp_path / f"doctor-{index}.json"
        path.write_text(json.dumps(document))
        try:
            load_doctor_document(path)
            smoke_takes = True
        except UsageError:
            smoke_takes = False
        assert smoke_takes == fleet_reads, (index, document)
