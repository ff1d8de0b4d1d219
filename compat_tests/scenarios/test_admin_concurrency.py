"""Concurrent admin requests on one topic, over several raw connections at once.

Kafka's controller applies admin changes one after another, so of several CreatePartitions to the
same count exactly one succeeds and the others see the new count (INVALID_PARTITIONS), and of several
CreateTopics of one name exactly one creates it (the others: TOPIC_ALREADY_EXISTS). pybroker used to
race here (issue 12: "partition directory already exists" internal errors, closed connections).
"""

from __future__ import annotations

import asyncio
import struct
from collections import Counter

from pybroker.protocol import codec
from pybroker.protocol.api import REQUESTS, RESPONSES

LEDGER_COLUMN = "raw-socket"
CREATE_TOPICS, CREATE_PARTITIONS = 19, 37
NONE, TOPIC_ALREADY_EXISTS, INVALID_PARTITIONS = 0, 36, 37
CONNECTIONS = 6


def _frame(api_key: int, version: int, body: dict) -> bytes:
    head = struct.pack(">hhih", api_key, version, 1, 6) + b"compat"
    if version in REQUESTS[api_key].flexible_versions:
        head += b"\x00"
    payload = head + codec.encode(REQUESTS[api_key], version, body)
    return struct.pack(">i", len(payload)) + payload


async def _one(host: str, port: int, api_key: int, version: int, body: dict) -> dict:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(_frame(api_key, version, body))
        await writer.drain()
        (size,) = struct.unpack(">i", await reader.readexactly(4))
        data = await reader.readexactly(size)
        offset = 4 + (1 if version in RESPONSES[api_key].flexible_versions else 0)
        return codec.decode(RESPONSES[api_key], version, data, offset)[0]
    finally:
        writer.close()


def _addresses(bootstrap: str) -> list[tuple[str, int]]:
    return [(host, int(port)) for host, _, port in (a.rpartition(":") for a in bootstrap.split(","))]


def _all_at_once(bootstrap: str, api_key: int, version: int, body: dict) -> list[dict]:
    """The same request on CONNECTIONS connections at once, spread over the bootstrap brokers (on a
    cluster every broker takes some: each hands them to the one controller)."""
    addresses = _addresses(bootstrap)

    async def run() -> list[dict]:
        return await asyncio.wait_for(
            asyncio.gather(
                *(_one(*addresses[i % len(addresses)], api_key, version, body) for i in range(CONNECTIONS))
            ),
            60,
        )

    return asyncio.run(run())


def _create_topics_body(topic: str, partitions: int) -> dict:
    return {
        "topics": [
            {
                "name": topic,
                "num_partitions": partitions,
                "replication_factor": 1,
                "assignments": [],
                "configs": [],
            }
        ],
        "timeout_ms": 30000,
        "validate_only": False,
    }


def test_concurrent_create_topics_of_one_name(bootstrap: str, unique_topic: str) -> None:
    answers = _all_at_once(bootstrap, CREATE_TOPICS, 7, _create_topics_body(unique_topic, 20))
    codes = Counter(a["topics"][0]["error_code"] for a in answers)
    assert codes == {NONE: 1, TOPIC_ALREADY_EXISTS: CONNECTIONS - 1}, codes


def test_concurrent_create_partitions_to_one_count(bootstrap: str, unique_topic: str) -> None:
    host, port = _addresses(bootstrap)[0]
    created = asyncio.run(_one(host, port, CREATE_TOPICS, 7, _create_topics_body(unique_topic, 2)))
    assert created["topics"][0]["error_code"] == NONE, created
    body = {"topics": [{"name": unique_topic, "count": 24, "assignments": None}], "timeout_ms": 30000}
    answers = _all_at_once(bootstrap, CREATE_PARTITIONS, 3, body)
    results = [a["results"][0] for a in answers]
    codes = Counter(r["error_code"] for r in results)
    assert codes == {NONE: 1, INVALID_PARTITIONS: CONNECTIONS - 1}, results
    messages = {r["error_message"] for r in results if r["error_code"]}
    assert messages == {"Topic already has 24 partition(s)."}, messages


def test_create_partitions_below_the_current_count(bootstrap: str, unique_topic: str) -> None:
    host, port = _addresses(bootstrap)[0]
    created = asyncio.run(_one(host, port, CREATE_TOPICS, 7, _create_topics_body(unique_topic, 4)))
    assert created["topics"][0]["error_code"] == NONE, created
    body = {"topics": [{"name": unique_topic, "count": 3, "assignments": None}], "timeout_ms": 30000}
    [result] = asyncio.run(_one(host, port, CREATE_PARTITIONS, 3, body))["results"]
    assert result["error_code"] == INVALID_PARTITIONS, result
    assert result["error_message"] == (
        f"The topic {unique_topic} currently has 4 partition(s); 3 would not be an increase."
    ), result
