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

    exit_code: int = ExitCode.CHECK_FAILED


class UsageError(RocmlabError):
    """Bad command-line arguments (exit 4 for smoke and fetch-mnist; a command may use another)."""

    exit_code: int = ExitCode.BAD_ARGUMENTS

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class DataError(RocmlabError):
    """Missing, truncated or altered data, or data that could not be fetched (exit 3)."""

    exit_code = ExitCode.DATA_PROBLEM


class GpuAbsentError(RocmlabError):
    """A GPU was required but the run would be on the CPU (exit 2)."""

    exit_code = ExitCode.GPU_ABSENT


class TorchMissingError(RocmlabError):
    """PyTorch is not importable: the smoke job cannot run (exit 1)."""

    exit_code = ExitCode.CHECK_FAILED
