"""Unit tests for plugins/callback/fleet_report.py: the fleet table at the end of a rollout,
including one that a failure budget stopped (Ansible runs no play after that, a callback's
v2_playbook_on_stats still runs)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "fleet_report_callback", REPO / "plugins" / "callback" / "fleet_report.py"
)
assert _spec is not None and _spec.loader is not None
callback = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(callback)


class Shown:
    """Stands in for Ansible's Display: keeps what the callback shows."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.warnings: list[str] = []

    def display(self, msg: str, **_: object) -> None:
        self.lines.append(msg)

    def banner(self, msg: str, **_: object) -> None:
        self.lines.append(f"BANNER {msg}")

    def warning(self, msg: str, **_: object) -> None:
        self.warnings.append(msg)


def plugin() -> tuple[callback.CallbackModule, Shown]:
    cb = callback.CallbackModule()
    shown = Shown()
    cb._display = shown
    return cb, shown


def result(facts: dict) -> SimpleNamespace:
    return SimpleNamespace(_result={"ansible_facts": facts, "changed": False})


def rollout_record(reports: Path, host: str, state: str, reason: str | None) -> None:
    path = reports / "fleet" / "rollout" / f"{host}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "schema_version": 1,
        "host": host,
        "created": "2025-01-06T09:12:00Z",
        "rollout_id": "r1",
        "state": state,
        "reason": reason,
        "batch": None,
    }
    path.write_text(json.dumps(record))


def plan(reports: Path, hosts: str, **changes: object) -> dict:
    argv = [sys.executable, "-m", "rocmlab", "fleet-report", str(reports), "--hosts", hosts]
    return {
        "rollout_id": "r1",
        "reports_dir": str(reports),
        "check_mode": False,
        "report_argv": argv,
        "report_env": {"PYTHONPATH": str(REPO / "src")},
        **changes,
    }


def test_a_stopped_rollout_still_ends_with_the_fleet_table(tmp_path: Path) -> None:
    rollout_record(tmp_path, "ws-01", "quarantined", "doctor: no GPU")
    rollout_record(tmp_path, "ws-02", "not_run", "an earlier batch exceeded the failure budget")
    cb, shown = plugin()
    cb.v2_runner_on_ok(result({"unrelated": 1}))
    cb.v2_runner_on_ok(result({"rocmlab_fleet_plan": plan(tmp_path, "ws-01,ws-02")}))
    cb.v2_playbook_on_stats(stats=None)
    text = "\n".join(shown.lines)
    assert shown.lines[0] == "BANNER FLEET REPORT [rollout r1]"
    assert "ws-01" in text and "QUARANTINED" in text and "doctor: no GPU" in text
    assert "ws-02" in text and "NOT_RUN" in text and "not run (the rollout stopped" in text
    assert "fleet: 0 of 2 hosts ready" in text
    assert text.endswith("(exit 1: not every declared host is ready)")
    assert (tmp_path / "fleet.html").is_file() and (tmp_path / "fleet.json").is_file()
    assert not shown.warnings


def test_other_playbooks_and_check_mode_print_nothing(tmp_path: Path) -> None:
    cb, shown = plugin()
    cb.v2_playbook_on_stats(stats=None)
    cb.v2_runner_on_ok(result({"rocmlab_fleet_plan": plan(tmp_path, "ws-01", check_mode=True)}))
    cb.v2_playbook_on_stats(stats=None)
    assert shown.lines == [] and shown.warnings == []
    assert not (tmp_path / "fleet.json").exists()


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["/nonexistent/python3"], "did not run"),
        (
            [sys.executable, "-m", "rocmlab", "fleet-report", "/nonexistent", "--hosts", "a"],
            "exited 2",
        ),
    ],
)
def test_a_report_that_cannot_run_is_a_warning_not_a_crash(
    tmp_path: Path, argv: list[str], fragment: str
) -> None:
    cb, shown = plugin()
    cb.v2_runner_on_ok(result({"rocmlab_fleet_plan": {**plan(tmp_path, "a"), "report_argv": argv}}))
    cb.v2_playbook_on_stats(stats=None)
    assert len(shown.warnings) == 1 and fragment in shown.warnings[0], shown.warnings
