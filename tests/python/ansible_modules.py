"""Run the collection's Ansible modules in-process, as ansible-core hands them their arguments.

A module is a script, not a package module: it is imported by its path (its module_utils import
from the collection: tests/python/conftest.py puts collections/ on sys.path, as ansible.cfg's
collections_path does for Ansible).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from ansible.module_utils import basic

REPO = Path(__file__).resolve().parents[2]


def load_module(name: str, path: Path | None = None) -> ModuleType:
    """plugins/modules/NAME.py (or PATH) imported under NAME."""
    spec = importlib.util.spec_from_file_location(
        name, path or REPO / "plugins" / "modules" / f"{name}.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_module(module: ModuleType, args: dict, capsys, monkeypatch, **main_kwargs) -> dict:
    """MODULE.main(**MAIN_KWARGS) with ARGS as its task arguments; the JSON result it printed."""
    # What ansible-core hands a module: its arguments as JSON and the (de)serialization profile.
    monkeypatch.setattr(basic, "_ANSIBLE_ARGS", json.dumps({"ANSIBLE_MODULE_ARGS": args}).encode())
    monkeypatch.setattr(basic, "_ANSIBLE_PROFILE", "legacy")
    with pytest.raises(SystemExit):
        module.main(**main_kwargs)
    return json.loads(capsys.readouterr().out)


# ---------------------------------------------------------------- as Ansible runs them on a host

SYSTEM_PYTHON = "/usr/bin/python3"


def system_python_has_apt() -> bool:
    if not (os.access(SYSTEM_PYTHON, os.X_OK) and shutil.which("apt-get")):
        return False
    probe = subprocess.run([SYSTEM_PYTHON, "-c", "import apt_pkg"], capture_output=True)
    return probe.returncode == 0


# The modules that read apt's cache need python3-apt, which the system Python has and the
# project's virtual environment does not.
needs_apt = pytest.mark.skipif(
    not system_python_has_apt(), reason="needs apt and python3-apt for /usr/bin/python3"
)


def venv_tool(name: str) -> str:
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    assert found, f"{name} not found"
    return found


def apt_config(root: Path, status: Path) -> Path:
    """An apt.conf under ROOT that shows apt the dpkg STATUS file and the sources in
    ROOT/parts/*.list alone, its lists and cache under ROOT; its path (for APT_CONFIG)."""
    for sub in ("lists/partial", "cache/archives/partial", "parts"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    (root / "apt.conf").write_text(
        f"""\
Dir::State::status "{status}";
Dir::State::lists "{root}/lists";
Dir::State::extended_states "{root}/extended_states";
Dir::Cache "{root}/cache";
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
Dir::Etc::sourcelist "{root}/parts/none.list";
Dir::Etc::sourceparts "{root}/parts";
Dir::Etc::preferences "{root}/parts/none.pref";
Dir::Etc::preferencesparts "{root}/parts";
Dir::Etc::parts "{root}/parts";
Dir::Log "{root}";
APT::Architecture "amd64";
APT::Architectures {{ "amd64"; }};
APT::Sandbox::User "root";
Debug::NoLocking "true";
"""
    )
    return root / "apt.conf"


def apt_env(root: Path, status: Path, sources: str) -> dict[str, str]:
    """An environment whose APT_CONFIG (apt_config) shows apt the dpkg STATUS file and the
    SOURCES (lines of a sources.list) alone; apt-get update has read the sources."""
    config = apt_config(root, status)
    (root / "parts" / "fixture.list").write_text(sources)
    env = dict(os.environ, APT_CONFIG=str(config), LC_ALL="C.UTF-8")
    update = subprocess.run(["apt-get", "update"], capture_output=True, text=True, env=env)
    assert update.returncode == 0, update.stdout + update.stderr
    return env


def run_on_localhost(
    name: str, arg_sets: list[dict], env: dict, workdir: Path, check: bool = False
) -> list[dict]:
    """The module NAME run once for each of ARG_SETS by ansible-playbook on localhost (local
    connection, /usr/bin/python3, ENV; in check mode with CHECK), as on a host; each run's
    result, in order."""
    playbook = workdir / "play.yml"
    tasks = [
        {"name": f"Run {i}", name: args, "check_mode": check} for i, args in enumerate(arg_sets)
    ]
    playbook.write_text(
        json.dumps(
            [
                {
                    "hosts": "localhost",
                    "connection": "local",
                    "gather_facts": False,
                    "vars": {"ansible_python_interpreter": SYSTEM_PYTHON},
                    "tasks": tasks,
                }
            ]
        )
    )
    # Not the repository's ansible.cfg (tools/test exports ANSIBLE_CONFIG): its callbacks
    # (profile_tasks) would print around the JSON.
    env = {key: value for key, value in env.items() if key != "ANSIBLE_CONFIG"}
    env = dict(
        env,
        ANSIBLE_LIBRARY=str(REPO / "plugins" / "modules"),
        ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"),
        ANSIBLE_STDOUT_CALLBACK="json",
        ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
        ANSIBLE_NOCOLOR="1",
    )
    run = subprocess.run(
        [venv_tool("ansible-playbook"), "-i", "localhost,", str(playbook)],
        capture_output=True,
        text=True,
        env=env,
        cwd=workdir,  # not the repository: its ansible.cfg plays no part
        check=False,
    )
    plays = json.loads(run.stdout)["plays"] if run.stdout.startswith("{") else []
    assert plays, run.stdout[-3000:] + run.stderr[-3000:]
    return [task["hosts"]["localhost"] for task in plays[0]["tasks"]]
