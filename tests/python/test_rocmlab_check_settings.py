"""The action rocmlab_check_settings (plugins/action/): every host's settings checked once, on the
controller, against the roles' meta/settings.yml, with each host's own problems.

One ansible-playbook run over hosts that cannot be reached (TEST-NET addresses over SSH): the
action must never contact them. The settings resolve as the hosts' tasks would see them (the
roles' templated defaults, the inventory over them), each host's problems name its own values.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest
import yaml
from rocmlab_testutil import playbook_run

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
    tmp_path: Path,
    hosts: dict[str, dict],
    roles: list[str],
    common_only: list | None = None,
    extra: dict | None = None,
    groups: dict[str, list[str]] | None = None,
    play: str = PLAY,
) -> dict:
    """The action's result for HOSTS (inventory host vars), in GROUPS (their group_vars files
    are whatever the test wrote to TMP_PATH/group_vars), with EXTRA as extra vars."""
    inventory = tmp_path / "inventory.json"
    localhost = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    children = {
        group: {"hosts": {name: {} for name in members}}
        for group, members in (groups or {}).items()
    }
    inventory.write_text(
        json.dumps(
            {
                "all": {
                    "hosts": {name: {**UNREACHABLE, **values} for name, values in hosts.items()},
                    "children": children,
                },
                "local": {"hosts": {"localhost": localhost}},
            }
        )
    )
    playbook = tmp_path / "play.yml"
    playbook.write_text(play)
    out = tmp_path / "result.json"
    run = playbook_run(
        [
            "-i",
            str(inventory),
            "-e",
            json.dumps(
                {"check_roles": roles, "out": str(out)}
                | ({} if common_only is None else {"check_common_only": common_only})
            ),
            *(["-e", json.dumps(extra)] if extra else []),
            str(playbook),
        ]
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


def test_where_rocm_comes_from_is_system_or_wheels(tmp_path):
    found = check(
        tmp_path,
        {"wheels": {"rocmlab_rocm_install": "wheels"}, "typo": {"rocmlab_rocm_install": "pip"}},
        ["user_groups", "pytorch_rocm"],
    )
    assert sorted(found["problems"]) == ["typo"]
    text = " ".join(found["problems"]["typo"])
    assert "rocmlab_rocm_install must be one of: system, wheels, got: pip" in text, text


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


# --- Variables no role declares (a typo would otherwise leave the default in place) ---------


def unknown(name: str, where: str, hint: str, prefix: str) -> str:
    """The problem of a variable with a role's prefix that no role declares, as a host sees it."""
    return (
        f"{name}, set in {where}, is not a setting of any rocmlab role, so nothing would read "
        f"it. {hint} A variable of the site's own whose name starts with {prefix} is accepted "
        "once listed in rocmlab_settings_allow_unknown."
    )


def test_a_misspelt_setting_in_the_extra_vars_is_refused_naming_the_setting(tmp_path):
    found = check(tmp_path, {"node": {}}, ["rocm_repo"], extra={"rocm_repo_verison": "7.1"})
    problem = unknown(
        "rocm_repo_verison", "the extra vars", "Did you mean rocm_repo_version?", "rocm_repo_"
    )
    # -e sets it for every host of the play: the controller (group local) too.
    assert found["problems"] == {"node": [problem], "localhost": [problem]}


def test_a_misspelt_setting_in_the_inventory_is_refused_naming_where(tmp_path):
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "lab.yml").write_text('---\nrocm_repo_verison: "7.1"\n')
    (tmp_path / "host_vars").mkdir()
    (tmp_path / "host_vars" / "third.yml").write_text("---\nsmoke_test_epoch: 1\n")
    (tmp_path / "site.yml").write_text('---\ngfx_override_verison: "10.3.0"\n')
    play = PLAY.replace(
        "  gather_facts: false\n",
        "  gather_facts: false\n  vars:\n    user_groups_user: [researcher]\n"
        "  vars_files: [site.yml]\n",
    )
    found = check(
        tmp_path,
        {"node": {}, "other": {"pytorch_rocm_verison": "2.9.1"}, "third": {}},
        ["rocm_repo", "pytorch_rocm", "user_groups", "smoke_test"],
        groups={"lab": ["node"]},
        play=play,
    )
    in_play = [
        unknown(
            "gfx_override_verison",
            "the play's vars_files",
            "Did you mean gfx_override_version?",
            "gfx_override_",
        ),
        unknown(
            "user_groups_user", "the play's vars", "Did you mean user_groups_users?", "user_groups_"
        ),
    ]
    own = {
        "node": unknown(
            "rocm_repo_verison", "group_vars/lab", "Did you mean rocm_repo_version?", "rocm_repo_"
        ),
        "other": unknown(
            "pytorch_rocm_verison",
            "the inventory's vars of host other",
            "Did you mean pytorch_rocm_version?",
            "pytorch_rocm_",
        ),
        "third": unknown(
            "smoke_test_epoch",
            "host_vars/third",
            "Role smoke_test's settings are listed in its README.",
            "smoke_test_",
        ),
    }
    # Each host's problems, in the order of the variables' names.
    assert found["problems"] == {
        **{host: sorted([problem, *in_play]) for host, problem in own.items()},
        "localhost": in_play,
    }


