"""A LogAppendTime topic: consumers see the broker's timestamp and the LogAppendTime type."""

from __future__ import annotations

import time

from compat_tests.clients.base import Record

from .support import expressible


def test_log_append_time_topic(client, client_name, bootstrap, make_topic) -> None:
    topic = make_topic(configs={"message.timestamp.type": "LogAppendTime"})
    old = int(time.time() * 1000) - 86_400_000
    records = [Record(b"k", f"v{i}".encode()) for i in range(3)]
    if client_name != "kcat":  # kcat cannot set timestamps; the others send a day-old CreateTime
        records = [Record(r.key, r.value, timestamp_ms=old) for r in records]
    before = int(time.time() * 1000)
    with expressible(client_name):
        deliveries = client.produce(bootstrap, topic, records, compression="snappy")
    after = int(time.time() * 1000)
    got = client.consume(bootstrap, topic, 0, start="beginning", count=len(records))
    assert [r.value for r in got] == [r.value for r in records]
    for consumed in got:
        # A client that reports no type at all (sarama) is still held to the broker's timestamp below.
        if consumed.timestamp_type is not None:
            assert consumed.timestamp_type == "LogAppendTime"
        # The broker's clock at append time (slack for clock granularity), not the producer's.
        assert before - 1000 <= consumed.timestamp_ms <= after + 1000
    for delivery, consumed in zip(deliveries, got, strict=True):
        if delivery.timestamp_ms != -1:  # kcat cannot report it
            assert delivery.timestamp_ms == consumed.timestamp_ms
