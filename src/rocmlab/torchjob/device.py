"""Device truth: which backend, device and architecture a run really uses.

ROCm PyTorch reuses the ``torch.cuda`` API: the device is ``cuda``, ``torch.version.hip`` is set
and ``torch.version.cuda`` is None.
"""

from __future__ import annotations

import os
import platform
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from rocmlab.common.errors import GpuAbsentError, UsageError

DEVICE_CHOICES = ("auto", "cuda", "cpu")
# Environment variables that decide which GPUs a process sees and which code objects it loads.
GPU_ENV_KEYS = (
    "HSA_OVERRIDE_GFX_VERSION",
    "ROCR_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "CUDA_VISIBLE_DEVICES",
)
_PER_NODE_OVERRIDE = re.compile(r"^HSA_OVERRIDE_GFX_VERSION_\d+$")


@dataclass
class DeviceInfo:
    """What the run uses, as reported in the summary and the JSON report."""

    device: str
    backend: str  # of the run: rocm | cuda | cpu
    torch_build: str  # of the installed wheel: rocm | cuda | cpu
    device_name: str
    gfx_arch: str | None
    compute_capability: str | None
    device_count: int
    torch_version: str
    hip_version: str | None
    cuda_version: str | None
    bf16_supported: bool
    env: dict[str, str | None] = field(default_factory=dict)
    note: str = ""

    @property
    def arch(self) -> str | None:
        """gfx name on ROCm, ``sm_XY`` on CUDA, None on the CPU."""
        if self.gfx_arch:
            return self.gfx_arch
        if self.compute_capability:
            return "sm_" + self.compute_capability.replace(".", "")
        return None

    def as_dict(self) -> dict[str, object]:
        """Plain dict for the report."""
        return asdict(self)


def gpu_env(environ: Mapping[str, str]) -> dict[str, str | None]:
    """The GPU-selection variables in effect (None when unset), per-node overrides included."""
    values: dict[str, str | None] = {key: environ.get(key) for key in GPU_ENV_KEYS}
    for key in sorted(environ):
        if _PER_NODE_OVERRIDE.match(key):
            values[key] = environ[key]
    return values


def torch_build() -> str:
    """rocm | cuda | cpu: what the installed torch wheel was built for."""
    if getattr(torch.version, "hip", None):
        return "rocm"
    if getattr(torch.version, "cuda", None):
        return "cuda"
    return "cpu"


def cpu_name() -> str:
    """The CPU's model name (from /proc/cpuinfo on Linux)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def why_no_gpu(build: str) -> str:
    """Explain why torch sees no GPU, with what to check."""
    if build == "cpu":
        return (
            f"torch {torch.__version__} is a CPU-only build; install the ROCm build "
            "(torch.version.hip must be set)"
        )
    if build == "rocm":
        return (
            "torch is a ROCm build but sees no GPU: check that /dev/kfd and /dev/dri exist, the "
            "user is in the render and video groups (log in again after adding), rocminfo lists "
            "the GPU, and ROCR_VISIBLE_DEVICES/HSA_OVERRIDE_GFX_VERSION are right"
        )
    return "torch is a CUDA build but sees no GPU (driver, CUDA_VISIBLE_DEVICES)"


def probe_device(
    requested: str, local_rank: int = 0, environ: Mapping[str, str] | None = None
) -> tuple[torch.device, DeviceInfo]:
    """Resolve ``--device`` to a torch.device and describe it; GpuAbsentError for a missing GPU."""
    if requested not in DEVICE_CHOICES:
        raise UsageError(f"--device {requested!r}: expected one of {', '.join(DEVICE_CHOICES)}")
    build = torch_build()
    available = torch.cuda.is_available()
    count = torch.cuda.device_count() if available else 0
    env = gpu_env(os.environ if environ is None else environ)
    common = {
        "torch_build": build,
        "device_count": count,
        "torch_version": torch.__version__,
        "hip_version": getattr(torch.version, "hip", None),
        "cuda_version": getattr(torch.version, "cuda", None),
        "env": env,
    }
    use_gpu = requested == "cuda" or (requested == "auto" and available)
    if use_gpu and not available:
        raise GpuAbsentError(f"--device cuda: no GPU available: {why_no_gpu(build)}")
    if use_gpu and local_rank >= count:
        raise GpuAbsentError(
            f"process with LOCAL_RANK {local_rank} needs GPU {local_rank}, but torch sees {count}"
        )
    if not use_gpu:
        note = "" if requested == "cpu" else f"no GPU: {why_no_gpu(build)}"
        info = DeviceInfo(
            device="cpu",
            backend="cpu",
            device_name=cpu_name(),
            gfx_arch=None,
            compute_capability=None,
            bf16_supported=False,
            note=note,
            **common,
        )
        return torch.device("cpu"), info
    device = torch.device("cuda", local_rank)
    torch.cuda.set_device(device)
    props = torch.cuda.get_device_properties(device)
    gfx = getattr(props, "gcnArchName", None) if build == "rocm" else None
    info = DeviceInfo(
        device=str(device),
        backend="rocm" if build == "rocm" else "cuda",
        device_name=torch.cuda.get_device_name(device),
        gfx_arch=gfx or None,
        compute_capability=None if build == "rocm" else f"{props.major}.{props.minor}",
        bf16_supported=bool(torch.cuda.is_bf16_supported()),
        **common,
    )
    return device, info


def synchronize(device: torch.device) -> None:
    """Wait for queued GPU work (so timings measure the work, not its launch)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
