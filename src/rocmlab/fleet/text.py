"""Wording shared by the fleet report's outputs: numbers, flags, a host's key figures, and
file names as text (``decodable``). Text from records is made safe to show by
rocmlab.common.textsafe.for_terminal."""

from __future__ import annotations

from typing import Any


def decodable(name: str) -> str:
    """A file name or path as text: bytes that are not UTF-8 (Python keeps them as lone
    surrogates, which no output can encode) written as ``\\xff``."""
    try:
        raw = name.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate that stands for no byte
        return name.encode("utf-8", "backslashreplace").decode("utf-8")
    return raw.decode("utf-8", "backslashreplace")


DRIFT_NAMES = {
    "rocm": "ROCm",
    "rocm_wheels": "ROCm wheels",
    "torch": "torch",
    "hip": "HIP",
    "kernel": "kernel",
}


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
    """``PASS 4m``: the health verdict that stands and its age, then the other tier's report
    when there are two (``FAIL 3h (tier 0: PASS 4m)``); an em dash without a report."""
    health = host["health"]
    if health is None:
        return "\u2014"
    text = f"{health['verdict'].upper()} {age_text(health['age_seconds'])}"
    for other in health["reports"]:
        if other["tier"] != health["tier"]:
            age = age_text(other["age_seconds"])
            text += f" (tier {other['tier']}: {other['verdict'].upper()} {age})"
    return text


def shows_known_good(fleet: dict[str, Any]) -> bool:
    """Whether the outputs have a known-good column: some host's rollout record names its
    known-good state."""
    return any(h["known_good"] for h in fleet["hosts"])


def known_good_release(host: dict[str, Any]) -> str:
    """``6.4.2``: the release of the host's known-good state, ``no AMD ROCm`` for a state without
    AMD's (the distribution's ROCm); an em dash without a known-good record."""
    known = host["known_good"]
    if known is None:
        return "\u2014"
    return known["release"] if known["release"] is not None else "no AMD ROCm"


def known_good_text(host: dict[str, Any]) -> str:
    """``6.4.2 3d``: the release of the host's known-good state and its age; an em dash without
    a known-good record."""
    known = host["known_good"]
    if known is None:
        return "\u2014"
    return f"{known_good_release(host)} {age_text(known['age_seconds'])}"


def shows_rocm_wheels(fleet: dict[str, Any]) -> bool:
    """Whether the text table has a ROCm column: some host's smoke report names the venv's ROCm
    from wheels."""
    return any(h["versions"]["rocm_wheels"] for h in fleet["hosts"])


def rocm_text(host: dict[str, Any]) -> str:
    """``10.0.0, venv 7.14.0``: the system's ROCm release and the venv's from wheels (an em dash
    for one that is unknown or absent)."""
    versions = host["versions"]
    return f"{versions['rocm'] or chr(0x2014)}, venv {versions['rocm_wheels'] or chr(0x2014)}"


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
