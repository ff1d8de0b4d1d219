"""The security issue's connection flood: 1,000 connections each announcing a 100 MiB request and
sending nothing, then 10,000 connections opened at once.  The broker keeps serving a normal client
(produce and consume through librdkafka), its RSS grows by at most 64 MiB, nothing crashes."""

from __future__ import annotations

import errno
import logging
import resource
import socket
import struct
import time
from pathlib import Path

import pytest

from compat_tests.brokers import PyBroker
from tests.integration.test_memory_pool import produce_and_consume, status_kib

pytestmark = pytest.mark.timeout(300)
log = logging.getLogger(__name__)
MiB = 1024 * 1024
ANNOUNCERS = 1_000
FLOOD = 10_000
RSS_GROWTH_LIMIT = 64 * MiB


def _open_many(port: int, count: int) -> list[socket.socket]:
    """Non-blocking connects, all started before any completes (the kernel's backlog holds them)."""
    socks = []
    for _ in range(count):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        err = s.connect_ex(("127.0.0.1", port))
        if err not in (0, errno.EINPROGRESS):
            s.close()
            continue
        socks.append(s)
    return socks


def test_announced_requests_and_a_connection_flood_do_not_starve_a_normal_client(tmp_path: Path) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = ANNOUNCERS + FLOOD + 512
    assert hard >= needed, f"this test needs {needed} descriptors; the hard limit is {hard}"
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, needed), hard))
    broker = PyBroker(tmp_path)
    broker.start()
    held: list[socket.socket] = []
    try:
        pid = broker.pid
        port = int(broker.bootstrap.rsplit(":", 1)[1])
        produce_and_consume(broker.bootstrap, "warm-up", b"w" * 1000, 10)
        idle_kib = status_kib(pid, "VmRSS")
        announcers = _open_many(port, ANNOUNCERS)
        held.extend(announcers)
        time.sleep(0.5)  # let the connects finish (the flood below is what must be survived)
        sent = 0
        for s in announcers:
            try:
                sent += s.send(struct.pack(">i", 100 * MiB)) > 0
            except OSError:
                pass
        assert sent >= ANNOUNCERS * 0.95, f"only {sent} of {ANNOUNCERS} announcers connected"
        held.extend(_open_many(port, FLOOD))
        started = time.monotonic()
        produce_and_consume(broker.bootstrap, "during-flood", b"n" * 1000, 20)
        served_s = time.monotonic() - started
        peak_kib = max(status_kib(pid, "VmHWM"), status_kib(pid, "VmRSS"))
        grown = (peak_kib - idle_kib) * 1024
        log.info(
            "announcers %d, flood %d: normal client served in %.1f s; RSS idle %d KiB, peak %d KiB (+%.1f MiB)",
            sent, FLOOD, served_s, idle_kib, peak_kib, grown / MiB,
        )
        print(f"flood: served in {served_s:.1f} s, RSS +{grown / MiB:.1f} MiB")  # noqa: T201 - the report's number
        assert grown <= RSS_GROWTH_LIMIT, f"RSS grew by {grown / MiB:.1f} MiB"
        assert broker.process.poll() is None
    finally:
        for s in held:
            s.close()
        broker.stop()
