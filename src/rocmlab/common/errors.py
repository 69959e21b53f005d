"""Exit codes and the errors that map onto them."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Process exit codes of ``rocmlab``: the table in rocmlab/data/cli_contract.json
    (``exit_codes``), which each command's ``--help`` and docs/cli.md show."""

    PASSED = 0
    CHECK_FAILED = 1
    BAD_ARGUMENTS = 2
    DATA_PROBLEM = 3
    GPU_ABSENT = 4
    NOT_WRITTEN = 5
    SLURM_GATE_FAILED = 6
    FAULT = 70


class RocmlabError(Exception):
    """An error with a user-facing message and the exit code it maps to."""

    exit_code: int = ExitCode.CHECK_FAILED


class UsageError(RocmlabError):
    """Usage or input refused before anything ran: bad arguments, a path that cannot be used,
    an input file that cannot be read (exit 2)."""

    exit_code = ExitCode.BAD_ARGUMENTS


class DataError(RocmlabError):
    """Missing, truncated or altered data, or data that could not be fetched (exit 3)."""

    exit_code = ExitCode.DATA_PROBLEM


class GpuAbsentError(RocmlabError):
    """A GPU was required but the run would be on the CPU (exit 4)."""

    exit_code = ExitCode.GPU_ABSENT


class OutputError(RocmlabError):
    """The run ended but an output file could not be written (exit 5): its path was checked
    before the run, something changed since."""

    exit_code = ExitCode.NOT_WRITTEN


class TorchMissingError(RocmlabError):
    """PyTorch is not importable: the smoke job cannot run (exit 1)."""

    exit_code = ExitCode.CHECK_FAILED
