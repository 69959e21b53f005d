"""The CLI's contract with the roles, read from one data file: ``rocmlab/data/cli_contract.json``.

What ``rocmlab smoke`` offers and what its exit codes mean, where a role relies on it: the models
(``--model``), the techniques (``--techniques``), the datasets (``--dataset``, also of
``rocmlab fetch-mnist``), the options the smoke_test role sets itself (refused in
``smoke_test_args``) and the exit codes with their meaning. The CLI builds its argparse choices
and its exit-code help from here; tools/role_docs.py writes the role's copy from the same file
and fails ``--check`` on drift, so the role cannot offer what the CLI refuses. Standard library
only: ``rocmlab --help`` reads it.
"""

from __future__ import annotations

import json
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
# Every exit code of smoke and fetch-mnist, in the order the help lists them.
EXIT_CODES: tuple[int, ...] = tuple(code for row in SMOKE["exit_codes"] for code in row["codes"])


def exit_codes_help(rows: list[dict[str, Any]] | None = None) -> str:
    """The ``exit codes:`` block of ``--help``: one line per row (``130, 143  interrupted ...``)."""
    lines = ["exit codes:"]
    for row in SMOKE["exit_codes"] if rows is None else rows:
        lines.append(f"  {', '.join(str(code) for code in row['codes'])}  {row['meaning']}")
    return "\n".join(lines)
