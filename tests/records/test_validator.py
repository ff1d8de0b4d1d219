"""records.validator: Kafka's LogValidator rules on crafted batches, uncompressed and compressed."""

from __future__ import annotations

import os
import time

import pytest
import zstandard

from pybroker.records import (
    CompressionType,
    SimpleRecord,
    build_batch,
    compress,
    iter_batch_headers,
    read_records,
    validator,
)
from pybroker.records.batch import HEADER_STRUCT, LOG_OVERHEAD, rewrite_crc
from pybroker.records.builder import encode_record
from pybroker.records.errors import InvalidRecordError, RecordBatchTooLargeError
from pybroker.records.streams import RecordDecompressionError
from pybroker.records.validator import (
    DecompressedSizeLimitError,
    InvalidTimestampError,
    RecordValidationError,
    ValidationRules,
    validate_batch,
)

CODECS = [
    CompressionType.NONE,
    CompressionType.GZIP,
    CompressionType.SNAPPY,
    CompressionType.LZ4,
    CompressionType.ZSTD,
]
NOW = int(time.time() * 1000)


@pytest.fixture(autouse=True, params=["c-walk", "python-walk"])
def walker(request, monkeypatch):
    """Every case runs on both record walks: the C one (records/_walk.c) and the Python one."""
    if request.param == "python-walk":
        monkeypatch.setattr(validator, "_native_walk", None)
    elif validator._native_walk is None:
        if os.environ.get("CI"):
            pytest.fail("the C record walk (pybroker.records._walk) is not built: pip install -e . needs a C compiler")
        pytest.skip("the C record walk is not built here (no C compiler when pybroker was installed)")
    return request.param


def _raw_batch(
    body: bytes, count: int, codec: int = CompressionType.NONE, base_ts: int = NOW, attrs: int = 0
) -> bytes:
    """A batch around a hand-made records section (``body`` uncompressed; compressed here)."""
    payload = compress(codec, body) if codec else body
    batch = bytearray(HEADER_STRUCT.size) + payload
    HEADER_STRUCT.pack_into(
        batch,
        0,
        0,
        len(batch) - LOG_OVERHEAD,
        -1,
        2,
        0,
        codec | attrs,
        count - 1,
        base_ts,
        base_ts,
        -1,
        -1,
        -1,
        count,
    )
    rewrite_crc(batch, 0)
    return bytes(batch)


def _body(records: list[SimpleRecord], deltas: list[int] | None = None) -> bytes:
    out = bytearray()
    for i, record in enumerate(records):
        encode_record(record, i, (deltas or [0] * len(records))[i], out)
    return bytes(out)


def _validate(batch: bytes, rules: ValidationRules | None = None):
    header = next(iter_batch_headers(batch))
    return validate_batch(batch, header, rules or ValidationRules(), NOW)


@pytest.mark.parametrize("codec", CODECS)
def test_valid_batches_pass_untouched(codec: int) -> None:
    batch = build_batch(
        [SimpleRecord(b"k%d" % i, b"v" * i, (("h", b"x"),)) for i in range(50)], compression=codec
    )
    result = _validate(batch)
    assert result.data is batch and not result.recompressed


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize(("declared", "actual"), [(3, 2), (2, 3)])
def test_declared_count_must_match(codec: int, declared: int, actual: int) -> None:
    body = _body([SimpleRecord(b"k", b"v")] * actual)
    with pytest.raises(InvalidRecordError, match="declared|remaining|premature|past the end"):
        _validate(_raw_batch(body, declared, codec))


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.ZSTD])
def test_malformed_records(codec: int) -> None:
    good = _body([SimpleRecord(b"a", b"value")])
    cases = {
        "length-mismatch": bytes([(len(good) - 1 + 4) * 2]) + good[1:] + b"\x00\x00\x00\x00",
        "negative-header-count": good[:-1] + b"\x05",  # zig-zag -3
        "varint-past-record": bytes([4 * 2]) + b"\x00\xff\xff\xff",
        "negative-length": b"\x03" + good[1:],
    }
    for name, body in cases.items():
        with pytest.raises(InvalidRecordError):
            _validate(_raw_batch(body, 1, codec))
        assert name


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.GZIP, CompressionType.ZSTD])
def test_keyless_records_on_a_compacted_topic_are_listed(codec: int) -> None:
    keyless = {3, 11, 42}
    records = [SimpleRecord(None if i in keyless else b"k", b"v") for i in range(50)]
    batch = build_batch(records, compression=codec)
    _validate(batch)  # not compacted: fine
    with pytest.raises(RecordValidationError) as caught:
        _validate(batch, ValidationRules(compacted=True))
    assert not isinstance(caught.value, InvalidTimestampError)
    assert [e.batch_index for e in caught.value.record_errors] == sorted(keyless)


def test_timestamps_out_of_bounds() -> None:
    hour = 3_600_000
    body = _body([SimpleRecord(b"k", b"v")] * 4)
    deltas = [0, 2 * hour, -10 * hour, 0]
    body = _body([SimpleRecord(b"k", b"v")] * 4, deltas)
    batch = _raw_batch(body, 4)
    with pytest.raises(InvalidTimestampError) as caught:
        _validate(batch)  # after.max.ms defaults to one hour, before is unbounded
    assert [e.batch_index for e in caught.value.record_errors] == [1]
    with pytest.raises(InvalidTimestampError) as caught:
        _validate(batch, ValidationRules(timestamp_before_max_ms=hour))
    assert [e.batch_index for e in caught.value.record_errors] == [1, 2]
    # A LogAppendTime topic does not check CreateTime timestamps.
    _validate(batch, ValidationRules(log_append_time=True))
    # NO_TIMESTAMP is never out of range.
    _validate(
        _raw_batch(_body([SimpleRecord(b"k", b"v")]), 1, base_ts=-1),
        ValidationRules(timestamp_before_max_ms=0),
    )


