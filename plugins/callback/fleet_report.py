# Copyright: rocmlab contributors
# Apache License 2.0
"""The fleet table at the end of a lab rollout (playbooks/fleet.yml), including a rollout that
stopped: Ansible ends the whole playbook when a batch exceeds max_fail_percentage (or every host
of a batch fails), so no play after the rollout would run then; a callback's
v2_playbook_on_stats still does.

Trust: this runs on the controller, in the ansible-playbook process, for every playbook run from
the checkout. What a managed host's modules return (their ansible_facts included) is written by
that host's root and is hostile; the callback therefore acts only on the result of the one task
that makes the plan on the controller (the set_fact of roles/rocmlab_fleet/tasks/plan.yml,
delegated to localhost: Ansible names the task and its file, no host can), takes data from it
(never a command), checks that data, and builds the command itself."""

from __future__ import annotations

DOCUMENTATION = r"""
name: fleet_report
type: aggregate
short_description: Print rocmlab's fleet table at the end of a lab rollout
description:
  - Watches for the plan that playbooks/fleet.yml makes in its first play, on the controller
    (the result of the set_fact task of roles/rocmlab_fleet/tasks/plan.yml, delegated to
    localhost), and at the end of the run - after the last play, or after a failure budget
    stopped the rollout - runs this checkout's C(rocmlab fleet-report) over the plan's reports
    directory and declared hosts and prints its table, or why it could not be made. Does nothing
    for other playbooks and in check mode.
  - Facts that any other task returns - in particular a managed host's - are never read, and no
    command is ever taken from the plan; its values (reports directory, host names, slow
    fraction) are checked before they reach the command line.
  - The report writes fleet.json, fleet.html and fleet.junit.xml into the reports directory
    (docs/fleet-report.md); its exit code (1 when a declared host is not ready, 2 when the report
    could not be made) does not change ansible-playbook's.
requirements:
  - enable it in ansible.cfg (callbacks_enabled = rocmlab.rocmlab.fleet_report), as this project's
    ansible.cfg does
"""

EXAMPLES = r"""
# ansible.cfg: the table at the end of every rollout (playbooks/fleet.yml)
#   [defaults]
#   callbacks_enabled = rocmlab.rocmlab.fleet_report
#
# or for one run:
#   ANSIBLE_CALLBACKS_ENABLED=rocmlab.rocmlab.fleet_report \
#     ansible-playbook -i inventory/lab rocmlab.rocmlab.fleet
"""

import contextlib
import math
import os
import re
import subprocess
import sys
from pathlib import Path

from ansible.plugins.callback import CallbackBase

# Every control, format (bidi, zero-width) and separator character a line holds is escaped
# before it reaches the terminal.
from ansible_collections.rocmlab.rocmlab.plugins.plugin_utils.terminal import shown, unsafe

# The fleet report reads a few files; it gets this long to do so before it is abandoned.
REPORT_TIMEOUT = 300
# rocmlab fleet-report's exit codes that mean no report was made: input refused, outputs not
# written, a fault (its table in src/rocmlab/data/cli_contract.json; the tests compare them).
REPORT_NOT_MADE = (2, 5, 70)
# This checkout (plugins/callback/ is two levels down): its src/ holds `rocmlab fleet-report`,
# its roles/ the one task whose result is the plan.
CHECKOUT = Path(__file__).resolve().parents[2]
PLAN_TASKS = CHECKOUT / "roles" / "rocmlab_fleet" / "tasks" / "plan.yml"
SET_FACT = frozenset({"set_fact", "ansible.builtin.set_fact", "ansible.legacy.set_fact"})
PLAN_FACT = "rocmlab_fleet_plan"
# What the report says about itself on stderr when it could not be made, kept to this much.
STDERR_SHOWN = 2000
_ROLLOUT_ID = re.compile(r"[0-9A-Za-z._:-]{1,64}")


class PlanError(ValueError):
    """The plan's values cannot make a fleet report; the message says which and why."""


def is_plan_task(task: object) -> bool:
    """Whether TASK (Ansible's Task object, made by the controller from the playbook) is the
    set_fact of roles/rocmlab_fleet/tasks/plan.yml in this checkout, delegated to localhost. A
    host decides what its modules return, never which task a result belongs to."""
    action = getattr(task, "action", None)
    if action not in SET_FACT or getattr(task, "delegate_to", None) != "localhost":
        return False
    get_path = getattr(task, "get_path", None)
    where = get_path() if callable(get_path) else ""
    if not isinstance(where, str) or not where:
        return False
    path = where.rsplit(":", 1)[0] if re.search(r":\d+$", where) else where
    try:
        return Path(path).resolve() == PLAN_TASKS
    except (OSError, RuntimeError, ValueError):
        return False


def _host_name(value: object, where: str) -> str:
    if not isinstance(value, str) or not value or value in (".", ".."):
        raise PlanError(f"{where}: {value!r} is not an inventory host name")
    if "," in value or "/" in value or unsafe(value) or value != value.strip():
        raise PlanError(
            f"{where}: {shown(repr(value))} cannot name a report file (no ',', '/', spaces at "
            "either end or control characters)"
        )
    return str(value)


