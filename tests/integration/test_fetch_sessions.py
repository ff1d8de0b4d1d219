"""Incremental fetch sessions (KIP-227) on the wire: a full fetch opens a session, incremental
fetches return only partitions with news, forgotten partitions drop out, and session errors are
the ones Kafka returns.  Broker-agnostic (``INTEGRATION_BROKER=kafka`` runs it against Kafka)."""

from __future__ import annotations

import uuid
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from pybroker.protocol.errors import ErrorCode
from tests.wire import WireClient

FETCH, METADATA = 1, 3


def make_topic(bootstrap: str, partitions: int) -> str:
    topic = f"fs-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the result is in
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    return topic


def produce(bootstrap: str, topic: str, partition: int, count: int = 1) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(count):
        producer.produce(topic, f"v{i}".encode(), partition=partition)
    assert producer.flush(30) == 0


def topic_id(wire: WireClient, topic: str) -> uuid.UUID:
    response = wire.request(
        METADATA,
        12,
        {
            "topics": [{"topic_id": uuid.UUID(int=0), "name": topic}],
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        },
    )
    return response["topics"][0]["topic_id"]


def fetch(
    wire: WireClient,
    version: int,
    session_id: int,
    epoch: int,
    topic: Any,
    offsets: dict[int, int],
    forget: list[int] = (),  # type: ignore[assignment]
    max_wait_ms: int = 100,
) -> dict:
    field = "topic_id" if version >= 13 else "topic"
    partitions = [
        {
            "partition": p,
            "current_leader_epoch": -1,
            "fetch_offset": o,
            "last_fetched_epoch": -1,
            "log_start_offset": -1,
            "partition_max_bytes": 1 << 20,
        }
        for p, o in offsets.items()
    ]
    return wire.request(
        FETCH,
        version,
        {
            "replica_id": -1,
            "max_wait_ms": max_wait_ms,
            "min_bytes": 1,
            "max_bytes": 1 << 20,
            "isolation_level": 0,
            "session_id": session_id,
            "session_epoch": epoch,
            "topics": [{field: topic, "partitions": partitions}] if partitions else [],
            "forgotten_topics_data": [{field: topic, "partitions": list(forget)}] if forget else [],
            "rack_id": "",
        },
    )


def reported(response: dict) -> dict[int, dict]:
    return {p["partition_index"]: p for t in response["responses"] for p in t["partitions"]}


def test_incremental_fetches_report_only_partitions_with_news(shared_broker) -> None:
    bootstrap = shared_broker.bootstrap
    topic = make_topic(bootstrap, 3)
    produce(bootstrap, topic, 0, 2)
    with WireClient(bootstrap) as wire:
        full = fetch(wire, 12, 0, 0, topic, {0: 0, 1: 0, 2: 0})
        session = full["session_id"]
        assert full["error_code"] == ErrorCode.NONE and session > 0
        assert set(reported(full)) == {0, 1, 2}
        assert reported(full)[0]["high_watermark"] == 2 and len(reported(full)[0]["records"]) > 0

        # Partition 0 moved on to its end: nothing new anywhere, so nothing is reported.
        quiet = fetch(wire, 12, session, 1, topic, {0: 2})
        assert quiet["error_code"] == ErrorCode.NONE and quiet["session_id"] == session
        assert reported(quiet) == {}

        produce(bootstrap, topic, 1, 3)
        news = fetch(wire, 12, session, 2, topic, {}, max_wait_ms=2000)
        assert set(reported(news)) == {1}
        assert reported(news)[1]["high_watermark"] == 3 and len(reported(news)[1]["records"]) > 0

        # Forget partition 2, then write to it: the session no longer reports it.
        fetch(wire, 12, session, 3, topic, {1: 3}, forget=[2])
        produce(bootstrap, topic, 2, 1)
        produce(bootstrap, topic, 0, 1)
        after = fetch(wire, 12, session, 4, topic, {}, max_wait_ms=2000)
        assert set(reported(after)) == {0}

        # A partition added to the session later is reported in full at once.
        added = fetch(wire, 12, session, 5, topic, {0: 3, 2: 0})
        assert set(reported(added)) == {2} and reported(added)[2]["high_watermark"] == 1


def test_session_errors(shared_broker) -> None:
    bootstrap = shared_broker.bootstrap
    topic = make_topic(bootstrap, 1)
    with WireClient(bootstrap) as wire:
        session = fetch(wire, 12, 0, 0, topic, {0: 0})["session_id"]
        assert session > 0
        stale = fetch(wire, 12, session, 7, topic, {})
        assert (stale["error_code"], stale["responses"]) == (ErrorCode.INVALID_FETCH_SESSION_EPOCH, [])
        unknown = fetch(wire, 12, (session % 1_000_000) + 1, 1, topic, {})
        assert unknown["error_code"] == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
        # Epoch -1 closes the session (a sessionless full fetch); it is gone afterwards.
        closing = fetch(wire, 12, session, -1, topic, {0: 0})
        assert closing["error_code"] == ErrorCode.NONE and closing["session_id"] == 0
        assert set(reported(closing)) == {0}
        gone = fetch(wire, 12, session, 1, topic, {})
        assert gone["error_code"] == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def test_topic_id_sessions(shared_broker) -> None:
    bootstrap = shared_broker.bootstrap
    topic = make_topic(bootstrap, 2)
    produce(bootstrap, topic, 1, 2)
    with WireClient(bootstrap) as wire:
        tid = topic_id(wire, topic)
        full = fetch(wire, 13, 0, 0, tid, {0: 0, 1: 0})
        session = full["session_id"]
        assert session > 0 and full["responses"][0]["topic_id"] == tid
        assert reported(full)[1]["high_watermark"] == 2
        quiet = fetch(wire, 13, session, 1, tid, {1: 2})
        assert reported(quiet) == {}
        # A session opened with topic ids cannot be continued by name.
        mixed = fetch(wire, 12, session, 2, topic, {})
        assert mixed["error_code"] == ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR
