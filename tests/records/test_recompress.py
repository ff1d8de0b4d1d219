"""Broker-side recompression: records section recoded, header fields kept, control batches untouched."""

import pytest

from pybroker.records import SimpleRecord, build_batch, iter_batch_headers, read_records
from pybroker.records.compression import CompressionType
from pybroker.records.recompress import needs_recompression, recompress_batches

RECORDS = [SimpleRecord(b"k%d" % i, b"v" * i, (("h", b"x"),), timestamp_ms=1_000 + i) for i in range(20)]


@pytest.mark.parametrize("source", list(CompressionType))
@pytest.mark.parametrize("target", list(CompressionType))
def test_recompressed_batch_keeps_records_and_header_fields(source: int, target: int) -> None:
    data = build_batch(RECORDS, compression=source, producer_id=7, producer_epoch=2, base_sequence=40)
    control = build_batch([SimpleRecord(b"\x00\x00\x00\x01", b"\x00\x00")], is_control=True)
    buf = data + control
    before = list(iter_batch_headers(buf))
    assert needs_recompression(before, target) == (source != target)
    out, after = recompress_batches(buf, before, target)
    assert [h.compression for h in iter_batch_headers(out, verify_crc=True)] == [target, 0]
    assert after == list(iter_batch_headers(out))
    for field in (
        "base_offset",
        "last_offset_delta",
        "base_timestamp",
        "max_timestamp",
        "producer_id",
        "producer_epoch",
        "base_sequence",
        "records_count",
    ):
        assert getattr(after[0], field) == getattr(before[0], field), field
    assert out[after[1].position :] == control
    got = list(read_records(bytes(out[: after[0].end_position])))
    assert [(r.key, r.value, r.timestamp, r.headers) for r in got] == [
        (r.key, r.value, r.timestamp_ms, r.headers) for r in RECORDS
    ]
