"""The action rocmlab_check_settings (plugins/action/): every host's settings checked once, on the
controller, against the roles' meta/settings.yml, with each host's own problems.

One ansible-playbook run over hosts that cannot be reached (TEST-NET addresses over SSH): the
action must never contact them. The settings resolve as the hosts' tasks would see them (the
roles' templated defaults, the inventory over them), each host's problems name its own values.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
UNREACHABLE = {"ansible_connection": "ssh", "ansible_host": "192.0.2.1", "ansible_port": 9}

PLAY = """
- name: Check the settings of the roles on the controller
  hosts: all
  gather_facts: false
  tasks:
    - name: Check every host's settings
      rocmlab.rocmlab.rocmlab_check_settings:
        roles: "{{ check_roles }}"
        common_only: "{{ check_common_only | default(omit) }}"
      run_once: true
      register: checked

    - name: Keep the result
      ansible.builtin.copy:
        content: "{{ checked | to_json }}"
        dest: "{{ out }}"
        mode: "0644"
      delegate_to: localhost
      run_once: true
"""


def check(
    tmp_path: Path, hosts: dict[str, dict], roles: list[str], common_only: list | None = None
) -> dict:
    inventory = tmp_path / "inventory.json"
    localhost = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory.write_text(
        json.dumps(
            {
                "all": {
                    "hosts": {name: {**UNREACHABLE, **values} for name, values in hosts.items()}
                },
                "local": {"hosts": {"localhost": localhost}},
            }
        )
    )
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAY)
    out = tmp_path / "result.json"
    bin_dir = Path(sys.executable).parent
    run = subprocess.run(
        [
            str(bin_dir / "ansible-playbook"),
            "-i",
            str(inventory),
            "-e",
            json.dumps(
                {"check_roles": roles, "out": str(out)}
                | ({} if common_only is None else {"check_common_only": common_only})
            ),
            str(playbook),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=dict(
            os.environ,
            ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
            ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"),
            ANSIBLE_ROLES_PATH=str(REPO / "roles"),
        ),
        check=False,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def result(tmp_path_factory) -> dict:
    hosts = {
        "good": {},
        "bad": {
            "rocm_repo_version": "6.4.2\n",
            "rocm_repo_source": "ubuntu",
            "rocm_repo_pin_priority": 400,
            "user_groups_users": "researcher",
            "gfx_override_version": 10.3,
            "smoke_test_venv": "/usr",
        },
        # The smoke job off: its settings are not checked.
        "off": {"smoke_test_enabled": False, "smoke_test_venv": "/usr"},
        # Names a lab cache whose port is out of range.
        "client": {"rocmlab_lab_cache": "head", "rocmlab_lab_cache_urls": {}},
        "head": {"lab_cache_apt_port": 80},
    }
    roles = ["rocm_repo", "user_groups", "gfx_override", "smoke_test"]
    return check(tmp_path_factory.mktemp("check"), hosts, roles)


def test_a_host_with_good_settings_has_no_problem_and_defaults_resolve(result):
    # The defaults are templates (rocmlab_reports_dir: "{{ playbook_dir }}/../reports",
    # rocm_repo_key_url: "{{ rocm_repo_base_url }}/..."): resolved, they pass.
    assert "good" not in result["problems"], result["problems"].get("good")
    assert result["roles"] == ["rocm_repo", "user_groups", "gfx_override", "smoke_test", "rocmlab"]


def test_each_bad_value_is_named_on_its_own_host(result):
    text = " ".join(result["problems"]["bad"])
    for fragment in (
        'rocm_repo_version: "6.4.2\\n" contains the control character "\\n"',
        "value of rocm_repo_source must be one of: , amd, distro, got: ubuntu",
        "rocm_repo_pin_priority: 400 is out of range. Use 501 to 1000",
        'user_groups_users: "researcher" is a string, not a list',
        'smoke_test_venv: "/usr" is a system directory',
    ):
        assert fragment in text, (fragment, text)
    # A version written as a number is checked as the text it becomes (string: true).
    assert 'gfx_override_version: "10.3" is not accepted' in text
    assert "is a number" not in text


def test_a_retired_setting_an_old_inventory_still_sets_is_refused(tmp_path):
    # Before rocmlab_reports_dir, each role had its own; an inventory that still sets one would
    # otherwise send nothing where it says, without a word.
    found = check(
        tmp_path,
        {
            "old": {"smoke_test_report_dir": "/srv/reports"},
            "new": {"rocmlab_reports_dir": "/srv/reports"},
        },
        ["smoke_test"],
    )
    assert found["problems"] == {
        "old": [
            "smoke_test_report_dir is no longer read: set rocmlab_reports_dir, the one directory "
            "for every report, instead."
        ]
    }


def test_common_only_checks_those_settings_of_role_rocmlab_and_no_other(tmp_path):
    # The rollout checks its own settings and the reports directory in one call: a bad lock
    # setting or a retired name is not its business there (the preflight checks them with every
    # role's).
    found = check(
        tmp_path,
        {
            "bad": {"rocmlab_fleet_connect_timeout": 0, "rocmlab_reports_dir": "reports"},
            "other": {"rocmlab_lock_stale_after": "soon", "smoke_test_report_dir": "/srv/r"},
        },
        ["rocmlab_fleet"],
        common_only=["rocmlab_reports_dir"],
    )
    assert found["roles"] == ["rocmlab_fleet", "rocmlab"]
    assert sorted(found["problems"]) == ["bad"]
    text = " ".join(found["problems"]["bad"])
    assert "rocmlab_fleet_connect_timeout: 0" in text, text
    assert 'rocmlab_reports_dir: "reports"' in text, text


def test_a_role_that_is_off_is_not_checked(result):
    assert "off" not in result["problems"]


def test_the_lab_cache_a_host_names_is_checked_with_its_settings(result):
    assert result["problems"]["client"] == [
        "lab_cache_apt_port of head: 80 is out of range. Use 1024 to 65535."
    ]


def test_a_directory_made_roots_is_left_to_the_host(tmp_path):
    found = check(tmp_path, {"cache": {}, "bad": {"lab_cache_root": "/etc"}}, ["lab_cache"])
    assert found["on_host"]["cache"] == [
        {
            "kind": "dir",
            "example": "/srv/rocmlab/lab-cache",
            "name": "lab_cache_root",
            "value": "/srv/rocmlab/lab-cache",
            "owner": "root",
        }
    ]
    # What fails on the controller already is not sent to the host.
    assert "bad" not in found["on_host"]
    assert any("lab_cache_root" in p for p in found["problems"]["bad"])


def test_a_role_checks_the_settings_of_the_role_it_uses(tmp_path):
    """cluster_check runs as smoke_test's account in its venv: smoke_test's settings are checked
    with it, even where the smoke job itself is off."""
    found = check(
        tmp_path,
        {"node": {"smoke_test_enabled": False, "smoke_test_venv": "/usr"}},
        ["cluster_check"],
    )
    assert any(p.startswith('smoke_test_venv: "/usr"') for p in found["problems"]["node"])
