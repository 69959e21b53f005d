"""The settings' single source (each role's meta/settings.yml) and what is generated from it: the
drift check in tools/role_docs.py passes on the repository and fails when a default, the
argument specs, a README table or the lab example (the starter and the reference) changes in
one place only, and when a setting is declared twice (in two roles, or checked by a row of its
own in a task file), and when a role's list of the facts it publishes differs from what its
tasks set. ansible-doc shows every role's settings."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from rocmlab_testutil import role_docs_tree

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("role_docs", REPO / "tools" / "role_docs.py")
assert _spec is not None and _spec.loader is not None
role_docs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(role_docs)


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """The roles, the playbooks (a fact they set is a role's to list), the lab example, the CLI's
    contract (which the smoke_test role copies) and the support catalog with its reader, its copy
    and the README (which it writes into), copied so that a test can make them drift."""
    return role_docs_tree(tmp_path)


def test_the_repository_has_no_drift(capsys):
    assert role_docs.main(["--check"]) == 0, capsys.readouterr().err


def test_a_default_changed_in_defaults_only_is_drift(copy, capsys):
    defaults = copy / "roles" / "pytorch_rocm" / "defaults" / "main.yml"
    defaults.write_text(
        defaults.read_text().replace('pytorch_rocm_version: ""', 'pytorch_rocm_version: "2.8.0"')
    )
    assert role_docs.main(["--check", "--root", str(copy)]) == 1
    err = capsys.readouterr().err
    assert "pytorch_rocm: pytorch_rocm_version defaults to '' in argument_specs but '2.8.0'" in err


def test_a_default_changed_in_the_declaration_only_is_drift_in_what_is_generated(copy, capsys):
    spec = copy / "roles" / "user_groups" / "meta" / "settings.yml"
    defaults = copy / "roles" / "user_groups" / "defaults" / "main.yml"
    for path in (spec, defaults):  # both sources agree; the generated files are now stale
        path.write_text(
            path.read_text()
            .replace("user_groups_udev_rules: false", "user_groups_udev_rules: true")
            .replace(
                "default: false\n        description: Install udev",
                "default: true\n        description: Install udev",
            )
        )
    assert role_docs.main(["--check", "--root", str(copy)]) == 1
    err = capsys.readouterr().err
    assert "roles/user_groups/README.md is not what tools/role_docs.py generates" in err
    assert (
        "roles/user_groups/meta/argument_specs.yml is not what tools/role_docs.py generates" in err
    )
    assert (
        "inventory/lab.example/group_vars/all.reference.yml is not what tools/role_docs.py "
        "generates" in err
    )
    assert role_docs.main(["--root", str(copy)]) == 0  # regenerating brings them back in step
    assert role_docs.main(["--check", "--root", str(copy)]) == 0
    assert (
        "| `user_groups_udev_rules` | bool | `true` |"
        in (copy / "roles/user_groups/README.md").read_text()
    )
    specs = yaml.safe_load((copy / "roles/user_groups/meta/argument_specs.yml").read_text())
    assert specs["argument_specs"]["main"]["options"]["user_groups_udev_rules"]["default"] is True


def test_the_argument_specs_are_the_declaration_without_its_checks():
    for role_dir in sorted((REPO / "roles").iterdir()):
        declared = yaml.safe_load((role_dir / "meta" / "settings.yml").read_text())
        specs = yaml.safe_load((role_dir / "meta" / "argument_specs.yml").read_text())
        assert specs == {"argument_specs": role_docs.stripped(declared["argument_specs"])}
        text = (role_dir / "meta" / "argument_specs.yml").read_text()
        assert "check:" not in text, role_dir.name


def test_argument_specs_edited_by_hand_are_drift(copy, capsys):
    specs = copy / "roles" / "rocm_repo" / "meta" / "argument_specs.yml"
    specs.write_text(specs.read_text().replace("default: 600", "default: 700"))
    assert role_docs.main(["--check", "--root", str(copy)]) == 1
    assert (
        "roles/rocm_repo/meta/argument_specs.yml is not what tools/role_docs.py generates"
        in capsys.readouterr().err
    )


def test_a_check_written_again_in_a_task_file_is_a_second_declaration(copy, capsys):
    validate = copy / "roles" / "gfx_override" / "tasks" / "validate.yml"
    validate.write_text(
        validate.read_text()
        + """
- name: Check the version again
  ansible.builtin.include_role:
    name: rocmlab
    tasks_from: check
  vars:
    __rocmlab_settings:
      - {name: gfx_override_version, value: "{{ gfx_override_version }}", kind: text}
"""
    )
    assert role_docs.main(["--check", "--root", str(copy)]) == 1
    assert (
        "gfx_override_version is checked by a row of its own in "
        "roles/gfx_override/tasks/validate.yml besides roles/gfx_override/meta/settings.yml"
        in capsys.readouterr().err
    )


def test_a_setting_declared_in_two_roles_is_refused(copy, capsys):
    settings = copy / "roles" / "smoke_test" / "meta" / "settings.yml"
    settings.write_text(
        settings.read_text().replace(
            "      smoke_test_enabled:\n",
            "      pytorch_rocm_venv:\n        type: path\n        description: Again.\n"
            "      smoke_test_enabled:\n",
        )
    )
    assert role_docs.main(["--check", "--root", str(copy)]) == 1
    assert (
        "pytorch_rocm_venv is declared in roles/pytorch_rocm/meta/settings.yml and in "
        "roles/smoke_test/meta/settings.yml: declare it once"
    ) in capsys.readouterr().err


def test_a_role_without_a_declaration_is_refused(copy, capsys):
    (copy / "roles" / "user_groups" / "meta" / "settings.yml").unlink()
    assert role_docs.main(["--check", "--root", str(copy)]) == 1
    assert "user_groups: meta/settings.yml is missing" in capsys.readouterr().err


def test_a_fact_a_role_sets_without_listing_it_is_drift(copy, capsys):
    # The settings check would refuse it as unknown where an inventory or -e sets it.
    tasks = copy / "roles" / "user_groups" / "tasks" / "main.yml"
    tasks.write_text(
        tasks.read_text()
        + "\n- name: Note the accounts\n  ansible.builtin.set_fact:\n"
        + "    user_groups_done: true\n    __user_groups_private: 1\n"
    )
    assert role_docs.main(["--check", "--root", str(copy)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "user_groups: user_groups_done is set in roles/user_groups/tasks/main.yml but not listed "
        "in publishes (meta/settings.yml): the settings check would refuse it as unknown"
    ]


def test_a_published_fact_nothing_sets_is_drift(copy, capsys):
    fleet = copy / "playbooks" / "fleet.yml"
    fleet.write_text(fleet.read_text().replace("rocmlab_fleet_wheel:", "rocmlab_fleet_wheels:"))
    assert role_docs.main(["--check", "--root", str(copy)]) == 1
    err = capsys.readouterr().err
    assert "rocmlab_fleet: rocmlab_fleet_wheel is listed in publishes but nothing sets it" in err
    assert "rocmlab_fleet_wheels is set in playbooks/fleet.yml but not listed" in err


def test_a_setting_missing_from_the_spec_is_drift(copy, capsys):
    defaults = copy / "roles" / "smoke_test" / "defaults" / "main.yml"
    defaults.write_text(defaults.read_text() + "smoke_test_undocumented: 1\n")
    assert role_docs.main(["--check", "--root", str(copy)]) == 1
    assert (
        "smoke_test_undocumented is in defaults/main.yml but not in argument_specs"
        in capsys.readouterr().err
    )


@pytest.mark.parametrize("role", role_docs.PUBLIC_ROLES)
def test_ansible_doc_shows_every_setting_of_the_role(role):
    ansible_doc = Path(sys.executable).with_name("ansible-doc")
    result = subprocess.run(
        [str(ansible_doc), "-t", "role", "-r", str(REPO / "roles"), role],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    for name in role_docs.spec_options(REPO / "roles" / role):
        assert name in result.stdout, name


@pytest.mark.parametrize("name", ["support_catalog.py", "rocm_installed.py"])
def test_a_wheel_copy_that_differs_from_the_collections_module_is_drift(copy, capsys, name):
    shipped = copy / "src" / "rocmlab" / "common" / name
    shipped.write_text(shipped.read_text() + "# edited in the wheel only\n")
    assert role_docs.main(["--check", "--root", str(copy)]) == 1
    assert f"src/rocmlab/common/{name}" in capsys.readouterr().err
    assert role_docs.main(["--root", str(copy)]) == 0
    source = copy / "plugins" / "module_utils" / name
    assert shipped.read_text() == source.read_text()


# --- The starter inventory: the decisions a lab makes (each role's starter list) -------------


def starter_declared() -> dict[str, dict]:
    """The settings the roles list under starter, in the order of the role registry, with their
    declarations."""
    declared = {}
    for role in role_docs.PUBLIC_ROLES:
        options = role_docs.spec_options(REPO / "roles" / role)
        declared |= {name: options[name] for name in role_docs.starter_names(REPO / "roles" / role)}
    return declared


def test_the_starter_holds_each_declared_decision_with_its_default():
    starter = yaml.safe_load(role_docs.STARTER.read_text())
    declared = starter_declared()
    assert {"rocm_repo_version", "rocm_repo_source", "rocmlab_lab_cache", "user_groups_users",
            "pytorch_rocm_version", "tensorflow_rocm_enabled"} <= set(declared)  # fmt: skip
    # Every variable in it is a declared setting, in the declared order, holding its default:
    # the file as written changes nothing (a templated default is written commented out).
    literal = [name for name, option in declared.items() if "{{" not in str(option["default"])]
    assert list(starter) == literal
    assert starter == {name: declared[name]["default"] for name in literal}
    text = role_docs.STARTER.read_text()
    for name in set(declared) - set(literal):
        assert f"\n# {name}: " in text, name
    # What a lab needs to decide the release: the catalog's lines and the torch pairs.
    assert "(AMD's Core SDK)" in text and "(legacy)" in text
    assert "7.2: 2.11, 2.12, 2.13, 2.14;" in text


def test_a_starter_naming_no_setting_is_drift(copy, capsys):
    settings = copy / "roles" / "rocm_repo" / "meta" / "settings.yml"
    settings.write_text(
        settings.read_text().replace(
            "starter: [rocm_repo_version, rocm_repo_source]",
            "starter: [rocm_repo_release, rocm_repo_source]",
        )
    )
    assert role_docs.main(["--check", "--root", str(copy)]) == 1
    err = capsys.readouterr().err
    assert (
        "rocm_repo: rocm_repo_release is listed under starter in meta/settings.yml but is no "
        "setting of the role" in err
    )
    assert (
        "inventory/lab.example/group_vars/all.yml is not what tools/role_docs.py generates" in err
    )


def test_a_renamed_setting_leaves_no_stale_starter(copy, capsys):
    # The setting renamed everywhere but in the starter list: --check names the list; the
    # generated starter never holds a name no role reads.
    for path in (copy / "roles" / "user_groups").rglob("*.yml"):
        text = path.read_text()
        if "user_groups_users:" in text:
            path.write_text(text.replace("user_groups_users:", "user_groups_accounts:"))
    assert role_docs.main(["--root", str(copy)]) == 1
    assert (
        "user_groups: user_groups_users is listed under starter in meta/settings.yml but is no "
        "setting of the role" in capsys.readouterr().err
    )
    starter = yaml.safe_load((copy / "inventory/lab.example/group_vars/all.yml").read_text())
    assert "user_groups_users" not in starter and "user_groups_accounts" not in starter


def test_a_decision_added_to_a_starter_list_is_generated(copy, capsys):
    settings = copy / "roles" / "user_groups" / "meta" / "settings.yml"
    settings.write_text(
        settings.read_text().replace(
            "starter: [user_groups_users]", "starter: [user_groups_users, user_groups_groups]"
        )
    )
    assert role_docs.main(["--check", "--root", str(copy)]) == 1
    assert "group_vars/all.yml is not what tools/role_docs.py generates" in capsys.readouterr().err
    assert role_docs.main(["--root", str(copy)]) == 0
    starter = (copy / "inventory/lab.example/group_vars/all.yml").read_text()
    assert "# Groups that grant GPU access.\n# For example: [render, video].\n" in starter
    assert "\nuser_groups_groups: [render, video]\n" in starter


def test_the_lab_example_reads_as_ansible_reads_it():
    """ansible-inventory over inventory/lab.example: the host range expands, every host gets the
    starter's values and the SSH account, and Ansible loads nothing of all.reference.yml."""
    ansible_inventory = Path(sys.executable).with_name("ansible-inventory")
    listed = subprocess.run(
        [str(ansible_inventory), "-i", str(REPO / "inventory" / "lab.example"), "--list"],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
    )
    assert listed.returncode == 0, listed.stderr
    assert "WARNING" not in listed.stderr, listed.stderr
    inventory = json.loads(listed.stdout)
    hostvars = inventory["_meta"]["hostvars"]
    assert sorted(hostvars) == [
        *[f"gpu{n:02d}.lab.example.org" for n in range(1, 9)],
        "mi210-01.lab.example.org",
    ]
    starter = yaml.safe_load(role_docs.STARTER.read_text())
    reference = yaml.safe_load(role_docs.REFERENCE.read_text())
    for host, values in hostvars.items():
        assert {name: values.get(name) for name in starter} == starter, host
        # The settings a host has: the starter's, and the driver hosts.yml gives the servers.
        servers = {"rocm_packages_driver"} if host.startswith("mi210-") else set()
        assert set(values) & set(reference) == set(starter) | servers, host
        assert values["ansible_user"] == "labadmin", host
        # A play's become: false must hold: an inventory ansible_become would override it.
        assert "ansible_become" not in values, host
    assert hostvars["mi210-01.lab.example.org"]["rocm_packages_driver"] == "dkms"
    assert inventory["lab"]["children"] == ["gpu_workstations", "gpu_servers"]


# The README's "Verified on hardware" table, from docs/verified.json (rocmlab verified).
VERIFIED_RUN = {
    "os": "debian 12", "os_name": "Debian GNU/Linux 12 (bookworm)", "kernel": "6.1.0-28-amd64",
    "rocm_release": "6.4.2", "rocm_source": "legacy", "gfx_arch": "gfx90a:sramecc+:xnack-",
    "gpu": "AMD Instinct MI210", "gpus": 2, "created": "2026-12-02T10:00:00Z",
    "rocmlab_version": "0.1.0", "torch_version": "2.9.1+rocm6.4", "model": "mlp",
    "report_sha256": "a" * 64,
}  # fmt: skip


def test_a_run_added_to_the_verified_file_is_drift_until_the_readme_lists_it(copy, capsys):
    verified = copy / "docs" / "verified.json"
    doc = json.loads(verified.read_text())
    doc["runs"] = [VERIFIED_RUN]
    verified.write_text(json.dumps(doc))
    assert role_docs.main(["--check", "--root", str(copy)]) == 1
    assert "README.md is not what tools/role_docs.py generates" in capsys.readouterr().err
    assert role_docs.main(["--root", str(copy)]) == 0
    readme = (copy / "README.md").read_text()
    block = readme.split(role_docs.VERIFIED_BEGIN, 1)[1].split(role_docs.VERIFIED_END, 1)[0]
    assert (
        "| Debian 12 | AMD's legacy packages (6.2-7.2) | 6.4.2 | 2 x gfx90a (AMD Instinct MI210) "
        "| 2026-12-02 | 0.1.0 |" in block
    )
    assert "| Debian 12 | AMD's Core SDK (7.14-10.0) | no run recorded on real hardware |" in block
    assert "1 run recorded" in block
    assert role_docs.main(["--check", "--root", str(copy)]) == 0


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ("markers", "README.md has no '<!-- BEGIN verified: generated -->' ... "),
        ("file", "docs/verified.json: 'runs[0].gpus' is string '2', expected integer or null"),
    ],
)
def test_no_markers_or_a_bad_verified_file_stops_the_tool(copy, change, said):
    if change == "markers":
        readme = copy / "README.md"
        readme.write_text(readme.read_text().replace(role_docs.VERIFIED_END, ""))
    else:
        verified = copy / "docs" / "verified.json"
        runs = [{**VERIFIED_RUN, "gpus": "2"}]
        verified.write_text(json.dumps({"schema_version": 1, "runs": runs}))
    with pytest.raises(SystemExit, match=re.escape(said)):
        role_docs.main(["--check", "--root", str(copy)])


