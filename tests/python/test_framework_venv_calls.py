"""Every call of role framework_venv's entry points, checked against its meta/argument_specs.yml.

framework_venv is internal: only this collection's roles include it, so its calls are checked
here, once, instead of by Ansible's argument spec task on every host of every run
(rolespec_validate: false at each call). A call that passes an option its entry point does not
declare, leaves out a required one, or gives a literal of the wrong type fails here.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SPECS = yaml.safe_load((ROOT / "roles/framework_venv/meta/argument_specs.yml").read_text())[
    "argument_specs"
]
INCLUDES = {
    "include_role",
    "import_role",
    "ansible.builtin.include_role",
    "ansible.builtin.import_role",
}
NAMES = {"framework_venv", "rocmlab.rocmlab.framework_venv"}


def tasks_in(items):
    """The tasks of a task list, blocks opened."""
    for task in items or []:
        if not isinstance(task, dict):
            continue
        yield task
        for part in ("block", "rescue", "always"):
            yield from tasks_in(task.get(part))


def calls():
    """(file, task name, entry point, vars, rolespec_validate) of every call in roles/."""
    found = []
    for path in sorted(ROOT.glob("roles/*/tasks/*.yml")):
        for task in tasks_in(yaml.safe_load(path.read_text())):
            for key in INCLUDES & task.keys():
                args = task[key]
                if isinstance(args, dict) and args.get("name") in NAMES:
                    where = f"{path.relative_to(ROOT)}: {task.get('name')}"
                    found.append(
                        (
                            where,
                            args.get("tasks_from", "main"),
                            task.get("vars") or {},
                            args.get("rolespec_validate", True),
                        )
                    )
    return found


def inner_calls():
    """The calls framework_venv's install and result make of its own entry points
    (include_tasks), with what they pass and what reaches them from the entry point's caller."""
    found = []
    for outer in ("install", "result", "converge"):
        path = ROOT / "roles" / "framework_venv" / "tasks" / f"{outer}.yml"
        inherited = dict.fromkeys(SPECS[outer].get("options", {}), "{{ from the caller }}")
        for task in tasks_in(yaml.safe_load(path.read_text())):
            included = task.get("ansible.builtin.include_tasks")
            if isinstance(included, str):
                where = f"{path.relative_to(ROOT)}: {task.get('name')}"
                given = {**inherited, **(task.get("vars") or {})}
                found.append((where, included.removesuffix(".yml"), given, False))
    return found


def _declared(entry: str, given: dict) -> dict:
    """GIVEN without what the entry point's caller passes through and ENTRY does not declare."""
    options = SPECS[entry].get("options", {})
    return {k: v for k, v in given.items() if k in options or v != "{{ from the caller }}"}


CALLS = calls() + [(w, e, _declared(e, g), v) for w, e, g, v in inner_calls()]


def literal_fits(value, option: dict) -> bool:
    """Whether VALUE, when it is not a template, has the option's type (and choice)."""
    if isinstance(value, str) and "{{" in value:
        return True
    kind = option.get("type", "str")
    if kind == "bool":
        ok = isinstance(value, bool)
    elif kind == "list":
        ok = isinstance(value, list) and all(
            isinstance(e, str) for e in value if option.get("elements") == "str"
        )
    elif kind in ("str", "path"):
        ok = isinstance(value, str)
    elif kind == "int":
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = True
    return ok and ("choices" not in option or value in option["choices"])


def test_the_roles_call_framework_venv():
    entries = {entry for _, entry, _, _ in CALLS}
    # The venv, pip, probe and record entry points are all used; a refactoring that stops finding
    # the calls (another include form) must not pass by finding none.
    assert {
        "plan",
        "converge",
        "install",
        "result",
        "absent",
        "venv",
        "pip",
        "probe",
        "record",
    } <= entries, entries
    assert len(CALLS) >= 11


