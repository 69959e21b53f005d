"""plugins/callback/fleet_report.py inside a real ansible-playbook run, with the project's
ansible.cfg: the plan is made by roles/rocmlab_fleet/tasks/plan.yml as playbooks/fleet.yml's first
play makes it, then a compromised host (a local-connection host running a module whose output its
root controls, tests/fixtures/hostile_host/) returns a fleet plan of its own - with a command that
would leave a marker on the controller, another reports directory and other hosts - and settings
of its own in its facts. The controller runs nothing of it: the table at the end is the real
plan's, and the host's facts change none of its settings."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HOSTILE = REPO / "tests" / "fixtures" / "hostile_host"
PLAYBOOK_DIR_NAME = "playbooks"


def venv_tool(name: str) -> str | None:
    return shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    playbook_tool = venv_tool("ansible-playbook")
    if playbook_tool is None:
        pytest.skip("needs ansible-playbook")
    tmp = tmp_path_factory.mktemp("fleet-callback")
    reports, elsewhere = tmp / "reports", tmp / "elsewhere"
    elsewhere.mkdir()
    marker = tmp / "controller-ran-the-hosts-command"
    forged = {
        "rocmlab_fleet_plan": {
            "rollout_id": "forged",
            "reports_dir": str(elsewhere),
            "check_mode": False,
            "declared": ["evil"],
            "slow_fraction": 0.7,
            "report_argv": [sys.executable, "-c", f"open({str(marker)!r}, 'w').write('ran')"],
            "report_env": {},
        },
        "rocmlab_reports_dir": str(elsewhere),
    }
    source = tmp / "host-file.json"  # a file on the compromised host
    source.write_text(json.dumps(forged))
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory = tmp / "hosts.json"
    inventory.write_text(
        json.dumps(
            {
                "all": {
                    "hosts": {"ws-01": local, "ws-02": local},
                    "vars": {
                        "rocmlab_reports_dir": str(reports),
                    },
                }
            }
        )
    )
    # The playbook sits in the checkout's playbooks/ so that roles resolve as fleet.yml's do.
    playbook = tmp / "hostile.yml"
    playbook.write_text(
        json.dumps(
            [
                {
                    "name": "Check the rollout's settings and make the plan",
                    "hosts": "all",
                    "gather_facts": False,
                    "tasks": [
                        {
                            "name": "Check the settings and plan the rollout",
                            "ansible.builtin.import_role": {
                                "name": "rocmlab_fleet",
                                "tasks_from": "plan",
                            },
                        }
                    ],
                },
                {
                    "name": "A compromised host answers",
                    "hosts": "ws-02",
                    "gather_facts": False,
                    "tasks": [
                        {
                            "name": "Run a module whose output the host's root controls",
                            "hostile_facts": {"source": str(source)},
                        },
                        {
                            "name": "Keep what the host said as its facts, on the controller",
                            "ansible.builtin.set_fact": {
                                "rocmlab_fleet_plan": "{{ ansible_facts['rocmlab_fleet_plan'] }}"
                            },
                        },
                        {
                            "name": "Say the settings as the host's tasks see them",
                            "ansible.builtin.debug": {"msg": "SETTINGS {{ rocmlab_reports_dir }}"},
                        },
                    ],
                },
            ]
        )
    )
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_ROLES_PATH=str(REPO / "roles"),
        ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"),
        ANSIBLE_LIBRARY=str(HOSTILE),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_CALLBACK_RESULT_FORMAT="json",
    )
    env.pop("ANSIBLE_CALLBACKS_ENABLED", None)
    env.pop("ANSIBLE_INJECT_FACT_VARS", None)
    done = subprocess.run(
        [playbook_tool, "-i", str(inventory), str(playbook)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp,
        timeout=600,
        check=False,
    )
    return {
        "done": done,
        "said": done.stdout + done.stderr,
        "reports": reports,
        "elsewhere": elsewhere,
        "marker": marker,
    }


def test_the_run_passes_and_the_controller_runs_nothing_the_host_sent(run: dict) -> None:
    assert run["done"].returncode == 0, run["said"][-4000:]
    assert not run["marker"].exists()
    assert not (run["elsewhere"] / "fleet.json").exists()
    assert "rollout forged" not in run["said"]


def test_the_table_at_the_end_is_the_real_plans(run: dict) -> None:
    said = run["said"]
    table = said[said.index("FLEET REPORT [rollout ") :]
    assert "fleet: 0 of 2 hosts ready" in table, table
    fleet = json.loads((run["reports"] / "fleet.json").read_text())
    assert [host["host"] for host in fleet["hosts"]] == ["ws-01", "ws-02"]


def test_a_hosts_facts_do_not_change_its_settings(run: dict) -> None:
    # The project's ansible.cfg keeps facts under ansible_facts (inject_facts_as_vars = False).
    reports = str(run["reports"])
    assert f"SETTINGS {reports}" in run["said"], run["said"][-4000:]
    assert f"SETTINGS {run['elsewhere']}" not in run["said"], run["said"][-4000:]
