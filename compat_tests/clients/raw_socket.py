"""The raw-socket "client": bytes written to a TCP connection by hand, no client library.

It is what the bad-input scenarios speak (compat_tests/scenarios/test_bad_input.py): a library
never sends a negative length prefix or half a frame, so those cases need a client that can.
It is not one of the library adapters in registry.py and has no produce/consume; it only sends
bytes and reports what the broker did about them, as an ``Observation``.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass
from typing import Literal

from compat_tests.brokers import encode_request, parse_api_versions_v0, split_bootstrap

API_VERSIONS_KEY = 18
_SIZE = struct.Struct(">i")


@dataclass(frozen=True)
class Observation:
    """What the broker did after the bytes were sent: closed the connection, answered one frame
    (``frame``: the response without its size prefix), or neither before the wait ran out."""

    kind: Literal["closed", "answered", "silent"]
    frame: bytes = b""

    def describe(self) -> str:
        if self.kind != "answered":
            return {"closed": "connection closed", "silent": "no answer, connection open"}[self.kind]
        (correlation_id,) = struct.unpack_from(">i", self.frame, 0)
        return f"answered (correlation id {correlation_id}, {len(self.frame)} bytes)"


class RawConnection:
    """One TCP connection to the broker, written to byte by byte."""

    def __init__(self, bootstrap: str, timeout_s: float = 10.0) -> None:
        self.sock = socket.create_connection(split_bootstrap(bootstrap.split(",")[0]), timeout=timeout_s)
        self._buffer = b""
        self._correlation_id = 1000

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def observe(self, wait_s: float = 10.0) -> Observation:
        """Read until one whole response frame, the end of the stream, or ``wait_s`` of quiet."""
        self.sock.settimeout(wait_s)
        while True:
            if len(self._buffer) >= 4:
                (size,) = _SIZE.unpack_from(self._buffer, 0)
                if len(self._buffer) >= 4 + size:
                    frame, self._buffer = self._buffer[4 : 4 + size], self._buffer[4 + size :]
                    return Observation("answered", frame)
            try:
                chunk = self.sock.recv(65536)
            except (ConnectionResetError, BrokenPipeError):
                return Observation("closed")
            except TimeoutError:
                return Observation("silent")
            if not chunk:
                return Observation("closed")
            self._buffer += chunk

    def api_versions(self) -> tuple[int, dict[int, tuple[int, int]]]:
        """ApiVersions v0 on this connection: (error code, {api key: (min, max)}); raises if not answered."""
        self._correlation_id += 1
        self.send(encode_request(API_VERSIONS_KEY, 0, self._correlation_id, client_id=b"compat-raw-socket"))
        seen = self.observe()
        if seen.kind != "answered":
            raise ConnectionError(f"ApiVersions v0 not answered: {seen.describe()}")
        correlation_id, error_code, ranges = parse_api_versions_v0(seen.frame)
        if correlation_id != self._correlation_id:
            raise ConnectionError(f"ApiVersions answered correlation id {correlation_id}")
        return error_code, ranges

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
