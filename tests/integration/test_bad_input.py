"""Malformed and hostile input: the offending connection is closed, everyone else is still served."""

from __future__ import annotations

import socket
import struct
import time

import pytest

from compat_tests.brokers import (
    API_VERSIONS_KEY,
    api_versions_probe,
    encode_request,
    parse_api_versions_v0,
    read_response,
    split_bootstrap,
)

from .conftest import SOCKET_REQUEST_MAX_BYTES, against_kafka

METADATA_KEY = 3
UNSUPPORTED_VERSION = 35


def connect(broker) -> socket.socket:
    sock = socket.create_connection(split_bootstrap(broker.bootstrap), timeout=10)
    return sock


def assert_closed_by_broker(sock: socket.socket, timeout_s: float = 10.0) -> None:
    """The broker closes: recv sees EOF (or a reset) before the deadline, and never a response."""
    sock.settimeout(timeout_s)
    try:
        data = sock.recv(65536)
    except ConnectionResetError:
        return
    except TimeoutError:
        pytest.fail(f"connection still open after {timeout_s}s")
    assert data == b"", f"expected the connection to be closed, got {len(data)} bytes"


def assert_still_serving(broker) -> None:
    host, port = split_bootstrap(broker.bootstrap)
    error_code, ranges = api_versions_probe(host, port, timeout_s=5)
    assert error_code == 0
    assert API_VERSIONS_KEY in ranges


def test_negative_frame_length_closes_connection(shared_broker) -> None:
    with connect(shared_broker) as sock:
        sock.sendall(struct.pack(">i", -5) + b"\x00" * 8)
        assert_closed_by_broker(sock)
    assert_still_serving(shared_broker)


def test_frame_above_socket_request_max_bytes_closes_connection(shared_broker) -> None:
    with connect(shared_broker) as sock:
        # Only the size prefix and a few bytes: the broker must refuse before reading (or allocating) it all.
        sock.sendall(struct.pack(">i", SOCKET_REQUEST_MAX_BYTES * 4) + b"\x00" * 16)
        assert_closed_by_broker(sock)
    assert_still_serving(shared_broker)


def _garbage_after_header() -> bytes:
    # A valid Metadata v1 header, then bytes that cannot be a Metadata body: 2^31-1 topics announced,
    # three bytes present.  (A negative count would be a valid null = "all topics".)
    return encode_request(METADATA_KEY, 1, correlation_id=11, body=b"\x7f\xff\xff\xff\x00\x03ab")


def test_garbage_after_valid_header_closes_connection(shared_broker) -> None:
    with connect(shared_broker) as sock:
        sock.sendall(_garbage_after_header())
        assert_closed_by_broker(sock)
    assert_still_serving(shared_broker)


def test_garbage_close_is_logged_with_the_peer(shared_broker) -> None:
    if against_kafka():
        pytest.skip("pybroker-specific: checks pybroker's own log line")
    with connect(shared_broker) as sock:
        peer = "{}:{}".format(*sock.getsockname())
        sock.sendall(_garbage_after_header())
        assert_closed_by_broker(sock)
    deadline = time.monotonic() + 10
    while peer not in shared_broker.log_text():
        assert time.monotonic() < deadline, f"no log line naming {peer}; tail:\n{shared_broker.log_tail()}"
        time.sleep(0.1)  # the broker writes the line asynchronously; bounded by the deadline


def test_unknown_api_key(shared_broker) -> None:
    """Kafka cannot parse a request of an unknown API: it closes the connection (or answers an error)."""
    with connect(shared_broker) as sock:
        sock.sendall(encode_request(29_999, 0, correlation_id=42))
        sock.settimeout(10)
        try:
            first = sock.recv(4)
        except ConnectionResetError:
            first = b""
        if first:  # an answer instead of a close must at least be for this request, with an error
            (size,) = struct.unpack(">i", first)
            body = first[4:] + sock.recv(size)
            (correlation_id,) = struct.unpack_from(">i", body, 0)
            assert correlation_id == 42
            assert struct.pack(">h", UNSUPPORTED_VERSION) in body
    assert_still_serving(shared_broker)


def test_too_new_api_versions_gets_v0_unsupported_version(shared_broker) -> None:
    with connect(shared_broker) as sock:
        # As a client would send a flexible version: header v2 and an (empty) tagged-field body.
        sock.sendall(
            encode_request(API_VERSIONS_KEY, 127, correlation_id=99, body=b"\x00", flexible_header=True)
        )
        frame = read_response(sock)
    correlation_id, error_code, ranges = parse_api_versions_v0(frame)
    assert correlation_id == 99
    assert error_code == UNSUPPORTED_VERSION
    assert list(ranges) == [API_VERSIONS_KEY]
    min_version, max_version = ranges[API_VERSIONS_KEY]
    assert min_version == 0 and max_version >= 3
    # v0 body: header (4) + error (2) + array length (4) + one entry (6), nothing else.
    assert len(frame) == 16
    assert_still_serving(shared_broker)


def test_half_sent_frame_does_not_stall_other_clients(shared_broker) -> None:
    with connect(shared_broker) as slow:
        frame = encode_request(API_VERSIONS_KEY, 0, correlation_id=5)
        slow.sendall(frame[:7])  # size prefix and part of the header, then nothing
        started = time.monotonic()
        assert_still_serving(shared_broker)
        assert time.monotonic() - started < 5
        # The slow client finishes its frame late and is still answered correctly.
        slow.sendall(frame[7:])
        correlation_id, error_code, _ = parse_api_versions_v0(read_response(slow))
        assert (correlation_id, error_code) == (5, 0)
