"""IDX parsing, on synthetic files written in the real IDX format."""

from __future__ import annotations

import struct

import pytest

from rocmlab.datasets.idx import IdxFormatError, encode_idx, parse_header, parse_idx


def test_round_trip_uint8_images() -> None:
    payload = bytes(range(256)) * 3  # 3 x 16 x 16
    array = parse_idx(encode_idx((3, 16, 16), payload))
    assert array.dtype == "uint8"
    assert array.shape == (3, 16, 16)
    assert array.count == 768
    assert bytes(array.data) == payload


def test_header_is_big_endian() -> None:
    # 0x00 0x00, type 0x08 (uint8), 1 dimension, 60000 as big-endian uint32.
    content = b"\x00\x00\x08\x01" + struct.pack(">I", 60000) + bytes(60000)
    assert parse_header(content) == ("uint8", (60000,), 8)


def test_other_element_types_use_their_item_size() -> None:
    payload = struct.pack(">3i", 1, -2, 3)
    array = parse_idx(encode_idx((3,), payload, dtype="int32"))
    assert array.dtype == "int32"
    assert struct.unpack(">3i", array.data) == (1, -2, 3)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"\x00\x00", "shorter than the 4-byte IDX magic"),
        (b"\x1f\x8b\x08\x00" + bytes(20), "bad IDX magic number 0x1f8b0800"),
        (b"\x00\x00\x07\x01" + bytes(8), "bad IDX magic number"),  # unknown type code
        (b"\x00\x00\x08\x03" + bytes(6), "truncated IDX header: 3 dimensions need 16 bytes"),
    ],
)
def test_malformed_headers_are_rejected(content: bytes, message: str) -> None:
    with pytest.raises(IdxFormatError, match=message):
        parse_idx(content)


def test_truncated_payload_reports_expected_and_actual_size() -> None:
    content = encode_idx((10, 28, 28), bytes(10 * 784))
    with pytest.raises(IdxFormatError, match=r"truncated: header says uint8 10x28x28 = 7856 bytes"):
        parse_idx(content[:-1])


def test_trailing_bytes_are_rejected() -> None:
    content = encode_idx((4,), bytes(4)) + b"x"
    with pytest.raises(IdxFormatError, match="trailing bytes after the data"):
        parse_idx(content)


def test_encode_rejects_unknown_dtype() -> None:
    with pytest.raises(ValueError, match="unknown IDX dtype 'uint16'"):
        encode_idx((1,), b"\x00\x00", dtype="uint16")
