"""Committed offsets do not outlive their topic: create T, commit for group G, delete T, create T
again: OffsetFetch answers "nothing committed" (-1), as Apache Kafka 4.3.1 does (its group
coordinator removes a deleted topic's offsets from every group, OffsetMetadataManager.onTopicsDeleted).
Otherwise a group resuming on the new T would silently skip its first records.

Both group kinds: a classic group (a standalone commit, as an application that seeks does) and a
KIP-848 consumer group (``group.protocol=consumer``) that consumed and committed before it closed.
That the removal survives a broker restart is checked in tests/integration/test_deleted_topic_offsets.py.
"""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from compat_tests.clients.base import ClientError, Record

from .support import wait_for

LEDGER_COLUMN = "confluent"
TIMEOUT_S = 30
OFFSET_INVALID = -1001  # librdkafka's "no committed offset"


def _consumer(bootstrap: str, group: str, **extra: Any) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False, **extra})


def _committed(bootstrap: str, group: str, topic: str, partitions: int) -> list[int]:
    consumer = _consumer(bootstrap, group)
    try:
        got = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=TIMEOUT_S)
        return [tp.offset for tp in sorted(got, key=lambda tp: tp.partition)]
    finally:
        consumer.close()


def _recreate(admin: Any, bootstrap: str, topic: str, partitions: int) -> None:
    """Delete then create again; Kafka deletes asynchronously, so creation is retried while the old
    topic is still being removed (TOPIC_ALREADY_EXISTS)."""
    admin.delete_topic(bootstrap, topic)
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        try:
            admin.create_topic(bootstrap, topic, partitions=partitions)
            return
        except ClientError as exc:
            if exc.error != "TOPIC_ALREADY_EXISTS" or time.monotonic() > deadline:
                raise
            time.sleep(0.2)  # the deletion is under way; the deadline bounds the retries


def test_standalone_commit_is_gone_after_topic_delete_and_recreate(bootstrap, admin, make_topic) -> None:
    topic = make_topic(partitions=2)
    group = f"{topic}-group"
    consumer = _consumer(bootstrap, group)
    try:
        consumer.commit(
            offsets=[TopicPartition(topic, 0, 10), TopicPartition(topic, 1, 7)], asynchronous=False
        )
    finally:
        consumer.close()
    assert _committed(bootstrap, group, topic, 2) == [10, 7]
    _recreate(admin, bootstrap, topic, 2)
    assert _committed(bootstrap, group, topic, 2) == [OFFSET_INVALID, OFFSET_INVALID]
    # The group itself still works: a commit on the new topic is kept.
    consumer = _consumer(bootstrap, group)
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, 3)], asynchronous=False)
    finally:
        consumer.close()
    assert _committed(bootstrap, group, topic, 2) == [3, OFFSET_INVALID]


def test_consumer_group_offsets_are_gone_after_topic_delete_and_recreate(
    bootstrap, admin, make_topic
) -> None:
    topic = make_topic()
    group = f"{topic}-kip848"
    admin.produce(bootstrap, topic, [Record(f"k{i}".encode(), f"v{i}".encode()) for i in range(10)])
    consumer = _consumer(bootstrap, group, **{"group.protocol": "consumer", "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        seen = 0
        deadline = time.monotonic() + 60
        while seen < 10 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                seen += 1
        assert seen == 10
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    assert _committed(bootstrap, group, topic, 1) == [10]
    _recreate(admin, bootstrap, topic, 1)
    wait_for(
        lambda: _committed(bootstrap, group, topic, 1) == [OFFSET_INVALID],
        TIMEOUT_S,
        "the deleted topic's offset to be gone",
    )


def test_live_consumer_group_member_loses_a_deleted_topics_partitions(bootstrap, admin, make_topic) -> None:
    """The KIP-848 group's assignment follows the deletion: the member keeps only the other topic."""
    doomed, kept = make_topic("-doomed", partitions=2), make_topic("-kept", partitions=1)
    group = f"{doomed}-live"
    consumer = _consumer(bootstrap, group, **{"group.protocol": "consumer", "auto.offset.reset": "earliest"})

    def assignment() -> set[tuple[str, int]]:
        consumer.poll(0.2)
        return {(tp.topic, tp.partition) for tp in consumer.assignment()}

    try:
        consumer.subscribe([doomed, kept])
        wait_for(lambda: assignment() == {(doomed, 0), (doomed, 1), (kept, 0)}, 60, "both topics assigned")
        consumer.commit(
            offsets=[TopicPartition(doomed, 0, 4), TopicPartition(kept, 0, 2)], asynchronous=False
        )
        admin.delete_topic(bootstrap, doomed)
        wait_for(lambda: assignment() == {(kept, 0)}, 60, "the deleted topic's partitions to be revoked")
        assert _committed(bootstrap, group, kept, 1) == [2]
        assert consumer.committed([TopicPartition(doomed, 0)], timeout=TIMEOUT_S)[0].offset == OFFSET_INVALID
    finally:
        consumer.close()
