"""Device truth on a host without a GPU (the CPU torch build used here)."""

from __future__ import annotations

import pytest
import torch

from rocmlab.common.errors import GpuAbsentError, UsageError
from rocmlab.torchjob.device import gpu_env, probe_device, torch_build, why_no_gpu

needs_no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="this host has a GPU")


def test_gpu_env_reports_set_and_unset_variables_and_per_node_overrides() -> None:
    env = gpu_env(
        {
            "HSA_OVERRIDE_GFX_VERSION": "10.3.0",
            "HSA_OVERRIDE_GFX_VERSION_1": "11.0.0",
            "HSA_OVERRIDE_GFX_VERSION_X": "ignored",
            "PATH": "/usr/bin",
        }
    )
    assert env == {
        "HSA_OVERRIDE_GFX_VERSION": "10.3.0",
        "ROCR_VISIBLE_DEVICES": None,
        "HIP_VISIBLE_DEVICES": None,
        "CUDA_VISIBLE_DEVICES": None,
        "HSA_OVERRIDE_GFX_VERSION_1": "11.0.0",
    }


def test_build_is_read_from_torch_version() -> None:
    expected = "rocm" if torch.version.hip else "cuda" if torch.version.cuda else "cpu"
    assert torch_build() == expected


@needs_no_gpu
def test_auto_falls_back_to_cpu_and_says_why() -> None:
    device, info = probe_device("auto", environ={"ROCR_VISIBLE_DEVICES": "0"})
    assert device == torch.device("cpu")
    assert info.backend == "cpu"
    assert info.device == "cpu"
    assert info.device_name  # the CPU model
    assert info.gfx_arch is None and info.arch is None
    assert info.torch_version == torch.__version__
    assert info.env["ROCR_VISIBLE_DEVICES"] == "0"
    assert info.note.startswith("no GPU: ")


def test_explicit_cpu_has_no_note() -> None:
    device, info = probe_device("cpu", environ={})
    assert device.type == "cpu"
    assert info.note == ""


@needs_no_gpu
def test_explicit_cuda_without_gpu_is_gpu_absent() -> None:
    with pytest.raises(GpuAbsentError, match="--device cuda: no GPU available: "):
        probe_device("cuda", environ={})


def test_unknown_device_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match=r"--device 'hip': expected one of auto, cuda, cpu"):
        probe_device("hip")


@pytest.mark.parametrize(
    ("build", "hint"),
    [("cpu", "CPU-only build"), ("rocm", "render and video groups"), ("cuda", "CUDA build")],
)
def test_why_no_gpu_gives_the_fix(build: str, hint: str) -> None:
    assert hint in why_no_gpu(build)
