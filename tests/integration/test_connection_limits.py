"""Connection limits against a real pybroker process over raw sockets: max.connections.per.ip refuses
the (N+1)th connection of an address while another address (127.0.0.2 on loopback) still connects,
its override applies, and connections.max.idle.ms closes a silent connection."""

from __future__ import annotations

import socket
import struct
import time

import pytest

from compat_tests.brokers import PyBroker

PER_IP = 3
OVERRIDE = 5
IDLE_MS = 1500


def _api_versions(sock: socket.socket, correlation_id: int = 7) -> bool:
    """True when the broker answers an ApiVersions v0 request on ``sock``."""
    client = b"limits"
    body = struct.pack(">hhih", 18, 0, correlation_id, len(client)) + client
    sock.sendall(struct.pack(">i", len(body)) + body)
    head = b""
    while len(head) < 8:
        chunk = sock.recv(8 - len(head))
        if not chunk:
            return False
        head += chunk
    size, got = struct.unpack(">ii", head)
    remaining = size - 4
    while remaining > 0:  # read the whole response, so that the next recv sees only what follows
        chunk = sock.recv(remaining)
        if not chunk:
            return False
        remaining -= len(chunk)
    return got == correlation_id


def _connect(port: int, source: str = "127.0.0.1") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=15, source_address=(source, 0))
    return sock


def _served(port: int, source: str = "127.0.0.1") -> socket.socket:
    """A connection the broker serves, retried for a while: a connection closed just before (the
    fixture's readiness probe) holds its slot until the broker has seen it close."""
    deadline = time.monotonic() + 10
    while True:
        sock = _connect(port, source)
        try:
            if _api_versions(sock):
                return sock
        except OSError:
            pass
        sock.close()
        assert time.monotonic() < deadline, f"no connection from {source} was served"
        time.sleep(0.05)


def _closed_by_peer(sock: socket.socket, timeout_s: float) -> bool:
    sock.settimeout(timeout_s)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


@pytest.fixture
def limited_broker(tmp_path, request):
    # The idle limit only where it is tested: on a loaded machine a held connection may wait longer.
    idle = {"connections.max.idle.ms": str(IDLE_MS)} if "idle" in request.node.name else {}
    broker = PyBroker(
        tmp_path,
        overrides={
            "max.connections.per.ip": str(PER_IP),
            "max.connections.per.ip.overrides": f"127.0.0.2:{OVERRIDE}",
            **idle,
        },
    )
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def test_per_ip_limit_refuses_the_next_connection_and_others_still_connect(limited_broker) -> None:
    port = int(limited_broker.bootstrap.rsplit(":", 1)[1])
    held = [_served(port) for _ in range(PER_IP)]
    try:
        extra = _connect(port)  # the TCP handshake completes in the backlog; the broker then closes it
        assert _closed_by_peer(extra, 10), "the (N+1)th connection from 127.0.0.1 was not closed"
        extra.close()
        others = [_served(port, "127.0.0.2") for _ in range(OVERRIDE)]  # the override: 5, not 3
        sixth = _connect(port, "127.0.0.2")
        assert _closed_by_peer(sixth, 10)
        sixth.close()
        for s in others:
            s.close()
        # Closing one frees its slot: a new connection from 127.0.0.1 is served again.
        held.pop().close()
        held.append(_served(port))
    finally:
        for s in held:
            s.close()


def test_idle_connection_is_closed(limited_broker) -> None:
    port = int(limited_broker.bootstrap.rsplit(":", 1)[1])
    sock = _connect(port)
    try:
        assert _api_versions(sock)
        started = time.monotonic()
        assert _closed_by_peer(sock, 20), "an idle connection was kept open"
        assert time.monotonic() - started >= IDLE_MS / 1000 * 0.9
    finally:
        sock.close()


def test_connection_creation_rate_delays_accepts_without_refusing(tmp_path) -> None:
    """KIP-612: over max.connection.creation.rate the broker accepts later; nothing is refused."""
    rate = 10
    broker = PyBroker(
        tmp_path,
        overrides={
            "max.connection.creation.rate": str(rate),
            "quota.window.num": "2",
            "quota.window.size.seconds": "1",
        },
    )
    broker.start()
    socks: list[socket.socket] = []
    try:
        port = int(broker.bootstrap.rsplit(":", 1)[1])
        count = 4 * rate
        started = time.monotonic()
        socks = [_connect(port) for _ in range(count)]  # complete in the listen backlog
        for i, s in enumerate(socks):
            assert _api_versions(s, 100 + i), f"connection {i} was refused"
        elapsed = time.monotonic() - started
        # A burst of one window (10) at once, then 10 a second: about 3 s for 40; far longer than
        # an unthrottled accept of 40 connections.
        assert elapsed >= 2.0, f"{count} connections accepted in {elapsed:.2f} s at {rate}/s"
    finally:
        for s in socks:
            s.close()
        broker.stop()
