"""Typed reads of JSON records: each read names the key, what it holds and what was expected."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


class RecordError(Exception):
    """A record that cannot be used; the message says why, for a person to act on."""


# Python types of parsed JSON and their JSON names; bool before int (True is an int).
_KINDS = (
    (type(None), "null"),
    (bool, "boolean"),
    (int, "integer"),
    (float, "number"),
    (str, "string"),
    (list, "array"),
    (dict, "object"),
)


def json_kind(value: Any) -> str:
    """The JSON type name of a parsed value (``true`` is a boolean, not a number)."""
    for kind, name in _KINDS:
        if isinstance(value, kind):
            return name
    return type(value).__name__


def _matches(value: Any, kind: str) -> bool:
    actual = json_kind(value)
    return actual == kind or (kind == "number" and actual == "integer")


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def get(record: Any, key: str, *kinds: str, where: str = "") -> Any:
    """``record[key]`` when it is one of ``kinds`` (JSON type names); else RecordError."""
    name = f"{where}{key}"
    if not isinstance(record, dict):
        what = f"'{where.rstrip('.')}'" if where else "the document"
        raise RecordError(f"{what} is {json_kind(record)}, expected an object")
    if key not in record:
        raise RecordError(f"missing key '{name}'")
    value = record[key]
    if not any(_matches(value, kind) for kind in kinds):
        raise RecordError(
            f"'{name}' is {json_kind(value)} {_shown(value)}, expected {' or '.join(kinds)}"
        )
    return value


def get_choice(record: Any, key: str, choices: Iterable[Any], where: str = "") -> Any:
    """``record[key]`` when it is one of ``choices`` (type included: 1 is not true); else
    RecordError naming them."""
    allowed = list(choices)
    value = get(record, key, "string", "integer", "number", "boolean", "null", "array", "object",
                where=where)  # fmt: skip
    if not any(value == choice and type(value) is type(choice) for choice in allowed):
        listed = ", ".join("null" if c is None else repr(c) for c in allowed)
        raise RecordError(f"'{where}{key}' is {_shown(value)}, expected one of {listed}")
    return value


def get_list(record: Any, key: str, where: str = "") -> list[Any]:
    """``record[key]`` when it is an array."""
    return get(record, key, "array", where=where)
