"""Host-provided text made safe for a terminal, for HTML and XML, and for a JSON document.
Standard library only; used by every command that shows what a host or a record says.

What a lab machine says (sysfs and os-release values, kernel log lines, module and device names,
command output, another rank's host name, the records fleet-report reads) may carry terminal
escape sequences, a newline that forges an output line, Unicode bidi controls that make a line
read differently from what it holds, or invisible characters (a zero-width space U+200B, a word
joiner U+2060, a byte order mark U+FEFF) that make two different names look alike.
:func:`for_terminal` makes every such character visible: the characters of Unicode's general
categories Cc (C0 controls, newline and tab too, DEL, C1 controls), Cf (format characters: the
bidi controls and marks, the zero-width and invisible ones, tag characters), Cs (lone
surrogates), Zl and Zp (the line and paragraph separators) become ``\\x1b``, ``\\n``,
``\\u202e``, ``\\u200b``, ``\\udcff``, ``\\U000e0041``. Everything else passes unchanged. With
``markup=True`` (HTML and XML, where they are white space) tab, newline and carriage return are
kept.

:func:`valid_unicode` keeps a JSON document faithful but valid: a lone surrogate (what Python
makes of an undecodable byte in ``os.environ`` or a file name) cannot be written as UTF-8 and
``json.dumps`` would emit it as a ``\\udcff`` escape that strict parsers refuse; it becomes the
visible ``\\xff`` of the byte it stood for (or U+FFFD), and control characters stay as they are,
since JSON escapes them.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache
from typing import Any

# The general categories written as escapes (none of their characters is printable). Cf holds
# the bidi controls and marks (UAX #9: U+202A-202E, U+2066-2069, U+200E/200F, U+061C).
UNSAFE_CATEGORIES = frozenset(("Cc", "Cf", "Cs", "Zl", "Zp"))
# What may be one of them: every character but printable ASCII.
_CANDIDATE = re.compile("[^\x20-\x7e]")
_SURROGATE = re.compile("[\ud800-\udfff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_MARKUP_SPACE = frozenset("\t\n\r")


@lru_cache(maxsize=4096)
def _shown(char: str, markup: bool) -> str:
    """``char`` as for_terminal writes it: itself, or its escape."""
    if markup and char in _MARKUP_SPACE:
        return char
    if unicodedata.category(char) not in UNSAFE_CATEGORIES:
        return char
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def _escape(match: re.Match[str]) -> str:
    return _shown(match[0], False)


def _escape_markup(match: re.Match[str]) -> str:
    return _shown(match[0], True)


def for_terminal(text: str, markup: bool = False) -> str:
    """``text`` with every control, format (bidi, zero-width, invisible) and separator
    character, and every lone surrogate, written as a visible escape (``\\x1b``, ``\\n``,
    ``\\u202e``, ``\\u200b``) that shows what it was and does nothing; the rest unchanged.
    ``markup``: for HTML and XML, where tab, newline and carriage return are white space and
    kept."""
    if text.isprintable():  # none of them is printable (tests/python/test_common.py)
        return text
    return _CANDIDATE.sub(_escape_markup if markup else _escape, text)


def _replace_surrogate(match: re.Match[str]) -> str:
    code = ord(match[0])
    # surrogateescape maps an undecodable byte 0x80-0xff to U+DC80-U+DCFF: show the byte.
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else "\ufffd"


def valid_unicode(value: Any) -> Any:
    """``value`` (a string, or lists and dicts of them, keys included) with lone surrogates
    replaced, so that it can be written as UTF-8 JSON; other values are returned as they are."""
    if isinstance(value, str):
        return _SURROGATE.sub(_replace_surrogate, value)
    if isinstance(value, dict):
        return {valid_unicode(key): valid_unicode(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [valid_unicode(item) for item in value]
    return value
