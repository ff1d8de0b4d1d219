import struct

import pytest
from crc32c import crc32c

from pybroker.records import (
    BatchHeader,
    CompressionType,
    CorruptRecordError,
    InvalidRecordError,
    SimpleRecord,
    build_batch,
    iter_batch_headers,
    read_records,
    stamp_base_offset,
    stamp_log_append_time,
    stamp_partition_leader_epoch,
    validate_produce_batches,
)
from pybroker.records.batch import ATTRIBUTES_OFFSET, CRC_OFFSET, LAST_OFFSET_DELTA_OFFSET, rewrite_crc


def make_batch(n: int = 3, **kwargs) -> bytes:
    records = [SimpleRecord(f"k{i}".encode(), f"value-{i}".encode(), timestamp_ms=1000 + i) for i in range(n)]
    return build_batch(records, **kwargs)


def stored_crc(buf, position: int = 0) -> int:
    return struct.unpack_from(">I", buf, position + CRC_OFFSET)[0]


def crc_is_valid(buf, position: int = 0) -> bool:
    length = struct.unpack_from(">i", buf, position + 8)[0]
    return crc32c(bytes(buf[position + ATTRIBUTES_OFFSET : position + 12 + length])) == stored_crc(
        buf, position
    )


def test_header_fields_parse():
    batch = make_batch(
        4, base_offset=77, producer_id=9, producer_epoch=2, base_sequence=10, partition_leader_epoch=5
    )
    (header,) = iter_batch_headers(batch)
    assert isinstance(header, BatchHeader)
    assert header.base_offset == 77
    assert header.size == len(batch)
    assert header.magic == 2
    assert header.last_offset_delta == 3
    assert header.last_offset == 80
    assert header.next_offset == 81
    assert header.records_count == 4
    assert header.base_timestamp == 1000
    assert header.max_timestamp == 1003
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (9, 2, 10)
    assert header.last_sequence == 13
    assert header.partition_leader_epoch == 5
    assert header.position == 0
    assert header.compression == 0
    assert not header.is_transactional and not header.is_control and not header.is_log_append_time


def test_header_flags():
    batch = make_batch(compression=CompressionType.LZ4, is_transactional=True, timestamp_type=1)
    (header,) = iter_batch_headers(batch)
    assert header.compression == CompressionType.LZ4
    assert header.is_transactional
    assert header.is_log_append_time


def test_last_sequence_wraps_at_int32():
    batch = make_batch(3, producer_id=1, producer_epoch=0, base_sequence=2**31 - 2)
    (header,) = iter_batch_headers(batch)
    assert header.last_sequence == 0


def test_consecutive_batches_and_positions():
    first, second = make_batch(2), make_batch(5)
    headers = list(iter_batch_headers(first + second))
    assert [h.position for h in headers] == [0, len(first)]
    assert [h.records_count for h in headers] == [2, 5]


def test_crc_mismatch_is_corrupt():
    batch = bytearray(make_batch())
    batch[-1] ^= 0x01
    with pytest.raises(CorruptRecordError, match="CRC"):
        list(iter_batch_headers(batch))
    # Without verification the header still parses.
    assert len(list(iter_batch_headers(batch, verify_crc=False))) == 1


def test_length_past_end_is_corrupt():
    batch = make_batch()
    with pytest.raises(CorruptRecordError):
        list(iter_batch_headers(batch[:-1]))
    with pytest.raises(CorruptRecordError):
        list(iter_batch_headers(batch + b"\x00" * 10))


def test_too_small_length_is_corrupt():
    batch = bytearray(make_batch())
    struct.pack_into(">i", batch, 8, 20)
    with pytest.raises(CorruptRecordError, match="batchLength"):
        list(iter_batch_headers(batch))


def test_old_magic_rejected():
    batch = bytearray(make_batch())
    batch[16] = 1
    with pytest.raises(InvalidRecordError, match="v0/v1 not supported"):
        list(iter_batch_headers(batch))


def test_validate_produce_checks_offset_range_and_count():
    good = make_batch(3)
    assert len(validate_produce_batches(good + make_batch(1))) == 2
    inconsistent = bytearray(good)
    struct.pack_into(">i", inconsistent, LAST_OFFSET_DELTA_OFFSET, 5)
    rewrite_crc(inconsistent, 0)
    with pytest.raises(InvalidRecordError, match="offset range"):
        validate_produce_batches(inconsistent)
    zero_count = bytearray(good)
    struct.pack_into(">i", zero_count, 57, 0)
    rewrite_crc(zero_count, 0)
    with pytest.raises(InvalidRecordError, match="record count"):
        validate_produce_batches(zero_count)
    with pytest.raises(CorruptRecordError):
        validate_produce_batches(b"")
    with pytest.raises(CorruptRecordError):
        validate_produce_batches(good + b"\x00\x00\x00")


def test_stamping_offset_and_epoch_keeps_crc():
    first, second = make_batch(2), make_batch(3)
    buf = bytearray(first + second)
    crc_before = [stored_crc(buf, 0), stored_crc(buf, len(first))]
    stamp_base_offset(buf, len(first), 123456789)
    stamp_partition_leader_epoch(buf, len(first), 17)
    headers = list(iter_batch_headers(buf))
    assert headers[1].base_offset == 123456789
    assert headers[1].partition_leader_epoch == 17
    assert headers[0].base_offset == 0
    assert [stored_crc(buf, 0), stored_crc(buf, len(first))] == crc_before
    assert crc_is_valid(buf, len(first))


def test_stamp_log_append_time_recomputes_crc():
    buf = bytearray(make_batch(3))
    old_crc = stored_crc(buf)
    stamp_log_append_time(buf, 0, 5_000_000)
    (header,) = iter_batch_headers(buf)  # verifies the CRC
    assert header.is_log_append_time
    assert header.max_timestamp == 5_000_000
    assert header.base_timestamp == 1000
    assert stored_crc(buf) != old_crc
    assert crc_is_valid(buf)
    assert [r.timestamp for r in read_records(buf)] == [5_000_000] * 3


def test_interop_with_kafka_python_reader():
    kafka_records = pytest.importorskip("kafka.record.default_records")
    batch = make_batch(3, compression=CompressionType.GZIP, base_offset=40)
    parsed = kafka_records.DefaultRecordBatch(bytearray(batch))
    assert parsed.validate_crc()
    assert [(r.offset, r.key, r.value, r.timestamp) for r in parsed] == [
        (40 + i, f"k{i}".encode(), f"value-{i}".encode(), 1000 + i) for i in range(3)
    ]


def test_interop_with_kafka_python_builder():
    kafka_records = pytest.importorskip("kafka.record.default_records")
    builder = kafka_records.DefaultRecordBatchBuilder(
        2, kafka_records.DefaultRecordBatch.CODEC_SNAPPY, 0, 7, 1, 4, 1 << 20
    )
    for i in range(5):
        builder.append(i, timestamp=2000 + i, key=b"key%d" % i, value=b"v" * 200 * i, headers=[("h", b"x")])
    batch = bytes(builder.build())
    (header,) = validate_produce_batches(batch)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 1, 4)
    assert header.compression == CompressionType.SNAPPY
    records = read_records(batch)
    assert [(r.offset, r.key, r.value, r.timestamp, r.headers) for r in records] == [
        (i, b"key%d" % i, b"v" * 200 * i, 2000 + i, (("h", b"x"),)) for i in range(5)
    ]
