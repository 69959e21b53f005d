"""Message sizes for the all-reduce benchmark: parsing ``--sizes`` and printing byte counts.

Units are binary, as nccl-tests' ``-b``/``-e`` options take them: K = 1024, M = 1024², G = 1024³
(``parsesize`` in nccl-tests' src/common.cu). Needs no PyTorch.
"""

from __future__ import annotations

import re

ELEMENT_BYTES = 4  # float32: every size is a whole number of elements
MAX_BYTES = 4 * 1024**3
_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}
_SIZE = re.compile(r"^\s*(\d+)\s*([KMG]?)(?:I?B)?\s*$", re.IGNORECASE)
ACCEPTED = (
    "a range LO:HI of sizes doubling from LO to HI (e.g. 1K:64M) or a comma list (e.g. 4K,1M); "
    f"each size in bytes with an optional K/M/G suffix (binary), a multiple of {ELEMENT_BYTES} "
    f"(float32 elements), from {ELEMENT_BYTES} B to 4G"
)


def parse_size(text: str) -> int:
    """Bytes of one size such as ``4096``, ``4K``, ``64MiB``; ValueError naming the problem."""
    match = _SIZE.match(text)
    if not match:
        raise ValueError(f"{text!r} is not a size")
    value = int(match.group(1)) * _UNITS[match.group(2).upper()]
    if not ELEMENT_BYTES <= value <= MAX_BYTES:
        raise ValueError(f"{text!r} is out of range")
    if value % ELEMENT_BYTES:
        raise ValueError(f"{text!r} is not a multiple of {ELEMENT_BYTES} bytes")
    return value


def parse_sizes(text: str) -> tuple[int, ...]:
    """``LO:HI`` (LO, 2·LO, 4·LO, ... up to HI) or ``A,B,C`` as sorted, distinct byte counts."""
    try:
        if ":" in text:
            parts = text.split(":")
            if len(parts) != 2:
                raise ValueError(f"{text!r} has more than one ':'")
            low, high = parse_size(parts[0]), parse_size(parts[1])
            if low > high:
                raise ValueError(f"{text!r} starts above its end")
            sizes = []
            size = low
            while size <= high:
                sizes.append(size)
                size *= 2
            return tuple(sizes)
        items = [item for item in text.split(",") if item.strip()]
        if not items:
            raise ValueError(f"{text!r} names no size")
        return tuple(sorted({parse_size(item) for item in items}))
    except ValueError as exc:
        raise ValueError(f"{exc}: expected {ACCEPTED}") from None


def format_bytes(count: int) -> str:
    """``4 B``, ``1 KiB``, ``1.5 MiB``, ``64 MiB``, ``4 GiB``."""
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if count >= scale:
            value = count / scale
            return f"{value:g} {unit}" if value == int(value) else f"{value:.3g} {unit}"
    return f"{count} B"
