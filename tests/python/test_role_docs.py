"""The settings' single source (meta/argument_specs.yml) and what is generated from it: the drift
check in tools/role_docs.py passes on the repository and fails when a default, a README table or
the lab example changes in one place only. ansible-doc shows every role's settings."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("role_docs", REPO / "tools" / "role_docs.py")
assert _spec is not None and _spec.loader is not None
role_docs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(role_docs)


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """The roles, the lab example and the CLI's contract (which the smoke_test role copies),
    copied so that a test can make them drift."""
    shutil.copytree(REPO / "roles", tmp_path / "roles")
    shutil.copytree(REPO / "inventory", tmp_path / "inventory")
    shutil.copytree(REPO / "src" / "rocmlab" / "data", tmp_path / "src" / "rocmlab" / "data")
    return tmp_path


def test_the_repository_has_no_drift(capsys):
    assert role_docs.main(["--check"]) == 0, capsys.readouterr().err


def test_a_default_changed_in_defaults_only_is_drift(copy, capsys):
    defaults = copy / "roles" / "pytorch_rocm" / "defaults" / "main.yml"
    defaults.write_text(
        defaults.read_text().replace(
            'pytorch_rocm_version: "2.9.1"', 'pytorch_rocm_version: "2.8.0"'
        )
    )
    assert role_docs.main(["--check", "--root", str(copy)]) == 1
    err = capsys.readouterr().err
    assert (
        "pytorch_rocm: pytorch_rocm_version defaults to '2.9.1' in argument_specs but '2.8.0'"
        in err
    )


def test_a_default_changed_in_the_spec_only_is_drift_in_the_readme_and_the_lab_example(
    copy, capsys
):
    spec = copy / "roles" / "user_groups" / "meta" / "argument_specs.yml"
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
        "inventory/lab.example/group_vars/all.yml is not what tools/role_docs.py generates" in err
    )
    assert role_docs.main(["--root", str(copy)]) == 0  # regenerating brings them back in step
    assert role_docs.main(["--check", "--root", str(copy)]) == 0
    assert (
        "| `user_groups_udev_rules` | bool | `true` |"
        in (copy / "roles/user_groups/README.md").read_text()
    )


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
