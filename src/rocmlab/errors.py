"""Exit codes and the errors that map onto them."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Process exit codes of ``rocmlab`` (documented in docs/smoke-job.md)."""

    PASSED = 0
    CHECK_FAILED = 1
    GPU_ABSENT = 2
    DATA_PROBLEM = 3
    BAD_ARGUMENTS = 4


class RocmlabError(Exception):
    """An error with a user-facing message and the exit code it maps to."""

    exit_code: ExitCode = ExitCode.CHECK_FAILED


class UsageError(RocmlabError):
    """Bad command-line arguments (exit 4)."""

    exit_code = ExitCode.BAD_ARGUMENTS


class DataError(RocmlabError):
    """Missing, truncated or altered data, or data that could not be fetched (exit 3)."""

    exit_code = ExitCode.DATA_PROBLEM


class GpuAbsentError(RocmlabError):
    """A GPU was required but the run would be on the CPU (exit 2)."""

    exit_code = ExitCode.GPU_ABSENT


class TorchMissingError(RocmlabError):
    """PyTorch is not importable: the smoke job cannot run (exit 1)."""

    exit_code = ExitCode.CHECK_FAILED
