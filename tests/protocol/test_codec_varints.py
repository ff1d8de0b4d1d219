"""Varint helpers (exported for the records layer): Kafka's ByteUtils encodings."""

from __future__ import annotations

import pytest

from pybroker.protocol import codec


@pytest.mark.parametrize(
    ("value", "wire"),
    [
        (0, "00"),
        (1, "01"),
        (127, "7f"),
        (128, "8001"),
        (300, "ac02"),
        (16384, "808001"),
        (2**32 - 1, "ffffffff0f"),
    ],
)
def test_unsigned_varint(value: int, wire: str) -> None:
    assert codec.encode_uvarint(value) == bytes.fromhex(wire)
    assert codec.decode_uvarint(bytes.fromhex(wire), 0) == (value, len(wire) // 2)


@pytest.mark.parametrize(
    ("value", "wire"),
    [
        (0, "00"),
        (-1, "01"),
        (1, "02"),
        (-2, "03"),
        (63, "7e"),
        (-64, "7f"),
        (64, "8001"),
        (2**31 - 1, "feffffff0f"),
    ],
)
def test_zigzag_varint(value: int, wire: str) -> None:
    assert codec.encode_varint(value) == bytes.fromhex(wire)
    assert codec.decode_varint(bytes.fromhex(wire), 0) == (value, len(wire) // 2)


def test_varint_extremes() -> None:
    assert codec.decode_varint(codec.encode_varint(-(2**31)), 0)[0] == -(2**31)
    low = codec.encode_varlong(-(2**63))
    assert low == bytes.fromhex("ffffffffffffffffff01")
    assert codec.decode_varlong(low, 0) == (-(2**63), 10)
    assert codec.decode_varlong(codec.encode_varlong(2**63 - 1), 0)[0] == 2**63 - 1


def test_varint_at_an_offset_and_truncated() -> None:
    assert codec.decode_varint(b"\xaa\x02", 1) == (1, 2)
    with pytest.raises(codec.DecodeError):
        codec.decode_uvarint(b"\x80\x80", 0)
    with pytest.raises(codec.DecodeError):
        codec.decode_varlong(b"\xff" * 11, 0)
    with pytest.raises(codec.EncodeError):
        codec.encode_uvarint(-1)
