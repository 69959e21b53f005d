"""argparse types shared by the commands: numbers checked for range, with a message that names
what would be accepted; the parser whose errors are the table's exit 2."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from rocmlab.common.errors import UsageError


class Parser(argparse.ArgumentParser):
    """argparse whose errors are UsageError (exit 2, printed once by the CLI with the usage)."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.subcommands: dict[str, Parser] = {}

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message}\n{self.format_usage().rstrip()}")


def number(
    kind: Callable[[str], float], low: float, high: float, what: str, low_open: bool = False
) -> Callable[[str], float]:
    """An argparse type: ``kind(text)`` within [low, high] (``(low, high]`` when ``low_open``),
    else an error naming ``what``."""

    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        above_low = value > low if low_open else value >= low
        if not (math.isfinite(value) and above_low and value <= high):
            raise argparse.ArgumentTypeError(f"{text!r} is out of range: expected {what}")
        return value

    return parse


POSITIVE_INT = number(int, 1, 1_000_000, "a whole number >= 1")
SEED = number(int, 0, 2**63 - 1, "a whole number >= 0")
LR = number(float, 1e-12, 10.0, "a learning rate in (0, 10]")
MOMENTUM = number(float, 0.0, 0.999, "a momentum in [0, 0.999]")
FRACTION = number(float, 0.0, 1.0, "an accuracy between 0 and 1")
SECONDS = number(float, 0.0, 3600.0, "seconds between 0 and 3600")
ATTEMPTS = number(int, 1, 100, "a whole number between 1 and 100")
SLOW_FRACTION = number(float, 0.0, 1.0, "a fraction in (0, 1]", low_open=True)


def comma_list(choices: tuple[str, ...]) -> Callable[[str], tuple[str, ...]]:
    """An argparse type: a comma-separated list of ``choices`` (in the order given, each once)."""

    def parse(text: str) -> tuple[str, ...]:
        names = [name.strip() for name in text.split(",") if name.strip()]
        unknown = [name for name in names if name not in choices]
        if unknown:
            raise argparse.ArgumentTypeError(
                f"{text!r}: unknown {', '.join(map(repr, unknown))}; expected a comma-separated "
                f"list of {', '.join(choices)}"
            )
        return tuple(dict.fromkeys(names))

    return parse


def existing_directory(option: str, path: Path) -> Path:
    """``path`` when it is a directory, else a usage error naming ``option``."""
    if not path.is_dir():
        raise UsageError(f"{option} {path}: not a directory (expected an existing directory)")
    return path
