"""The fault proxy on its own (no Kafka): forwarding, a cut that black-holes (silence, not a reset),
a heal that closes the cut connections, and a cut node's own outgoing connections found through /proc."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from compat_tests.brokers import free_port
from compat_tests.reference.fault_proxy import FaultProxies, Route


class EchoServer(threading.Thread):
    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]

    def run(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    @staticmethod
    def _echo(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(4096):
                conn.sendall(data)


def echo_round_trip(sock: socket.socket, payload: bytes = b"ping") -> bytes | None:
    """What comes back within 1 s; None on silence, b"" when the proxy closed the connection."""
    sock.sendall(payload)
    sock.settimeout(1.0)
    try:
        return sock.recv(4096)
    except TimeoutError:
        return None
    except ConnectionResetError:
        return b""


@pytest.fixture
def proxied() -> Iterator[tuple[FaultProxies, list[int]]]:
    servers = [EchoServer(), EchoServer()]
    for server in servers:
        server.start()
    listen = [free_port(), free_port()]
    proxies = FaultProxies([Route(1, listen[0], servers[0].port), Route(2, listen[1], servers[1].port)])
    proxies.start()
    try:
        yield proxies, listen
    finally:
        proxies.stop()
        for server in servers:
            server.sock.close()


def test_cut_black_holes_then_heal_closes(proxied: tuple[FaultProxies, list[int]]) -> None:
    proxies, (port1, port2) = proxied
    to_node1 = socket.create_connection(("127.0.0.1", port1))
    to_node2 = socket.create_connection(("127.0.0.1", port2))
    assert echo_round_trip(to_node1) == b"ping"
    proxies.isolate(1)
    assert echo_round_trip(to_node1) is None  # silence, not a reset: peers must time out
    assert echo_round_trip(to_node2) == b"ping"  # a client's link to another node is untouched
    late = socket.create_connection(("127.0.0.1", port1))  # accepted, then left hanging
    assert echo_round_trip(late) is None
    proxies.heal(1)
    assert echo_round_trip(to_node1, b"again") == b""  # its stream had a gap: closed on heal
    fresh = socket.create_connection(("127.0.0.1", port1))
    assert echo_round_trip(fresh) == b"ping"
    assert proxies.stats()["cut"] >= 1
    for sock in (to_node1, to_node2, late, fresh):
        sock.close()


def test_cut_node_outgoing_connections_are_cut_too(proxied: tuple[FaultProxies, list[int]]) -> None:
    """A process registered as node 1 connects to node 2's proxy: isolating node 1 cuts that link."""
    proxies, (_, port2) = proxied
    program = (
        "import socket, sys\n"
        f"s = socket.create_connection(('127.0.0.1', {port2}))\n"
        "s.settimeout(1.0)\n"
        "for line in sys.stdin:\n"
        "    s.sendall(b'x')\n"
        "    try:\n"
        "        print(s.recv(10).decode() or 'closed', flush=True)\n"
        "    except TimeoutError:\n"
        "        print('silence', flush=True)\n"
    )
    node1 = subprocess.Popen(
        [sys.executable, "-c", program], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert node1.stdin is not None and node1.stdout is not None

        def ask() -> str:
            node1.stdin.write("go\n")
            node1.stdin.flush()
            return node1.stdout.readline().strip()

        proxies.set_pids({1: node1.pid})
        assert ask() == "x"
        client = socket.create_connection(("127.0.0.1", port2))
        proxies.isolate(1)
        assert ask() == "silence"
        assert echo_round_trip(client) == b"ping"  # not node 1's: still flows
        client.close()
    finally:
        node1.kill()
        node1.wait(10)
