"""Bad input on the wire, through a raw socket: the broker must do what Apache Kafka 4.3.1 does
(close the connection, or answer with an error) and keep serving everyone else.

Each expectation below was measured against Apache Kafka 4.3.1 (``pytest compat_tests --broker
kafka -k bad_input`` checks it still holds) and is asserted unchanged against pybroker.  The
ledger shows these rows in the ``raw-socket`` column (no client library can send such bytes) and
lists what each broker did in its "Bad input" section.

After every case a *bystander* connection, opened and used before the bad bytes were sent, must
still be answered, and so must a brand-new connection: one bad peer costs only its own connection.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from compat_tests.brokers import encode_request, parse_api_versions_v0
from compat_tests.clients.base import Record
from compat_tests.clients.raw_socket import API_VERSIONS_KEY, RawConnection

# The ledger column of every row of this module (ledger_plugin.scenario_and_client reads it).
LEDGER_COLUMN = "raw-socket"

PRODUCE_KEY, FETCH_KEY, LIST_OFFSETS_KEY, METADATA_KEY = 0, 1, 2, 3
UNSUPPORTED_VERSION = 35
# Kafka's default socket.request.max.bytes (100 MiB); the scenarios run against default brokers.
SOCKET_REQUEST_MAX_BYTES = 104_857_600


@dataclass(frozen=True)
class Case:
    """Bytes to send, and what Apache Kafka 4.3.1 was measured to do about them."""

    id: str
    data: Callable[[dict[int, tuple[int, int]]], bytes]  # given the broker's ApiVersions ranges
    expected: str  # "closed" or "answered"


def _below_minimum(ranges: dict[int, tuple[int, int]]) -> bytes:
    # A version the broker itself says it no longer supports (Kafka 4 dropped Fetch v0-3 and
    # Produce v0-2, KIP-896): the first of these APIs whose advertised minimum is above 0.
    for key in (FETCH_KEY, PRODUCE_KEY, LIST_OFFSETS_KEY, METADATA_KEY):
        low, _high = ranges[key]
        if low > 0:
            return encode_request(key, low - 1, 31, body=b"\x00" * 32)
    pytest.fail(f"the broker supports every version of Produce/Fetch/ListOffsets/Metadata: {ranges}")


CASES = [
    # An api key no Kafka version has: the header cannot even be interpreted.
    Case("unknown-api-key", lambda _r: encode_request(29_999, 0, 42), "closed"),
    # Sixteen random bytes behind a plausible length: api key 0xdead.
    Case("garbage-frame", lambda _r: struct.pack(">i", 16) + bytes.fromhex("deadbeefcafebabe0011223344556677"), "closed"),
    # A frame too short to hold a request header (api key, version, correlation id).
    Case("frame-shorter-than-a-header", lambda _r: struct.pack(">i", 3) + b"\x00\x03\x00", "closed"),
    Case("empty-frame", lambda _r: struct.pack(">i", 0), "closed"),
    # Length prefixes: the broker refuses at once, without waiting for (or allocating) the bytes.
    Case("length-2GiB", lambda _r: struct.pack(">i", 2**31 - 1) + b"\x00" * 16, "closed"),
    Case(
        "length-above-socket.request.max.bytes",
        lambda _r: struct.pack(">i", SOCKET_REQUEST_MAX_BYTES + 1) + b"\x00" * 16,
        "closed",
    ),
    Case("negative-length", lambda _r: struct.pack(">i", -5) + b"\x00" * 8, "closed"),
    # A valid Metadata v1 header, then a body announcing 2^31-1 topics with three bytes present.
    Case("garbage-body", lambda _r: encode_request(METADATA_KEY, 1, 11, body=b"\x7f\xff\xff\xff\x00\x03ab"), "closed"),
    # One topic whose name claims 10 bytes, 2 present: the frame ends inside the body.
    Case("truncated-body", lambda _r: encode_request(METADATA_KEY, 1, 12, body=b"\x00\x00\x00\x01\x00\x0aab"), "closed"),
    # A supported api at a version above its maximum, and below its minimum.
    Case(
        "version-above-maximum",
        lambda _r: encode_request(METADATA_KEY, 99, 43, body=b"\x01\x00\x00", flexible_header=True),
        "closed",
    ),
    Case("version-below-minimum", _below_minimum, "closed"),
    # Produce v2: advertised (the range starts at 0 for librdkafka's sake, KAFKA-18659) but removed in
    # Kafka 4.0; a well-formed v2 body (acks, timeout, no topics) is still refused by closing.
    Case(
        "produce-v2-advertised-but-removed",
        lambda _r: encode_request(PRODUCE_KEY, 2, 44, body=struct.pack(">hii", 1, 1000, 0)),
        "closed",
    ),
    # ApiVersions at an unknown version, header v1: Kafka reads every version above its maximum
    # as flexible (header v2), so the missing tagged-field section is a parse error.
    Case("api-versions-too-new-with-header-v1", lambda _r: encode_request(API_VERSIONS_KEY, 127, 99), "closed"),
    # Bytes after a complete ApiVersions v0 request: Kafka ignores them and answers.
    Case("trailing-bytes-after-a-request", lambda _r: encode_request(API_VERSIONS_KEY, 0, 13, body=b"junk"), "answered"),
]  # fmt: skip


@pytest.fixture
def bystander(bootstrap: str) -> Iterator[RawConnection]:
    """A connection answered before the bad input; it must still be answered after it."""
    with RawConnection(bootstrap) as connection:
        error_code, _ = connection.api_versions()
        assert error_code == 0
        yield connection


def assert_still_serving(bootstrap: str, bystander: RawConnection) -> None:
    assert bystander.api_versions()[0] == 0, "the connection opened before the bad input"
    with RawConnection(bootstrap) as fresh:
        assert fresh.api_versions()[0] == 0, "a new connection"


def advertised(bootstrap: str) -> dict[int, tuple[int, int]]:
    with RawConnection(bootstrap) as connection:
        return connection.api_versions()[1]


CASE_BY_ID = {case.id: case for case in CASES}


@pytest.mark.parametrize("case_id", list(CASE_BY_ID))
def test_bad_frame(case_id: str, bootstrap: str, bystander: RawConnection, record_property) -> None:
    case = CASE_BY_ID[case_id]
    ranges = advertised(bootstrap)
    with RawConnection(bootstrap) as connection:
        started = time.monotonic()
        connection.send(case.data(ranges))
        seen = connection.observe(wait_s=10)
        record_property("observed", seen.describe())
        assert seen.kind == case.expected, f"{case.id}: {seen.describe()}, Apache Kafka: {case.expected}"
        if seen.kind == "closed":
            # Refused on sight, not after a timeout (a 2 GiB prefix is not waited for).
            assert time.monotonic() - started < 5
        else:
            correlation_id, error_code, answered = parse_api_versions_v0(seen.frame)
            assert (correlation_id, error_code, answered) == (13, 0, ranges)
    assert_still_serving(bootstrap, bystander)


def test_api_versions_too_new_gets_v0_unsupported_version(
    bootstrap: str, bystander: RawConnection, record_property
) -> None:
    """KIP-511: a client newer than the broker sends its own latest ApiVersions; the broker answers
    in v0 with UNSUPPORTED_VERSION and its ApiVersions range only, so the client can retry."""
    ranges = advertised(bootstrap)
    with RawConnection(bootstrap) as connection:
        connection.send(encode_request(API_VERSIONS_KEY, 127, 99, body=b"\x00", flexible_header=True))
        seen = connection.observe()
        record_property("observed", seen.describe())
        assert seen.kind == "answered", seen.describe()
        correlation_id, error_code, answered = parse_api_versions_v0(seen.frame)
        assert (correlation_id, error_code) == (99, UNSUPPORTED_VERSION)
        assert answered == {API_VERSIONS_KEY: ranges[API_VERSIONS_KEY]}
        # v0 layout exactly: correlation id, error code, a one-entry array, no throttle time.
        assert len(seen.frame) == 4 + 2 + 4 + 6
        # The connection stays usable: the client retries at a version the broker named.
        assert connection.api_versions() == (0, ranges)
    assert_still_serving(bootstrap, bystander)


def _produce_and_consume_meanwhile(admin, bootstrap: str, topic: str) -> None:
    """Another client (a real library) works normally while the odd connection is open."""
    records = [Record(f"k{i}".encode(), f"v{i}".encode()) for i in range(10)]
    deliveries = admin.produce(bootstrap, topic, records)
    assert [d.offset for d in deliveries] == list(range(10))
    got = admin.consume(bootstrap, topic, 0, start="beginning", count=10, timeout_s=30)
    assert [(r.key, r.value) for r in got] == [(r.key, r.value) for r in records]


def test_half_sent_frame_held_open(
    bootstrap: str, bystander: RawConnection, admin, make_topic, record_property
) -> None:
    topic = make_topic()
    with RawConnection(bootstrap) as slow:
        frame = encode_request(API_VERSIONS_KEY, 0, 5)
        slow.send(frame[:7])  # the size prefix and part of the header, then nothing for a while
        _produce_and_consume_meanwhile(admin, bootstrap, topic)
        assert_still_serving(bootstrap, bystander)
        held = slow.observe(wait_s=2)
        assert held.kind == "silent", f"while the frame was incomplete: {held.describe()}"
        slow.send(frame[7:])  # the rest arrives late and is answered like any request
        seen = slow.observe()
        record_property("observed", f"held open; completed frame {seen.describe()}")
        assert seen.kind == "answered", seen.describe()
        assert parse_api_versions_v0(seen.frame)[:2] == (5, 0)


def test_client_that_sends_nothing(
    bootstrap: str, bystander: RawConnection, admin, make_topic, record_property
) -> None:
    topic = make_topic()
    with RawConnection(bootstrap) as idle:
        _produce_and_consume_meanwhile(admin, bootstrap, topic)
        # Kafka keeps an idle connection for connections.max.idle.ms (10 minutes by default).
        seen = idle.observe(wait_s=3)
        record_property("observed", seen.describe())
        assert seen.kind == "silent", seen.describe()
        assert idle.api_versions()[0] == 0, "the idle connection, when it finally speaks"
    assert_still_serving(bootstrap, bystander)
