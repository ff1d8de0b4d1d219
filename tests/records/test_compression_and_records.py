import io

import pytest

from pybroker.records import (
    CompressionType,
    CorruptRecordError,
    SimpleRecord,
    build_batch,
    compress,
    decompress,
    iter_batch_headers,
    read_records,
)
from pybroker.records.compression import XERIAL_MAGIC

PAYLOAD = b"".join(b"record %d with some repetitive payload;" % i for i in range(5000))


@pytest.mark.parametrize("codec", list(CompressionType))
def test_codec_round_trip(codec):
    packed = compress(codec, PAYLOAD)
    if codec != CompressionType.NONE:
        assert len(packed) < len(PAYLOAD)
    assert decompress(codec, packed) == PAYLOAD


def test_xerial_snappy_round_trip_and_detection():
    packed = compress(CompressionType.SNAPPY, PAYLOAD, xerial=True)
    assert packed.startswith(XERIAL_MAGIC)
    assert decompress(CompressionType.SNAPPY, packed) == PAYLOAD
    assert decompress(CompressionType.SNAPPY, compress(CompressionType.SNAPPY, b"")) == b""


def test_xerial_block_layout_matches_java_framing():
    # Built independently: header (magic, version 1, compat 1) and big-endian length-prefixed raw blocks.
    import struct

    import cramjam

    blocks = [PAYLOAD[:1000], PAYLOAD[1000:3000]]
    framed = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
    for block in blocks:
        raw = bytes(cramjam.snappy.compress_raw(block))
        framed += struct.pack(">i", len(raw)) + raw
    assert decompress(CompressionType.SNAPPY, framed) == PAYLOAD[:3000]


def test_zstd_frame_without_content_size_decompresses():
    zstandard = pytest.importorskip("zstandard")
    out = io.BytesIO()
    writer = zstandard.ZstdCompressor(write_content_size=False).stream_writer(out, closefd=False)
    writer.write(PAYLOAD)
    writer.flush(zstandard.FLUSH_FRAME)
    assert decompress(CompressionType.ZSTD, out.getvalue()) == PAYLOAD


def test_lz4_frame_from_lz4_package_decompresses():
    lz4_frame = pytest.importorskip("lz4.frame")
    assert decompress(CompressionType.LZ4, lz4_frame.compress(PAYLOAD)) == PAYLOAD


def test_corrupt_compressed_data():
    with pytest.raises(CorruptRecordError):
        decompress(CompressionType.ZSTD, b"definitely not zstd")


RECORDS = [
    SimpleRecord(b"k1", b"v1", timestamp_ms=10),
    SimpleRecord(None, b"value without key", (("trace", b"abc"), ("empty", None)), timestamp_ms=5),
    SimpleRecord(b"tombstone", None, timestamp_ms=20),
    SimpleRecord(b"", b"", timestamp_ms=15),
]


@pytest.mark.parametrize("codec", list(CompressionType))
@pytest.mark.parametrize("xerial", [False, True])
def test_build_read_round_trip(codec, xerial):
    batch = build_batch(RECORDS, base_offset=100, compression=codec, xerial_snappy=xerial)
    (header,) = iter_batch_headers(batch)
    assert header.compression == codec
    assert header.max_timestamp == 20
    records = read_records(batch)
    assert [r.offset for r in records] == [100, 101, 102, 103]
    assert [(r.key, r.value, r.timestamp, r.headers) for r in records] == [
        (r.key, r.value, r.timestamp_ms, r.headers) for r in RECORDS
    ]


def test_large_varints_and_multiple_batches():
    big_value = b"x" * 70000
    first = build_batch([SimpleRecord(b"a", big_value, timestamp_ms=2**40)], base_offset=0)
    second = build_batch([SimpleRecord(b"b", b"y", timestamp_ms=-1)], base_offset=1)
    records = read_records(first + second)
    assert records[0].value == big_value and records[0].timestamp == 2**40
    assert records[1].offset == 1 and records[1].timestamp == -1


def test_truncated_record_body_is_corrupt():
    batch = bytearray(build_batch(RECORDS))
    from pybroker.records.batch import rewrite_crc

    batch[-1:] = b""
    batch[8:12] = (len(batch) - 12).to_bytes(4, "big")
    rewrite_crc(batch, 0)
    with pytest.raises(CorruptRecordError):
        read_records(batch)
