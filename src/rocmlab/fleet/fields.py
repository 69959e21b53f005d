"""Typed reads of JSON records: each read names the key, what it holds and what was expected."""

from __future__ import annotations

from collections.abc import Iterable
from itertools import product
from operator import itemgetter
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


_ANY = ("string", "integer", "number", "boolean", "null", "array", "object")
# The same by exact type, for the values json.loads makes (looked up once per value read).
_EXACT = dict(_KINDS)


def json_kind(value: Any) -> str:
    """The JSON type name of a parsed value (``true`` is a boolean, not a number)."""
    name = _EXACT.get(type(value))
    if name is not None:
        return name
    for kind, name in _KINDS:
        if isinstance(value, kind):
            return name
    return type(value).__name__


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def get(record: Any, key: str, *kinds: str, where: str = "") -> Any:
    """``record[key]`` when it is one of ``kinds`` (JSON type names); else RecordError."""
    if not isinstance(record, dict):
        what = f"'{where.rstrip('.')}'" if where else "the document"
        raise RecordError(f"{what} is {json_kind(record)}, expected an object")
    try:
        value = record[key]
    except KeyError:
        raise RecordError(f"missing key '{where}{key}'") from None
    actual = json_kind(value)
    if actual in kinds or (actual == "integer" and "number" in kinds):
        return value
    raise RecordError(f"'{where}{key}' is {actual} {_shown(value)}, expected {' or '.join(kinds)}")


def get_choice(record: Any, key: str, choices: Iterable[Any], where: str = "") -> Any:
    """``record[key]`` when it is one of ``choices`` (type included: 1 is not true); else
    RecordError naming them."""
    allowed = choices if isinstance(choices, (tuple, list)) else list(choices)
    value = get(record, key, *_ANY, where=where)
    for choice in allowed:
        if value == choice and type(value) is type(choice):
            return value
    listed = ", ".join("null" if c is None else repr(c) for c in allowed)
    raise RecordError(f"'{where}{key}' is {_shown(value)}, expected one of {listed}")


def get_list(record: Any, key: str, where: str = "") -> list[Any]:
    """``record[key]`` when it is an array."""
    return get(record, key, "array", where=where)


# Exact Python types of the JSON types (what json.loads makes), for ``fits``.
TYPES = {
    "null": frozenset({type(None)}),
    "boolean": frozenset({bool}),
    "integer": frozenset({int}),
    "number": frozenset({int, float}),
    "string": frozenset({str}),
    "array": frozenset({list}),
    "object": frozenset({dict}),
}
STRING = TYPES["string"]
STRING_OR_NULL = TYPES["string"] | TYPES["null"]
ARRAY = TYPES["array"]


class Shape:
    """The keys of an object and the exact types their values may have, checked in one pass
    (``fits``): the object's values by one itemgetter, their types as one tuple looked up among
    the allowed ones."""

    def __init__(self, types: dict[str, frozenset[type]]) -> None:
        self.keys = tuple(types)
        self._take = itemgetter(*self.keys)
        self._allowed = frozenset(product(*types.values()))
        self._one = len(self.keys) == 1

    def fits(self, record: Any) -> bool:
        """Whether ``record`` is an object holding each key with a value of one of its types:
        the common case. Never true where ``get`` would refuse the record (so a reader may skip
        its reads when it is); when it is false the reads say why."""
        # Exact JSON types (a bool is not an int here).
        if type(record) is not dict:  # pylint: disable=unidiomatic-typecheck
            return False
        try:
            values = self._take(record)
        except KeyError:
            return False
        return ((type(values),) if self._one else tuple(map(type, values))) in self._allowed


def shape_of(keys: dict[str, tuple[str, ...]]) -> Shape:
    """The Shape of ``get``'s reads: key -> the JSON type names it accepts."""
    return Shape(
        {key: frozenset().union(*(TYPES[kind] for kind in kinds)) for key, kinds in keys.items()}
    )
