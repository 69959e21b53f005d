"""``fleet.json``'s text: what ``json.dumps(doc, indent=2)`` writes, in pieces, faster.

With ``indent``, the json module encodes in Python, one generator step per value: for 10,000
hosts (about 30 checks each) that was most of fleet-report's time, and the whole 86 MB text was
then held twice (the string and its bytes). Here the innermost containers, those holding only
numbers, strings, booleans, nulls and empty containers (a check, a host's files, its versions),
are encoded by the json module's C encoder with the item separator set to the newline and
indentation of their depth, which is exactly how ``indent=2`` lays them out; the containers
around them are laid out here, and the text is given in pieces of about a host each
(``iter_indented``), so it can be written as it is made. A list of flat objects that was written
before (a host's checks: rows share them) is written again from its text.
tests/python/test_fleet_scale.py checks that the text is ``json.dumps(doc, indent=2)``'s, byte
for byte, hostile strings included.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from functools import cache
from itertools import chain
from json.encoder import encode_basestring_ascii
from typing import Any

INDENT = "  "
_SCALARS = frozenset({str, int, float, bool, type(None)})
_DICT = frozenset({dict})
_STREAM_DEPTH = 2  # pieces are given after each item of the containers above this depth
_PIECE = 256  # parts joined into one piece


@cache
def _flat_encoder(depth: int) -> Callable[[Any], str]:
    """The C encoder that writes a container of scalars as ``indent=2`` does at ``depth``,
    less the newlines after its opening and before its closing bracket; made once per depth
    (``JSONEncoder.encode`` makes it again on every call)."""
    encoder = json.JSONEncoder(separators=(",\n" + INDENT * depth, ": "))
    try:
        make = json.encoder.c_make_encoder  # type: ignore[attr-defined]
        c_encode = make(
            None,
            encoder.default,
            encode_basestring_ascii,
            None,
            encoder.key_separator,
            encoder.item_separator,
            False,
            False,
            True,
        )

        def encode(value: Any) -> str:
            return "".join(c_encode(value, 0))

        sample = {"a": [1, 2.5, None, True, "\u00e9\n"], "b": {}}
        if encode(sample) == encoder.encode(sample):
            return encode
    except Exception:  # no C encoder, or another signature: the json module's own way
        pass
    return encoder.encode


def _is_flat(items: Any) -> bool:
    """Whether ``items`` are scalars and empty containers: what the flat encoder writes."""
    if _SCALARS.issuperset(map(type, items)):  # the common case, looked at in C
        return True
    for item in items:
        kind = type(item)
        if kind is dict or kind is list:
            if item:
                return False
        elif kind not in _SCALARS:
            return False
    return True


def _scalar(value: Any) -> str:
    kind = type(value)
    if kind is str:
        return encode_basestring_ascii(value)
    if kind is int:
        return int.__repr__(value)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if kind is float and math.isfinite(value):
        return float.__repr__(value)
    return json.dumps(value)  # json's NaN and Infinity, subclasses, its TypeError


def _key(key: Any) -> str:
    # json writes 1, 1.5, true, null keys as strings
    if type(key) is not str:  # pylint: disable=unidiomatic-typecheck
        key = next(iter(json.loads(json.dumps({key: None}))))
    return encode_basestring_ascii(key)


def _flat_objects(items: list[Any]) -> bool:
    """Whether ``items`` are non-empty flat objects (a host's checks): the types of all their
    values looked at in one pass in C, each object alone only when that finds a container."""
    if not (_DICT.issuperset(map(type, items)) and all(items)):
        return False
    values = chain.from_iterable(map(dict.values, items))
    return _SCALARS.issuperset(map(type, values)) or all(_is_flat(v.values()) for v in items)


def _is_scalar(value: Any) -> bool:
    """Whether the flat encoder writes ``value`` on one line: a scalar or an empty container."""
    kind = type(value)
    return kind in _SCALARS or ((kind is dict or kind is list) and not value)


def _flat_dicts(value: list[Any], depth: int) -> str:
    """A list of non-empty flat objects at ``depth`` (a host's checks) in one call of the C
    encoder: written with the separators of the objects' items, the boundaries between the
    objects (``},`` newline, their items' indentation, ``{``: nothing else writes that, as the
    encoder escapes every newline in a string) are then given their own indentation."""
    outer, middle, inner = INDENT * depth, INDENT * (depth + 1), INDENT * (depth + 2)
    text = _flat_encoder(depth + 2)(value)[2:-2]
    text = text.replace("},\n" + inner + "{", f"\n{middle}}},\n{middle}{{\n{inner}")
    return f"[\n{middle}{{\n{inner}{text}\n{middle}}}\n{outer}]"


# Texts of lists of flat objects already written, by depth and the objects' ids (see _encode).
_Written = dict[tuple[int, ...], str]
_WRITTEN = 256  # at most, the oldest let go first


def _list_of_objects(value: list[Any], depth: int, written: _Written) -> str | None:
    """The text of ``value`` at ``depth`` when it is a list of non-empty flat objects (a host's
    checks), else None. Rows share their checks (rocmlab.fleet.rules), so most hosts' lists
    hold the same objects as one written before: its text is written again. The ids name the
    objects while ``written`` lives, as the document being written holds them all."""
    key = (depth, *map(id, value))
    text = written.get(key)
    if text is None and _flat_objects(value):
        if len(written) >= _WRITTEN:
            del written[next(iter(written))]
        text = written[key] = _flat_dicts(value, depth)
    return text


def _encode(value: Any, depth: int, out: list[str], written: _Written) -> None:
    """Append the text of ``value`` at ``depth`` to ``out`` (``written``: see _list_of_objects)."""
    kind = type(value)
    if kind is dict:
        if not value:
            out.append("{}")
        elif _is_flat(value.values()):
            text = _flat_encoder(depth + 1)(value)
            out.append(f"{{\n{INDENT * (depth + 1)}{text[1:-1]}\n{INDENT * depth}}}")
        else:
            # Runs of items on one line each are written together by the flat encoder.
            parts: list[str] = []
            run: dict[Any, Any] = {}
            for key, item in value.items():
                if _is_scalar(item):
                    run[key] = item
                    continue
                if run:
                    parts.append(_flat_encoder(depth + 1)(run)[1:-1])
                    run = {}
                inner: list[str] = [_key(key), ": "]
                _encode(item, depth + 1, inner, written)
                parts.append("".join(inner))
            if run:
                parts.append(_flat_encoder(depth + 1)(run)[1:-1])
            separator = ",\n" + INDENT * (depth + 1)
            out.append(f"{{\n{INDENT * (depth + 1)}{separator.join(parts)}\n{INDENT * depth}}}")
    elif kind is list or kind is tuple:
        if not value:
            out.append("[]")
        elif _is_flat(value):
            text = _flat_encoder(depth + 1)(value)
            out.append(f"[\n{INDENT * (depth + 1)}{text[1:-1]}\n{INDENT * depth}]")
        elif kind is list and (text := _list_of_objects(value, depth, written)) is not None:
            out.append(text)
        else:
            inner_separator = ",\n" + INDENT * (depth + 1)
            out.append("[\n" + INDENT * (depth + 1))
            for index, item in enumerate(value):
                if index:
                    out.append(inner_separator)
                _encode(item, depth + 1, out, written)
            out.append("\n" + INDENT * depth + "]")
    elif kind in _SCALARS:
        out.append(_scalar(value))
    elif isinstance(value, (dict, list, tuple)):
        # A subclass: as json.dumps would write it (the generic path above needs exact types).
        out.append(json.dumps(value, indent=2).replace("\n", "\n" + INDENT * depth))
    else:
        out.append(_scalar(value))  # json's own TypeError for what JSON cannot hold


def _stream(value: Any, depth: int, out: list[str], written: _Written) -> Iterator[str]:
    """As _encode, giving the text made so far after each item of the top containers."""
    kind = type(value)
    if (
        depth >= _STREAM_DEPTH
        or kind not in (dict, list)
        or not value
        or _is_flat(value.values() if kind is dict else value)
    ):
        _encode(value, depth, out, written)
        return
    items = value.items() if kind is dict else ((None, item) for item in value)
    open_, close = ("{", "}") if kind is dict else ("[", "]")
    inner = ",\n" + INDENT * (depth + 1)
    out.append(open_ + "\n" + INDENT * (depth + 1))
    first = True
    for key, item in items:
        if not first:
            out.append(inner)
        first = False
        if kind is dict:
            out.append(_key(key) + ": ")
        yield from _stream(item, depth + 1, out, written)
        if len(out) >= _PIECE:
            yield "".join(out)
            out.clear()
    out.append("\n" + INDENT * depth + close)


def iter_indented(doc: Any) -> Iterator[str]:
    """``json.dumps(doc, indent=2)`` in pieces (their concatenation is that text)."""
    out: list[str] = []
    yield from _stream(doc, 0, out, {})
    if out:
        yield "".join(out)


def dumps_indented(doc: Any) -> str:
    """``json.dumps(doc, indent=2)``."""
    return "".join(iter_indented(doc))


def file_pieces(doc: Any) -> Iterator[bytes]:
    """A JSON file's bytes: ``json.dumps(doc, indent=2)`` and a newline, UTF-8, in pieces."""
    for piece in iter_indented(doc):
        yield piece.encode("utf-8")
    yield b"\n"
