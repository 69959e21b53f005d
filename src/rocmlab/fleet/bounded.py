"""Reading what lab machines wrote, under bounds (docs/security.md, "rocmlab fleet-report's
inputs").

Every record in REPORTS_DIR came from a lab machine or an account on one, so it is hostile input:

- ``read_record`` reads it through rocmlab.common.hostread.read_regular without following a
  symbolic link and without blocking; anything but a regular file (a link, FIFO, device, socket
  or directory) is refused before it is opened, and what is opened is checked again with
  ``fstat``, also for a hard link (more than one name: one planted in REPORTS_DIR can name a file
  only the controller's account may read, which the outputs would publish). It reads at most
  MAX_BYTES + 1 bytes, whatever the file's size claims.
  ``read_listed`` reads a name the directory's listing says is a regular file with one system
  call fewer (the listing, not a ``stat``, says what it is), and leaves anything else to
  ``read_record``.
- ``parse_json`` parses strict JSON with bounds: nesting (MAX_DEPTH, checked before the parser
  runs, so deep input never reaches a recursion limit), integers (MAX_INT_DIGITS digits, within a
  64-bit integer), floats (finite only: ``1e400``, ``NaN`` and ``Infinity`` are refused), and
  Unicode (strict UTF-8, no lone surrogate such as ``"\\ud800"``). Every step is linear in the
  input.

Each refusal is a RecordError whose message says what was found, for the host's reason.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from array import array
from functools import lru_cache
from itertools import accumulate
from pathlib import Path
from typing import Any, NoReturn

from rocmlab.common.hostread import (
    FileReplaced,
    FileTooLarge,
    HardLinked,
    NotRegularFile,
    file_kind,
    read_at_most,
    read_regular,
)
from rocmlab.fleet.fields import RecordError

MAX_BYTES = 4 * 1024 * 1024
MAX_DEPTH = 64
MAX_INT_DIGITS = 19  # and within a signed 64-bit integer
MAX_NUMBER_CHARS = 64  # a float's text; Python's repr of any float is at most 24
_INT_RANGE = 2**63

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# How read_regular opens a file it does not follow a link to.
_FILE_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC | os.O_NOFOLLOW

# A JSON string, from its opening quote to its closing one or to the end of the text (a string
# cut short). Each character belongs to one branch, and the match never fails, so scanning is
# linear even for hostile text.
_STRING = re.compile(r'"[^"\\]*(?:\\(?:.|\Z)[^"\\]*)*(?:"|\Z)', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_DEPTH_STEPS = bytes.maketrans(b"[]{}", b"\x01\xff\x01\xff")  # +1, -1 as signed bytes
_ONE_KIND = bytes.maketrans(b"{}", b"[]")
_NOT_STRUCTURE = bytes(range(256)).translate(None, b'"[]{}')  # all bytes but quotes, brackets
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class _Refused(Exception):
    """A value the parser hooks refuse (not a ValueError: json's own errors are those)."""


def _not_regular(mode: int) -> RecordError:
    if stat.S_ISLNK(mode):
        return RecordError(
            "a symbolic link, not followed: a record must be a regular file in REPORTS_DIR"
        )
    return RecordError(f"{file_kind(mode, named_pipe=True)}, not a regular file: not read")


def _too_big(limit: int, size: int | None = None, what: str = "any record") -> RecordError:
    told = f"{size} bytes" if size is not None else f"more than {limit} bytes"
    return RecordError(f"{told}: larger than {what} ({limit} bytes at most)")


def open_directory(name: str, dir_fd: int, label: str) -> int | None:
    """A file descriptor of the directory ``name`` in ``dir_fd``, not through a link; None when
    there is none. RecordError when ``name`` is a link or not a directory (``label`` names it)."""
    try:
        mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise RecordError(f"{label}: cannot be read: {exc.strerror or exc}") from None
    if stat.S_ISLNK(mode):
        raise RecordError(
            f"{label} is a symbolic link: fleet-report follows no link in REPORTS_DIR "
            "(make it a directory)"
        )
    if not stat.S_ISDIR(mode):
        raise RecordError(f"{label} is {file_kind(mode, named_pipe=True)}, expected a directory")
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        raise RecordError(f"{label}: cannot be opened: {exc.strerror or exc}") from None


def read_record(dir_fd: int, name: str, limit: int = MAX_BYTES) -> bytes | None:
    """The bytes of the regular file ``name`` in the directory ``dir_fd``; None when there is
    no such name. RecordError for a link, a special file, a file over ``limit`` bytes or one
    that cannot be read."""
    try:
        data = read_regular(
            name, limit, dir_fd=dir_fd, follow_links=False, refuse_larger=True, single_link=True
        )
    except FileNotFoundError:
        return None
    except NotRegularFile as exc:
        raise _not_regular(exc.mode) from None
    except HardLinked as exc:
        raise RecordError(
            f"{exc}: not read, a record must be a file of its own in REPORTS_DIR (copy it, do "
            "not link it)"
        ) from None
    except FileTooLarge as exc:
        raise _too_big(limit, exc.size) from None
    except FileReplaced as exc:
        raise RecordError(f"{exc}: not read") from None
    except OSError as exc:
        raise RecordError(f"cannot be read: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise _too_big(limit)
    return data


def read_listed(dir_fd: int, entry: os.DirEntry[str], limit: int = MAX_BYTES) -> bytes | None:
    """What read_record(dir_fd, entry.name, limit) gives, for a name os.scandir listed in
    ``dir_fd``, with a system call fewer (of six) where the name is the regular file listed, of
    one name: the listing, not a ``stat``, says what it is (_listed_regular). Anything else is
    left to read_record, which reads or refuses it as it always has."""
    try:
        data = _listed_regular(dir_fd, entry, limit)
    except OSError:
        data = None
    return data if data is not None else read_record(dir_fd, entry.name, limit)


def _listed_regular(dir_fd: int, entry: os.DirEntry[str], limit: int) -> bytes | None:
    """The bytes of ``entry`` when the listing says it is a regular file and what is opened
    (without following a link, without blocking) is that file (``fstat``: a regular file, the
    inode listed, no other name) and within ``limit``; else None."""
    if not entry.is_file(follow_symlinks=False):
        return None
    fd = os.open(entry.name, _FILE_FLAGS, dir_fd=dir_fd)
    try:
        opened = os.fstat(fd)
        if not (
            stat.S_ISREG(opened.st_mode)
            and opened.st_ino == entry.inode()
            and opened.st_nlink == 1
            and opened.st_size <= limit
        ):
            return None
        data = read_at_most(fd, limit)
    finally:
        os.close(fd)
    return data if len(data) <= limit else None


def read_file(path: Path, limit: int = MAX_BYTES, what: str = "any record") -> bytes:
    """The bytes of the regular file at ``path`` (links followed: for files the admin names,
    such as the inventory), without blocking, at most ``limit``; RecordError otherwise (``what``
    the file is, for the message)."""
    try:
        data = read_regular(path, limit, refuse_larger=True)
    except NotRegularFile as exc:
        raise RecordError(
            f"{file_kind(exc.mode, named_pipe=True)}, not a regular file: not read"
        ) from None
    except FileTooLarge as exc:
        raise _too_big(limit, exc.size, what) from None
    except FileReplaced as exc:
        raise RecordError(f"{exc}: not read") from None
    except OSError as exc:
        raise RecordError(f"cannot be read: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise _too_big(limit, what=what)
    return data


def _cut(text: str, width: int = 24) -> str:
    return text if len(text) <= width else f"{text[: width - 3]}..."


def _parse_int(text: str) -> int:
    if len(text) < MAX_INT_DIGITS:  # 18 characters: within a 64-bit integer
        return int(text)
    digits = len(text) - text.startswith("-")
    if digits > MAX_INT_DIGITS:
        raise _Refused(
            f"integer {_cut(text)} has {digits} digits: out of range "
            f"(a 64-bit integer, {MAX_INT_DIGITS} digits at most)"
        )
    value = int(text)
    if not -_INT_RANGE <= value < _INT_RANGE:
        raise _Refused(f"integer {text} is out of range (a 64-bit integer at most)")
    return value


def _parse_float(text: str) -> float:
    if len(text) > MAX_NUMBER_CHARS:
        raise _Refused(
            f"number {_cut(text)} has {len(text)} characters: longer than any number a record "
            f"holds ({MAX_NUMBER_CHARS} at most)"
        )
    value = float(text)
    if not math.isfinite(value):
        raise _Refused(f"number {text} is not finite: beyond a 64-bit float's range")
    return value


def _reject_constant(name: str) -> Any:
    raise _Refused(f"{name} is not a JSON number")


# The parser of every record that parses: json.loads given hooks makes a new decoder, and its
# scanner, on each call. (A record that does not parse is parsed again by json.loads, _refuse,
# whose error says why: a byte order mark, for one, which json.loads alone looks for.) Its
# number hooks remember what they made of the texts seen last (lru_cache, looked up in C: no
# call into Python for the few hundred numbers every host's records repeat); a text they refuse
# is refused again each time (the cache keeps no exception). 256 keep the repeated ones; more
# would only keep texts of records long let go, and the memory around them (4,096: 19 MB more
# at 10,000 hosts).
_NUMBERS = 256
_DECODER = json.JSONDecoder(
    parse_int=lru_cache(maxsize=_NUMBERS)(_parse_int),
    parse_float=lru_cache(maxsize=_NUMBERS)(_parse_float),
    parse_constant=_reject_constant,
)


def _structure(text: str) -> tuple[int, int]:
    """(deepest nesting of arrays and objects, nesting still open at the end) of JSON text,
    brackets inside strings not counted."""
    skeleton = _NOT_BRACKET.sub("", _STRING.sub("", text))
    steps = array("b", skeleton.encode("ascii").translate(_DEPTH_STEPS))
    return max(accumulate(steps), default=0), sum(steps)


def _lone_surrogate(doc: Any) -> str | None:
    """The first lone UTF-16 surrogate in any string or key of ``doc``, escaped; else None."""
    try:
        json.dumps(doc, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"\\u{ord(exc.object[exc.start]):04x}"
    return None


def _valid_depth(data: bytes) -> int:
    """The deepest nesting of arrays and objects in ``data``, which json.loads has parsed: as
    _structure's, found with a few passes of C. In valid JSON a backslash only ever starts an
    escape (taken in pairs from the left, as a parser does), and a quote that is not escaped
    begins or ends a string, so once the escapes are gone every other piece between quotes is
    outside the strings."""
    text = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    outside = b"".join(text.translate(None, _NOT_STRUCTURE).split(b'"')[::2])
    # Brackets are matched in valid JSON, so their kind does not matter: each round takes away
    # the innermost pairs, and the rounds it takes to take them all are the depth.
    brackets = outside.translate(_ONE_KIND)
    for depth in range(MAX_DEPTH + 1):
        if not brackets:
            return depth
        brackets = brackets.replace(b"[]", b"")
    steps = array("b", outside.translate(_DEPTH_STEPS))
    return max(accumulate(steps), default=0)


def _too_deep(depth: int) -> RecordError:
    return RecordError(
        f"arrays and objects nested {depth} deep: deeper than any record ({MAX_DEPTH} at most)"
    )


def parse_json(data: bytes) -> Any:
    """``data`` parsed as strict JSON within the bounds above; RecordError saying what is wrong.

    A record that parses is then checked for depth (the parser's own recursion bound is far
    above MAX_DEPTH and stops it safely); one that does not is examined as before any parse, so
    that a deep record is refused for its depth whatever else is wrong with it."""
    if not data or data.isspace():  # what strip() leaves nothing of, without a copy
        raise RecordError("empty file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RecordError(f"not UTF-8 text (byte {exc.start})") from None
    try:
        doc = _DECODER.decode(text)
    except (_Refused, json.JSONDecodeError, RecursionError):
        _refuse(text)
    # No record nests deeper than it has brackets, in its strings or not: most records have
    # fewer than MAX_DEPTH, and their depth need not be measured.
    if data.count(b"[") + data.count(b"{") > MAX_DEPTH:
        depth = _valid_depth(data)
        if depth > MAX_DEPTH:
            raise _too_deep(depth)
    if _SURROGATE_ESCAPE.search(text):
        surrogate = _lone_surrogate(doc)
        if surrogate is not None:
            raise RecordError(f"a string holds a lone surrogate {surrogate}: not valid Unicode")
    return doc


def _refuse(text: str) -> NoReturn:
    """Why ``text``, which did not parse, is refused: its depth when too deep (checked before
    the parser runs, so deep input never reaches a recursion limit), else the parser's error."""
    depth, still_open = _structure(text)
    if depth > MAX_DEPTH:
        raise _too_deep(depth)
    try:
        json.loads(
            text,
            parse_int=_parse_int,
            parse_float=_parse_float,
            parse_constant=_reject_constant,
        )
    except _Refused as exc:
        raise RecordError(f"not valid JSON: {exc}") from None
    except json.JSONDecodeError as exc:
        cut = still_open > 0 or exc.msg.startswith("Unterminated string")
        raise RecordError(
            f"not valid JSON: {exc.msg}: line {exc.lineno} column {exc.colno}"
            + ("; the file is truncated" if cut else "")
        ) from None
    raise AssertionError("a record that did not parse parsed")  # pragma: no cover
