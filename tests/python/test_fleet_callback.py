"""Unit tests for plugins/callback/fleet_report.py: the fleet table at the end of a rollout,
including one that a failure budget stopped (Ansible runs no play after that, a callback's
v2_playbook_on_stats still runs), and the trust boundary: only the plan task's own result is
read, a host's facts never are, and no command is ever taken from the plan.

The results here stand in for Ansible's TaskResult with the three things the callback reads
(_task, _host, _result); test_fleet_callback_run.py runs the callback inside ansible-playbook
with Ansible's own Task objects.
"""

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

PLAN_FILE = REPO / "roles" / "rocmlab_fleet" / "tasks" / "plan.yml"


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


def task(
    path: Path | str = PLAN_FILE,
    line: int = 31,
    action: str = "ansible.builtin.set_fact",
    delegate_to: str | None = "localhost",
) -> SimpleNamespace:
    """What the callback reads of Ansible's Task: its action, delegate_to and get_path()."""
    return SimpleNamespace(
        action=action, delegate_to=delegate_to, get_path=lambda: f"{path}:{line}"
    )


def result(facts: dict, the_task: SimpleNamespace | None = None, host: str = "ws-01"):
    return SimpleNamespace(
        _task=the_task or task(),
        _host=SimpleNamespace(name=host),
        _result={"ansible_facts": facts, "changed": False},
    )


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


def plan(reports: Path, hosts: list[str], **changes: object) -> dict:
    """The plan as roles/rocmlab_fleet/tasks/plan.yml makes it."""
    return {
        "rollout_id": "r1",
        "started": "2025-01-06T09:00:00Z",
        "hosts": hosts,
        "serial": [1, "25%"],
        "failure_budget": 10.0,
        "all_or_nothing": False,
        "reports_dir": str(reports),
        "check_mode": False,
        "declared": hosts,
        "slow_fraction": 0.7,
        **changes,
    }


def marker_argv(marker: Path) -> list[str]:
    """A command that leaves MARKER behind if anything runs it."""
    return [sys.executable, "-c", f"open({str(marker)!r}, 'w').write('ran')"]


def test_a_stopped_rollout_still_ends_with_the_fleet_table(tmp_path: Path) -> None:
    rollout_record(tmp_path, "ws-01", "quarantined", "doctor: no GPU")
    rollout_record(tmp_path, "ws-02", "not_run", "an earlier batch exceeded the failure budget")
    cb, shown = plugin()
    cb.v2_runner_on_ok(result({"unrelated": 1}, task(line=10, action="ansible.builtin.assert")))
    cb.v2_runner_on_ok(result({"rocmlab_fleet_plan": plan(tmp_path, ["ws-01", "ws-02"])}))
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
    cb.v2_runner_on_ok(result({"rocmlab_fleet_plan": plan(tmp_path, ["ws-01"], check_mode=True)}))
    cb.v2_playbook_on_stats(stats=None)
    assert shown.lines == [] and shown.warnings == []
    assert not (tmp_path / "fleet.json").exists()


