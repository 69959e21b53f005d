"""The controller check (plugins/filter/controller.py) that the first play of playbooks/site.yml
and playbooks/fleet.yml runs: ansible-core and the controller's Python against what rocmlab
needs, with the versions found and needed named, and those needs held to the files that declare
them (meta/runtime.yml, pyproject.toml)."""

from __future__ import annotations

import importlib.util
import platform
import re

import pytest
import yaml
from rocmlab_testutil import REPO

_spec = importlib.util.spec_from_file_location(
    "controller_filter", REPO / "plugins" / "filter" / "controller.py"
)
assert _spec is not None and _spec.loader is not None
controller = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(controller)


@pytest.mark.parametrize(
    ("core", "python"),
    [
        ("2.17.0", "3.10.0"),
        ("2.17.14", "3.12.3"),
        ("2.19.14", "3.11.2"),
        ("2.20.0.dev0", "3.13.0rc1"),
        ("3.0.0", "4.0"),
    ],
)
def test_new_enough_versions_pass(core, python):
    assert controller.problems(core, python) == []


@pytest.mark.parametrize(
    ("core", "python", "named"),
    [
        # Debian 12's own ansible-core, on its Python.
        ("2.14.18", "3.11.2", ["ansible-core 2.14.18 runs this playbook"]),
        ("2.16.14", "3.12.3", ["ansible-core 2.16.14 runs this playbook"]),
        ("2.17.0rc1", "3.9.2", ["Python 3.9.2 runs this playbook"]),
        ("1.9.6", "2.7.18", ["ansible-core 1.9.6", "Python 2.7.18"]),
        ("devel", "3.12.0", ["ansible-core 'devel' runs this playbook"]),
    ],
)
def test_old_or_unreadable_versions_are_named_with_what_is_needed(core, python, named):
    found = controller.problems(core, python)
    text = " ".join(found)
    for part in named:
        assert part in text
    assert len(found) == len(named) + 1  # one per version, then how to install a newer one
    for message in found[:-1]:
        assert re.search(r"needs (ansible-core 2\.17|Python 3\.10) or later", message), message
    assert "pip install 'ansible-core>=2.17'" in found[-1]
    assert "Nothing on any host was changed." in found[-1]


def test_the_filter_checks_the_python_it_runs_on():
    assert controller.controller_problems("2.17.0") == controller.problems(
        "2.17.0", platform.python_version()
    )
    assert controller.FilterModule().filters()["controller_problems"]("2.14.0", "3.12.0")


def test_the_needs_are_the_ones_the_project_declares():
    runtime = yaml.safe_load((REPO / "meta" / "runtime.yml").read_text())
    assert runtime["requires_ansible"] == ">={}.{}.0".format(*controller.ANSIBLE_CORE)
    pyproject = (REPO / "pyproject.toml").read_text()
    needed = ">={}.{}".format(*controller.PYTHON)
    assert re.findall(r'^requires-python = "(.*)"$', pyproject, re.M) == [needed]
    for meta in (REPO / "roles").glob("*/meta/main.yml"):
        info = yaml.safe_load(meta.read_text())["galaxy_info"]
        assert info["min_ansible_version"] == "{}.{}".format(*controller.ANSIBLE_CORE), meta


@pytest.mark.parametrize("playbook", ["site.yml", "fleet.yml"])
def test_the_first_play_checks_the_controller_before_any_host_is_contacted(playbook):
    first = yaml.safe_load((REPO / "playbooks" / playbook).read_text())[0]
    assert first["gather_facts"] is False
    assert "always" in first["tags"]
    assert first["tasks"][0]["ansible.builtin.import_tasks"] == "tasks/controller.yml"
    (task,) = yaml.safe_load((REPO / "playbooks" / "tasks" / "controller.yml").read_text())
    assert task["run_once"] is True
    assert "rocmlab.rocmlab.controller_problems" in task["vars"]["__rocmlab_controller_problems"]
    assert task["ansible.builtin.assert"]["that"] == "__rocmlab_controller_problems | length == 0"
