"""Kafka's LogValidator record checks for batches a client produces, walking records as Kafka does.

Kafka iterates the records of every produced batch (``assignOffsetsNonCompressed`` and
``validateMessagesAndAssignOffsetsCompressed``): each record must parse (varints, lengths inside
the batch, exactly ``recordsCount`` records), a compacted topic refuses records without a key, and a
CreateTime record's timestamp must lie within ``message.timestamp.before.max.ms`` /
``message.timestamp.after.max.ms`` of the broker's clock.  Per-record failures are collected for the
whole batch and reported as ``record_errors`` (batch index, message); the batch then fails.

The walk is streaming and allocation-free per record: an uncompressed batch is read in place, a
compressed one is decompressed in chunks (``streams``) with only the current chunk (and at most one
record of up to ``_WHOLE_RECORD`` bytes) held, so a batch that expands to gigabytes costs CPU, never
memory.  Recompression to the topic's codec rides the same walk: each decompressed chunk goes to a
streaming compressor, whose output must fit ``max.message.bytes``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from crc32c import crc32c

from pybroker.records.batch import RECORDS_OFFSET, TIMESTAMP_TYPE_MASK, BatchHeader, replace_records_section
from pybroker.records.compression import CompressionType
from pybroker.records.errors import (
    DecompressedSizeLimitError,
    InvalidRecordError,
    RecordBatchTooLargeError,
)
from pybroker.records.streams import Reader, StreamCompressor, open_reader

try:  # the same walk in C (setup.py builds it; optional): ~50x faster per record
    from pybroker.records._walk import walk_records
except ImportError:  # pragma: no cover - no C compiler where pybroker was installed
    _native_walk = None
else:  # (assigned here, not imported as the name: the checker then types it "walk_records or None")
    _native_walk = walk_records
try:  # one produced batch checked and walked in one call (an extension built before it: None)
    from pybroker.records._walk import check_batch
except ImportError:  # pragma: no cover - no C compiler, or an older build of the extension
    _native_check_batch = None
else:
    _native_check_batch = check_batch

NO_TIMESTAMP = -1
LONG_MAX = (1 << 63) - 1
LONG_MIN = -(1 << 63)
# _native_walk's flags (records/_walk.c)
_CHECK_KEYS, _CHECK_TS, _LAT_BATCH = 1, 2, 4

# Decompressed bytes read from a codec per step.
_CHUNK = 64 * 1024
# A record up to this size is gathered whole and parsed in place; a larger one is parsed field by
# field as its bytes stream past (its key, value and header values are skipped, never held).
_WHOLE_RECORD = 256 * 1024

# How far a records section may expand, as a multiple of max.message.bytes (which bounds the
# compressed batch).  Memory does not depend on it (the walk is streaming); it bounds the CPU one
# request can cost.
#
# Validation only (the batch is stored as sent): 1024.  Deflate, the codec with the highest ratio any
# real producer data reaches, cannot exceed ~1032:1, so no batch a producer compressed from real data
# comes near; and Apache Kafka 4.3.1 accepts a 33 KB zstd batch holding a 1 GiB record of zeros into a
# compression.type=producer topic (it skips keys and values without holding them), which 1024 x the
# default 1 MiB (1,073,754,112 bytes) still accepts.  An 8 GiB bomb stops after ~1 GiB of streaming.
VALIDATION_EXPANSION = 1024
# Recompression (compression.type names another codec): 64.  Kafka rebuilds such a batch on its heap
# (every record materialised, then recompressed) and answers UNKNOWN_SERVER_ERROR when it cannot; it
# refuses the same 1 GiB bomb that way.  Recompressing costs far more CPU per byte than walking
# (deflate level 6 runs at tens of MB/s), so the bound is tighter: 64 MiB at the default
# max.message.bytes, several times what any producer's batch.size yields even at 10:1 compression.
RECOMPRESSION_EXPANSION = 64


class RecordError(NamedTuple):
    """One refused record: its index in the batch and why (Produce v8+ ``record_errors``)."""

    batch_index: int
    message: str


class RecordValidationError(InvalidRecordError):
    """Some records of a batch break a rule: the batch fails with INVALID_RECORD and their errors."""

    def __init__(self, message: str, record_errors: list[RecordError]) -> None:
        super().__init__(message)
        self.record_errors = record_errors


class InvalidTimestampError(RecordValidationError):
    """A record's timestamp is out of range (Kafka: INVALID_TIMESTAMP, with the record errors)."""


