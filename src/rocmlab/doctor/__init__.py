"""``rocmlab doctor``: every known way a ROCm machine fails, diagnosed with its fix.

Standard library only (PyTorch is used when importable). Each check is a small function of a
:class:`~rocmlab.doctor.context.Context` returning a :class:`~rocmlab.doctor.model.Result`;
:func:`run_checks` runs them in order, and a check that raises is reported as ``error`` while
the others still run. docs/doctor.md lists every check with the symptom it explains and the fix.

Every host file is read through hostread.read_bounded (bounded, regular files only, never
blocking); what the checks print goes through textsafe.for_terminal (model.format_line).
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Sequence

from rocmlab.doctor import checks_driver, checks_gfx, checks_kernel, checks_software, checks_system
from rocmlab.doctor.context import Context
from rocmlab.doctor.model import ERROR, Result

Check = Callable[[Context], Result]

# (stable name, check), in the order they are printed: driver and access first, then what
# runs on top of them.
CHECKS: tuple[tuple[str, Check], ...] = (
    ("amdgpu_driver", checks_driver.check_amdgpu_driver),
    ("device_nodes", checks_driver.check_device_nodes),
    ("gpu_groups", checks_driver.check_gpu_groups),
    ("gpu_count", checks_driver.check_gpu_count),
    ("gfx_override", checks_gfx.check_gfx_override),
    ("igpu_hidden", checks_gfx.check_igpu_hidden),
    ("rocm_release", checks_software.check_rocm_release),
    ("torch_build", checks_software.check_torch_build),
    ("torch_gpu", checks_software.check_torch_gpu),
    ("opencl", checks_software.check_opencl),
    ("kernel_log", checks_kernel.check_kernel_log),
    ("secure_boot", checks_kernel.check_secure_boot),
    ("dkms_headers", checks_kernel.check_dkms_headers),
    ("dkms_next_kernel", checks_kernel.check_dkms_next_kernel),
    ("boot_space", checks_kernel.check_boot_space),
    ("kernel_support", checks_kernel.check_kernel_support),
    ("pcie_link", checks_system.check_pcie_link),
    ("dev_shm", checks_system.check_dev_shm),
    # Last: it reports what the checks above could not read whole.
    ("host_files", checks_system.check_host_files),
)


def run_check(name: str, check: Check, ctx: Context) -> Result:
    """One check; an exception becomes an ``error`` result naming it and where it was raised."""
    try:
        result = check(ctx)
    except Exception as exc:
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        where = f"{frame.filename.rsplit('/', 1)[-1]}:{frame.lineno}"
        result = Result(
            ERROR,
            f"the check crashed: {type(exc).__name__}: {exc} (at {where})",
            "this is a rocmlab bug: report it with this line; the other checks still ran",
        )
    result.name = name
    return result


def run_checks(ctx: Context, checks: Sequence[tuple[str, Check]] = CHECKS) -> list[Result]:
    """Every check, in order."""
    return [run_check(name, check, ctx) for name, check in checks]
