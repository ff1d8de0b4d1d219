"""Decode the records of v2 batches (tests, timestamp lookups inside a batch, compaction)."""

from __future__ import annotations

from dataclasses import dataclass

from pybroker.records.batch import BATCH_HEADER_SIZE, BatchHeader, iter_batch_headers
from pybroker.records.compression import decompress
from pybroker.records.errors import CorruptRecordError
from pybroker.records.streams import RecordDecompressionError, decompress_bounded
from pybroker.records.varint import read_varint


@dataclass(frozen=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


def read_records(buf: bytes | bytearray | memoryview, verify_crc: bool = True) -> list[Record]:
    """Decode every record of every batch in `buf` (one or more whole batches)."""
    view = memoryview(buf)
    records: list[Record] = []
    for header in iter_batch_headers(view, verify_crc=verify_crc):
        records.extend(decode_batch_records(view[header.position : header.end_position], header))
    return records


def decode_batch_records(
    batch: bytes | bytearray | memoryview, header: BatchHeader, max_bytes: int | None = None
) -> list[Record]:
    """Decode the records of one batch; `batch` starts at the batch's first byte.  With ``max_bytes``,
    a compressed batch is decompressed in chunks and refused (DecompressedSizeLimitError) as soon as
    its records pass that many bytes; undecodable data is a CorruptRecordError either way."""
    payload = memoryview(batch)[BATCH_HEADER_SIZE : header.size]
    if header.compression and max_bytes is not None:
        try:
            payload = memoryview(decompress_bounded(header.compression, payload, max_bytes))
        except RecordDecompressionError as exc:
            raise CorruptRecordError(str(exc)) from exc
    elif header.compression:
        payload = memoryview(decompress(header.compression, payload))
    log_append_time = header.is_log_append_time
    records = []
    position = 0
    for _ in range(header.records_count):
        length, position = read_varint(payload, position)
        end = position + length
        if length < 0 or end > len(payload):
            raise CorruptRecordError("record runs past the end of its batch")
        position += 1  # record attributes
        timestamp_delta, position = read_varint(payload, position)
        offset_delta, position = read_varint(payload, position)
        key, position = _read_nullable_bytes(payload, position)
        value, position = _read_nullable_bytes(payload, position)
        header_count, position = read_varint(payload, position)
        headers = []
        for _ in range(header_count):
            key_length, position = read_varint(payload, position)
            header_key = bytes(payload[position : position + key_length]).decode()
            position += key_length
            header_value, position = _read_nullable_bytes(payload, position)
            headers.append((header_key, header_value))
        if position != end:
            raise CorruptRecordError("record length does not match its contents")
        timestamp = header.max_timestamp if log_append_time else header.base_timestamp + timestamp_delta
        records.append(Record(header.base_offset + offset_delta, timestamp, key, value, tuple(headers)))
    return records


def _read_nullable_bytes(payload: memoryview, position: int) -> tuple[bytes | None, int]:
    length, position = read_varint(payload, position)
    if length < 0:
        return None, position
    if position + length > len(payload):
        raise CorruptRecordError("record field runs past the end of its batch")
    return bytes(payload[position : position + length]), position + length