@dataclass(frozen=True)
class ValidationRules:
    """What a log asks of produced records (Kafka's LogValidator arguments)."""

    compacted: bool = False
    log_append_time: bool = False  # the topic's message.timestamp.type
    timestamp_before_max_ms: int = LONG_MAX
    timestamp_after_max_ms: int = 3_600_000
    max_message_bytes: int = 1_048_588
    target_codec: int | None = None  # None: keep the producer's codec
    compression_level: int | None = None

    def recompresses(self, header: BatchHeader) -> bool:
        return (
            self.target_codec is not None
            and header.compression != self.target_codec
            and not header.is_control
        )


class ValidatedBatch(NamedTuple):
    """A checked batch: ``data`` (the batch as sent, or recompressed) and its record count."""

    data: bytes | bytearray | memoryview
    recompressed: bool


class _Walk:
    """Per-batch state of a record walk: the rules applied and the record errors found."""

    __slots__ = (
        "check_keys", "check_ts", "lat_batch", "base_ts", "max_ts", "lo", "hi", "errors", "now", "native_args"
    )

    def __init__(self, header: BatchHeader, rules: ValidationRules, now_ms: int) -> None:
        self.check_keys = rules.compacted
        # Kafka's validateTimestamp: a CreateTime topic checks every record's timestamp (except -1);
        # otherwise a batch the producer marked LogAppendTime is refused.
        self.check_ts = not rules.log_append_time
        self.lat_batch = header.is_log_append_time
        self.base_ts = header.base_timestamp
        self.max_ts = header.max_timestamp
        self.lo = now_ms - rules.timestamp_before_max_ms
        self.hi = now_ms + rules.timestamp_after_max_ms
        self.now = now_ms
        self.errors: list[tuple[bool, RecordError]] = []  # (is a timestamp error, error)
        # The C walk's rule arguments: bounds clamped to int64 (it then reports a superset of the
        # records to check, and check() decides with Python's exact integers).
        flags = (
            (_CHECK_KEYS if self.check_keys else 0)
            | (_CHECK_TS if self.check_ts else 0)
            | (_LAT_BATCH if self.lat_batch else 0)
        )
        self.native_args = (
            max(LONG_MIN, min(self.base_ts, LONG_MAX)),
            max(LONG_MIN, min(self.lo, LONG_MAX)),
            max(LONG_MIN, min(self.hi, LONG_MAX)),
            flags,
        )

    def check(self, index: int, has_key: bool, timestamp_delta: int) -> None:
        if self.check_keys and not has_key:
            self.errors.append(
                (
                    False,
                    RecordError(
                        index, "Compacted topic cannot accept message without key in topic partition"
                    ),
                )
            )
            return
        timestamp = self.max_ts if self.lat_batch else self.base_ts + timestamp_delta
        if self.check_ts and timestamp != NO_TIMESTAMP:
            if timestamp < self.lo or timestamp > self.hi:
                self.errors.append(
                    (
                        True,
                        RecordError(
                            index,
                            f"Timestamp {timestamp} of message with offset {index} is out of range. The timestamp"
                            f" should be within [{self.lo}, {self.hi}]",
                        ),
                    )
                )
        elif self.lat_batch:
            self.errors.append(
                (
                    True,
                    RecordError(
                        index,
                        "Invalid timestamp type in message. Producer should not set timestamp type to LogAppendTime.",
                    ),
                )
            )

    def raise_errors(self) -> None:
        """Kafka's processRecordErrors: INVALID_TIMESTAMP if any error is one, else INVALID_RECORD."""
        if not self.errors:
            return
        errors = [e for _, e in self.errors]
        if any(is_ts for is_ts, _ in self.errors):
            raise InvalidTimestampError(
                "One or more records have been rejected due to invalid timestamp", errors
            )
        raise RecordValidationError(
            f"One or more records have been rejected due to {len(errors)} record errors in total, and only"
            f" showing the first three errors at most: {errors[:3]}",
            errors,
        )