# --- the trust boundary -------------------------------------------------------------------
# A managed host's root decides what its modules return, ansible_facts included: the same fact
# the plan task sets, with a command in it, arrives in the result of any task run on the host.
HOSTILE_TASKS = {
    "a module on the host (setup)": task(path="/work/lab/site.yml", action="ansible.builtin.setup",
                                         delegate_to=None),
    "a set_fact of the host's own": task(path="/work/lab/site.yml", delegate_to=None),
    "a set_fact delegated to localhost elsewhere": task(path="/work/lab/site.yml"),
    "another task of plan.yml": task(line=60, action="ansible.builtin.file"),
    "the plan file's set_fact, not delegated": task(delegate_to=None),
    "a task with no origin": task(path=""),
    "a plan.yml of another checkout": task(path="/elsewhere/roles/rocmlab_fleet/tasks/plan.yml"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(HOSTILE_TASKS))
def test_a_plan_in_any_other_tasks_result_is_ignored_and_runs_nothing(
    tmp_path: Path, case: str
) -> None:
    marker = tmp_path / "ran"
    forged = plan(
        tmp_path,
        ["ws-01"],
        report_argv=marker_argv(marker),
        report_env={"PYTHONPATH": str(tmp_path)},
    )
    cb, shown = plugin()
    cb.v2_runner_on_ok(result({"rocmlab_fleet_plan": forged}, HOSTILE_TASKS[case], host="ws-01"))
    cb.v2_playbook_on_stats(stats=None)
    assert not marker.exists()
    assert shown.lines == [] and shown.warnings == []
    assert not (tmp_path / "fleet.json").exists()


def test_a_hosts_plan_after_the_real_one_changes_nothing_and_no_command_is_taken(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "ran"
    reports = tmp_path / "reports"
    reports.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    rollout_record(reports, "ws-01", "ready", None)
    cb, shown = plugin()
    # The real plan carries (as an old plan did) a command: it is not what runs.
    real = plan(reports, ["ws-01"], report_argv=marker_argv(marker))
    cb.v2_runner_on_ok(result({"rocmlab_fleet_plan": real}))
    forged = plan(elsewhere, ["evil"], rollout_id="forged", report_argv=marker_argv(marker))
    for hostile in HOSTILE_TASKS.values():
        cb.v2_runner_on_ok(result({"rocmlab_fleet_plan": forged}, hostile))
    # Even a second result of the plan task itself (a plan included twice) does not replace it.
    cb.v2_runner_on_ok(result({"rocmlab_fleet_plan": forged}))
    cb.v2_playbook_on_stats(stats=None)
    assert not marker.exists()
    assert shown.lines[0] == "BANNER FLEET REPORT [rollout r1]"
    assert (reports / "fleet.json").is_file() and not (elsewhere / "fleet.json").exists()
    hosts = [h["host"] for h in json.loads((reports / "fleet.json").read_text())["hosts"]]
    assert hosts == ["ws-01"]


def test_the_command_is_this_checkouts_fleet_report_over_the_plans_values(tmp_path: Path) -> None:
    checked = callback.checked_plan(plan(tmp_path, ["ws-01", "ws-02"], slow_fraction="0.8"))
    argv, env, cwd = callback.report_command(checked)
    assert argv == [
        sys.executable, "-m", "rocmlab", "fleet-report", str(tmp_path),
        "--hosts", "ws-01,ws-02", "--slow-fraction", "0.8",
    ]  # fmt: skip
    assert env["PYTHONPATH"] == cwd == str(REPO / "src")


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [
        ({"reports_dir": "/nonexistent/reports"}, "reports_dir: /nonexistent/reports is not a"),
        ({"reports_dir": ["/tmp"]}, "reports_dir: ['/tmp'] is not a path"),
        ({"reports_dir": "/tmp\n/etc"}, "reports_dir: '/tmp\\n/etc' is not a path"),
        ({"declared": ["ws-01", "--inventory=/etc/passwd,x"]}, "declared[1]"),
        ({"declared": ["../../etc/x"]}, "declared[0]"),
        ({"declared": ["ws-01\x1b[2J"]}, "declared[0]: 'ws-01\\x1b[2J'"),
        ({"declared": "ws-01"}, "declared: 'ws-01' is not a list"),
        ({"slow_fraction": "0.5; touch /tmp/x"}, "slow_fraction"),
        ({"slow_fraction": float("nan")}, "slow_fraction: nan"),
        ({"slow_fraction": 2}, "slow_fraction: 2"),
        ({"rollout_id": "r1\x1b]0;owned\x07"}, "rollout_id"),
        ({"check_mode": "yes"}, "check_mode: 'yes' is not a boolean"),
    ],
)
def test_a_plan_value_that_cannot_make_the_report_is_named_and_runs_nothing(
    tmp_path: Path, changes: dict, fragment: str
) -> None:
    cb, shown = plugin()
    cb.v2_runner_on_ok(result({"rocmlab_fleet_plan": plan(tmp_path, ["ws-01"], **changes)}))
    cb.v2_playbook_on_stats(stats=None)
    assert shown.lines == ["BANNER FLEET REPORT"]
    assert len(shown.warnings) == 1 and fragment in shown.warnings[0], shown.warnings
    assert "\x1b" not in shown.warnings[0] and "\n" not in shown.warnings[0]
    assert not (tmp_path / "fleet.json").exists()


def test_a_relative_reports_dir_is_the_one_the_run_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "reports").mkdir()
    monkeypatch.chdir(tmp_path)
    checked = callback.checked_plan(plan(Path("reports"), ["ws-01"]))
    assert checked["reports_dir"] == str(tmp_path / "reports")


