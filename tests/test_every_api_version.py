"""Every (api key, version) the broker advertises is sent once, over a real socket, to a real broker
process, and must come back as a well-formed response with the right correlation id."""

from __future__ import annotations

import socket
import struct

import pytest

from compat_tests.brokers import PyBroker, read_response, split_bootstrap
from pybroker.apis import load_all
from pybroker.protocol import codec
from pybroker.protocol.api import REQUESTS, RESPONSES

# Minimal bodies where an all-defaults request would not get an answer or would be rejected as garbage.
BODIES = {
    0: {"acks": 1, "timeout_ms": 1000, "topic_data": []},  # acks=0 gets no response by design
    1: {"max_wait_ms": 0, "min_bytes": 0, "topics": []},
    18: {"client_software_name": "pybroker-tests", "client_software_version": "1.0"},
    # DescribeAcls: an UNKNOWN (0) filter element is unparseable for Kafka (connection closed); ANY is 1.
    29: {"resource_type_filter": 1, "pattern_type_filter": 1, "operation": 1, "permission_type": 1},
}


def _request_header(api_key: int, version: int, correlation_id: int) -> bytes:
    client_id = b"every-api-version"
    head = struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id
    if REQUESTS[api_key].supports(version) and version in REQUESTS[api_key].flexible_versions:
        head += b"\x00"  # empty tagged-field section of request header v2
    return head


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory):
    with PyBroker(tmp_path_factory.mktemp("every-api")) as broker:
        yield broker.bootstrap


def advertised() -> list[tuple[int, int]]:
    """Every advertised (api key, version) the broker implements."""
    from pybroker.apis.api_versions import advertised_api_keys

    handlers = load_all()
    return [
        (k["api_key"], v)
        for k in advertised_api_keys()
        for v in range(k["min_version"], k["max_version"] + 1)
        if v >= handlers[k["api_key"]].min_version
    ]


def advertised_only() -> list[tuple[int, int]]:
    """Versions advertised but not implemented, as Kafka 4 does for Produce v0-2 (KAFKA-18659)."""
    handlers = load_all()
    return [
        (h.api_key, v)
        for h in handlers.values()
        if h.advertised_min is not None
        for v in range(h.advertised_min, h.min_version)
    ]


def test_produce_v0_to_v2_are_advertised_but_not_implemented():
    assert advertised_only() == [(0, 0), (0, 1), (0, 2)]


@pytest.mark.parametrize("api_key,version", advertised_only())
def test_advertised_but_removed_versions_close_the_connection(bootstrap, api_key, version):
    """Kafka's Processor refuses a version its ApiKeys no longer has (UnsupportedVersionException) and
    closes the connection; a v2 Produce body is well-formed, so nothing but the version is at fault."""
    host, port = split_bootstrap(bootstrap)
    body = struct.pack(">hii", 1, 1000, 0)  # acks, timeout, no topics: the v0-2 layout
    payload = _request_header(api_key, version, 7) + body
    with socket.create_connection((host, port), timeout=10) as s:
        s.sendall(struct.pack(">i", len(payload)) + payload)
        try:
            data = s.recv(4)
        except ConnectionResetError:
            data = b""
        assert data == b"", f"answered instead of closing: {data!r}"


@pytest.mark.parametrize("api_key,version", advertised())
def test_every_advertised_version_answers(bootstrap, api_key, version):
    host, port = split_bootstrap(bootstrap)
    body = codec.encode(REQUESTS[api_key], version, BODIES.get(api_key, {}))
    correlation_id = 1000 + api_key * 100 + version
    payload = _request_header(api_key, version, correlation_id) + body
    with socket.create_connection((host, port), timeout=10) as s:
        s.sendall(struct.pack(">i", len(payload)) + payload)
        frame = read_response(s)
    (got_correlation,) = struct.unpack_from(">i", frame, 0)
    assert got_correlation == correlation_id
    flexible_header = version in RESPONSES[api_key].flexible_versions and api_key != 18
    offset = 4 + (1 if flexible_header else 0)
    response, end = codec.decode(RESPONSES[api_key], version, frame, offset)
    assert end == len(frame), "response has trailing bytes"
    assert isinstance(response, dict)