def _structure(message: str) -> InvalidRecordError:
    return InvalidRecordError(message)


def _varint(buf, q: int, limit: int) -> tuple[int, int]:
    """A zig-zag varint at ``q`` that must end before ``limit``."""
    result = 0
    shift = 0
    while True:
        if q >= limit:
            raise _structure("Found invalid record structure: a varint runs past the end of its record")
        byte = buf[q]
        q += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (result >> 1) ^ -(result & 1), q
        shift += 7
        if shift > 63:
            raise _structure("Found invalid record structure: varint longer than 10 bytes")


def _length_prefix(buf, p: int, end: int) -> tuple[int, int] | None:
    """The record length varint at ``p``, or None when ``buf`` ends inside it."""
    result = 0
    shift = 0
    while True:
        if p >= end:
            return None
        byte = buf[p]
        p += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (result >> 1) ^ -(result & 1), p
        shift += 7
        if shift > 28:
            raise _structure("Found invalid record structure: record length varint longer than 5 bytes")


def _walk_contiguous(buf, pos: int, end: int, index: int, count: int, walk: _Walk) -> tuple[int, int]:
    """Check whole records in ``buf[pos:end]`` from record ``index``; stop at ``count`` or at the first
    record not wholly inside the buffer.  Returns (next record index, its position).

    The C walk goes first when it is built; at a record it does not accept it stops, and the
    Python walk takes over there, so every refusal is the Python walk's own."""
    if _native_walk is not None:
        index, pos, anomaly, candidates = _native_walk(buf, pos, end, index, count, *walk.native_args)
        if candidates is not None:
            check = walk.check
            for i, has_key, timestamp_delta in candidates:
                check(i, has_key, timestamp_delta)
        if not anomaly:
            return index, pos
    try:
        return _walk_records(buf, pos, end, index, count, walk)
    except IndexError:
        # A field ran past the end of the buffer, hence past the end of its record.
        raise _structure("Found invalid record structure: a field runs past the end of its record") from None