def test_a_site_variable_listed_in_the_opt_out_passes(tmp_path):
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "all.yml").write_text("---\nrocm_repo_site_owner: ops\n")
    found = check(
        tmp_path,
        {
            "allowed": {"rocmlab_settings_allow_unknown": ["rocm_repo_site_owner"]},
            "strict": {},
            "bad": {"rocmlab_settings_allow_unknown": "rocm_repo_site_owner"},
        },
        ["rocm_repo"],
    )
    refused = unknown(
        "rocm_repo_site_owner",
        "group_vars/all",
        "Role rocm_repo's settings are listed in its README.",
        "rocm_repo_",
    )
    assert "allowed" not in found["problems"]
    assert found["problems"]["strict"] == [refused]
    # The opt-out is checked like every other setting.
    assert found["problems"]["bad"] == [
        refused,
        'rocmlab_settings_allow_unknown: "rocm_repo_site_owner" is a string, not a list. '
        "Write a YAML list, one item each.",
    ]


def test_the_facts_the_roles_publish_are_never_refused_as_unknown(tmp_path):
    # A scenario or a test may set a published fact in the inventory (rocmlab_lab_cache_urls: {}
    # to skip the lab cache's lookup); meta/settings.yml lists them (publishes), and
    # tools/role_docs.py --check holds the lists to what the roles' tasks set.
    published = {
        name: {}
        for path in sorted((REPO / "roles").glob("*/meta/settings.yml"))
        for name in yaml.safe_load(path.read_text()).get("publishes") or []
    }
    assert {"rocm_repo_files", "rocmlab_settings_checked", "smoke_test_wheel_built"} <= set(
        published
    )
    found = check(tmp_path, {"node": published}, ["rocm_repo"])
    assert "node" not in found["problems"], found["problems"]


CONVERGED = """
- name: Check the settings as a run does, then again once the role has set its facts
  hosts: localhost
  gather_facts: true
  tasks:
    - name: Check the settings of role rocm_repo, as its first task does (sets its facts)
      ansible.builtin.include_role:
        name: rocmlab.rocmlab.rocmlab
        tasks_from: roles
        rolespec_validate: false
      vars:
        __rocmlab_roles: [rocm_repo]

    - name: Check every host's settings again, with the facts set
      rocmlab.rocmlab.rocmlab_check_settings:
        roles: [rocm_repo]
      register: checked

    - name: Keep the result and the facts
      ansible.builtin.copy:
        content: "{{ {'checked': checked, 'facts': facts} | to_json }}"
        dest: "{{ out }}"
        mode: "0644"
      vars:
        facts:
          rocm_repo_source_effective: "{{ rocm_repo_source_effective }}"
          rocm_repo_downloads: "{{ rocm_repo_downloads | length }}"
          rocmlab_lab_cache_urls: "{{ rocmlab_lab_cache_urls }}"
          rocmlab_settings_checked: "{{ rocmlab_settings_checked }}"
"""


def test_a_converged_runs_own_facts_never_trip_the_check(tmp_path):
    found = check(tmp_path, {}, [], play=CONVERGED)
    # The role's real tasks set its facts on this host (read-only: the checks and validate.yml).
    assert found["facts"]["rocmlab_settings_checked"] == ["rocm_repo"]
    assert found["facts"]["rocm_repo_source_effective"] in ("amd", "distro")
    assert found["checked"]["problems"] == {}, found["checked"]["problems"]


