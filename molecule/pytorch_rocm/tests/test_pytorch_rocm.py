"""The venv the pytorch_rocm role built from the wheelhouse fixture (a CPU build of torch 2.13.0,
said openly in molecule.yml), what it recorded, and bad input refused before any change."""

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
PROJECT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
PLAYBOOK = Path(os.environ["MOLECULE_SCENARIO_DIRECTORY"]) / "converge.yml"
HOST_NAME = "rocmlab-pytorch-debian12"
VENV = "/opt/rocmlab/venvs/pytorch"
RESULT = "/etc/rocmlab/pytorch.json"
TORCH = "2.13.0+cpu"
GFX_PROFILE = "/etc/profile.d/rocmlab-gfx.sh"  # written by the gfx_override role on GPU hosts
IMPORT_TORCH = f"{VENV}/bin/python -c 'import torch; print(torch.__version__)'"

# What a refused run must not have touched: the venv's tree, the record, the packages, the groups.
SNAPSHOT = (
    "find /opt/rocmlab /etc/rocmlab -printf '%p %u %g %m %s %T@\\n' | sort | sha256sum;"
    " cat /etc/rocmlab/pytorch.json; cat /etc/group; dpkg-query -W -f '${Package} ${Version}\\n'"
)


@pytest.fixture(scope="module")
def host():
    return testinfra.get_host(f"ansible://{HOST_NAME}?ansible_inventory={INVENTORY}")


def play(extra_vars: dict, *args: str) -> subprocess.CompletedProcess:
    """The converge playbook on this file's host (the wheels host has test_wheels.py)."""
    return playbook_runs.play(PLAYBOOK, extra_vars, "--limit", HOST_NAME, *args)


@pytest.mark.parametrize(
    ("path", "user", "group", "mode"),
    [
        ("/opt/rocmlab/venvs", "root", "root", 0o755),
        (VENV, "root", "render", 0o755),
        (f"{VENV}/bin", "root", "root", 0o755),
        (f"{VENV}/bin/activate", "root", "root", 0o644),
        (RESULT, "root", "root", 0o644),
    ],
)
def test_venv_and_record_are_root_owned_and_readable_by_all(host, path, user, group, mode):
    f = host.file(path)
    assert f.exists
    assert (f.user, f.group, f.mode) == (user, group, mode)


def test_venv_python_imports_the_requested_torch(host):
    out = host.check_output(IMPORT_TORCH)
    assert out.strip() == TORCH


def test_every_user_can_run_the_venv(host):
    # nobody is in no group at all: "usable by the render group" holds a fortiori.
    script = "import torch; print(torch.ones(2).sum().item())"
    out = host.check_output(f"su -s /bin/sh nobody -c \"{VENV}/bin/python -c '{script}'\"")
    assert out.strip() == "2.0"


def test_nothing_but_root_can_write_into_the_venv(host):
    writable = host.check_output(f"find {VENV} -perm /022 ! -type l | head -5")
    assert writable == ""


def test_system_python_has_no_torch_and_pip_stayed_out_of_it(host):
    assert host.run("python3 -c 'import torch'").rc != 0
    local = host.run("ls /usr/local/lib/python3*/dist-packages/ 2>/dev/null | grep -i torch")
    assert local.stdout == ""
    assert host.package("python3-venv").is_installed


def test_activation_sources_the_gpu_override_when_it_exists(host):
    activate = host.file(f"{VENV}/bin/activate").content_string
    assert "# BEGIN rocmlab: GPU override (gfx_override)" in activate
    assert ". /etc/profile.d/rocmlab-gfx.sh" in activate
    # Without the file activation still works; with it the override reaches the shell.
    assert host.check_output(f"bash -c '. {VENV}/bin/activate && echo $VIRTUAL_ENV'") == VENV
    host.check_output("echo 'export HSA_OVERRIDE_GFX_VERSION=10.3.0' > %s", GFX_PROFILE)
    try:
        out = host.check_output(
            f"bash -c '. {VENV}/bin/activate && echo $HSA_OVERRIDE_GFX_VERSION'"
        )
    finally:
        host.check_output("rm -f %s", GFX_PROFILE)
    assert out == "10.3.0"


def test_the_record_says_what_was_installed(host):
    record = json.loads(host.file(RESULT).content_string)
    assert record == {
        "source": "pip",
        "venv": VENV,
        "python": f"{VENV}/bin/python",
        "python_version": host.check_output(
            "python3 -c 'import platform as p; print(p.python_version())'"
        ),
        "torch_version": TORCH,
        # The pin of molecule.yml (the wheelhouse has torch 2.13.0's CPU build only).
        "torch_requested": "2.13.0",
        "torchvision_version": None,
        "hip_version": None,
        "cuda_version": None,
        "cuda_available": False,
        "gpu_present": False,
        "build": "cpu",
        "index_url": "",
        "find_links": os.environ["ROCMLAB_WHEELHOUSE_URL"],
    }


