"""Concurrent admin requests on the same topics (issue 12, case 8).

Found by fuzzing: concurrent CreatePartitions of one topic answered with "partition directory already
exists" and "topic not found" internal errors and closed the connection. Kafka's controller applies
admin changes one after another, so concurrent requests get ordinary answers (INVALID_PARTITIONS
"Topic already has N partition(s).", UNKNOWN_TOPIC_OR_PARTITION, TOPIC_ALREADY_EXISTS). These tests send
many such requests at once over several raw connections against a real broker process.
"""

from __future__ import annotations

import asyncio
import random
import struct
from collections import Counter
from pathlib import Path

import pytest

from compat_tests.brokers import PyBroker
from pybroker.controller.local import SYNC_CREATE_PARTITIONS
from pybroker.protocol import codec
from pybroker.protocol.api import REQUESTS, RESPONSES
from pybroker.protocol.errors import ErrorCode

CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS, METADATA = 19, 20, 37, 3
# Above the synchronous threshold, so creating partitions really awaits an executor thread.
WIDE = SYNC_CREATE_PARTITIONS + 4

pytestmark = pytest.mark.timeout(180)


def frame(api_key: int, version: int, correlation_id: int, body: dict) -> bytes:
    head = struct.pack(">hhih", api_key, version, correlation_id, 4) + b"race"
    if version in REQUESTS[api_key].flexible_versions:
        head += b"\x00"
    payload = head + codec.encode(REQUESTS[api_key], version, body)
    return struct.pack(">i", len(payload)) + payload


def create_topics(topic: str, partitions: int) -> tuple[int, int, dict]:
    body = {
        "topics": [
            {"name": topic, "num_partitions": partitions, "replication_factor": 1, "assignments": [], "configs": []}
        ],
        "timeout_ms": 30000,
        "validate_only": False,
    }
    return CREATE_TOPICS, 7, body


def create_partitions(topic: str, count: int) -> tuple[int, int, dict]:
    body = {"topics": [{"name": topic, "count": count, "assignments": None}], "timeout_ms": 30000}
    return CREATE_PARTITIONS, 3, body


def delete_topics(topic: str) -> tuple[int, int, dict]:
    return DELETE_TOPICS, 5, {"topic_names": [topic], "timeout_ms": 30000}


async def pipeline(port: int, requests: list[tuple[int, int, dict]]) -> list[tuple[int, dict]]:
    """Send every request on one connection without waiting, then read the answers in order;
    a closed connection raises."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"".join(frame(k, v, i, body) for i, (k, v, body) in enumerate(requests)))
        await writer.drain()
        answers = []
        for i, (api_key, version, _) in enumerate(requests):
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            data = await reader.readexactly(size)
            assert struct.unpack_from(">i", data)[0] == i
            offset = 4 + (1 if version in RESPONSES[api_key].flexible_versions else 0)
            body, end = codec.decode(RESPONSES[api_key], version, data, offset)
            assert end == len(data)
            answers.append((api_key, body))
        return answers
    finally:
        writer.close()


def error_codes(api_key: int, body: dict) -> list[int]:
    if api_key == CREATE_TOPICS:
        return [t["error_code"] for t in body["topics"]]
    if api_key == DELETE_TOPICS:
        return [t["error_code"] for t in body["responses"]]
    return [t["error_code"] for t in body["results"]]


def run_connections(port: int, per_connection: list[list[tuple[int, int, dict]]]) -> list[tuple[int, dict]]:
    async def all_of_them() -> list[list[tuple[int, dict]]]:
        return await asyncio.wait_for(
            asyncio.gather(*(pipeline(port, reqs) for reqs in per_connection)), timeout=120
        )

    return [answer for answers in asyncio.run(all_of_them()) for answer in answers]


def partition_counts(port: int, topics: list[str]) -> dict[str, int]:
    [(_, body)] = run_connections(port, [[(METADATA, 12, {"topics": [{"name": t} for t in topics]})]])
    return {t["name"]: len(t["partitions"]) for t in body["topics"] if t["error_code"] == 0}


@pytest.fixture
def broker(tmp_path: Path):
    instance = PyBroker(tmp_path, overrides={"auto.create.topics.enable": "false"})
    instance.start()
    try:
        yield instance
    finally:
        instance.stop()


def test_concurrent_create_partitions_to_the_same_count(broker: PyBroker) -> None:
    """Kafka's controller serialises them: one succeeds, the others see the new count."""
    [(_, body)] = run_connections(broker.port, [[create_topics("grow", 2)]])
    assert error_codes(CREATE_TOPICS, body) == [0]
    answers = run_connections(broker.port, [[create_partitions("grow", WIDE)] for _ in range(6)])
    codes = Counter(code for api_key, body in answers for code in error_codes(api_key, body))
    assert codes == {ErrorCode.NONE: 1, ErrorCode.INVALID_PARTITIONS: 5}, codes
    messages = {
        r["error_message"] for _, body in answers for r in body["results"] if r["error_code"] != 0
    }
    assert messages == {f"Topic already has {WIDE} partition(s)."}
    assert partition_counts(broker.port, ["grow"]) == {"grow": WIDE}
    assert "internal error" not in broker.log_text()


