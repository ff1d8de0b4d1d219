"""Metadata through a real broker follows partition additions and a topic deleted and created again
(pybroker answers these from its per-topic encoding cache); broker-agnostic, so
``INTEGRATION_BROKER=kafka`` runs it against Apache Kafka too."""

from __future__ import annotations

import time
import uuid
from typing import Any

from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from tests.wire import WireClient

METADATA = 3


def _describe(bootstrap: str, topic: str, version: int) -> dict:
    """The topic by name, checked against the same broker's answer for every topic (the list of every
    topic's entries pybroker keeps per image) at the same version: the two must agree at once."""
    body: dict[str, Any] = {"topics": [{"name": topic, "topic_id": uuid.UUID(int=0)}]}
    if version >= 4:
        body["allow_auto_topic_creation"] = False
    with WireClient(bootstrap) as client:
        for _ in range(20):
            # Every topic, the topic, every topic: unless the topic changed in between (the two
            # answers for every topic differ; asked again), the three agree.
            before, named, after = (
                [t for t in client.request(METADATA, version, b)["topics"] if t["name"] == topic]
                for b in ({**body, "topics": None}, body, {**body, "topics": None})
            )
            if before == after:
                break
        expected = named if named[0]["error_code"] == 0 else []  # a topic that does not exist is not listed
        assert before == after == expected, f"v{version}: every topic's answer disagrees with the topic's own"
    return named[0]


def _wait_for(bootstrap: str, topic: str, version: int, ok, timeout_s: float = 60) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        described = _describe(bootstrap, topic, version)
        if ok(described) or time.monotonic() > deadline:
            return described
        time.sleep(0.1)  # poll interval of a deadline-bounded wait


def test_metadata_follows_new_partitions_and_a_recreated_topic(shared_broker: Any) -> None:
    bootstrap = shared_broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = f"md-cache-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(60)
    for version in (1, 9, 12):  # three layouts, each cached
        first = _wait_for(bootstrap, topic, version, lambda t: len(t["partitions"]) == 3)
        assert first["error_code"] == 0 and len(first["partitions"]) == 3
    old_id = first["topic_id"]

    admin.create_partitions([NewPartitions(topic, 5)])[topic].result(60)
    for version in (1, 9, 12):
        grown = _wait_for(bootstrap, topic, version, lambda t: len(t["partitions"]) == 5)
        assert sorted(p["partition_index"] for p in grown["partitions"]) == [0, 1, 2, 3, 4]
        assert all(p["error_code"] == 0 and p["leader_id"] >= 0 for p in grown["partitions"])

    admin.delete_topics([topic])[topic].result(60)
    gone = _wait_for(bootstrap, topic, 12, lambda t: t["error_code"] == 3)
    assert gone["error_code"] == 3  # UNKNOWN_TOPIC_OR_PARTITION
    deadline = time.monotonic() + 60
    while True:  # Kafka finishes a deletion in the background: creating again may be refused a while
        try:
            admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(60)
            break
        except Exception:  # noqa: BLE001 - TOPIC_ALREADY_EXISTS while the deletion completes
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    again = _wait_for(bootstrap, topic, 12, lambda t: len(t["partitions"]) == 2 and t["topic_id"] != old_id)
    assert again["topic_id"] != old_id and len(again["partitions"]) == 2
    assert _wait_for(bootstrap, topic, 1, lambda t: len(t["partitions"]) == 2)["partitions"][1]["error_code"] == 0