def test_check_mode_on_the_converged_host_changes_nothing():
    run = play({}, "--check")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert changed(run) == 0, run.stdout[-3000:]


BAD_INPUT = [
    pytest.param(
        {"pytorch_rocm_version": "2.x"},
        ["pytorch_rocm_version", '"2.x"', "X.Y.Z"],
        id="version-format",
    ),
    pytest.param(
        {"pytorch_rocm_version": "2.13"},
        ["pytorch_rocm_version", '"2.13"', "X.Y.Z"],
        id="version-without-patch",
    ),
    pytest.param(
        {"pytorch_rocm_rocm_version": "7"},
        ["pytorch_rocm_rocm_version", '"7"', "X.Y or X.Y.Z"],
        id="rocm-format",
    ),
    pytest.param(
        {"pytorch_rocm_version": "3.0.0"},
        ["torch 3.0.0 is not in the table", "2.4, 2.5"],
        id="unknown-release",
    ),
    pytest.param(
        {"pytorch_rocm_version": "2.9.1"},
        [
            'pytorch_rocm_version "2.9.1" does not fit pytorch_rocm_rocm_version "7.2"',
            "torch 2.9 is built for ROCm 6.4, 6.3",
            "built for ROCm 7.2: 2.11, 2.12, 2.13, 2.14",
            'set pytorch_rocm_version: "" to follow the ROCm release (torch 2.14)',
        ],
        id="pair-not-in-table",
    ),
    pytest.param(
        {"pytorch_rocm_index_url": "", "pytorch_rocm_find_links": ""},
        ["pytorch_rocm_index_url", "set at least one"],
        id="no-source",
    ),
    pytest.param(
        {"pytorch_rocm_index_url": "ftp://mirror/whl"},
        ["pytorch_rocm_index_url", '"ftp://mirror/whl"', "http(s) URL"],
        id="index-scheme",
    ),
    pytest.param(
        {"pytorch_rocm_pip_extra_args": ["--extra-index-url", "http://pypi.example/simple"]},
        ["pytorch_rocm_pip_extra_args", "found: --extra-index-url", "CUDA build"],
        id="extra-index",
    ),
    pytest.param(
        {"pytorch_rocm_source": "conda"},
        ["pytorch_rocm_source", "conda", "pip, distro"],
        id="unknown-source",
    ),
    pytest.param(
        {"pytorch_rocm_source": "distro"},
        ['"distro" is not available on Debian 12', "pytorch_rocm_source: pip"],
        id="distro-on-debian12",
    ),
    pytest.param(
        {"pytorch_rocm_venv": "opt/venv"},
        ["pytorch_rocm_venv", '"opt/venv"', "not an absolute path"],
        id="venv-relative",
    ),
]


@pytest.mark.parametrize(("extra_vars", "expected"), BAD_INPUT)
def test_bad_input_fails_clearly_before_any_change(host, extra_vars, expected):
    failure = playbook_runs.refused_without_change(host, SNAPSHOT, lambda: play(extra_vars))
    for fragment in expected:
        assert fragment in failure, (fragment, failure[-3000:])


FAKE_PY = "/tmp/python3.9"


def test_a_python_without_wheels_is_refused_naming_versions_that_work(host):
    # A stand-in interpreter that reports Python 3.9.2 (Debian 11's), for torch 2.13 (3.10+).
    host.check_output("printf '#!/bin/sh\\necho 3.9.2\\n' > %s && chmod 755 %s", FAKE_PY, FAKE_PY)
    before = host.check_output(SNAPSHOT)
    run = play({"pytorch_rocm_python": FAKE_PY})
    host.check_output("rm -f %s", FAKE_PY)
    assert run.returncode != 0
    out = said(run)
    assert f"torch 2.13 has no wheels for Python 3.9.2 ({FAKE_PY})" in out, out[-3000:]
    assert "its wheels are for Python 3.10, 3.11, 3.12, 3.13, 3.14" in out
    assert "torch releases with wheels for Python 3.9: 2.4, 2.5, 2.6, 2.7, 2.8." in out
    assert host.check_output(SNAPSHOT) == before


def test_a_cpu_build_is_refused_when_a_rocm_build_is_required(host):
    record = host.file(RESULT).content_string
    # The role reinstalls a non-ROCm torch (--force-reinstall); the wheelhouse has only the CPU
    # build, so what lands is CPU again and the role refuses it.
    run = play({"pytorch_rocm_require_rocm_build": True})
    assert run.returncode != 0
    out = said(run)
    assert f"has torch {TORCH}, a CPU build (torch.version.hip: None" in out, out[-3000:]
    assert "It cannot use an AMD GPU" in out
    assert "pytorch_rocm_require_rocm_build: false" in out
    # The record still says what is there, and the venv still works.
    assert host.file(RESULT).content_string == record
    assert host.check_output(IMPORT_TORCH) == TORCH