# --- docs/network.md: what each role fetches, from where --------------------------------------


def test_the_network_table_names_each_fetch_with_its_setting_and_default_host():
    table = (REPO / "docs" / "network.md").read_text()
    for row in (
        "| rocm_repo | AMD's apt repositories (ROCm, amdgpu, graphics) and their signing key | "
        "`rocm_repo_base_url`, default repo.radeon.com | HTTPS 443 |",
        "| lab_cache | apt-cacher-ng (the clients' apt, AMD's repositories included) | "
        "`lab_cache_apt_port` (TCP, default 3142) |",
    ):
        assert row in table, row
    # Through the role's vars: smoke_test_mnist_url's default reads __smoke_test_mnist_url.
    mnist = yaml.safe_load((REPO / "roles/smoke_test/vars/main.yml").read_text())
    host = mnist["__smoke_test_mnist_upstream"].split("/")[2]
    assert f"`smoke_test_mnist_url`, default {host} | HTTPS 443 |" in table


def test_a_changed_default_host_is_drift_in_the_network_table(copy, capsys):
    for path in (
        copy / "roles" / "lab_cache" / "meta" / "settings.yml",
        copy / "roles" / "lab_cache" / "defaults" / "main.yml",
    ):
        text = path.read_text()
        assert "https://repo.amd.com/rocm/packages" in text
        path.write_text(
            text.replace("https://repo.amd.com/rocm/packages", "http://mirror.lab:8080")
        )
    assert role_docs.main(["--check", "--root", str(copy)]) == 1
    err = capsys.readouterr().err
    assert "docs/network.md is not what tools/role_docs.py generates" in err
    assert role_docs.main(["--root", str(copy)]) == 0
    table = (copy / "docs" / "network.md").read_text()
    assert "`lab_cache_amd_core_upstream`, default mirror.lab | HTTP 8080 |" in table


def test_a_network_row_naming_another_roles_setting_is_refused(copy, capsys):
    path = copy / "roles" / "rocm_repo" / "meta" / "settings.yml"
    path.write_text(path.read_text().replace("setting: rocm_repo_core_url", "setting: rocm_core"))
    assert role_docs.main(["--check", "--root", str(copy)]) == 1
    assert "names rocm_core, which is no setting of rocm_repo" in capsys.readouterr().err


def test_a_role_that_downloads_without_declaring_its_fetches_is_refused(copy, capsys):
    path = copy / "roles" / "smoke_test" / "meta" / "settings.yml"
    data = path.read_text()
    start, end = data.index("network:\n"), data.index("argument_specs:\n")
    path.write_text(data[:start] + data[end:])
    assert role_docs.main(["--check", "--root", str(copy)]) == 1
    err = capsys.readouterr().err
    assert "smoke_test: publishes smoke_test_downloads but declares no network fetches" in err