def test_producer_may_not_mark_a_batch_log_append_time_on_a_log_append_time_topic() -> None:
    batch = _raw_batch(_body([SimpleRecord(b"k", b"v")]), 1, attrs=0x08)
    with pytest.raises(InvalidTimestampError):
        _validate(batch, ValidationRules(log_append_time=True))


def test_key_error_wins_over_timestamp_error_for_the_same_record() -> None:
    body = _body([SimpleRecord(None, b"v"), SimpleRecord(b"k", b"v")], [10 * 3_600_000, 10 * 3_600_000])
    with pytest.raises(InvalidTimestampError) as caught:
        _validate(_raw_batch(body, 2), ValidationRules(compacted=True))
    assert [e.batch_index for e in caught.value.record_errors] == [0, 1]
    assert "without key" in caught.value.record_errors[0].message


@pytest.mark.parametrize(
    "codec", [CompressionType.GZIP, CompressionType.SNAPPY, CompressionType.LZ4, CompressionType.ZSTD]
)
def test_junk_payload_is_a_decompression_error(codec: int) -> None:
    junk = b"\x1f\x8b\x08\x00" + os.urandom(200) if codec == CompressionType.GZIP else os.urandom(200)
    batch = _raw_batch(b"", 1)[: HEADER_STRUCT.size] + junk
    batch = bytearray(batch)
    HEADER_STRUCT.pack_into(
        batch, 0, 0, len(batch) - LOG_OVERHEAD, -1, 2, 0, codec, 0, NOW, NOW, -1, -1, -1, 1
    )
    rewrite_crc(batch, 0)
    with pytest.raises((RecordDecompressionError, InvalidRecordError)):
        _validate(bytes(batch))


def test_a_large_record_is_streamed_and_checked() -> None:
    # One 3 MiB value, then a keyless record: the big one goes through the field-by-field path.
    records = [SimpleRecord(b"big", bytes(3 << 20)), SimpleRecord(None, b"small")]
    batch = build_batch(records, compression=CompressionType.ZSTD)
    _validate(batch)
    with pytest.raises(RecordValidationError) as caught:
        _validate(batch, ValidationRules(compacted=True))
    assert [e.batch_index for e in caught.value.record_errors] == [1]
    # The same record one byte short of its declared length.
    body = bytearray(_body([SimpleRecord(b"big", bytes(3 << 20))]))
    with pytest.raises(InvalidRecordError):
        _validate(_raw_batch(bytes(body[:-1]), 1, CompressionType.ZSTD))


def test_expansion_is_bounded_by_max_message_bytes() -> None:
    batch = build_batch([SimpleRecord(b"k", bytes(2 << 20))], compression=CompressionType.ZSTD)
    # Validation alone: 1024 x max.message.bytes.
    _validate(batch, ValidationRules(max_message_bytes=4096))
    with pytest.raises(DecompressedSizeLimitError):
        _validate(batch, ValidationRules(max_message_bytes=1024))
    # Recompression: 64 x max.message.bytes.
    with pytest.raises(DecompressedSizeLimitError):
        _validate(batch, ValidationRules(max_message_bytes=16 * 1024, target_codec=CompressionType.GZIP))


def test_recompressed_output_must_fit_max_message_bytes() -> None:
    values = [os.urandom(1000) for _ in range(200)]  # incompressible: ~200 KB whatever the codec
    batch = build_batch([SimpleRecord(b"k", v) for v in values], compression=CompressionType.ZSTD)
    with pytest.raises(RecordBatchTooLargeError):
        _validate(batch, ValidationRules(max_message_bytes=100_000, target_codec=CompressionType.GZIP))


@pytest.mark.parametrize("source", CODECS)
@pytest.mark.parametrize("target", CODECS)
def test_recompression_keeps_every_record(source: int, target: int) -> None:
    records = [SimpleRecord(b"k%d" % i, b"value-%d" % i * 20) for i in range(300)]
    batch = build_batch(records, compression=source)
    result = _validate(batch, ValidationRules(target_codec=target))
    assert result.recompressed == (source != target)
    (header,) = list(iter_batch_headers(result.data))
    assert header.compression == target and header.records_count == 300
    assert [(r.key, r.value) for r in read_records(result.data)] == [(r.key, r.value) for r in records]


@pytest.mark.parametrize(("window_log", "accepted"), [(25, True), (26, False)])
def test_zstd_window_is_capped(window_log: int, accepted: bool) -> None:
    # A frame asking for a large window makes the decoder allocate (and fill) it.
    params = zstandard.ZstdCompressionParameters.from_level(3, window_log=window_log)
    body = _body([SimpleRecord(b"k", bytes(1 << 20))])
    payload = zstandard.ZstdCompressor(compression_params=params).compressobj()
    data = payload.compress(body) + payload.flush()  # streamed: no content size, the window is what it says
    batch = bytearray(HEADER_STRUCT.size) + data
    HEADER_STRUCT.pack_into(
        batch, 0, 0, len(batch) - LOG_OVERHEAD, -1, 2, 0, CompressionType.ZSTD, 0, NOW, NOW, -1, -1, -1, 1
    )
    rewrite_crc(batch, 0)
    if accepted:
        _validate(bytes(batch))
    else:
        with pytest.raises(RecordDecompressionError, match="memory|window"):
            _validate(bytes(batch))
