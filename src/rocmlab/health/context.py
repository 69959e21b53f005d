"""What a health check may read: the doctor's Context, the last run's state, and the run's
options."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocmlab.doctor.context import Context, KernelLog
from rocmlab.doctor.model import Result

GIB = 1 << 30
MIB = 1 << 20

# Where rocmlab's roles record what they provisioned, and where health keeps its state.
PYTORCH_RECORD = "/etc/rocmlab/pytorch.json"
TENSORFLOW_RECORD = "/etc/rocmlab/tensorflow.json"
KNOWN_GOOD_RECORD = "/var/lib/rocmlab/known-good.json"
DEFAULT_STATE_DIR = Path("/var/lib/rocmlab/health")
BOOT_ID = "/proc/sys/kernel/random/boot_id"

# The file systems whose free space is checked, and the default thresholds (WARN below, FAIL
# below a quarter): a ROCm upgrade unpacks several GiB next to the old release and a venv
# rebuild downloads a 3-4 GiB wheel; an amdgpu-dkms initramfs is 100-200 MiB, and /boot must
# hold the next one beside the current one.
ROCM_DIR = "/opt/rocm"
VENVS_DIR = "/opt/rocmlab/venvs"
BOOT_DIR = "/boot"
DEFAULT_MIN_FREE = 5 * GIB
DEFAULT_MIN_FREE_BOOT = 300 * MIB

# Where the smoke job's data is by default: the smoke_test role's smoke_test_data_dir and dataset.
DEFAULT_SMOKE_DATA = Path("/var/lib/rocmlab/datasets/mnist")


@dataclass
class Options:
    """The run's options (``rocmlab health --help``)."""

    tier: int = 0
    accounts: tuple[str, ...] = ()
    render_group: str = "render"
    min_free: int = DEFAULT_MIN_FREE
    min_free_boot: int = DEFAULT_MIN_FREE_BOOT
    smoke_data: Path = DEFAULT_SMOKE_DATA
    smoke_dataset: str = "mnist"
    smoke_args: tuple[str, ...] = ()
    kernel_log_file: Path | None = None


@dataclass
class HealthContext:
    """One run: the doctor's Context (roots, command runner, --expect-gpus), the options, the
    boot this run is in, and each stateful check's record from the last run."""

    doctor: Context
    options: Options = field(default_factory=Options)
    boot_id: str = ""
    previous: Mapping[str, Any] = field(default_factory=dict)
    python: str = ""  # the interpreter that runs the GPU probe and the smoke job

    def kernel_log(self) -> KernelLog:
        """The kernel log of this boot, read once (bounded, as the doctor reads it)."""
        from rocmlab.doctor.context import load_kernel_log

        if self.doctor.kernel_log is None:
            self.doctor.kernel_log = load_kernel_log(self.options.kernel_log_file, self.doctor.run)
        return self.doctor.kernel_log

    def before(self, check: str) -> dict[str, Any] | None:
        """The check's data from the last run in this boot, or None (no run, another boot, or
        a record that is not an object)."""
        piece = self.previous.get(check)
        if not isinstance(piece, dict) or piece.get("boot_id") != self.boot_id:
            return None
        data = piece.get("data")
        return data if isinstance(data, dict) else None


@dataclass
class Outcome:
    """A check's result and what it wants kept for the next run (None: keep nothing new)."""

    result: Result
    state: dict[str, Any] | None = None
