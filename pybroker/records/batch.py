"""RecordBatch v2 (magic 2) header: parsing, CRC-32C checks and in-place stamping.

The broker treats a batch as opaque bytes: it reads the fixed 61-byte header, verifies the CRC and
rewrites a few header fields in place. Records are never decoded on the produce or fetch path.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import NamedTuple

from crc32c import crc32c

from pybroker.records.errors import CorruptRecordError, InvalidRecordError

# Field offsets inside a batch (Kafka's DefaultRecordBatch).
BASE_OFFSET_OFFSET = 0
LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
LAST_OFFSET_DELTA_OFFSET = 23
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35
PRODUCER_ID_OFFSET = 43
PRODUCER_EPOCH_OFFSET = 51
BASE_SEQUENCE_OFFSET = 53
RECORDS_COUNT_OFFSET = 57
RECORDS_OFFSET = 61

BATCH_HEADER_SIZE = 61
# baseOffset + batchLength: the part of the header not counted in batchLength.
LOG_OVERHEAD = 12
# batchLength covers everything after the length field; a v2 header alone is 49 bytes of it.
MIN_BATCH_LENGTH = BATCH_HEADER_SIZE - LOG_OVERHEAD
CURRENT_MAGIC = 2

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1

HEADER_STRUCT = struct.Struct(">qiibIhiqqqhii")
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")
_PREFIX = struct.Struct(">qiib")  # baseOffset, batchLength, partitionLeaderEpoch, magic

assert HEADER_STRUCT.size == BATCH_HEADER_SIZE


class BatchHeader(NamedTuple):
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int
    position: int

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies, including the 12-byte log overhead."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_MASK)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record, wrapping at int32 like Kafka's DefaultRecordBatch."""
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF

    @property
    def end_position(self) -> int:
        return self.position + self.batch_length + LOG_OVERHEAD


def batch_crc(buf: bytes | bytearray | memoryview, position: int, batch_length: int) -> int:
    """CRC-32C over attributes..end of the batch, as stored in the header's crc field."""
    end = position + LOG_OVERHEAD + batch_length
    return crc32c(memoryview(buf)[position + ATTRIBUTES_OFFSET : end])


def parse_batch_header(buf: bytes | bytearray | memoryview, position: int = 0) -> BatchHeader:
    """Parse the header at `position` without checking the CRC. The buffer must hold 61 bytes there."""
    return BatchHeader._make((*HEADER_STRUCT.unpack_from(buf, position), position))


def whole_batches(records: bytes | bytearray | memoryview) -> memoryview:
    """The prefix of `records` made of whole batches: a log read or a fetch is cut at its byte limit and
    may end inside a batch (Kafka's FileRecords slices do the same); the torn tail is dropped."""
    view = memoryview(records)
    position, end = 0, len(view)
    while position + LOG_OVERHEAD <= end:
        size = int.from_bytes(view[position + 8 : position + 12], "big", signed=True)
        if size < 0 or position + LOG_OVERHEAD + size > end:
            break
        position += LOG_OVERHEAD + size
    return view[:position]


def iter_batch_headers(
    buf: bytes | bytearray | memoryview, verify_crc: bool = True, start: int = 0
) -> Iterator[BatchHeader]:
    """Yield the headers of consecutive batches in `buf`.

    Raises CorruptRecordError for a bad CRC, a too-small batch or one that runs past the buffer (including
    trailing bytes too short for a header), InvalidRecordError for message format v0/v1.
    """
    view = memoryview(buf)
    end = len(view)
    position = start
    unpack = HEADER_STRUCT.unpack_from
    while position < end:
        remaining = end - position
        if remaining < LOG_OVERHEAD + 5:
            raise CorruptRecordError(f"{remaining} trailing bytes at position {position}: not a whole batch")
        _, batch_length, _, magic = _PREFIX.unpack_from(view, position)
        if magic != CURRENT_MAGIC:
            raise InvalidRecordError(
                f"batch at position {position} has magic {magic}: message format v0/v1 not supported"
            )
        if batch_length < MIN_BATCH_LENGTH:
            raise CorruptRecordError(f"batch at position {position} has batchLength {batch_length} < 49")
        batch_end = position + LOG_OVERHEAD + batch_length
        if batch_end > end:
            raise CorruptRecordError(
                f"batch at position {position} of {batch_length + LOG_OVERHEAD} bytes runs past the end"
                f" of the buffer ({remaining} bytes left)"
            )
        header = BatchHeader._make((*unpack(view, position), position))
        if verify_crc and crc32c(view[position + ATTRIBUTES_OFFSET : batch_end]) != header.crc:
            raise CorruptRecordError(
                f"batch at position {position} (base offset {header.base_offset}) fails its CRC-32C check"
            )
        yield header
        position = batch_end


_new_tuple = tuple.__new__  # a BatchHeader without NamedTuple's Python-level _make


