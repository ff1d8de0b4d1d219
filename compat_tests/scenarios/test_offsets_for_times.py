"""Offsets by timestamp: the first offset whose timestamp is >= the one asked for; None past the end."""

from __future__ import annotations

import time

from compat_tests.clients.base import Record

from .support import expressible

COUNT = 10


def test_offset_for_time(client, client_name, bootstrap, make_topic, admin) -> None:
    topic = make_topic()
    base = int(time.time() * 1000) - 600_000
    records = [Record(f"k{i}".encode(), f"v{i}".encode(), timestamp_ms=base + i * 100) for i in range(COUNT)]
    admin.produce(bootstrap, topic, records, compression="gzip")
    with expressible(client_name):
        assert client.offset_for_time(bootstrap, topic, 0, base - 1) == 0
        assert client.offset_for_time(bootstrap, topic, 0, base) == 0
        assert client.offset_for_time(bootstrap, topic, 0, base + 250) == 3  # between 200 and 300
        assert client.offset_for_time(bootstrap, topic, 0, base + 300) == 3
        assert client.offset_for_time(bootstrap, topic, 0, base + (COUNT - 1) * 100) == COUNT - 1
        assert client.offset_for_time(bootstrap, topic, 0, base + (COUNT - 1) * 100 + 1) is None
