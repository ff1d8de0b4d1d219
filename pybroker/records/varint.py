"""Zig-zag varints as used inside v2 records (protobuf encoding, Kafka's ByteUtils)."""

from __future__ import annotations

from pybroker.records.errors import CorruptRecordError


def write_varint(value: int, out: bytearray) -> None:
    """Append `value` zig-zag encoded (valid for int32 and int64 alike)."""
    encoded = (value << 1) ^ (value >> 63)
    encoded &= 0xFFFFFFFFFFFFFFFF
    while encoded >= 0x80:
        out.append((encoded & 0x7F) | 0x80)
        encoded >>= 7
    out.append(encoded)


def read_varint(buf: bytes | bytearray | memoryview, position: int) -> tuple[int, int]:
    """Decode a zig-zag varint at `position`; return (value, next position)."""
    result = 0
    shift = 0
    end = len(buf)
    while True:
        if position >= end:
            raise CorruptRecordError("varint runs past the end of the records")
        byte = buf[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
        if shift > 63:
            raise CorruptRecordError("varint longer than 10 bytes")
    return (result >> 1) ^ -(result & 1), position