@pytest.mark.parametrize("where", ["extra vars", "group_vars"])
def test_the_demo_run_stops_at_the_settings_check_before_any_change(tmp_path, where):
    """ansible-playbook -i inventory/demo playbooks/site.yml --check with the typo, given with -e
    or written in the demo's group_vars: the first play's settings check fails the host, and no
    later play runs. Facts are not gathered (ANSIBLE_GATHERING=explicit), so the demo's
    container is never contacted: a real run gathers them first (read-only), then stops at the
    same task."""
    inventory = tmp_path / "inventory" / "demo"
    shutil.copytree(REPO / "inventory" / "demo", inventory)
    extra = ["-e", "rocm_repo_verison=7.1"]
    if where == "group_vars":
        with (inventory / "group_vars" / "demo_lab.yml").open("a") as group_vars:
            group_vars.write('rocm_repo_verison: "7.1"\n')
        extra = []
    run = playbook_run(
        ["-i", str(inventory), "playbooks/site.yml", "--check", *extra],
        ANSIBLE_GATHERING="explicit",
    )
    output = run.stdout + run.stderr
    assert run.returncode == 2, output[-3000:]
    placed = "the extra vars" if where == "extra vars" else "group_vars/demo_lab"
    assert f"rocm_repo_verison, set in {placed}, is not a setting" in output, output[-3000:]
    assert "Did you mean rocm_repo_version?" in output
    failed = [line for line in output.splitlines() if line.startswith("fatal: ")]
    assert failed == ["fatal: [rocmlab-demo]: FAILED! => "], failed
    task = output.split("fatal: [rocmlab-demo]")[0].rsplit("TASK [", 1)[1].split("]")[0]
    assert task == (
        "rocmlab.rocmlab.rocmlab : Check that this host's settings were accepted, and refuse "
        "them otherwise"
    )
    assert "Provision ROCm and the frameworks" not in output
    assert re.search(r"rocmlab-demo +: ok=\d+ +changed=0 +unreachable=0 +failed=1", output)


# --- The starter inventory (inventory/lab.example/group_vars/all.yml) ------------------------

STARTER = REPO / "inventory" / "lab.example" / "group_vars" / "all.yml"
# The roles site.yml applies (the role registry's rocm, frameworks and smoke groups).
SITE_ROLES = [
    entry["name"]
    for entry in yaml.safe_load((REPO / "roles/rocmlab/vars/main.yml").read_text())[
        "__rocmlab_registry"
    ]
    if entry["group"] in ("rocm", "frameworks", "smoke")
]


def filled(decisions: dict) -> str:
    """The starter with each of DECISIONS ({name: value}) written over its line, as a lab admin
    edits the copy."""
    text = STARTER.read_text()
    for name, value in decisions.items():
        line = next(line for line in text.splitlines() if line.startswith(f"{name}: "))
        text = text.replace(f"\n{line}\n", f"\n{name}: {json.dumps(value)}\n")
    assert {k: v for k, v in yaml.safe_load(text).items() if k in decisions} == decisions
    return text


@pytest.mark.parametrize(
    "decisions",
    [
        {},  # as written: every decision at its default
        {
            "rocmlab_lab_cache": "head-01",
            "rocm_repo_version": "7.2",
            "rocm_repo_source": "amd",
            "user_groups_users": ["alice", "bob"],
            "pytorch_rocm_version": "2.13.0",
            "tensorflow_rocm_enabled": True,
        },
    ],
    ids=["as-written", "filled"],
)
def test_the_settings_check_accepts_the_starter(tmp_path, decisions):
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "all.yml").write_text(filled(decisions))
    assert SITE_ROLES[0] == "rocm_repo" and "smoke_test" in SITE_ROLES
    found = check(
        tmp_path,
        {"gpu01": {}, "head-01": {}},
        SITE_ROLES,
        groups={"lab_cache": ["head-01"]},
    )
    assert found["problems"] == {}, found["problems"]


def test_a_misspelt_decision_in_the_starter_is_refused_naming_the_file(tmp_path):
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "all.yml").write_text(
        STARTER.read_text().replace("\nrocm_repo_version: ", "\nrocm_repo_verison: ")
    )
    found = check(tmp_path, {"gpu01": {}}, SITE_ROLES)
    assert found["problems"]["gpu01"] == [
        unknown(
            "rocm_repo_verison", "group_vars/all", "Did you mean rocm_repo_version?", "rocm_repo_"
        )
    ]
