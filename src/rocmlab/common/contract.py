"""The CLI's contract with the roles, read from one data file: ``rocmlab/data/cli_contract.json``.

What ``rocmlab smoke`` offers where a role relies on it: the models (``--model``), the
techniques (``--techniques``), the datasets (``--dataset``, also of ``rocmlab fetch-mnist``), the
options the smoke_test role sets itself (refused in ``smoke_test_args``); and the one table of
every command's exit codes. The CLI builds its argparse choices and each command's exit-code help
from here; tools/role_docs.py writes the role's copy from the same file and fails ``--check`` on
drift, so the role cannot offer what the CLI refuses. Standard library only: ``rocmlab --help``
reads it.
"""

from __future__ import annotations

import json
import textwrap
from importlib import resources
from typing import Any

FILE = "cli_contract.json"


def load() -> dict[str, Any]:
    """The contract as the wheel ships it."""
    return json.loads(resources.files("rocmlab.data").joinpath(FILE).read_text("utf-8"))


SMOKE: dict[str, Any] = load()["smoke"]
MODELS: tuple[str, ...] = tuple(SMOKE["models"])
TECHNIQUES: tuple[str, ...] = tuple(SMOKE["techniques"])
DATASETS: tuple[str, ...] = tuple(SMOKE["datasets"])
SET_BY_ROLE: tuple[str, ...] = tuple(SMOKE["set_by_role"])
# The one table of every command's exit codes (0, 1 and 2 mean the same for all; a row lists
# the commands that use it and, per command, what it means there).
EXIT_TABLE: list[dict[str, Any]] = load()["exit_codes"]
COMMANDS: tuple[str, ...] = tuple(dict.fromkeys(c for row in EXIT_TABLE for c in row["commands"]))


def exit_rows(command: str) -> list[dict[str, Any]]:
    """The exit codes ``rocmlab COMMAND`` uses: ``{"codes": [...], "meaning": ...}`` per row, the
    meaning as it reads for that command."""
    return [
        {"codes": row["codes"], "meaning": row.get("detail", {}).get(command, row["meaning"])}
        for row in EXIT_TABLE
        if command in row["commands"]
    ]


def exit_codes_of(command: str) -> tuple[int, ...]:
    """Every exit code of ``rocmlab COMMAND``, in the table's order."""
    return tuple(code for row in exit_rows(command) for code in row["codes"])


# Every exit code of smoke, in the order the help lists them (its report's exit_code).
EXIT_CODES: tuple[int, ...] = exit_codes_of("smoke")


def _line(codes: list[int], meaning: str) -> str:
    """``  CODES  MEANING``, wrapped at 79 columns under the meaning's start."""
    head = f"  {', '.join(str(code) for code in codes)}  "
    return textwrap.fill(
        meaning, 79, initial_indent=head, subsequent_indent=" " * len(head), break_on_hyphens=False
    )


def exit_codes_help(command: str | None = None) -> str:
    """The ``exit codes:`` block of ``--help``: one line per row (``130, 143  interrupted ...``),
    for ``command``, or the whole table with the commands of each row beyond 0-2 (``rocmlab
    --help``)."""
    lines = ["exit codes:"]
    if command is not None:
        lines += [_line(row["codes"], row["meaning"]) for row in exit_rows(command)]
        return "\n".join(lines)
    for row in EXIT_TABLE:
        which = "" if set(row["commands"]) == set(COMMANDS) else f" ({', '.join(row['commands'])})"
        lines.append(_line(row["codes"], row["meaning"] + which))
    return "\n".join(lines)
