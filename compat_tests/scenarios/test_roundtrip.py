"""Produce with a client and read back with the same client, byte for byte, for every codec."""

from __future__ import annotations

import os
import time

import pytest

from compat_tests.clients.base import Record

from .support import CODECS, assert_same_records, expressible, mixed_records

# Under librdkafka's default message.max.bytes (1000000), which counts the batch overhead too.
LARGE_VALUE_BYTES = 990_000


@pytest.mark.parametrize("codec", CODECS)
def test_roundtrip_every_codec(client, client_name, codec, bootstrap, make_topic) -> None:
    topic = make_topic()
    records = mixed_records(codec)
    with expressible(client_name):
        deliveries = client.produce(bootstrap, topic, records, compression=codec)
    assert [d.offset for d in deliveries] == list(range(len(records)))
    got = client.consume(bootstrap, topic, 0, start="beginning", count=len(records))
    assert_same_records(records, deliveries, got)


@pytest.mark.full
@pytest.mark.parametrize("codec", CODECS)
def test_roundtrip_many_records_every_codec(client, client_name, codec, bootstrap, make_topic) -> None:
    """--full: 2000 records (many batches, sizes up to 1.5 KiB) through one client and back."""
    topic = make_topic()
    records = mixed_records(f"many-{codec}", count=2000)
    with expressible(client_name):
        deliveries = client.produce(bootstrap, topic, records, compression=codec)
    assert [d.offset for d in deliveries] == list(range(len(records)))
    got = client.consume(bootstrap, topic, 0, start="beginning", count=len(records), timeout_s=120)
    assert_same_records(records, deliveries, got)


@pytest.mark.full
@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_record_near_the_size_limit(client, client_name, codec, bootstrap, make_topic) -> None:
    """--full: one ~1 MB record (random, so a codec cannot shrink it) under the brokers' default
    limit (message.max.bytes 1048588) and librdkafka's default message.max.bytes (1000000)."""
    topic = make_topic()
    records = [Record(b"large", os.urandom(LARGE_VALUE_BYTES), (("h", b"v"),)), Record(b"after", b"small")]
    with expressible(client_name):
        deliveries = client.produce(bootstrap, topic, records, compression=codec)
    assert [d.offset for d in deliveries] == [0, 1]
    got = client.consume(bootstrap, topic, 0, start="beginning", count=2, timeout_s=60)
    assert_same_records(records, deliveries, got)


def test_explicit_timestamps(client, client_name, bootstrap, make_topic) -> None:
    topic = make_topic()
    base = int(time.time() * 1000) - 3_600_000  # an hour ago: clearly not the broker's clock
    records = mixed_records("ts", count=6, timestamp_base=base)
    with expressible(client_name):
        deliveries = client.produce(bootstrap, topic, records, compression="lz4")
    got = client.consume(bootstrap, topic, 0, start="beginning", count=len(records))
    assert_same_records(records, deliveries, got)
    assert [r.timestamp_ms for r in got] == [base + i * 10 for i in range(len(records))]


def test_null_header_value_and_empty_fields(client, client_name, bootstrap, make_topic) -> None:
    """A header with a NULL value, an empty (not NULL) key and an empty value survive the trip."""
    topic = make_topic()
    records = [
        Record(b"", b"empty-key", (("null-header", None),)),
        Record(b"empty-value", b"", (("null-header", None),)),
    ]
    with expressible(client_name):
        deliveries = client.produce(bootstrap, topic, records)
    got = client.consume(bootstrap, topic, 0, start="beginning", count=len(records))
    assert_same_records(records, deliveries, got)