def _walk_records(buf, pos: int, end: int, index: int, count: int, walk: _Walk) -> tuple[int, int]:
    # The hot loop of every produced batch: fields of one or two bytes are decoded inline, longer
    # varints by _varint.  Reads are not bounds-checked field by field: ``q`` only grows, so a field
    # that overruns its record ends with q != limit (or an IndexError past the buffer), both refused.
    varint = _varint
    check = walk.check
    # The common case, inlined: a CreateTime topic, not compacted, a CreateTime batch.
    fast_ts = walk.check_ts and not walk.check_keys and not walk.lat_batch
    any_check = walk.check_keys or walk.check_ts or walk.lat_batch
    base_ts, lo, hi = walk.base_ts, walk.lo, walk.hi
    while index < count:
        if pos >= end:
            return index, pos
        first = buf[pos]
        if first < 0x80:
            length = (first >> 1) ^ -(first & 1)
            p = pos + 1
        elif pos + 1 < end and buf[pos + 1] < 0x80:  # two bytes: records of 64 B to 8 KiB
            raw = (first & 0x7F) | (buf[pos + 1] << 7)
            length = (raw >> 1) ^ -(raw & 1)
            p = pos + 2
        else:
            prefix = _length_prefix(buf, pos, end)
            if prefix is None:
                return index, pos
            length, p = prefix
        if length < 0:
            raise _structure(f"Invalid record size {length} at record {index}")
        limit = p + length
        if limit > end:
            return index, pos
        q = p + 1  # attributes (unused in v2)
        # timestampDelta
        b = buf[q]
        if b < 0x80:
            timestamp_delta = (b >> 1) ^ -(b & 1)
            q += 1
        elif buf[q + 1] < 0x80:
            raw = (b & 0x7F) | (buf[q + 1] << 7)
            timestamp_delta = (raw >> 1) ^ -(raw & 1)
            q += 2
        else:
            timestamp_delta, q = varint(buf, q, limit)
        # offsetDelta (not checked: Kafka rewrites, never refuses, inner offsets)
        b = buf[q]
        if b < 0x80:
            q += 1
        elif buf[q + 1] < 0x80:
            q += 2
        else:
            _offset_delta, q = varint(buf, q, limit)
        # keyLength, key
        b = buf[q]
        if b < 0x80:
            key_length = (b >> 1) ^ -(b & 1)
            q += 1
        else:
            key_length, q = varint(buf, q, limit)
        if key_length > 0:
            q += key_length
        # valueLength, value
        b = buf[q]
        if b < 0x80:
            value_length = (b >> 1) ^ -(b & 1)
            q += 1
        elif buf[q + 1] < 0x80:
            raw = (b & 0x7F) | (buf[q + 1] << 7)
            value_length = (raw >> 1) ^ -(raw & 1)
            q += 2
        else:
            value_length, q = varint(buf, q, limit)
        if value_length > 0:
            q += value_length
        # headers
        if buf[q] == 0:
            q += 1
        else:
            header_count, q = varint(buf, q, limit)
            if header_count < 0:
                raise _structure(f"Found invalid number of record headers {header_count}")
            for _ in range(header_count):
                header_key_length, q = varint(buf, q, limit)
                if header_key_length < 0:
                    raise _structure(f"Invalid negative header key size {header_key_length}")
                q += header_key_length
                header_value_length, q = varint(buf, q, limit)
                if header_value_length > 0:
                    q += header_value_length
                if q > limit:
                    break
        if q != limit:
            raise _structure(
                f"Invalid record size: expected to read {length} bytes in record payload, but instead read"
                f" {q - p}"
            )
        if fast_ts:
            timestamp = base_ts + timestamp_delta
            if (timestamp < lo or timestamp > hi) and timestamp != NO_TIMESTAMP:
                check(index, key_length >= 0, timestamp_delta)
        elif any_check:
            check(index, key_length >= 0, timestamp_delta)
        index += 1
        pos = limit
    return index, pos


class _Stream:
    """Decompressed bytes arriving chunk by chunk, counted against a limit, optionally teed into a
    compressor (recompression)."""

    def __init__(self, read: Reader, limit: int, tee: StreamCompressor | None, max_output: int) -> None:
        self._read = read
        self.limit = limit
        self.total = 0
        self.tee = tee
        self.max_output = max_output
        self.buf = bytearray()
        self.pos = 0
        self.eof = False

    def fill(self) -> bool:
        """Append one more chunk to ``buf``; False at the end of the stream."""
        if self.eof:
            return False
        chunk = self._read(_CHUNK)
        if not chunk:
            self.eof = True
            return False
        self.total += len(chunk)
        if self.total > self.limit:
            raise DecompressedSizeLimitError(
                f"records expand beyond {self.limit} bytes (the limit for a batch of this topic)"
            )
        if self.tee is not None:
            self.tee.write(chunk)
            if self.tee.output_size > self.max_output:
                raise RecordBatchTooLargeError(
                    f"recompressed batch exceeds max.message.bytes {self.max_output}"
                )
        self.buf += chunk
        return True

    def compact(self) -> None:
        if self.pos:
            del self.buf[: self.pos]
            self.pos = 0

    # -- field-by-field access for records too large to gather (rare: big values) --
    def byte(self) -> int:
        while self.pos >= len(self.buf):
            self.compact()
            if not self.fill():
                raise InvalidRecordError("Incorrect declared batch size, premature EOF reached")
        value = self.buf[self.pos]
        self.pos += 1
        return value

    def varint(self) -> int:
        result = 0
        shift = 0
        while True:
            byte = self.byte()
            result |= (byte & 0x7F) << shift
            if byte < 0x80:
                return (result >> 1) ^ -(result & 1)
            shift += 7
            if shift > 63:
                raise _structure("Found invalid record structure: varint longer than 10 bytes")

    def skip(self, n: int) -> None:
        while n > 0:
            available = len(self.buf) - self.pos
            if available >= n:
                self.pos += n
                return
            n -= available
            self.buf.clear()
            self.pos = 0
            if not self.fill():
                raise InvalidRecordError("Incorrect declared batch size, premature EOF reached")


