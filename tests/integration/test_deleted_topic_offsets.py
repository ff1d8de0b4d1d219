"""A deleted topic's committed offsets stay gone across broker restarts (graceful and kill -9): the
coordinator writes tombstones for them into ``__consumer_offsets``, so replaying the log at start-up
does not bring them back. (The broker-agnostic part, before any restart, is the compat scenario
compat_tests/scenarios/test_deleted_topic_offsets.py, which passes on Apache Kafka too.)

Also: ``__consumer_offsets`` deleted by an admin is created again, and a group committing afterwards
keeps its offsets across a restart.
"""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from compat_tests.brokers import PyBroker
from compat_tests.clients.confluent import ConfluentClient

CLIENT = ConfluentClient()
TIMEOUT_S = 30
OFFSET_INVALID = -1001


def _commit(bootstrap: str, group: str, offsets: list[tuple[str, int, int]]) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(t, p, o) for t, p, o in offsets], asynchronous=False)
    finally:
        consumer.close()


def _committed(bootstrap: str, group: str, topic: str, partitions: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        got = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=TIMEOUT_S)
        return [tp.offset for tp in sorted(got, key=lambda tp: tp.partition)]
    finally:
        consumer.close()


def _restart(broker: PyBroker, how: str) -> None:
    if how == "graceful":
        assert broker.stop() == 0, broker.log_tail()
        broker.start()
    else:
        broker.kill9()
        broker.start()


@pytest.mark.parametrize("how", ["graceful", "kill9"])
def test_deleted_topic_offsets_stay_gone_after_restart(own_pybroker: PyBroker, how: str) -> None:
    bootstrap = own_pybroker.bootstrap
    CLIENT.create_topic(bootstrap, "doomed", partitions=2)
    CLIENT.create_topic(bootstrap, "kept", partitions=1)
    for group in ("g1", "g2"):
        _commit(bootstrap, group, [("doomed", 0, 10), ("doomed", 1, 11), ("kept", 0, 5)])
    CLIENT.delete_topic(bootstrap, "doomed")
    CLIENT.create_topic(bootstrap, "doomed", partitions=2)
    for group in ("g1", "g2"):
        assert _committed(bootstrap, group, "doomed", 2) == [OFFSET_INVALID, OFFSET_INVALID]

    _restart(own_pybroker, how)

    for group in ("g1", "g2"):
        assert _committed(bootstrap, group, "doomed", 2) == [OFFSET_INVALID, OFFSET_INVALID]
        assert _committed(bootstrap, group, "kept", 1) == [5]  # other topics' offsets are untouched
    # A commit on the recreated topic is kept as usual.
    _commit(bootstrap, "g1", [("doomed", 0, 2)])
    _restart(own_pybroker, how)
    assert _committed(bootstrap, "g1", "doomed", 2) == [2, OFFSET_INVALID]


def test_consumer_offsets_deleted_then_groups_work_across_restart(own_pybroker: PyBroker) -> None:
    bootstrap = own_pybroker.bootstrap
    CLIENT.create_topic(bootstrap, "data", partitions=1)
    _commit(bootstrap, "before", [("data", 0, 4)])
    CLIENT.delete_topic(bootstrap, "__consumer_offsets")
    assert _committed(bootstrap, "before", "data", 1) == [OFFSET_INVALID]
    _commit(bootstrap, "after", [("data", 0, 7)])
    assert _committed(bootstrap, "after", "data", 1) == [7]
    _restart(own_pybroker, "graceful")
    assert _committed(bootstrap, "after", "data", 1) == [7]
    assert _committed(bootstrap, "before", "data", 1) == [OFFSET_INVALID]
    # Deleting it again (it exists again) is accepted as well; nothing is left behind.
    CLIENT.delete_topic(bootstrap, "__consumer_offsets")
    assert _committed(bootstrap, "after", "data", 1) == [OFFSET_INVALID]
    assert "internal error" not in own_pybroker.log_text().lower()


def test_offsets_of_a_topic_deleted_just_before_a_crash_are_removed_at_start(own_pybroker: PyBroker) -> None:
    """The crash window between the metadata change and the tombstones: simulated by removing the
    topic from the metadata file while the broker is stopped (its log is then a stray, deleted at
    start); the coordinator must not serve the dead topic's offsets, and must tombstone them."""
    bootstrap = own_pybroker.bootstrap
    CLIENT.create_topic(bootstrap, "vanishing", partitions=1)
    CLIENT.create_topic(bootstrap, "kept", partitions=1)
    _commit(bootstrap, "g", [("vanishing", 0, 9), ("kept", 0, 3)])
    assert own_pybroker.stop() == 0, own_pybroker.log_tail()
    path = own_pybroker.data_dir / "pybroker-metadata.json"
    doc = json.loads(path.read_text())
    doc["topics"] = [t for t in doc["topics"] if t["name"] != "vanishing"]
    path.write_text(json.dumps(doc))
    own_pybroker.start()
    CLIENT.create_topic(bootstrap, "vanishing", partitions=1)
    assert _committed(bootstrap, "g", "vanishing", 1) == [OFFSET_INVALID]
    assert _committed(bootstrap, "g", "kept", 1) == [3]
    _restart(own_pybroker, "graceful")  # the sweep wrote tombstones: still gone after another start
    assert _committed(bootstrap, "g", "vanishing", 1) == [OFFSET_INVALID]
    assert _committed(bootstrap, "g", "kept", 1) == [3]


def test_consumer_offsets_auto_created_after_deletion_is_the_coordinators_topic(own_pybroker: PyBroker) -> None:
    """A Metadata request allowed to auto-create ``__consumer_offsets`` (a producer's, here) creates
    it as the coordinator does: offsets.topic.num.partitions partitions, compacted, internal."""
    bootstrap = own_pybroker.bootstrap
    CLIENT.delete_topic(bootstrap, "__consumer_offsets")
    producer = Producer({"bootstrap.servers": bootstrap, "allow.auto.create.topics": True})
    producer.list_topics("__consumer_offsets", timeout=TIMEOUT_S)
    assert CLIENT.describe_topic(bootstrap, "__consumer_offsets").partitions == 50  # pybroker's default
    assert CLIENT.describe_configs(bootstrap, "__consumer_offsets")["cleanup.policy"] == "compact"
    CLIENT.create_topic(bootstrap, "data", partitions=1)
    _commit(bootstrap, "g", [("data", 0, 3)])
    assert _committed(bootstrap, "g", "data", 1) == [3]
