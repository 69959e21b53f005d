"""The venv the pytorch_rocm role built from the wheelhouse fixture (a CPU build of torch 2.13.0,
said openly in molecule.yml), what it recorded, and bad input refused before any change: the
framework suite (molecule/shared/framework_suite.py) for PyTorch, and what only PyTorch has."""

from __future__ import annotations

import json
import os

import pytest
from framework_suite import *  # noqa: F403 - the framework suite's tests, run for FRAMEWORK
from framework_suite import Framework

VENV = "/opt/rocmlab/venvs/pytorch"
RESULT = "/etc/rocmlab/pytorch.json"
TORCH = "2.13.0+cpu"

FRAMEWORK = Framework(
    role="pytorch_rocm",
    host="rocmlab-pytorch-debian12",
    module="torch",
    version=TORCH,
    sum_script="import torch; print(torch.ones(2).sum().item())",
    # Debian 11's Python, for torch 2.13 (3.10+).
    fake_python="3.9.2",
    python_refusal=(
        "torch 2.13 has no wheels for Python 3.9.2 ({path})",
        "its wheels are for Python 3.10, 3.11, 3.12, 3.13, 3.14",
        "torch releases with wheels for Python 3.9: 2.4, 2.5, 2.6, 2.7, 2.8.",
    ),
    # The role reinstalls a non-ROCm torch (--force-reinstall); the wheelhouse has only the CPU
    # build, so what lands is CPU again and the role refuses it.
    cpu_refusal=(f"has torch {TORCH}, a CPU build (torch.version.hip: None",),
)


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
