"""File-descriptor exhaustion (issue 12, case 5).

Found by hostile-client testing: 10,000 connections against an open-file limit of 1,024 — new
connections were reset (libuv accepts and closes them when out of descriptors) and nothing was
logged. Now the broker raises its soft limit to the hard limit at start (and logs it), logs failed
accepts at most once per interval, keeps the waiting connections queued instead of resetting them,
and accepts them once descriptors are freed. Run against a real broker process whose soft and hard
limits are set low before it starts.
"""

from __future__ import annotations

import re
import socket
import struct
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer

from compat_tests.brokers import PyBroker, api_versions_probe, encode_request, read_response

LIMIT = 256
CONNECTIONS = 400

pytestmark = pytest.mark.timeout(180)


class LimitedBroker(PyBroker):
    """A pybroker started with RLIMIT_NOFILE soft = hard = ``limit`` (set in the child before exec)."""

    def __init__(self, workdir: Path, limit: int, soft: int | None = None) -> None:
        super().__init__(workdir)
        self.limit = limit
        self.soft = soft if soft is not None else limit

    def command(self) -> list[str]:
        setup = (
            "import os, resource, sys; "
            f"resource.setrlimit(resource.RLIMIT_NOFILE, ({self.soft}, {self.limit})); "
            "os.execv(sys.executable, [sys.executable] + sys.argv[1:])"
        )
        return [sys.executable, "-c", setup, *super().command()[1:]]


def wait_for_log(broker: PyBroker, pattern: str, timeout_s: float = 15) -> re.Match[str] | None:
    deadline = time.monotonic() + timeout_s
    while True:
        match = re.search(pattern, broker.log_text())
        if match or time.monotonic() > deadline:
            return match
        time.sleep(0.05)  # polling the broker's log for a condition, with a deadline


def api_versions_on(sock: socket.socket, correlation_id: int) -> None:
    sock.settimeout(20)
    sock.sendall(encode_request(18, 0, correlation_id))
    frame = read_response(sock)
    assert struct.unpack_from(">ih", frame) == (correlation_id, 0)


def round_trip(bootstrap: str, topic: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(5):
        producer.produce(topic, value=b"v%d" % i)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": topic, "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        values = []
        deadline = time.monotonic() + 30
        while len(values) < 5 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
        assert values == [b"v%d" % i for i in range(5)]
    finally:
        consumer.close()


def test_soft_limit_is_raised_to_the_hard_limit(tmp_path: Path) -> None:
    broker = LimitedBroker(tmp_path, limit=4096, soft=300)
    broker.start()
    try:
        assert wait_for_log(broker, r"open-file limit raised from 300 to 4096"), broker.log_tail()
        pid = broker.pid
        limits = Path(f"/proc/{pid}/limits").read_text()
        assert re.search(r"Max open files\s+4096\s+4096", limits), limits
    finally:
        broker.stop()


def test_running_out_of_descriptors_is_logged_and_survived(tmp_path: Path) -> None:
    broker = LimitedBroker(tmp_path, limit=LIMIT)
    bootstrap = broker.start()
    socks: list[socket.socket] = []
    try:
        assert wait_for_log(broker, rf"open-file limit {LIMIT} \(hard limit {LIMIT}\)"), broker.log_tail()
        for _ in range(CONNECTIONS):
            socks.append(socket.create_connection(("127.0.0.1", broker.port), timeout=10))
        line = wait_for_log(broker, r"cannot accept connections on \S+: \[Errno 24\] Too many open files")
        assert line, broker.log_tail()
        assert broker.process is not None and broker.process.poll() is None
        # Rate-limited: one line for the whole flood, not one per refused accept.
        time.sleep(1.0)  # let the retries happen; the count below is what they must not produce
        assert broker.log_text().count("cannot accept connections") <= 2, broker.log_tail()
        # Free descriptors: the connections that waited in the backlog were not reset and are served.
        for sock in socks[:300]:
            sock.close()
        late = socks[300:]
        socks = late
        for i, sock in enumerate(late):
            api_versions_on(sock, 1000 + i)
        assert wait_for_log(broker, r"accepting connections on \S+ again"), broker.log_tail()
        assert broker.log_text().count("accepting connections on") <= 2, broker.log_tail()
    finally:
        for sock in socks:
            sock.close()
    try:
        assert api_versions_probe("127.0.0.1", broker.port, timeout_s=10)[0] == 0
        round_trip(bootstrap, "after-fd-exhaustion")
        assert "internal error" not in broker.log_text()
    finally:
        broker.stop()
