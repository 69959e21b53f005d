"""The collection's role registry (roles/rocmlab/vars/main.yml, __rocmlab_registry), the one list
of the roles: its functions (plugins/module_utils/registry.py), its filters, and each of its
columns against the roles' own files and the playbooks, so that a role added, renamed, retagged
or moved in a playbook without its row fails here."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import yaml
from ansible_collections.rocmlab.rocmlab.plugins.module_utils import registry
from ansible_collections.rocmlab.rocmlab.plugins.plugin_utils import registry as loaded

REPO = Path(__file__).resolve().parents[2]
VARS = REPO / "roles" / "rocmlab" / "vars" / "main.yml"
REGISTRY = yaml.safe_load(VARS.read_text())["__rocmlab_registry"]
ROLES = registry.roles(REGISTRY)
# Roles that take their arguments from other roles only, never from a lab's inventory.
INTERNAL = {"framework_venv"}


def entry(name):
    return next(e for e in REGISTRY if e["name"] == name)


# --- the functions ----------------------------------------------------------------------------


def test_the_site_roles_are_the_rocm_frameworks_and_smoke_groups_in_order() -> None:
    assert ROLES["site"] == ROLES["rocm"] + ROLES["frameworks"] + ROLES["smoke"]
    assert ROLES["site"] == [
        "rocm_repo",
        "rocm_packages",
        "user_groups",
        "gfx_override",
        "pytorch_rocm",
        "tensorflow_rocm",
        "jax_rocm",
        "smoke_test",
    ]
    assert ROLES["tags"]["smoke_test"] == "smoke"
    assert "rocmlab" not in ROLES["tags"] and "rocmlab_fleet" not in ROLES["tags"]
    assert ROLES["all"][0] == "rocmlab"


@pytest.mark.parametrize(
    ("run_tags", "skip_tags", "checked", "expected"),
    [
        (["all"], [], [], ["rocm_repo", "gfx_override", "smoke_test"]),
        ([], [], [], ["rocm_repo", "gfx_override", "smoke_test"]),
        (["smoke"], [], [], ["smoke_test"]),
        # A role's name is not its tag: --tags smoke_test selects nothing here.
        (["smoke_test"], [], [], []),
        (["rocm_repo", "smoke"], [], [], ["rocm_repo", "smoke_test"]),
        (["all"], ["smoke"], [], ["rocm_repo", "gfx_override"]),
        (["all"], [], ["rocm_repo"], ["gfx_override", "smoke_test"]),
        (["gfx_override"], ["gfx_override"], [], []),
    ],
)
def test_a_run_checks_the_roles_its_tags_select_and_skip_less_those_checked(
    run_tags, skip_tags, checked, expected
) -> None:
    wanted = ["rocm_repo", "gfx_override", "smoke_test"]
    assert registry.applied(REGISTRY, wanted, run_tags, skip_tags, checked) == expected


@pytest.mark.parametrize(
    ("install", "expected"),
    [
        ("system", ["rocm_repo", "rocm_packages", "user_groups", "pytorch_rocm"]),
        # ROCm from wheels: apt and a system ROCm are left alone, the GPU groups are not.
        ("wheels", ["user_groups", "pytorch_rocm"]),
        # Not a choice: the settings check refuses it (rocmlab_rocm_install's choices) before
        # anything changes, with every role's settings checked.
        ("wheel", ["rocm_repo", "rocm_packages", "user_groups", "pytorch_rocm"]),
    ],
)
def test_a_host_with_rocm_from_wheels_leaves_the_system_rocm_roles_out(install, expected) -> None:
    wanted = ["rocm_repo", "rocm_packages", "user_groups", "pytorch_rocm"]
    assert registry.applied(REGISTRY, wanted, ["all"], [], [], install) == expected
    assert ROLES["system_rocm"] == ["rocm_repo", "rocm_packages"]


def test_the_wanted_order_is_kept() -> None:
    assert registry.applied(REGISTRY, ["smoke_test", "rocm_repo"], ["all"], []) == [
        "smoke_test",
        "rocm_repo",
    ]


@pytest.mark.parametrize("wanted", [["rocm_repos"], ["rocmlab_fleet"]])
def test_a_role_without_a_row_or_a_tag_is_named(wanted) -> None:
    with pytest.raises(ValueError, match=rf"{wanted[0]}: not a role of the registry with a tag"):
        registry.applied(REGISTRY, wanted, ["all"], [])


def broken(change):
    entries = copy.deepcopy(REGISTRY)
    change(entries)
    return entries


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda e: e.append(dict(e[1])), "the role rocm_repo is listed twice"),
        (lambda e: e[2].update(tag="rocm_repo"), "the tag rocm_repo is another role's too"),
        (lambda e: e[3].pop("host_rules"), "is not a role entry with the keys"),
        (lambda e: e[3].update(downloads="yes"), "downloads 'yes' is not true or false"),
        (lambda e: e[4].update(group=""), "group '' is neither a name nor null"),
        (lambda e: e[5].update(name=None), "name None is not a role's name"),
        (lambda e: e.clear(), "is not a list of roles"),
    ],
)
def test_a_broken_registry_is_refused_with_what_is_wrong(change, message) -> None:
    entries = broken(change)
    assert any(message in problem for problem in registry.problems(entries))
    with pytest.raises(ValueError, match=re.escape(message)):
        registry.roles(entries)


def test_the_real_registry_has_no_problem_and_the_controller_reads_the_same() -> None:
    assert registry.problems(REGISTRY) == []
    assert loaded.roles() == ROLES


def test_the_filters_refuse_with_ansibles_error() -> None:
    from ansible.errors import AnsibleFilterError
    from ansible_collections.rocmlab.rocmlab.plugins.filter import registry as filters

    assert filters.registry_roles(REGISTRY) == ROLES
    assert filters.registry_applied(REGISTRY, ["smoke_test"], ["all"], [], None) == ["smoke_test"]
    both = ["rocm_repo", "user_groups"]
    assert filters.registry_applied(REGISTRY, both, ["all"], [], None, "wheels") == ["user_groups"]
    with pytest.raises(AnsibleFilterError, match="listed twice"):
        filters.registry_roles(broken(lambda e: e.append(dict(e[1]))))
    with pytest.raises(AnsibleFilterError, match="nope: not a role"):
        filters.registry_applied(REGISTRY, ["nope"], ["all"], [])


# --- each column against the roles' files and the playbooks ----------------------------------


def test_every_role_of_the_collection_has_a_row_and_every_row_a_role() -> None:
    dirs = {p.parent.parent.name for p in (REPO / "roles").glob("*/meta/settings.yml")}
    assert set(ROLES["all"]) == dirs - INTERNAL


def test_the_site_groups_are_the_roles_playbooks_tasks_import_in_order_with_their_tags() -> None:
    """playbooks/tasks/<group>.yml (which site.yml and the rollout run) import the group's roles,
    in the registry's order, each under its tag."""
    for group in registry.SITE_GROUPS:
        tasks = yaml.safe_load((REPO / "playbooks" / "tasks" / f"{group}.yml").read_text())
        imported = [
            (t["ansible.builtin.import_role"]["name"].rsplit(".", 1)[-1], t.get("tags"))
            for t in tasks
            if "ansible.builtin.import_role" in t
        ]
        of_group = [(name, tags) for name, tags in imported if entry(name)["group"] == group]
        assert [name for name, _ in of_group] == ROLES[group]
        assert all(tags == [ROLES["tags"][name]] for name, tags in of_group)


