"""Wording shared by the fleet report's outputs: numbers, flags, a host's key figures, and
text from records made safe to show (``visible``)."""

from __future__ import annotations

import re
from typing import Any

# Characters that act on a terminal or reorder what it shows rather than show themselves: C0
# and C1 controls and DEL (escape sequences, newlines that start a line of their own, carriage
# returns that overwrite one), the Unicode line and paragraph separators, the bidirectional
# controls (U+061C, U+200E/F, U+202A-202E, U+2066-2069: text that reads one way and is stored
# another), and lone surrogates (not Unicode: no output can encode them).
_UNSAFE = (
    "\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029"
    "\u202a-\u202e\u2066-\u2069\ud800-\udfff"
)
_UNSAFE_LINE = re.compile(f"[\t\n\r{_UNSAFE}]")
_UNSAFE_MARKUP = re.compile(f"[{_UNSAFE}]")  # tab, newline and CR are only white space there
_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def visible(text: str, markup: bool = False) -> str:
    """``text`` with every character above written as an escape (``\\x1b``, ``\\n``,
    ``\\u202e``) that shows what it was and does nothing: one line that says what it holds.
    ``markup``: for HTML and XML, where tab, newline and carriage return are white space and kept.
    """
    return (_UNSAFE_MARKUP if markup else _UNSAFE_LINE).sub(_escape, text)


def decodable(name: str) -> str:
    """A file name or path as text: bytes that are not UTF-8 (Python keeps them as lone
    surrogates, which no output can encode) written as ``\\xff``."""
    try:
        raw = name.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate that stands for no byte
        return name.encode("utf-8", "backslashreplace").decode("utf-8")
    return raw.decode("utf-8", "backslashreplace")


DRIFT_NAMES = {"rocm": "ROCm", "torch": "torch", "hip": "HIP", "kernel": "kernel"}


def number(value: float | None, digits: int = 0) -> str:
    """``12,345`` / ``0.9538``; an em dash for a missing value."""
    if value is None:
        return "\u2014"
    return f"{value:,.{digits}f}"


def tflops(values: dict[str, float] | None) -> str:
    """``float32 0.04, bfloat16 0.09`` (TFLOP/s per dtype)."""
    if not values:
        return "\u2014"
    return ", ".join(f"{dtype} {value:.2f}" for dtype, value in values.items())


def drift_text(drift: dict[str, Any]) -> str:
    """``torch 2.12.0 (majority 2.13.0)``, or ``(no majority)`` when values tie."""
    majority = drift["majority"]
    against = f"majority {majority}" if majority is not None else "no majority"
    return f"{DRIFT_NAMES[drift['field']]} {drift['value']} ({against})"


def slow_text(slow: dict[str, Any]) -> str:
    """``0.52 x the median of AMD Radeon RX 7900 XTX (41,000 samples/s)``."""
    return (
        f"{slow['ratio']:.2f} x the median of {slow['device_name']} "
        f"({number(slow['median'])} samples/s)"
    )


def flags(host: dict[str, Any]) -> list[str]:
    """The host's flags in words: ``DRIFT torch 2.12.0 (majority 2.13.0)``, ``SLOW 0.52 x ...``."""
    words = [f"DRIFT {drift_text(d)}" for d in host["drift"]]
    if host["slow"] is not None:
        words.append(f"SLOW {slow_text(host['slow'])}")
    return words


def short_flags(host: dict[str, Any]) -> list[str]:
    """The flags in a few words each: ``DRIFT torch 2.12.0``, ``SLOW 0.52x median``."""
    words = [f"DRIFT {DRIFT_NAMES[d['field']]} {d['value']}" for d in host["drift"]]
    if host["slow"] is not None:
        words.append(f"SLOW {host['slow']['ratio']:.2f}x median")
    return words


def key_figures(host: dict[str, Any]) -> str:
    """What a ready host measured: ``AMD Instinct MI210 gfx90a rocm, accuracy 0.9538,
    61,500 samples/s, 19.80 TFLOP/s float32`` (the first matmul dtype: fp32)."""
    words = [host["device_name"] or "no device"]
    if host["gfx_arch"]:
        words.append(host["gfx_arch"].split(":")[0])
    if host["backend"]:
        words.append(host["backend"])
    figures = [
        " ".join(words),
        f"accuracy {number(host['test_accuracy'], 4)}",
        f"{number(host['samples_per_second'])} samples/s",
    ]
    if host["matmul_tflops"]:
        dtype, value = next(iter(host["matmul_tflops"].items()))
        figures.append(f"{value:.2f} TFLOP/s {dtype}")
    return ", ".join(figures)


def age_text(seconds: float) -> str:
    """``45s``, ``12m``, ``3h``, ``2d``: an age in its largest whole unit."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def shows_health(fleet: dict[str, Any]) -> bool:
    """Whether the outputs have a health column: some host has a health report, or a maximum
    age was asked for."""
    return fleet["health_max_age_seconds"] is not None or any(h["health"] for h in fleet["hosts"])


def health_text(host: dict[str, Any]) -> str:
    """``PASS 4m``: the latest health verdict and its age; an em dash without a report."""
    health = host["health"]
    if health is None:
        return "\u2014"
    return f"{health['verdict'].upper()} {age_text(health['age_seconds'])}"


def headline(fleet: dict[str, Any]) -> str:
    """``3 of 5 hosts ready``, with the flags and undeclared files counted after it."""
    summary = fleet["summary"]
    words = [f"{summary['ready']} of {summary['declared']} hosts ready"]
    if summary["drift"]:
        words.append(f"{summary['drift']} with version drift")
    if summary["slow"]:
        words.append(f"{summary['slow']} slow")
    if summary["undeclared"]:
        words.append(f"{summary['undeclared']} undeclared file(s) not counted")
    return "; ".join(words)
