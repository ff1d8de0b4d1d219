"""queued.max.request.bytes: the broker-wide memory pool for request bytes (issue 12, case 3).

Found by hostile-client testing: 20 connections each sending 64 MiB of a 100 MiB request and then
stalling took the broker's RSS from ~40 MB to 1.35 GB. Kafka bounds this with its memory pool: a
request's buffer is allocated when its size prefix is read, and a connection whose request cannot be
allocated is muted until memory is released. Here the same attack against a real broker process
must grow its peak RSS by at most queued.max.request.bytes + 64 MiB, while a normal client is still
served; after the attackers go away the memory is back and large requests are served again.
"""

from __future__ import annotations

import logging
import select
import socket
import struct
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer

from compat_tests.brokers import PyBroker, api_versions_probe

MiB = 1024 * 1024
REQUEST_SIZE = 100 * MiB  # the declared size: socket.request.max.bytes's default
SENT_PER_CONNECTION = 64 * MiB
CONNECTIONS = 20
POOL = 100 * MiB  # pybroker's default queued.max.request.bytes (= socket.request.max.bytes)

pytestmark = pytest.mark.timeout(240)
log = logging.getLogger(__name__)


def status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def stall_connections(port: int) -> tuple[list[socket.socket], int]:
    """Open the connections, each sending a 100 MiB size prefix and then up to 64 MiB of it, until
    the broker stops reading (no progress for 2 s) or all is sent; returns them and bytes sent."""
    socks = []
    for _ in range(CONNECTIONS):
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        sock.setblocking(False)
        socks.append(sock)
    chunk = memoryview(bytes(MiB))
    remaining = {s: SENT_PER_CONNECTION for s in socks}
    for s in socks:
        s.send(struct.pack(">i", REQUEST_SIZE))
    total = 0
    last_progress = time.monotonic()
    while remaining and time.monotonic() - last_progress < 2.0:
        _, writable, _ = select.select([], list(remaining), [], 0.2)
        for s in writable:
            try:
                n = s.send(chunk[: min(len(chunk), remaining[s])])
            except BlockingIOError:
                continue
            total += n
            last_progress = time.monotonic()
            remaining[s] -= n
            if not remaining[s]:
                del remaining[s]
    return socks, total


def produce_and_consume(bootstrap: str, topic: str, value: bytes, count: int) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "message.max.bytes": 8 * MiB, "linger.ms": 0}
    )
    errors = []
    for i in range(count):
        producer.produce(topic, value=value, key=b"%d" % i, on_delivery=lambda e, m: e and errors.append(e))
    assert producer.flush(30) == 0 and not errors, errors
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{topic}",
            "auto.offset.reset": "earliest",
            "fetch.max.bytes": 16 * MiB,
            "max.partition.fetch.bytes": 16 * MiB,
        }
    )
    try:
        consumer.subscribe([topic])
        got = 0
        deadline = time.monotonic() + 30
        while got < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                assert message.value() == value
                got += 1
        assert got == count
    finally:
        consumer.close()


def test_stalled_large_requests_are_bounded_by_the_memory_pool(tmp_path: Path) -> None:
    broker = PyBroker(tmp_path, overrides={"message.max.bytes": str(8 * MiB)})
    bootstrap = broker.start()
    socks: list[socket.socket] = []
    try:
        pid = broker.pid
        assert pid is not None
        produce_and_consume(bootstrap, "warm-up", b"w" * 1000, 10)
        idle_kib = status_kib(pid, "VmRSS")
        socks, sent = stall_connections(broker.port)
        # The broker muted most of them: far less than 20 x 64 MiB went through.
        assert sent < POOL + 64 * MiB, sent
        # A normal client is served meanwhile: small requests arrive whole and are handled at once.
        started = time.monotonic()
        assert api_versions_probe("127.0.0.1", broker.port, timeout_s=5)[0] == 0
        produce_and_consume(bootstrap, "during-attack", b"n" * 1000, 20)
        assert time.monotonic() - started < 60
        peak_kib = status_kib(pid, "VmHWM")
        grown = (peak_kib - idle_kib) * 1024
        log.info("sent %.0f MiB; idle RSS %d KiB, peak %d KiB", sent / MiB, idle_kib, peak_kib)
        assert grown <= POOL + 64 * MiB, f"peak RSS grew by {grown / MiB:.0f} MiB (idle {idle_kib} KiB)"
        assert broker.process is not None and broker.process.poll() is None
    finally:
        for s in socks:
            s.close()
    try:
        # The attackers' memory is released: a large request (4 MiB records) is served again.
        produce_and_consume(bootstrap, "after-attack", b"L" * (4 * MiB), 3)
        assert "internal error" not in broker.log_text()
    finally:
        broker.stop()