def test_create_partitions_racing_delete_and_recreate(broker: PyBroker) -> None:
    """CreateTopics, CreatePartitions and DeleteTopics of three topics from eight connections at
    once: only Kafka's ordinary answers, no closed connection, no internal error, and every topic
    left behind has exactly the partition directories its metadata names."""
    rng = random.Random(12)
    topics = [f"race-{i}" for i in range(3)]
    per_connection = []
    for _ in range(8):
        requests = []
        for _ in range(12):
            topic = rng.choice(topics)
            kind = rng.random()
            if kind < 0.3:
                requests.append(create_topics(topic, rng.choice([1, WIDE])))
            elif kind < 0.8:
                requests.append(create_partitions(topic, rng.randint(2, 2 * WIDE)))
            else:
                requests.append(delete_topics(topic))
        per_connection.append(requests)
    answers = run_connections(broker.port, per_connection)
    allowed = {
        ErrorCode.NONE,
        ErrorCode.TOPIC_ALREADY_EXISTS,
        ErrorCode.INVALID_PARTITIONS,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
    codes = Counter(code for api_key, body in answers for code in error_codes(api_key, body))
    assert set(codes) <= allowed, codes
    assert codes[ErrorCode.NONE] > 0, codes
    log_text = broker.log_text()
    assert "internal error" not in log_text and "closing connection" not in log_text, broker.log_tail()
    counts = partition_counts(broker.port, topics)
    for topic in topics:
        on_disk = sorted(
            int(p.name.rpartition("-")[2])
            for p in broker.data_dir.glob(f"{topic}-*")
            if p.is_dir() and p.name.rpartition("-")[2].isdigit()  # not a deleted one awaiting purge
        )
        assert on_disk == list(range(counts.get(topic, 0))), (topic, on_disk, counts)


def test_a_change_queued_behind_a_long_one_times_out_with_its_own_timeout(broker: PyBroker) -> None:
    """Found by tools/fuzz_broker.py: DeleteTopics waited (no answer for many seconds) behind a
    CreatePartitions of thousands of partitions of the same topic. Like a Kafka controller
    operation past its deadline, it now answers REQUEST_TIMED_OUT once its timeout_ms has passed."""
    [(_, body)] = run_connections(broker.port, [[create_topics("slow", 1)]])
    assert error_codes(CREATE_TOPICS, body) == [0]

    async def scenario() -> tuple[list, list]:
        grow = asyncio.ensure_future(pipeline(broker.port, [create_partitions("slow", 3000)]))
        async with asyncio.timeout(60):
            while not (broker.data_dir / "slow-1").exists():  # the long change is under way
                await asyncio.sleep(0.005)
        body = {"topic_names": ["slow"], "timeout_ms": 1}
        delete = await pipeline(broker.port, [(DELETE_TOPICS, 5, body)])
        assert not grow.done()
        return delete, await asyncio.wait_for(grow, 120)

    delete, grow = asyncio.run(scenario())
    [(_, deleted)] = delete
    assert deleted["responses"][0]["error_code"] == ErrorCode.REQUEST_TIMED_OUT, deleted
    [(_, grown)] = grow
    assert error_codes(CREATE_PARTITIONS, grown) == [0]
    assert partition_counts(broker.port, ["slow"]) == {"slow": 3000}
