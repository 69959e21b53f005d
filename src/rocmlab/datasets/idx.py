"""The IDX file format of MNIST (http://yann.lecun.com/exdb/mnist/, "FILE FORMATS").

Header: two zero bytes, a type code, the number of dimensions, then one big-endian uint32 per
dimension; the data follows in row-major order, big-endian. Pure Python: no torch, no numpy.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

# type code -> (name, item size in bytes)
IDX_TYPES: dict[int, tuple[str, int]] = {
    0x08: ("uint8", 1),
    0x09: ("int8", 1),
    0x0B: ("int16", 2),
    0x0C: ("int32", 4),
    0x0D: ("float32", 4),
    0x0E: ("float64", 8),
}
_TYPE_CODES = {name: code for code, (name, _unused) in IDX_TYPES.items()}


class IdxFormatError(ValueError):
    """The bytes are not a well-formed IDX file."""


@dataclass(frozen=True)
class IdxArray:
    """A parsed IDX file: its element type, shape and the raw payload (big-endian)."""

    dtype: str
    shape: tuple[int, ...]
    data: memoryview

    @property
    def count(self) -> int:
        """Number of elements."""
        count = 1
        for dim in self.shape:
            count *= dim
        return count


def parse_header(buf: bytes | memoryview) -> tuple[str, tuple[int, ...], int]:
    """Return (dtype, shape, header length) of an IDX buffer, or raise IdxFormatError."""
    if len(buf) < 4:
        raise IdxFormatError(f"{len(buf)} bytes is shorter than the 4-byte IDX magic number")
    zero1, zero2, code, ndim = bytes(buf[:4])
    if zero1 != 0 or zero2 != 0 or code not in IDX_TYPES or ndim == 0:
        raise IdxFormatError(f"bad IDX magic number 0x{bytes(buf[:4]).hex()}")
    header_len = 4 + 4 * ndim
    if len(buf) < header_len:
        raise IdxFormatError(
            f"truncated IDX header: {ndim} dimensions need {header_len} bytes, got {len(buf)}"
        )
    shape = struct.unpack(f">{ndim}I", bytes(buf[4:header_len]))
    return IDX_TYPES[code][0], tuple(shape), header_len


def parse_idx(buf: bytes | memoryview) -> IdxArray:
    """Parse a whole IDX file; the payload length must match the header exactly."""
    dtype, shape, header_len = parse_header(buf)
    itemsize = dict(IDX_TYPES.values())[dtype]
    count = 1
    for dim in shape:
        count *= dim
    expected = header_len + count * itemsize
    if len(buf) != expected:
        what = "truncated" if len(buf) < expected else "trailing bytes after the data"
        raise IdxFormatError(
            f"{what}: header says {dtype} {'x'.join(map(str, shape))} = {expected} bytes, "
            f"file has {len(buf)}"
        )
    return IdxArray(dtype=dtype, shape=shape, data=memoryview(buf)[header_len:])


def encode_idx(shape: tuple[int, ...], data: bytes, dtype: str = "uint8") -> bytes:
    """Serialise a payload (already big-endian) as an IDX file."""
    if dtype not in _TYPE_CODES:
        raise ValueError(f"unknown IDX dtype {dtype!r}; known: {', '.join(_TYPE_CODES)}")
    header = bytes((0, 0, _TYPE_CODES[dtype], len(shape))) + struct.pack(f">{len(shape)}I", *shape)
    return header + data
