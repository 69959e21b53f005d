# Copyright: rocmlab contributors
# Apache License 2.0
"""The fleet table at the end of a lab rollout (playbooks/fleet.yml), including a rollout that
stopped: Ansible ends the whole playbook when a batch exceeds max_fail_percentage (or every host
of a batch fails), so no play after the rollout would run then; a callback's
v2_playbook_on_stats still does."""

from __future__ import annotations

import os
import subprocess

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = r"""
name: fleet_report
type: aggregate
short_description: Print rocmlab's fleet table at the end of a lab rollout
description:
  - Watches for the plan that playbooks/fleet.yml makes in its first play (the fact
    C(rocmlab_fleet_plan) of localhost), and at the end of the run - after the last play, or
    after a failure budget stopped the rollout - runs C(rocmlab fleet-report) with the plan's
    arguments and prints its table. Does nothing for other playbooks and in check mode.
  - The report writes fleet.json, fleet.html and fleet.junit.xml into the reports directory
    (docs/fleet-report.md); its exit code (1 when a declared host is not ready) does not change
    ansible-playbook's.
requirements:
  - enable it in ansible.cfg (callbacks_enabled = rocmlab.rocmlab.fleet_report), as this project's
    ansible.cfg does
"""

# The fleet report reads a few files; it gets this long to do so before it is abandoned.
REPORT_TIMEOUT = 300


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "rocmlab.rocmlab.fleet_report"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self.plan = None

    def v2_runner_on_ok(self, result):
        facts = result._result.get("ansible_facts") or {}
        plan = facts.get("rocmlab_fleet_plan")
        if isinstance(plan, dict) and plan.get("report_argv"):
            self.plan = plan

    def v2_playbook_on_stats(self, stats):
        if not self.plan or self.plan.get("check_mode"):
            return
        argv = [str(arg) for arg in self.plan["report_argv"]]
        env = dict(
            os.environ, **{k: str(v) for k, v in (self.plan.get("report_env") or {}).items()}
        )
        self._display.banner(f"FLEET REPORT [rollout {self.plan.get('rollout_id', '?')}]")
        try:
            done = subprocess.run(
                argv, env=env, capture_output=True, text=True, timeout=REPORT_TIMEOUT, check=False
            )
        except (OSError, subprocess.SubprocessError) as exc:
            self._display.warning(f"rocmlab fleet-report did not run ({exc}): {' '.join(argv)}")
            return
        for line in done.stdout.splitlines():
            self._display.display(line)
        if done.returncode not in (0, 1):
            self._display.warning(
                f"rocmlab fleet-report exited {done.returncode}: {done.stderr.strip()[-2000:]}"
            )
            return
        where = self.plan.get("reports_dir", "")
        self._display.display(
            f"fleet.html, fleet.json and fleet.junit.xml in {where}"
            + ("" if done.returncode == 0 else " (exit 1: not every declared host is ready)")
        )
