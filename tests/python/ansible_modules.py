"""Run the collection's Ansible modules in-process, as ansible-core hands them their arguments.

A module is a script, not a package module: it is imported by its path (its module_utils import
from the collection: tests/python/conftest.py puts collections/ on sys.path, as ansible.cfg's
collections_path does for Ansible).
"""

from __future__ import annotations

import importlib.util
import json
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
