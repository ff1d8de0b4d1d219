"""A minimal Kafka wire client for tests that need exact control over requests (raw sockets,
our own codec): one request, one response."""

from __future__ import annotations

import socket
import struct
from typing import Any

from compat_tests.brokers import read_response, split_bootstrap
from pybroker.protocol import codec
from pybroker.protocol.api import REQUESTS, RESPONSES


class WireClient:
    def __init__(self, bootstrap: str, client_id: bytes = b"pybroker-tests") -> None:
        # A cluster's bootstrap list: the first broker (requests for a partition must go to its leader).
        host, port = split_bootstrap(bootstrap.split(",")[0])
        self.sock = socket.create_connection((host, port), timeout=15)
        self.client_id = client_id
        self.correlation_id = 0

    def send(self, api_key: int, version: int, body: dict[str, Any]) -> None:
        self.correlation_id += 1
        head = (
            struct.pack(">hhih", api_key, version, self.correlation_id, len(self.client_id)) + self.client_id
        )
        if version in REQUESTS[api_key].flexible_versions:
            head += b"\x00"
        payload = head + codec.encode(REQUESTS[api_key], version, body)
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)

    def request(self, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        self.send(api_key, version, body)
        frame = read_response(self.sock)
        (correlation_id,) = struct.unpack_from(">i", frame, 0)
        assert correlation_id == self.correlation_id
        offset = 4 + (1 if version in RESPONSES[api_key].flexible_versions and api_key != 18 else 0)
        response, end = codec.decode(RESPONSES[api_key], version, frame, offset)
        assert end == len(frame)
        return response

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
