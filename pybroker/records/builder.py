"""Build RecordBatch v2 bytes from records (tests, internal topics, compaction; not the produce path)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from pybroker.records.batch import (
    CONTROL_MASK,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    rewrite_crc,
)
from pybroker.records.compression import CompressionType, compress
from pybroker.records.varint import write_varint


@dataclass(frozen=True)
class SimpleRecord:
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = field(default=())
    timestamp_ms: int | None = None


def encode_record(record: SimpleRecord, offset_delta: int, timestamp_delta: int, out: bytearray) -> None:
    body = bytearray()
    body.append(0)  # record attributes: unused in v2
    write_varint(timestamp_delta, body)
    write_varint(offset_delta, body)
    _write_nullable_bytes(record.key, body)
    _write_nullable_bytes(record.value, body)
    write_varint(len(record.headers), body)
    for header_key, header_value in record.headers:
        encoded_key = header_key.encode()
        write_varint(len(encoded_key), body)
        body += encoded_key
        _write_nullable_bytes(header_value, body)
    write_varint(len(body), out)
    out += body


def _write_nullable_bytes(value: bytes | None, out: bytearray) -> None:
    if value is None:
        write_varint(-1, out)
    else:
        write_varint(len(value), out)
        out += value


def build_batch(
    records: list[SimpleRecord],
    *,
    base_offset: int = 0,
    compression: int = CompressionType.NONE,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    timestamp_type: int = 0,
    is_transactional: bool = False,
    is_control: bool = False,
    partition_leader_epoch: int = -1,
    xerial_snappy: bool = False,
) -> bytes:
    """Encode `records` as one v2 batch with a valid CRC. Records without a timestamp get the current time."""
    if not records:
        raise ValueError("a record batch needs at least one record")
    now_ms = int(time.time() * 1000)
    timestamps = [r.timestamp_ms if r.timestamp_ms is not None else now_ms for r in records]
    base_timestamp = timestamps[0]
    body = bytearray()
    for offset_delta, (record, timestamp) in enumerate(zip(records, timestamps, strict=True)):
        encode_record(record, offset_delta, timestamp - base_timestamp, body)
    payload = compress(compression, body, xerial=xerial_snappy) if compression else bytes(body)
    attributes = compression & 0x07
    if timestamp_type:
        attributes |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attributes |= TRANSACTIONAL_MASK
    if is_control:
        attributes |= CONTROL_MASK
    batch = bytearray(HEADER_STRUCT.size + len(payload))
    HEADER_STRUCT.pack_into(
        batch,
        0,
        base_offset,
        len(batch) - LOG_OVERHEAD,
        partition_leader_epoch,
        2,
        0,
        attributes,
        len(records) - 1,
        base_timestamp,
        max(timestamps),
        producer_id,
        producer_epoch,
        base_sequence,
        len(records),
    )
    batch[HEADER_STRUCT.size :] = payload
    rewrite_crc(batch, 0)
    return bytes(batch)