# What framework_venv's install and result read of the calling role, by name (vars/main.yml).
CONVENTION = yaml.safe_load((ROOT / "roles/framework_venv/vars/main.yml").read_text())[
    "__framework_venv_settings"
]


FRAMEWORK_ROLES = ["pytorch_rocm", "tensorflow_rocm", "jax_rocm"]


@pytest.mark.parametrize("role", FRAMEWORK_ROLES)
def test_a_framework_role_declares_what_framework_venv_reads_of_it(role):
    called = {v["framework_venv_role"] for _, e, v, _ in calls() if e in ("converge", "install")}
    assert called == set(FRAMEWORK_ROLES)
    settings = yaml.safe_load((ROOT / "roles" / role / "meta" / "settings.yml").read_text())
    declared = set(settings["argument_specs"]["main"]["options"]) | set(settings["publishes"])
    assert {f"{role}_{name}" for name in CONVENTION} <= declared


@pytest.mark.parametrize("where,entry,given,validate", CALLS, ids=[c[0] for c in CALLS])
def test_each_call_matches_its_entry_point(where, entry, given, validate):
    assert entry in SPECS, f"{where}: framework_venv has no entry point {entry!r}"
    options = SPECS[entry].get("options", {})
    unknown = sorted(set(given) - set(options))
    assert not unknown, f"{where}: {entry} does not declare {unknown}"
    missing = sorted(k for k, o in options.items() if o.get("required") and k not in given)
    assert not missing, f"{where}: {entry} requires {missing}"
    wrong = sorted(k for k, v in given.items() if not literal_fits(v, options[k]))
    assert not wrong, f"{where}: {entry}: {wrong} are not of the declared type or choices"
    assert validate is False, f"{where}: set rolespec_validate: false (checked here instead)"


def test_the_check_finds_a_bad_call():
    option = SPECS["probe"]["options"]["framework_venv_framework"]
    assert not literal_fits("mxnet", option)
    assert literal_fits("torch", option)
    assert not literal_fits("yes", SPECS["probe"]["options"]["framework_venv_probe_import"])
    assert literal_fits("{{ x | bool }}", SPECS["probe"]["options"]["framework_venv_probe_import"])


def _task_lines(role: str) -> list[str]:
    """ROLE's task files as lines without comments, the framework's names replaced by one word."""
    lines = []
    for path in sorted((ROOT / "roles" / role / "tasks").glob("*.yml")):
        text = re.sub(r"pytorch_rocm|tensorflow_rocm|jax_rocm", "ROLE", path.read_text())
        text = re.sub(r"PyTorch|TensorFlow|JAX|torch|tensorflow|jax", "FRAMEWORK", text)
        lines += [line.strip() for line in text.splitlines() if line.strip()[:1] not in ("", "#")]
    return lines


# The most lines two framework roles' task files may share (runs of three or more lines, names
# aside): pytorch_rocm and tensorflow_rocm shared 118 before framework_venv's install, result and
# absent took the venv, pip, probe, record and removal (2026-12-07), 59 after, 39 once the plan
# and converge entry points took the plan's frame and the install-then-record (2026-12-07, late).
# What is left: the settings check and the calls of framework_venv's entry points, which is
# nearly all of jax_rocm (49 lines).
SHARED_AT_MOST = {
    ("pytorch_rocm", "tensorflow_rocm"): 39,
    ("pytorch_rocm", "jax_rocm"): 38,
    ("tensorflow_rocm", "jax_rocm"): 42,
}


@pytest.mark.parametrize("pair", SHARED_AT_MOST, ids="-".join)
def test_the_framework_roles_share_no_more_than_their_entry_points(pair):
    """A framework role that copies tasks of another again fails here."""
    one, other = (_task_lines(role) for role in pair)
    matcher = difflib.SequenceMatcher(None, one, other, autojunk=False)
    shared = sum(block.size for block in matcher.get_matching_blocks() if block.size >= 3)
    assert shared <= SHARED_AT_MOST[pair], shared
