"""Host-provided text made safe for a terminal, for HTML and XML, and for a JSON document.
Standard library only; used by every command that shows what a host or a record says.

What a lab machine says (sysfs and os-release values, kernel log lines, module and device names,
command output, another rank's host name, the records fleet-report reads) may carry terminal
escape sequences, a newline that forges an output line, or Unicode bidi controls that make a line
read differently from what it holds. :func:`for_terminal` makes every such character visible: C0
controls (newline and tab too), DEL, C1 controls, the bidi controls and marks, the line and
paragraph separators, and lone surrogates become ``\\x1b``, ``\\n``, ``\\u202e``, ``\\udcff``.
Everything else passes unchanged. With ``markup=True`` (HTML and XML, where they are white space)
tab, newline and carriage return are kept.

:func:`valid_unicode` keeps a JSON document faithful but valid: a lone surrogate (what Python
makes of an undecodable byte in ``os.environ`` or a file name) cannot be written as UTF-8 and
``json.dumps`` would emit it as a ``\\udcff`` escape that strict parsers refuse; it becomes the
visible ``\\xff`` of the byte it stood for (or U+FFFD), and control characters stay as they are,
since JSON escapes them.
"""

from __future__ import annotations

import re
from typing import Any

# Unicode bidi controls and marks (UAX #9): embeddings and overrides U+202A-202E, isolates
# U+2066-2069, LRM/RLM U+200E/200F, the Arabic letter mark U+061C.
BIDI_CONTROLS = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
_UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u2028\u2029" + BIDI_CONTROLS + "\ud800-\udfff]"
)  # fmt: skip
# The same without tab, newline and carriage return: white space in HTML and XML.
_UNSAFE_MARKUP = re.compile(
    "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u2028\u2029" + BIDI_CONTROLS + "\ud800-\udfff]"
)  # fmt: skip
_SURROGATE = re.compile("[\ud800-\udfff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match[0]
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def for_terminal(text: str, markup: bool = False) -> str:
    """``text`` with every control, bidi and separator character, and every lone surrogate,
    written as a visible escape (``\\x1b``, ``\\n``, ``\\u202e``) that shows what it was and does
    nothing; the rest unchanged. ``markup``: for HTML and XML, where tab, newline and carriage
    return are white space and kept."""
    if text.isprintable():  # none of them is printable (tests/python/test_common.py)
        return text
    return (_UNSAFE_MARKUP if markup else _UNSAFE).sub(_escape, text)


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
