"""plugins/lookup/smoke_summary.py: the one line per host playbooks/smoke.yml and site.yml print
from the smoke reports the controller keeps (playbooks/tasks/smoke-summary.yml). The reports are
the real report (tests/fixtures/fleet/smoke-cpu-mnist.json) as fleet_testutil makes it per host;
every one came from a lab machine, so it is read as rocmlab fleet-report reads its records: no
symbolic or hard link, no FIFO, a bound on its size and depth, and PASSED only at its own
accuracy gate. One test runs the task file in a real ansible-playbook."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fleet_testutil import smoke_report

REPO = Path(__file__).resolve().parents[2]
_SPEC = importlib.util.spec_from_file_location(
    "smoke_summary_lookup", REPO / "plugins" / "lookup" / "smoke_summary.py"
)
assert _SPEC is not None and _SPEC.loader is not None
summary = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(summary)


def write(reports: Path, host: str, content: object) -> None:
    reports.mkdir(exist_ok=True)
    text = content if isinstance(content, (str, bytes)) else json.dumps(content)
    path = reports / f"{host}.json"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())


def test_a_passing_report_and_a_failed_one(tmp_path: Path) -> None:
    write(tmp_path, "ws-01", smoke_report("ws-01", gpu="rx7900xtx", speed=104_600.0))
    failed = smoke_report("ws-02", passed=False, exit_code=1, test_accuracy=None,
                          error="mnist data incomplete")  # fmt: skip
    write(tmp_path, "ws-02", failed)
    assert summary.line(str(tmp_path), "ws-01") == (
        "ws-01: PASSED, rocm on AMD Radeon RX 7900 XTX (gfx1100), test accuracy 95.38 %, "
        "104600 samples/s"
    )
    assert summary.line(str(tmp_path), "ws-02").startswith("ws-02: FAILED, cpu on ")
    assert summary.line(str(tmp_path), "ws-02").endswith("error: mnist data incomplete")
    assert summary.line(str(tmp_path), "ws-03") == (
        "ws-03: no report (the smoke job did not run there)"
    )


def test_no_reports_directory_yet_is_no_report(tmp_path: Path) -> None:
    # Check mode, or a controller where no smoke job ran: the directory was never made.
    assert summary.line(str(tmp_path / "reports"), "ws-01") == (
        "ws-01: no report (the smoke job did not run there)"
    )


def test_a_report_below_its_own_accuracy_gate_is_failed(tmp_path: Path) -> None:
    write(tmp_path, "ws-01", smoke_report("ws-01", test_accuracy=0.312, min_accuracy=0.94))
    write(tmp_path, "ws-02", smoke_report("ws-02", test_accuracy=0.94, min_accuracy=0.94))
    assert summary.line(str(tmp_path), "ws-01").startswith(
        "ws-01: FAILED (the report says passed, but its test accuracy 31.20 % is below its own "
        "gate 94.00 %)"
    )
    assert summary.line(str(tmp_path), "ws-02").startswith("ws-02: PASSED, ")


def test_links_fifos_and_huge_or_deep_reports_are_named_never_read(tmp_path: Path) -> None:
    """A symbolic and a hard link to a file only the controller's account may read (a valid
    report, mode 0600), a FIFO (which would block a reader), a sparse 64 GiB file, a report
    nested 100,000 deep, not JSON, of the wrong shape: each named with the reason, nothing of
    the linked file shown."""
    outside = tmp_path / "outside"
    outside.mkdir()
    for name in ("a", "b"):
        (outside / f"{name}.json").write_text(json.dumps(smoke_report(f"secret-{name}")))
        (outside / f"{name}.json").chmod(0o600)
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "ws-01.json").symlink_to(outside / "a.json")
    os.link(outside / "b.json", reports / "ws-02.json")
    os.mkfifo(reports / "ws-03.json")
    with open(reports / "ws-04.json", "wb") as sparse:
        sparse.truncate(64 * 1024**3)
    write(reports, "ws-05", "[" * 100_000 + "]" * 100_000)
    write(reports, "ws-06", "{not json")
    write(reports, "ws-07", {"passed": "yes"})
    write(reports, "ws-08", smoke_report("ws-08", test_accuracy="high"))
    expected = {
        "ws-01": "a symbolic link, not followed",
        "ws-02": "a hard link (2 names for one file), not read",
        "ws-03": "not a regular file",
        "ws-04": f"{64 * 1024**3} bytes, more than 4194304",
        "ws-05": "arrays and objects nested deeper than any report (64)",
        "ws-06": "not JSON (Expecting property name enclosed in double quotes",
        "ws-07": "no boolean 'passed'",
        "ws-08": "'test_accuracy' is str, expected a number or null",
    }
    for host, why in expected.items():
        said = summary.line(str(reports), host)
        assert said.startswith(f"{host}: unusable report {host}.json: {why}"), said
        assert "secret" not in said


def test_what_a_report_says_reaches_the_terminal_escaped(tmp_path: Path) -> None:
    hidden = "\x1b[2J\u202e\u200b\ufeff\n"
    write(tmp_path, "ws-01", smoke_report("ws-01", device_name=f"GPU{hidden}x"))
    said = summary.line(str(tmp_path), "ws-01")
    assert "GPU\\x1b[2J\\u202e\\u200b\\ufeff\\x0ax" in said
    assert not any(char in said for char in "\x1b\u202e\u200b\ufeff\n")


def test_the_task_file_prints_the_lines_in_a_real_run(tmp_path: Path) -> None:
    tool = shutil.which("ansible-playbook", path=str(Path(sys.executable).parent))
    if tool is None:
        pytest.skip("needs ansible-playbook")
    reports = tmp_path / "reports"
    write(reports, "ws-01", smoke_report("ws-01", test_accuracy=0.312, min_accuracy=0.94))
    write(reports, "ws-02", smoke_report("ws-02"))
    (reports / "ws-03.json").symlink_to(reports / "ws-02.json")
    # A host whose inventory sets its own reports directory: the smoke job wrote its report
    # there (the setting is the host's), so its line is read from there too.
    own = tmp_path / "ws-04-reports"
    write(own, "ws-04", smoke_report("ws-04"))
    inventory = tmp_path / "hosts.json"
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    hosts = dict.fromkeys(("ws-01", "ws-02", "ws-03"), local)
    hosts["ws-04"] = dict(local, rocmlab_reports_dir=str(own))
    inventory.write_text(json.dumps({"all": {"hosts": hosts}}))
    playbook = tmp_path / "summary.yml"
    playbook.write_text(
        json.dumps(
            [
                {
                    "name": "Summary",
                    "hosts": "localhost",
                    "gather_facts": False,
                    "vars": {"rocmlab_reports_dir": str(reports)},
                    "tasks": [
                        {
                            "name": "The lines",
                            "ansible.builtin.import_tasks": str(
                                REPO / "playbooks" / "tasks" / "smoke-summary.yml"
                            ),
                        }
                    ],
                }
            ]
        )
    )
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"),
        ANSIBLE_NOCOLOR="1",
    )
    done = subprocess.run(
        [tool, "-i", str(inventory), str(playbook)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
        check=False,
    )
    said = done.stdout + done.stderr
    assert done.returncode == 0, said[-3000:]
    assert "ws-01: FAILED (the report says passed, but its test accuracy 31.20 %" in said
    assert "ws-02: PASSED, cpu on " in said
    assert "ws-03: unusable report ws-03.json: a symbolic link, not followed" in said
    assert "ws-04: PASSED, cpu on " in said


def test_ansible_doc_renders_the_lookup(tmp_path: Path) -> None:
    tool = shutil.which("ansible-doc", path=str(Path(sys.executable).parent))
    if tool is None:
        pytest.skip("needs ansible-doc")
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"))
    done = subprocess.run(
        [tool, "-t", "lookup", "rocmlab.rocmlab.smoke_summary"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0 and "ERROR" not in done.stderr, done.stderr
    assert "LOOKUP" in done.stdout and "dir" in done.stdout