def _walk_large_record(stream: _Stream, index: int, walk: _Walk) -> None:
    """One record at ``stream.pos`` parsed as it streams by, bytes counted against its length."""
    start_total = stream.total - (len(stream.buf) - stream.pos)  # stream offset of the record

    def consumed() -> int:
        return stream.total - (len(stream.buf) - stream.pos) - start_total

    length = stream.varint()
    body_start = consumed()
    if length < 0:
        raise _structure(f"Invalid record size {length} at record {index}")

    def within(n: int = 0) -> None:
        if consumed() - body_start + n > length:
            raise _structure("Found invalid record structure: a field runs past the end of its record")

    stream.byte()  # attributes
    timestamp_delta = stream.varint()
    stream.varint()  # offsetDelta
    key_length = stream.varint()
    if key_length > 0:
        within(key_length)
        stream.skip(key_length)
    value_length = stream.varint()
    if value_length > 0:
        within(value_length)
        stream.skip(value_length)
    header_count = stream.varint()
    if header_count < 0:
        raise _structure(f"Found invalid number of record headers {header_count}")
    for _ in range(header_count):
        header_key_length = stream.varint()
        if header_key_length < 0:
            raise _structure(f"Invalid negative header key size {header_key_length}")
        within(header_key_length)
        stream.skip(header_key_length)
        header_value_length = stream.varint()
        if header_value_length > 0:
            within(header_value_length)
            stream.skip(header_value_length)
    read = consumed() - body_start
    if read != length:
        raise _structure(
            f"Invalid record size: expected to read {length} bytes in record payload, but instead read {read}"
        )
    walk.check(index, key_length >= 0, timestamp_delta)


def _walk_stream(stream: _Stream, header: BatchHeader, walk: _Walk) -> None:
    count = header.records_count
    index = 0
    while True:
        index, stream.pos = _walk_contiguous(stream.buf, stream.pos, len(stream.buf), index, count, walk)
        if index == count:
            break
        stream.compact()
        prefix = _length_prefix(stream.buf, 0, len(stream.buf))
        if prefix is not None and prefix[0] + prefix[1] > _WHOLE_RECORD:
            _walk_large_record(stream, index, walk)
            index += 1
            continue
        if not stream.fill():
            raise InvalidRecordError("Incorrect declared batch size, premature EOF reached")
    # Exactly recordsCount records: nothing may follow the last one.
    if stream.pos < len(stream.buf) or stream.fill():
        raise InvalidRecordError("Incorrect declared batch size, records still remaining in file")


_new_tuple = tuple.__new__


def _native_rules(rules: ValidationRules, now_ms: int) -> tuple[int, int, int]:
    """The C walk's rule arguments for a batch not marked LogAppendTime: (flags, low, high), the
    timestamp bounds clamped to int64 (as ``_Walk.native_args``: the walk then reports a superset of
    the records to check)."""
    lo = now_ms - rules.timestamp_before_max_ms
    hi = now_ms + rules.timestamp_after_max_ms
    return (
        (_CHECK_KEYS if rules.compacted else 0) | (0 if rules.log_append_time else _CHECK_TS),
        lo if lo > LONG_MIN else LONG_MIN,
        hi if hi < LONG_MAX else LONG_MAX,
    )


