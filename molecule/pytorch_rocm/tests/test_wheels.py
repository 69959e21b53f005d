"""pytorch_rocm_source: wheels (the default where rocmlab_rocm_install is wheels, as on this host)
on a host that shows an MI210 (sysfs fixture) and has no ROCm package: torch with the gfx90a
device code and ROCm itself in the venv, from the ROCm wheels fixture index (a CPU torch
repacked as AMD's torch 2.13.0+rocm7.14.0, said in molecule.yml)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import playbook_runs
import pytest
import testinfra
from playbook_runs import changed, said

INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
PLAYBOOK = Path(os.environ["MOLECULE_SCENARIO_DIRECTORY"]) / "converge.yml"
HOST_NAME = "rocmlab-pytorch-wheels-debian12"
VENV = "/opt/rocmlab/venvs/pytorch"
RESULT = "/etc/rocmlab/pytorch.json"
TORCH = "2.13.0+rocm7.14.0"
DISTS = (
    f"{VENV}/bin/python -c 'import json, importlib.metadata as m;"
    ' print(json.dumps({d.metadata["Name"]: d.version for d in m.distributions()}))\''
)


@pytest.fixture(scope="module")
def host():
    return testinfra.get_host(f"ansible://{HOST_NAME}?ansible_inventory={INVENTORY}")


def play(extra_vars: dict, *args: str) -> subprocess.CompletedProcess:
    return playbook_runs.play(PLAYBOOK, extra_vars, "--limit", HOST_NAME, *args)


def test_the_venv_has_torch_rocm_and_the_device_code_of_the_gpu_the_host_shows(host):
    dists = json.loads(host.check_output(DISTS))
    assert dists["torch"] == TORCH
    assert dists["rocm"] == dists["rocm-sdk-core"] == dists["rocm-sdk-libraries"] == "7.14.0"
    devices = sorted(name for name in dists if "-device-" in name)
    assert devices == ["amd-torch-device-gfx90a", "rocm-sdk-device-gfx90a"]
    assert host.check_output(f"{VENV}/bin/rocm-sdk version") == "7.14.0"
    tested = host.run(f"{VENV}/bin/rocm-sdk test")
    assert (tested.rc, tested.stdout.split()[-1:]) == (0, ["OK"]), tested.stdout + tested.stderr


def test_no_rocm_package_is_installed_on_the_host(host):
    packages = host.check_output("dpkg-query -W -f '${Package}\\n'").split()
    assert [p for p in packages if p.startswith(("amdrocm", "rocm", "hip", "amdgpu"))] == []


def test_the_record_says_the_source_the_targets_and_the_venvs_rocm(host):
    record = json.loads(host.file(RESULT).content_string)
    assert {k: record[k] for k in ("source", "torch_version", "torch_requested", "build")} == {
        "source": "wheels",
        "torch_version": TORCH,
        "torch_requested": "2.13.0",
        # The fixture's torch is a CPU build inside AMD's name (molecule.yml).
        "build": "cpu",
    }
    assert (record["gfx_targets"], record["rocm_wheels_version"]) == (["gfx90a"], "7.14.0")
    assert record["index_url"] == os.environ["ROCMLAB_ROCM_WHEELS_URL"]


def test_check_mode_on_the_converged_host_changes_nothing():
    run = play({}, "--check")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert changed(run) == 0, run.stdout[-3000:]


def test_a_host_without_a_gpu_and_no_targets_is_refused_before_any_change(host):
    snapshot = f"find {VENV} /etc/rocmlab -printf '%p %s %T@\\n' | sort | sha256sum"
    before = host.check_output(snapshot)
    run = play({"pytorch_rocm_sysfs_root": "/srv/sysfs/none"})
    assert run.returncode != 0
    out = said(run)
    assert "pytorch_rocm_gfx_targets is empty and no AMD GPU was found on this host" in out, out[
        -3000:
    ]
    assert host.check_output(snapshot) == before


def test_a_second_target_is_added_beside_the_first(host):
    run = play({"pytorch_rocm_gfx_targets": ["gfx90a", "gfx1100"]})
    assert run.returncode == 0, said(run)[-3000:]
    dists = json.loads(host.check_output(DISTS))
    assert dists["amd-torch-device-gfx1100"] == TORCH
    assert dists["torch"] == TORCH
    record = json.loads(host.file(RESULT).content_string)
    assert record["gfx_targets"] == ["gfx1100", "gfx90a"]
    again = play({"pytorch_rocm_gfx_targets": ["gfx90a", "gfx1100"]})
    assert changed(again) == 0, again.stdout[-3000:]