def _one_sound_batch(buf: bytes | bytearray | memoryview) -> list[BatchHeader] | None:
    """What ``iter_batch_headers`` yields for ``buf`` when it is exactly one v2 batch with a good CRC
    (every produce request of a v3+ client), without the generator; None otherwise."""
    view = memoryview(buf)
    end = len(view)
    if end < BATCH_HEADER_SIZE:
        return None
    header = _new_tuple(BatchHeader, (*HEADER_STRUCT.unpack_from(view, 0), 0))
    batch_length = header.batch_length
    if header.magic != CURRENT_MAGIC or batch_length < MIN_BATCH_LENGTH or LOG_OVERHEAD + batch_length != end:
        return None
    if crc32c(view[ATTRIBUTES_OFFSET:end]) != header.crc:
        return None
    return [header]


def validate_produce_batches(buf: bytes | bytearray | memoryview) -> list[BatchHeader]:
    """Validate a Produce request's records for one partition and return their headers.

    Mirrors Kafka's LogValidator checks for magic v2: valid CRC, at least one record, and an offset range
    (lastOffsetDelta + 1) equal to the record count. The client's base offset is ignored (it is rewritten).
    """
    if len(buf) == 0:
        raise CorruptRecordError("produce request carries no record batches")
    headers = _one_sound_batch(buf)
    if headers is None:  # several batches, or something wrong: the walk says what
        headers = list(iter_batch_headers(buf, verify_crc=True))
    for header in headers:
        if header.records_count <= 0:
            raise InvalidRecordError(
                f"batch at position {header.position} has invalid record count {header.records_count}"
            )
        if header.last_offset_delta < 0 or header.last_offset_delta + 1 != header.records_count:
            raise InvalidRecordError(
                f"batch at position {header.position}: inconsistent offset range"
                f" (lastOffsetDelta {header.last_offset_delta}, recordsCount {header.records_count})"
            )
        if header.attributes & CONTROL_MASK:  # is_control (bit tests: no property calls per batch)
            raise InvalidRecordError("Clients are not allowed to write control records")
        if header.producer_id >= 0 and header.base_sequence < 0:  # has_producer_id
            raise InvalidRecordError(
                f"Invalid sequence number {header.base_sequence} in record batch with producerId"
                f" {header.producer_id}"
            )
    return headers


def stamp_base_offset(buf: bytearray | memoryview, position: int, base_offset: int) -> None:
    """Rewrite baseOffset in place; it sits outside the CRC so the CRC stays valid."""
    _INT64.pack_into(buf, position + BASE_OFFSET_OFFSET, base_offset)


def stamp_partition_leader_epoch(buf: bytearray | memoryview, position: int, epoch: int) -> None:
    """Rewrite partitionLeaderEpoch in place; outside the CRC."""
    _INT32.pack_into(buf, position + PARTITION_LEADER_EPOCH_OFFSET, epoch)


_OFFSET_LENGTH_EPOCH = struct.Struct(">qii")  # baseOffset, batchLength, partitionLeaderEpoch


def stamp_offset_and_epoch(buf: bytearray | memoryview, header: BatchHeader, base_offset: int, epoch: int) -> None:
    """``stamp_base_offset`` and ``stamp_partition_leader_epoch`` in one write (the batchLength
    between them written back as ``header``, parsed from these bytes, has it)."""
    _OFFSET_LENGTH_EPOCH.pack_into(buf, header.position, base_offset, header.batch_length, epoch)


def stamp_log_append_time(buf: bytearray | memoryview, position: int, timestamp_ms: int) -> None:
    """Mark the batch LogAppendTime, set maxTimestamp to the append time and recompute the CRC.

    Kafka leaves baseTimestamp and the record deltas alone; readers take every record's timestamp from
    maxTimestamp when the timestamp-type bit is set.
    """
    (attributes,) = _INT16.unpack_from(buf, position + ATTRIBUTES_OFFSET)
    _INT16.pack_into(buf, position + ATTRIBUTES_OFFSET, attributes | TIMESTAMP_TYPE_MASK)
    _INT64.pack_into(buf, position + MAX_TIMESTAMP_OFFSET, timestamp_ms)
    rewrite_crc(buf, position)


def rewrite_crc(buf: bytearray | memoryview, position: int) -> None:
    (batch_length,) = _INT32.unpack_from(buf, position + LENGTH_OFFSET)
    _UINT32.pack_into(buf, position + CRC_OFFSET, batch_crc(buf, position, batch_length))


def replace_records_section(
    batch: bytes | bytearray | memoryview, payload: bytes | bytearray, codec: int
) -> bytearray:
    """A copy of ``batch`` (one whole batch) with a new records section in ``codec``: same base offset,
    timestamps, producer fields, offset span and count; new length, codec bits and CRC."""
    out = bytearray(memoryview(batch)[:RECORDS_OFFSET])
    out += payload
    _INT32.pack_into(out, LENGTH_OFFSET, len(out) - LOG_OVERHEAD)
    (attributes,) = _INT16.unpack_from(out, ATTRIBUTES_OFFSET)
    _INT16.pack_into(out, ATTRIBUTES_OFFSET, (attributes & ~COMPRESSION_MASK) | codec)
    rewrite_crc(out, 0)
    return out