# --- what the report says, whatever its exit code -------------------------------------------
def fake_report(tmp_path: Path, code: int, out: str, err: str) -> Path:
    """A stand-in `rocmlab` package whose fleet-report prints OUT and ERR and exits CODE, put
    where the callback runs the checkout's (its src/)."""
    src = tmp_path / "checkout" / "src" / "rocmlab"
    src.mkdir(parents=True)
    (src / "__init__.py").write_text("")
    (src / "__main__.py").write_text(
        f"import sys\nsys.stdout.write({out!r})\nsys.stderr.write({err!r})\nsys.exit({code})\n"
    )
    return tmp_path / "checkout"


@pytest.mark.parametrize(
    ("code", "out", "err", "lines", "warning"),
    [
        (0, "ws-01  READY\nfleet: 1 of 1 hosts ready\n", "", ["fleet: 1 of 1 hosts ready"], None),
        (1, "ws-01  NO_REPORT  no report\n", "", ["(exit 1: not every declared host"], None),
        (
            2,
            "",
            "rocmlab fleet-report: cannot write fleet.html: Permission denied\n",
            [],
            "could not be made (rocmlab fleet-report exited 2): rocmlab fleet-report: "
            "cannot write fleet.html: Permission denied",
        ),
        (
            5,
            "ws-01  READY\n",
            "outputs not written: the previous set is intact\n",
            ["ws-01  READY"],
            "exited 5): outputs not written: the previous set is intact",
        ),
        (1, "", "Traceback (most recent call last):\nValueError: x\n", [], "without printing"),
        (137, "", "", [], "exited 137 without printing the table: it said nothing on stderr"),
        (0, "ws-01 \x1b[31mREADY\u202e\n", "", ["ws-01 \\x1b[31mREADY\\u202e"], None),
        # Invisible format characters (Unicode's Cf), on stdout and stderr.
        (
            1,
            "ws\u200b-01  READY\ufeff\n",
            "ws\u2060-02\U000e0041\n",
            ["ws\\u200b-01  READY\\ufeff"],
            "said: ws\\u2060-02\\U000e0041",
        ),
    ],
)
def test_the_table_or_the_error_is_shown_never_only_an_exit_code(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    code: int,
    out: str,
    err: str,
    lines: list[str],
    warning: str | None,
) -> None:
    monkeypatch.setattr(callback, "CHECKOUT", fake_report(tmp_path, code, out, err))
    reports = tmp_path / "reports"
    reports.mkdir()
    cb, shown = plugin()
    cb.v2_runner_on_ok(result({"rocmlab_fleet_plan": plan(reports, ["ws-01"])}))
    cb.v2_playbook_on_stats(stats=None)
    text = "\n".join(shown.lines)
    for line in lines:
        assert line in text, text
    assert not any(c in text + "".join(shown.warnings) for c in "\x1b\u202e\u200b\u2060\ufeff")
    if warning is None:
        assert not shown.warnings, shown.warnings
    else:
        assert len(shown.warnings) == 1 and warning in shown.warnings[0], shown.warnings


def test_a_report_that_cannot_run_is_a_warning_not_a_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(callback.sys, "executable", "/nonexistent/python3")
    cb, shown = plugin()
    cb.v2_runner_on_ok(result({"rocmlab_fleet_plan": plan(tmp_path, ["a"])}))
    cb.v2_playbook_on_stats(stats=None)
    assert len(shown.warnings) == 1 and "did not run" in shown.warnings[0], shown.warnings


def test_the_codes_that_mean_no_report_are_fleet_reports_own() -> None:
    """What the callback reads as "no report was made" is every code of the CLI's table for
    rocmlab fleet-report but passed, not ready and interrupted."""
    from rocmlab.common import contract

    codes = set(contract.exit_codes_of("fleet-report")) - {0, 1, 130, 143}
    assert set(callback.REPORT_NOT_MADE) == codes