def _native_walk_clean(buf, end: int, header: BatchHeader, rules: ValidationRules, now_ms: int) -> bool:
    """Whether the C walk finds an uncompressed batch's records exactly as declared and none to
    look at (the common case, without the per-batch ``_Walk``); False: walk it with ``_Walk``.
    Same arguments as ``_Walk.native_args`` (the base timestamp is an int64 of the header)."""
    assert _native_walk is not None
    flags, lo, hi = _native_rules(rules, now_ms)
    if header.attributes & TIMESTAMP_TYPE_MASK:
        flags |= _LAT_BATCH
    count = header.records_count
    index, pos, anomaly, candidates = _native_walk(
        buf, RECORDS_OFFSET, end, 0, count, header.base_timestamp, lo, hi, flags
    )
    return not anomaly and candidates is None and index == count and pos == end


def check_produce_batch(
    records: bytes | bytearray | memoryview, rules: ValidationRules, now_ms: int
) -> tuple[BatchHeader, bool] | None:
    """The produce path's fast check of one partition's records, in one C call: (header, walked)
    when ``records`` is exactly one sound v2 batch (what ``validate_produce_batches`` accepts as one
    batch: magic, length, CRC, record count and offset range, no control batch, a sequence with a
    producer id), ``walked`` True when it is uncompressed and ``validate_batch`` under ``rules`` would
    accept it as it is (its records walk clean, none for a rule to look at), False when it is
    compressed (not walked).  None, when the extension is not built or anything is not so: the
    Python checks then run and answer what Kafka answers."""
    if _native_check_batch is None:
        return None
    checked = _native_check_batch(records, crc32c, *_native_rules(rules, now_ms))
    if checked is None:
        return None
    fields, walked = checked
    return _new_tuple(BatchHeader, fields), walked


def validate_batch(
    batch: bytes | bytearray | memoryview, header: BatchHeader, rules: ValidationRules, now_ms: int
) -> ValidatedBatch:
    """Walk the records of one produced batch (``batch`` starts at its first byte, CRC already checked)
    and, when the topic names another codec, recompress it.  Raises InvalidRecordError (structure),
    RecordValidationError / InvalidTimestampError (per-record rules, with their record errors),
    RecordDecompressionError, DecompressedSizeLimitError or RecordBatchTooLargeError."""
    view = memoryview(batch)[: header.size]
    recompress = rules.target_codec is not None and rules.recompresses(header)
    if header.compression == CompressionType.NONE and not recompress:
        # The hot path: records read in place, no copy.
        # Indexing bytes/bytearray is cheaper than indexing a memoryview: walk the object itself.
        buf = view if isinstance(batch, memoryview) else batch
        if _native_walk is not None and _native_walk_clean(buf, len(view), header, rules, now_ms):
            return _new_tuple(ValidatedBatch, (batch, False))  # ValidatedBatch(batch, False), sans __new__
        # A record to look at, or one the C walk does not accept: the walk below finds what is wrong.
        walk = _Walk(header, rules, now_ms)
        index, pos = _walk_contiguous(buf, RECORDS_OFFSET, len(view), 0, header.records_count, walk)
        if index < header.records_count:
            raise InvalidRecordError(
                f"Invalid record size: record {index} of {header.records_count} runs past the end of the batch"
                if pos < len(view)
                else f"Incorrect declared batch size: {index} records found, {header.records_count} declared"
            )
        if pos != len(view):
            raise InvalidRecordError("Incorrect declared batch size, records still remaining in file")
        walk.raise_errors()
        return ValidatedBatch(batch, False)
    walk = _Walk(header, rules, now_ms)
    multiple = RECOMPRESSION_EXPANSION if recompress else VALIDATION_EXPANSION
    limit = multiple * max(rules.max_message_bytes, 1)
    tee = None
    if recompress:
        assert rules.target_codec is not None
        tee = StreamCompressor(rules.target_codec, rules.compression_level)
    stream = _Stream(
        open_reader(header.compression, view[RECORDS_OFFSET:]), limit, tee, rules.max_message_bytes
    )
    _walk_stream(stream, header, walk)
    walk.raise_errors()
    if tee is None:
        return ValidatedBatch(batch, False)
    assert rules.target_codec is not None
    return ValidatedBatch(replace_records_section(view, tee.finish(), rules.target_codec), True)