def checked_plan(plan: object) -> dict:
    """The values of the plan the report needs, checked: {rollout_id, reports_dir (absolute,
    an existing directory), declared (host names), slow_fraction (in (0, 1]), check_mode}.
    Raises PlanError naming the value that is not usable."""
    if not isinstance(plan, dict):
        raise PlanError(f"{PLAN_FACT} is a {type(plan).__name__}, not a mapping")
    rollout_id = plan.get("rollout_id")
    if not isinstance(rollout_id, str) or not _ROLLOUT_ID.fullmatch(rollout_id):
        raise PlanError(f"{PLAN_FACT}.rollout_id: {shown(repr(rollout_id))} is not a rollout id")
    reports_dir = plan.get("reports_dir")
    if not isinstance(reports_dir, str) or not reports_dir or unsafe(reports_dir):
        raise PlanError(
            f"{PLAN_FACT}.reports_dir: {shown(repr(reports_dir))} is not a path "
            "(rocmlab_reports_dir)"
        )
    reports = os.path.abspath(reports_dir)
    if not os.path.isdir(reports):
        raise PlanError(
            f"{PLAN_FACT}.reports_dir: {shown(reports)} is not a directory on the controller "
            "(rocmlab_reports_dir)"
        )
    declared = plan.get("declared")
    if not isinstance(declared, list) or not declared:
        raise PlanError(f"{PLAN_FACT}.declared: {shown(repr(declared))} is not a list of hosts")
    hosts = [_host_name(name, f"{PLAN_FACT}.declared[{i}]") for i, name in enumerate(declared)]
    fraction = plan.get("slow_fraction")
    if isinstance(fraction, str):
        with contextlib.suppress(ValueError):
            fraction = float(fraction)
    if (
        isinstance(fraction, bool)
        or not isinstance(fraction, (int, float))
        or not math.isfinite(fraction)
        or not 0 < fraction <= 1
    ):
        raise PlanError(
            f"{PLAN_FACT}.slow_fraction: {shown(repr(plan.get('slow_fraction')))} is not a "
            "fraction above 0 and up to 1 (rocmlab_fleet_slow_fraction)"
        )
    check_mode = plan.get("check_mode")
    if isinstance(check_mode, str) and check_mode in ("True", "False"):
        check_mode = check_mode == "True"
    if not isinstance(check_mode, bool):
        raise PlanError(f"{PLAN_FACT}.check_mode: {shown(repr(check_mode))} is not a boolean")
    return {
        "rollout_id": str(rollout_id),
        "reports_dir": str(reports),
        "declared": hosts,
        "slow_fraction": float(fraction),
        "check_mode": check_mode,
    }


def report_command(plan: dict) -> tuple[list[str], dict[str, str], str]:
    """argv, environment and working directory of the fleet report for a checked PLAN: the
    Python that runs Ansible, this checkout's src/ (the standard library only), run from src/
    so that `-m rocmlab` finds no other module of that name first."""
    argv = [
        sys.executable,
        "-m",
        "rocmlab",
        "fleet-report",
        plan["reports_dir"],
        "--hosts",
        ",".join(plan["declared"]),
        "--slow-fraction",
        repr(plan["slow_fraction"]),
    ]
    src = str(CHECKOUT / "src")
    return argv, dict(os.environ, PYTHONPATH=src), src


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "rocmlab.rocmlab.fleet_report"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self.plan = None

    def v2_runner_on_ok(self, result):
        # The first plan of the run only, and only from the plan task itself.
        if self.plan is not None or not is_plan_task(getattr(result, "_task", None)):
            return
        facts = result._result.get("ansible_facts") or {}
        if PLAN_FACT in facts:
            self.plan = facts[PLAN_FACT]

    def v2_playbook_on_stats(self, stats):
        if self.plan is None:
            return
        try:
            plan = checked_plan(self.plan)
        except PlanError as exc:
            self._display.banner("FLEET REPORT")
            self._display.warning(f"The fleet report was not made: {exc}.")
            return
        if plan["check_mode"]:
            return
        argv, env, cwd = report_command(plan)
        self._display.banner(f"FLEET REPORT [rollout {plan['rollout_id']}]")
        try:
            done = subprocess.run(
                argv,
                env=env,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                errors="replace",
                timeout=REPORT_TIMEOUT,
                check=False,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            self._display.warning(
                f"rocmlab fleet-report did not run ({shown(str(exc))}): {shown(' '.join(argv))}"
            )
            return
        for line in done.stdout.splitlines():
            self._display.display(shown(line))
        said = shown(done.stderr.strip()[-STDERR_SHOWN:])
        where = plan["reports_dir"]
        if done.returncode == 0:
            self._display.display(f"fleet.html, fleet.json and fleet.junit.xml in {shown(where)}")
        elif done.returncode == 1 and done.stdout.strip():
            self._display.display(
                f"fleet.html, fleet.json and fleet.junit.xml in {shown(where)}"
                " (exit 1: not every declared host is ready)"
            )
        elif done.returncode in REPORT_NOT_MADE:
            self._display.warning(
                f"The fleet report could not be made (rocmlab fleet-report exited "
                f"{done.returncode}): {said or 'it said nothing on stderr'}"
            )
            return
        else:
            self._display.warning(
                f"rocmlab fleet-report exited {done.returncode}"
                + (" without printing the table" if not done.stdout.strip() else "")
                + f": {said or 'it said nothing on stderr'}"
            )
            return
        if said:
            self._display.warning(f"rocmlab fleet-report said: {said}")