def test_the_playbooks_leave_the_system_rocm_column_out_of_a_host_with_rocm_from_wheels() -> None:
    """What site.yml, rocm.yml and the rollout import (playbooks/tasks/rocm.yml), and what
    reset.yml removes: the roles of the column, and only they, skip a host whose
    rocmlab_rocm_install is wheels."""
    gate = "rocmlab_rocm_install != 'wheels'"
    tasks = yaml.safe_load((REPO / "playbooks" / "tasks" / "rocm.yml").read_text())
    gated = [
        t["ansible.builtin.import_role"]["name"].rsplit(".", 1)[-1]
        for t in tasks
        if "ansible.builtin.import_role" in t and t.get("when") == gate
    ]
    assert gated == ROLES["system_rocm"]
    reset = yaml.safe_load((REPO / "playbooks" / "reset.yml").read_text())
    removing = [t for t in reset[1]["tasks"][0]["block"] if "ansible.builtin.include_role" in t]
    gated = sorted(
        t["ansible.builtin.include_role"]["name"].rsplit(".", 1)[-1]
        for t in removing
        if t.get("when") == gate
    )
    assert gated == sorted(ROLES["system_rocm"])


def test_the_roles_that_publish_downloads_are_the_downloads_column() -> None:
    """Each role of the column sets <role>_downloads in its tasks, and no other role does."""
    publishing = set()
    for tasks in (REPO / "roles").glob("*/tasks/*.yml"):
        publishing |= set(re.findall(r"^\s+([a-z_]+)_downloads:", tasks.read_text(), re.M))
    assert publishing == set(ROLES["downloads"])


def test_the_roles_whose_defaults_read_the_lab_caches_urls_are_that_column() -> None:
    reading = {
        role
        for role in ROLES["all"]
        if role != "rocmlab"
        for path in (REPO / "roles" / role / part / "main.yml" for part in ("defaults", "vars"))
        if path.exists() and "rocmlab_lab_cache_urls" in path.read_text()
    }
    assert reading == set(ROLES["lab_cache_urls"])


def test_the_host_rules_column_is_the_tagged_roles_with_a_validate_file() -> None:
    """rocmlab_fleet (no tag: it never runs alone) checks its validate.yml in its own play."""
    roles = REPO / "roles"
    with_rules = {
        role for role in ROLES["tags"] if (roles / role / "tasks" / "validate.yml").exists()
    }
    assert with_rules == set(ROLES["host_rules"])


def test_no_playbook_or_role_lists_the_roles_a_run_checks_by_hand() -> None:
    """A playbook's first play takes its roles from the registry (role rocmlab's
    __rocmlab_roles_of); a role running alone names itself."""
    literal = re.compile(r"__rocmlab_roles:\s*\[([^\]]*)\]")
    for path in (REPO / "playbooks").glob("*.yml"):
        assert not literal.search(path.read_text()), path.name
    for path in (REPO / "roles").glob("*/tasks/*.yml"):
        for found in literal.findall(path.read_text()):
            assert [r.strip() for r in found.split(",")] == [path.parent.parent.name], path
