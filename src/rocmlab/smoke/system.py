"""The smoke report's ``system``: what the machine the job ran on is, as the doctor reads it.

The OS (os-release, as the support catalog keys it: ``ubuntu 24.04``), the kernel, AMD's or the
distribution's installed ROCm, whether ``/dev/kfd`` is a character device and whether the job ran
in a container. Every file is read with the doctor's bounded readers; nothing is run. ``rocmlab
verified`` records a run as one on real hardware only when its system says so (docs/verified.md).
No torch needed.
"""

from __future__ import annotations

import stat
from typing import Any

from rocmlab.doctor.checks_kernel import distribution_key
from rocmlab.doctor.checks_software import installed_rocm
from rocmlab.doctor.context import Context

# Files a container runtime leaves in the container, and the runtime each names: Docker's
# /.dockerenv, Podman's /run/.containerenv; systemd's /run/systemd/container holds the name.
CONTAINER_FILES = (("/.dockerenv", "docker"), ("/run/.containerenv", "podman"))
SYSTEMD_CONTAINER = "/run/systemd/container"
ROCM_SOURCES = ("legacy", "core", "distro")

_TEXT_OR_NULL = {"type": ["string", "null"]}
# JSON Schema of the report's ``system`` (null where a report was made without reading it).
SYSTEM_SCHEMA: dict[str, Any] = {
    "type": ["object", "null"],
    "required": ["os", "os_name", "kernel", "rocm_release", "rocm_source", "kfd", "container"],
    "additionalProperties": False,
    "properties": {
        "os": _TEXT_OR_NULL,
        "os_name": _TEXT_OR_NULL,
        "kernel": _TEXT_OR_NULL,
        "rocm_release": _TEXT_OR_NULL,
        "rocm_source": {"enum": [*ROCM_SOURCES, None]},
        "kfd": {"type": "boolean"},
        "container": _TEXT_OR_NULL,
    },
}


def container(ctx: Context) -> str | None:
    """The container runtime the machine under ``ctx.root`` is a container of, else None."""
    for path, runtime in CONTAINER_FILES:
        if ctx.path(path).exists():
            return runtime
    said = (ctx.read(SYSTEMD_CONTAINER) or "").strip()
    return said[:64] or None


def kfd_device(ctx: Context) -> bool:
    """Whether ``/dev/kfd`` (under ``ctx.dev_root``) is a character device: the amdgpu driver's
    compute interface, which no fixture tree or GPU-less container has."""
    try:
        return stat.S_ISCHR(ctx.dev("kfd").stat().st_mode)
    except OSError:
        return False


def host_system(ctx: Context | None = None) -> dict[str, Any]:
    """The ``system`` of the machine under ``ctx`` (default: this one)."""
    ctx = ctx if ctx is not None else Context()
    rocm = installed_rocm(ctx)
    # AMD's line (a legacy install has no line of its own), else the distribution's.
    source = (rocm.line or "legacy") if rocm.amd else ("distro" if rocm.distro else None)
    return {
        "os": distribution_key(ctx) or None,
        "os_name": ctx.os_release().get("PRETTY_NAME") or None,
        "kernel": ctx.kernel_release(),
        "rocm_release": rocm.amd or rocm.distro,
        "rocm_source": source,
        "kfd": kfd_device(ctx),
        "container": container(ctx),
    }
