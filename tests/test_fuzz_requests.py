"""Hostile and malformed requests against one running pybroker.

For every API the broker advertises: valid headers followed by random bytes, by randomly valued but
well-formed bodies, and by captured client requests with a few bytes changed; truncated captured
requests; absurd length prefixes; a request written one byte at a time; and a half-sent frame held open
while a real client does a produce/fetch round trip. Afterwards the broker must still be alive and
serving, and must have logged every connection it closed with the peer and the reason.

Each fuzz frame is followed on its connection by an ApiVersions v0 probe. The broker may answer the
fuzz frame (the answer must then decode at that version) or close the connection (Kafka's reaction to
an unparseable request); it must never answer with something undecodable or leave the probe hanging
(except behind a Fetch, whose long poll may legitimately hold the connection). Randomness is seeded.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import random
import re
import socket
import struct
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from compat_tests.brokers import PyBroker, api_versions_probe, read_response
from pybroker.protocol.api import API_NAMES, REQUEST_HEADER, REQUESTS, RESPONSE_HEADER, RESPONSES
from pybroker.protocol.codec import (
    decode,
    decode_request_header,
    encode,
    request_header_version,
    response_header_version,
)

SEED = 20261122
SOCKET_REQUEST_MAX_BYTES = 1_048_576
API_VERSIONS, FETCH = 18, 1
PROBE_CORRELATION_ID = 0x7E57
FUZZ_CORRELATION_ID = 4242
EXCHANGE_TIMEOUT_S = 3.0
CONCURRENCY = 24
GOLDEN_DIR = Path(__file__).resolve().parent / "protocol" / "golden"
# Kafka's legal topic names (Topic.LEGAL_CHARS, at most 249 characters).
LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")

pytestmark = pytest.mark.timeout(120)


def _load_message_factory() -> type:
    path = Path(__file__).resolve().parent / "protocol" / "protocol_samples.py"
    spec = importlib.util.spec_from_file_location("protocol_samples_for_fuzz", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.MessageFactory


# --------------------------------------------------------------------------------------------------
# Frames


def request_header(api_key: int, version: int, correlation_id: int, client_id: str = "fuzz") -> bytes:
    fields = {
        "request_api_key": api_key,
        "request_api_version": version,
        "correlation_id": correlation_id,
        "client_id": client_id,
    }
    return encode(REQUEST_HEADER, request_header_version(api_key, version), fields)


def sized(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def probe_frame() -> bytes:
    return sized(request_header(API_VERSIONS, 0, PROBE_CORRELATION_ID))


def golden_requests() -> dict[tuple[int, int], bytes]:
    """One captured client request per (api key, version), without its size prefix."""
    index = json.loads((GOLDEN_DIR / "index.json").read_text())
    frames: dict[tuple[int, int], bytes] = {}
    for entry in index["requests"]:
        frames.setdefault((entry["api_key"], entry["api_version"]), (GOLDEN_DIR / entry["file"]).read_bytes())
    return frames


@dataclass(frozen=True)
class Case:
    kind: str
    api_key: int
    version: int
    payload: bytes  # everything written, size prefixes included
    expects_probe: bool = True  # False when the payload is deliberately incomplete

    @property
    def name(self) -> str:
        return f"{self.kind} {API_NAMES.get(self.api_key, self.api_key)} v{self.version}"


@dataclass(frozen=True)
class Outcome:
    case: Case
    result: str  # "answered" (probe answered), "closed", "timeout", "wrong"
    peer: str  # our end of the connection, as the broker logs it
    detail: str = ""


def _check_fuzz_answer(case: Case, frame: bytes) -> str:
    """'' if ``frame`` is a decodable response to the fuzz request, else what is wrong with it."""
    versions = [case.version] + ([0] if case.api_key == API_VERSIONS else [])  # KIP-511 v0 fallback
    errors = []
    for version in versions:
        try:
            _, offset = decode(RESPONSE_HEADER, response_header_version(case.api_key, version), frame)
            _, end = decode(RESPONSES[case.api_key], version, frame, offset)
        except Exception as exc:  # noqa: BLE001 - collected into the report
            errors.append(f"v{version}: {exc}")
            continue
        if end == len(frame):
            return ""
        errors.append(f"v{version}: {len(frame) - end} trailing bytes")
    return f"undecodable answer ({'; '.join(errors)}): {frame[:64].hex()}"


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    return await reader.readexactly(size)


async def exchange(port: int, case: Case) -> Outcome:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    peer = "{}:{}".format(*writer.get_extra_info("sockname"))
    try:
        writer.write(case.payload + (probe_frame() if case.expects_probe else b""))
        if not case.expects_probe:
            writer.write_eof()  # the peer gives up mid-frame
        await writer.drain()
        async with asyncio.timeout(EXCHANGE_TIMEOUT_S):
            while True:
                try:
                    frame = await _read_frame(reader)
                except (asyncio.IncompleteReadError, ConnectionError):
                    return Outcome(case, "closed", peer)
                (correlation_id,) = struct.unpack_from(">i", frame, 0)
                if correlation_id == PROBE_CORRELATION_ID and case.expects_probe:
                    return Outcome(case, "answered", peer)
                if correlation_id != FUZZ_CORRELATION_ID:
                    return Outcome(case, "wrong", peer, f"unexpected correlation id {correlation_id}")
                problem = _check_fuzz_answer(case, frame)
                if problem:
                    return Outcome(case, "wrong", peer, problem)
    except TimeoutError:
        return Outcome(case, "timeout", peer)
    except ConnectionError as exc:
        return Outcome(case, "closed", peer, str(exc))
    finally:
        writer.close()


# Every fuzz case sent, by our end of its connection: ties the broker's log lines back to inputs.
CASES_BY_PEER: dict[str, Case] = {}


def run_cases(port: int, cases: list[Case]) -> list[Outcome]:
    async def run_all() -> list[Outcome]:
        limit = asyncio.Semaphore(CONCURRENCY)

        async def one(case: Case) -> Outcome:
            async with limit:
                return await exchange(port, case)

        return await asyncio.gather(*(one(case) for case in cases))

    outcomes = asyncio.run(run_all())
    CASES_BY_PEER.update((o.peer, o.case) for o in outcomes)
    return outcomes


def summarize(outcomes: list[Outcome]) -> str:
    counts = Counter(o.result for o in outcomes)
    return ", ".join(f"{result}: {count}" for result, count in sorted(counts.items()))


# --------------------------------------------------------------------------------------------------
# A real client round trip, and the broker fixture


def kafka_python_round_trip(bootstrap: str, topic: str, count: int = 3, timeout_s: float = 15) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic

    deadline = time.monotonic() + timeout_s
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=int(timeout_s * 1000))
    try:
        admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
    finally:
        admin.close()
    producer = KafkaProducer(
        bootstrap_servers=bootstrap, acks="all", request_timeout_ms=int(timeout_s * 1000)
    )
    try:
        futures = [producer.send(topic, key=b"k%d" % i, value=b"v%d" % i, partition=0) for i in range(count)]
        producer.flush(timeout_s)
        offsets = [future.get(timeout_s).offset for future in futures]
    finally:
        producer.close(timeout=5)
    assert offsets == list(range(count))
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        values: list[bytes] = []
        while len(values) < count and time.monotonic() < deadline:
            for message in consumer.poll(timeout_ms=200).get(tp, []):
                values.append(message.value)
    finally:
        consumer.close()
    assert values == [b"v%d" % i for i in range(count)]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PyBroker]:
    instance = PyBroker(
        tmp_path_factory.mktemp("fuzz-broker"),
        overrides={"socket.request.max.bytes": str(SOCKET_REQUEST_MAX_BYTES)},
    )
    instance.start()
    try:
        yield instance
    finally:
        instance.stop()


@pytest.fixture(scope="module")
def advertised(broker: PyBroker) -> dict[int, tuple[int, int]]:
    error_code, ranges = api_versions_probe("127.0.0.1", broker.port)
    assert error_code == 0 and ranges
    return ranges


@pytest.fixture(scope="module")
def closed_peers() -> list[str]:
    """host:port of our connections the broker must have closed (and logged), filled by the tests."""
    return []


# --------------------------------------------------------------------------------------------------
# (a) valid headers, garbage bodies


def garbage_cases(advertised: dict[int, tuple[int, int]]) -> list[Case]:
    rng = random.Random(SEED)
    factory = _load_message_factory()(SEED)
    golden = golden_requests()
    cases: list[Case] = []
    for api_key, (low, high) in sorted(advertised.items()):
        for version in range(low, high + 1):
            header = request_header(api_key, version, FUZZ_CORRELATION_ID)
            for max_len in (16, 600):
                body = rng.randbytes(rng.randint(0, max_len))
                cases.append(Case("random-body", api_key, version, sized(header + body)))
            if not REQUESTS[api_key].supports(version):
                continue  # advertised, not declared (Produce v0-2, KAFKA-18659): random bodies only
            # Well-formed but randomly valued: reaches the handlers with absurd field values.
            body = encode(REQUESTS[api_key], version, factory.message(REQUESTS[api_key], version))
            cases.append(Case("random-values", api_key, version, sized(header + body)))
    for (api_key, version), frame in sorted(golden.items()):
        if api_key not in advertised:
            continue
        body_offset = decode_request_header(frame).body_offset
        for _ in range(3):
            mutated = bytearray(frame)
            if len(frame) > body_offset:
                for _ in range(rng.randint(1, 4)):
                    mutated[rng.randrange(body_offset, len(frame))] = rng.randrange(256)
            mutated[4:8] = struct.pack(">i", FUZZ_CORRELATION_ID)
            cases.append(Case("mutated-capture", api_key, version, sized(bytes(mutated))))
    return cases


CREATE_TOPICS, CREATE_PARTITIONS = 19, 37
# A fuzzed count above 10,000 is refused (test_absurd_partition_count_is_refused_promptly); one below it
# is real work (a few ms a partition, off the event loop) that would only slow this test down, so
# large counts are left to the two dedicated tests below.
MAX_FUZZED_PARTITIONS = 200


def creates_huge_topic(case: Case) -> bool:
    if case.api_key not in (CREATE_TOPICS, CREATE_PARTITIONS):
        return False
    frame = case.payload[4:]
    try:
        body, _ = decode(
            REQUESTS[case.api_key], case.version, frame, decode_request_header(frame).body_offset
        )
    except Exception:  # noqa: BLE001 - undecodable: the broker closes the connection
        return False
    if case.api_key == CREATE_TOPICS:
        return any(topic["num_partitions"] > MAX_FUZZED_PARTITIONS for topic in body["topics"])
    return any(topic["count"] > MAX_FUZZED_PARTITIONS for topic in body["topics"])


def test_valid_headers_with_garbage_bodies(broker: PyBroker, advertised: dict[int, tuple[int, int]]) -> None:
    cases = [case for case in garbage_cases(advertised) if not creates_huge_topic(case)]
    assert len(cases) >= 200
    outcomes = run_cases(broker.port, cases)
    wrong = [f"{o.case.name}: {o.detail}" for o in outcomes if o.result == "wrong"]
    # Only a Fetch may hold its connection (long poll up to its random max_wait_ms).
    hung = [o.case.name for o in outcomes if o.result == "timeout" and o.case.api_key != FETCH]
    assert not wrong, "\n".join(wrong)
    assert not hung, f"no answer and no close within {EXCHANGE_TIMEOUT_S}s: {hung}"
    counts = Counter(o.result for o in outcomes)
    # Both reactions must actually occur, or the fuzzing is not reaching what it claims to.
    assert counts["closed"] > 0 and counts["answered"] > 0, summarize(outcomes)
    assert broker.process is not None and broker.process.poll() is None, broker.log_tail()


# --------------------------------------------------------------------------------------------------
# (b) truncated valid requests


def test_truncated_requests_close_the_connection(
    broker: PyBroker, advertised: dict[int, tuple[int, int]]
) -> None:
    rng = random.Random(SEED + 1)
    cases: list[Case] = []
    for (api_key, version), frame in sorted(golden_requests().items()):
        if api_key not in advertised:
            continue
        frame = frame[:4] + struct.pack(">i", FUZZ_CORRELATION_ID) + frame[8:]
        for cut in sorted({rng.randrange(1, len(frame)) for _ in range(3)}):
            # A complete frame whose content is cut short...
            cases.append(Case("truncated", api_key, version, sized(frame[:cut])))
        # ...and a frame whose sender goes away mid-way.
        cut = rng.randrange(0, len(frame))
        cases.append(
            Case(
                "abandoned",
                api_key,
                version,
                struct.pack(">i", len(frame)) + frame[:cut],
                expects_probe=False,
            )
        )
    outcomes = run_cases(broker.port, cases)
    not_closed = [f"{o.case.name}: {o.result} {o.detail}" for o in outcomes if o.result != "closed"]
    assert not not_closed, "\n".join(not_closed)


# --------------------------------------------------------------------------------------------------
# (c) absurd length prefixes


def _assert_closed_without_answer(sock: socket.socket, timeout_s: float = 5.0) -> None:
    sock.settimeout(timeout_s)
    try:
        data = sock.recv(64)
    except ConnectionResetError:
        return
    assert data == b"", f"expected the broker to close the connection, got {data!r}"


@pytest.mark.parametrize(
    "size",
    [-1, -(2**31), 0, SOCKET_REQUEST_MAX_BYTES + 1, 2**31 - 1],
    ids=["minus-one", "int32-min", "zero", "max-plus-one", "int32-max"],
)
def test_absurd_length_prefix_closes_the_connection(
    broker: PyBroker, size: int, closed_peers: list[str]
) -> None:
    with socket.create_connection(("127.0.0.1", broker.port), timeout=5) as sock:
        closed_peers.append("{}:{}".format(*sock.getsockname()))
        # A plausible header after the prefix: the size alone must decide.
        sock.sendall(struct.pack(">i", size) + request_header(API_VERSIONS, 0, 1))
        _assert_closed_without_answer(sock)


# --------------------------------------------------------------------------------------------------
# (d) one byte at a time


def test_requests_written_one_byte_at_a_time(broker: PyBroker) -> None:
    metadata = sized(request_header(3, 12, 11) + encode(REQUESTS[3], 12, {"topics": None}))
    api_versions = sized(
        request_header(API_VERSIONS, 3, 12)
        + encode(REQUESTS[API_VERSIONS], 3, {"client_software_name": "fuzz", "client_software_version": "1"})
    )
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for byte in metadata + api_versions:
            sock.sendall(bytes((byte,)))
            time.sleep(0.002)  # the point of the test: each byte arrives in its own segment
        first, second = read_response(sock), read_response(sock)
    assert struct.unpack_from(">i", first)[0] == 11
    _, offset = decode(RESPONSE_HEADER, response_header_version(3, 12), first)
    body, end = decode(RESPONSES[3], 12, first, offset)
    assert end == len(first) and body["brokers"][0]["port"] == broker.port
    assert struct.unpack_from(">i", second)[0] == 12
    body, end = decode(RESPONSES[API_VERSIONS], 3, second, 4)
    assert end == len(second) and body["error_code"] == 0


# --------------------------------------------------------------------------------------------------
# (e) a half-sent frame must not stall anyone else


def test_half_sent_frame_does_not_block_other_clients(broker: PyBroker) -> None:
    frame = sized(request_header(3, 12, 21) + encode(REQUESTS[3], 12, {"topics": None}))
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as stalled:
        stalled.sendall(frame[: len(frame) // 2])
        started = time.monotonic()
        kafka_python_round_trip(broker.bootstrap, "fuzz-while-half-sent")
        assert time.monotonic() - started < 10
        # The stalled client can still finish its request and get the answer.
        stalled.sendall(frame[len(frame) // 2 :])
        response = read_response(stalled)
    assert struct.unpack_from(">i", response)[0] == 21


# --------------------------------------------------------------------------------------------------
# After all of that


def _wait_for_log(broker: PyBroker, pattern: re.Pattern[str], timeout_s: float = 5.0) -> re.Match[str] | None:
    deadline = time.monotonic() + timeout_s
    while True:
        match = pattern.search(broker.log_text())
        if match or time.monotonic() > deadline:
            return match
        time.sleep(0.05)  # polling a file for a condition, with a deadline


def test_broker_survives_and_logs_every_close(broker: PyBroker, closed_peers: list[str]) -> None:
    assert broker.process is not None and broker.process.poll() is None, broker.log_tail()
    error_code, ranges = api_versions_probe("127.0.0.1", broker.port)
    assert error_code == 0 and ranges
    kafka_python_round_trip(broker.bootstrap, "fuzz-after-all")
    assert len(closed_peers) == 5, "run the whole module: the length-prefix tests record their peers"
    for peer in closed_peers:
        line = _wait_for_log(
            broker, re.compile(rf"^.*closing connection from {re.escape(peer)}: (.+)$", re.M)
        )
        assert line is not None, f"no close logged for {peer}; log tail:\n{broker.log_tail()}"
        assert line.group(1).strip(), line.group(0)


def test_no_topic_with_an_illegal_name_was_created(broker: PyBroker) -> None:
    topics = {path.name.rpartition("-")[0] for path in broker.data_dir.iterdir() if path.is_dir()}
    illegal = sorted(topic for topic in topics if not LEGAL_TOPIC.fullmatch(topic))
    assert not illegal, illegal


def test_no_internal_errors_logged(broker: PyBroker) -> None:
    """A client can make the broker answer with an error or close the connection, never hit a bug."""
    internal = re.findall(r"internal error while handling a request from (\S+)", broker.log_text())
    details = [
        f"{peer}: {CASES_BY_PEER[peer].name} {CASES_BY_PEER[peer].payload.hex()}"
        if peer in CASES_BY_PEER
        else peer
        for peer in internal
    ]
    assert not internal, "\n".join(details) + "\n" + broker.log_tail()


# --------------------------------------------------------------------------------------------------
# Broker bugs found by this fuzzing, pinned as explicit cases.


def test_metadata_v11_with_a_null_topic_name_is_not_an_internal_error(broker: PyBroker) -> None:
    """Found by this fuzzing: the handler built a response topic with a null name, which v10/v11 cannot
    encode (an internal error with a traceback). Fixed by answering an empty name."""
    body = encode(REQUESTS[3], 11, {"topics": [{"topic_id": uuid.uuid4(), "name": None}]})
    with socket.create_connection(("127.0.0.1", broker.port), timeout=5) as sock:
        peer = "{}:{}".format(*sock.getsockname())
        sock.sendall(sized(request_header(3, 11, 31) + body))
        sock.settimeout(5)
        try:
            answer = read_response(sock)
        except ConnectionError:
            answer = None  # closing the connection is an acceptable reaction to an invalid request...
    if answer is not None:
        problem = _check_fuzz_answer(Case("explicit", 3, 11, b""), answer)
        assert not problem, problem
        return
    # ...but not as an internal error.
    line = _wait_for_log(broker, re.compile(rf"^.*closing connection from {re.escape(peer)}: (.+)$", re.M), 2)
    assert line is not None and "internal error" not in line.group(1), broker.log_tail()


@pytest.fixture
def scratch_broker(tmp_path: Path) -> Iterator[PyBroker]:
    """A broker of its own for a test that may wedge it; killed, not stopped, afterwards."""
    instance = PyBroker(tmp_path / "scratch-broker")
    instance.start()
    try:
        yield instance
    finally:
        instance.kill9()


def _create_topic_request(correlation_id: int, name: str, partitions: int) -> bytes:
    topic = {
        "name": name,
        "num_partitions": partitions,
        "replication_factor": 1,
        "assignments": [],
        "configs": [],
    }
    return sized(
        request_header(19, 3, correlation_id)
        + encode(REQUESTS[19], 3, {"topics": [topic], "timeout_ms": 30000, "validate_only": False})
    )


def test_creating_many_partitions_does_not_stall_other_clients(scratch_broker: PyBroker) -> None:
    with socket.create_connection(("127.0.0.1", scratch_broker.port), timeout=30) as sock:
        sock.sendall(_create_topic_request(41, "many-partitions", 1000))
        # The request is in the broker's hands once it starts creating partition directories.
        deadline = time.monotonic() + 5
        while not any(scratch_broker.data_dir.glob("many-partitions-*")) and time.monotonic() < deadline:
            time.sleep(0.01)  # polling the file system for a condition, with a deadline
        started = time.monotonic()
        error_code, _ = api_versions_probe("127.0.0.1", scratch_broker.port, timeout_s=1.0)
        assert error_code == 0 and time.monotonic() - started < 1.0


def test_absurd_partition_count_is_refused_promptly(scratch_broker: PyBroker) -> None:
    with socket.create_connection(("127.0.0.1", scratch_broker.port), timeout=5) as sock:
        sock.sendall(_create_topic_request(51, "absurd-partitions", 2**31 - 1))
        sock.settimeout(5)
        try:
            frame = read_response(sock)
        except TimeoutError:
            pytest.fail("no CreateTopics answer within 5 s")
    body, _ = decode(RESPONSES[19], 3, frame, 4)
    # Kafka's controller: more than 10,000 partitions in one request is a POLICY_VIOLATION.
    assert body["topics"][0]["error_code"] == 44, body
