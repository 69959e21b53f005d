# Copyright: rocmlab contributors
# Apache License 2.0
"""Text a host chose, made safe for the controller's terminal, for the collection's controller
plugins (the fleet callback, the smoke_summary lookup), which import nothing of rocmlab: as
rocmlab.common.textsafe.for_terminal does, every character of Unicode's general categories Cc
(C0 and C1 controls, DEL), Cf (format characters: the bidirectional controls, zero-width and
other invisible characters such as U+200B, U+2060, U+FEFF), Cs (lone surrogates), Zl and Zp (the
line and paragraph separators) is written as a visible escape. None of them is printable."""

from __future__ import annotations

import re
import unicodedata

UNSAFE_CATEGORIES = frozenset(("Cc", "Cf", "Cs", "Zl", "Zp"))
_CANDIDATE = re.compile(r"[^\x20-\x7e]")


def _escaped(match: re.Match) -> str:
    char = match[0]
    if unicodedata.category(char) not in UNSAFE_CATEGORIES:
        return char
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def shown(text: str) -> str:
    """TEXT with every control, format (bidi, zero-width) and separator character escaped
    (\\x1b, \\u202e, \\u200b), for the terminal."""
    return text if text.isprintable() else _CANDIDATE.sub(_escaped, text)


def unsafe(text: str) -> bool:
    """Whether TEXT holds a character shown() escapes."""
    return shown(text) != text
