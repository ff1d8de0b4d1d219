"""CreateTopics above the synchronous threshold: partitions are built in an executor thread and the
topic keeps the id its partition directories were created with (found by bench.scaling: the
metadata store rejected the pre-made id, so every topic over 16 partitions failed to create)."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.brokers import PyBroker
from pybroker.controller.local import SYNC_CREATE_PARTITIONS

PARTITIONS = SYNC_CREATE_PARTITIONS * 4


def _partitions_with_leaders(bootstrap: str, topic: str) -> int:
    meta = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=30).topics[topic]
    assert meta.error is None, meta.error
    return sum(1 for p in meta.partitions.values() if p.leader >= 0)


def test_large_topic_is_created_and_survives_a_restart(tmp_path: Path) -> None:
    broker = PyBroker(tmp_path)
    bootstrap = broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("wide", PARTITIONS, 1)])["wide"].result(60)
        assert _partitions_with_leaders(bootstrap, "wide") == PARTITIONS
        ids_before = {(p / "partition.metadata").read_text() for p in (tmp_path / "data").glob("wide-*")}
        assert len(ids_before) == 1  # every partition directory names the same topic id
        broker.restart()
        assert _partitions_with_leaders(bootstrap, "wide") == PARTITIONS
    finally:
        broker.stop()
