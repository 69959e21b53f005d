"""The dpkg guard's reading (plugins/modules/rocmlab_dpkg.py) over a copied tree: which packages
a failed run left half-done, and which of them the caller replaces itself (a rollback, a release
move, AMD's packages for rocm_packages), so that only the others stop the run. The status file
is in dpkg's own format."""

from __future__ import annotations

import os

import pytest
from ansible_collections.rocmlab.rocmlab.plugins.module_utils import amd_packages
from ansible_modules import load_module, run_module

module = load_module("rocmlab_dpkg")

STATUS = """\
Package: rocm-hip-runtime
Status: install ok half-configured
Version: 7.1.2.70102-1

Package: rocm-hip-sdk
Status: install ok unpacked
Version: 7.1.2.70102-1

Package: liberror-perl
Status: install ok half-configured
Version: 0.17029-2

Package: bash
Status: install ok installed
Version: 5.2.15-2+b7
"""


@pytest.fixture
def tree(tmp_path):
    (tmp_path / "var/lib/dpkg").mkdir(parents=True)
    (tmp_path / "var/lib/dpkg/status").write_text(STATUS)
    return tmp_path


def names(entries):
    return [entry["package"] for entry in entries]


def test_every_half_done_package_is_stuck_unless_the_caller_replaces_it(tree, capsys, monkeypatch):
    found = run_module(module, {"root": str(tree)}, capsys, monkeypatch)
    assert names(found["unconfigured"]) == ["rocm-hip-runtime", "rocm-hip-sdk", "liberror-perl"]
    assert found["unconfigured"][0]["version"] == "7.1.2.70102-1"
    assert names(found["stuck"]) == names(found["unconfigured"])
    args = {"root": str(tree), "replaced": ["rocm-hip-runtime", "rocm-hip-sdk"]}
    found = run_module(module, args, capsys, monkeypatch)
    assert names(found["stuck"]) == ["liberror-perl"]  # nobody replaces Debian's


@pytest.mark.skipif(os.geteuid() != 0, reason="the ledger must be root's")
def test_amds_packages_by_the_ledger_are_left_for_the_role_that_moves_them(
    tree, capsys, monkeypatch
):
    (tree / "var/lib/rocmlab").mkdir(parents=True)
    amd_packages.write(
        str(tree / "var/lib/rocmlab/amd-packages.json"),
        {"rocm-hip-runtime": ["7.1.2.70102-1"], "rocm-hip-sdk": ["7.1.0.70100-1"]},
    )
    args = {"root": str(tree), "replaced_amd": True}
    found = run_module(module, args, capsys, monkeypatch)
    # rocm-hip-sdk's half-done version is not one the ledger holds: it stays stuck.
    assert names(found["stuck"]) == ["rocm-hip-sdk", "liberror-perl"]
    (tree / "var/lib/rocmlab/amd-packages.json").write_text("not a ledger")
    found = run_module(module, args, capsys, monkeypatch)
    assert len(found["stuck"]) == 3  # an unreadable ledger: nothing counts as AMD's
