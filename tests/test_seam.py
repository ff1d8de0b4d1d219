"""The seam in front of the broker: ReplicaManager's partition lookups and leader checks, the
metadata image's order and identity rules, and the single broker's image publisher (lazy rebuilds)."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest

from pybroker.metadata.image import (
    NO_LEADER,
    UNASSIGNED,
    BrokerRegistration,
    MetadataImage,
    PartitionRegistration,
    TopicImage,
)
from pybroker.metadata.local import LocalMetadataPublisher
from pybroker.metadata.store import MetadataStore
from pybroker.protocol.errors import ErrorCode, KafkaError
from pybroker.records import SimpleRecord, build_batch
from pybroker.replication.partition import Partition
from pybroker.replication.replica_manager import ReplicaManager
from pybroker.storage import Log, LogConfig

NODE = 1


class _Log:
    log_end_offset = 0


def _partition(topic: str, index: int, leader: int = NODE) -> Partition:
    p = Partition(topic, index, uuid.uuid4(), _Log(), NODE)  # type: ignore[arg-type]
    p.leader_id = leader
    return p


def test_get_partition_or_error_names_unknown_and_not_leader() -> None:
    rm = ReplicaManager(NODE)
    led = _partition("t", 0)
    followed = _partition("t", 1, leader=2)
    rm.add_partition(led)
    rm.add_partition(followed)
    assert rm.get_partition_or_error("t", 0) is led
    assert rm.get_partition("t", 1) is followed  # hosted, as a follower
    with pytest.raises(KafkaError) as e:
        rm.get_partition_or_error("t", 1)
    assert e.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    with pytest.raises(KafkaError) as e:
        rm.get_partition_or_error("t", 2)
    assert e.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert sorted((p.topic, p.index) for p in rm.all_partitions()) == [("t", 0), ("t", 1)]
    assert rm.remove_partition("t", 0) is led and rm.get_partition("t", 0) is None


def _produce(topic: str, index: int, records: bytes) -> list[dict]:
    return [{"name": topic, "partition_data": [{"index": index, "records": records}]}]


def test_append_records_writes_only_as_leader(tmp_path: Path) -> None:
    async def run() -> None:
        rm = ReplicaManager(NODE)
        lg = Log.create(tmp_path / "t-0", "t", 0, LogConfig(), 0)
        try:
            p = Partition("t", 0, uuid.uuid4(), lg, NODE)
            rm.add_partition(p)
            batch = build_batch([SimpleRecord(b"k", b"v")])
            args = {"acks": -1, "timeout_ms": 1000, "api_version": 11, "transactional_id": None}
            args["now_ms"] = int(time.time() * 1000)
            [topic] = rm.append_records(_produce("t", 0, batch), **args)  # type: ignore[misc]
            assert topic["partition_responses"][0]["error_code"] == ErrorCode.NONE
            assert p.log_end_offset == 1 and p.high_watermark == 1
            p.leader_id = 2  # leadership moved away: nothing more is appended here
            [topic] = rm.append_records(_produce("t", 0, batch), **args)  # type: ignore[misc]
            assert topic["partition_responses"][0]["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
            [topic] = rm.append_records(_produce("t", 9, batch), **args)  # type: ignore[misc]
            assert topic["partition_responses"][0]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            assert p.log_end_offset == 1
            p.leader_id = NODE
            p.min_insync_replicas = 2
            p.replicas = (NODE, NODE + 1)
            # the ISR (this broker alone) is below min.insync.replicas: refused before appending
            [topic] = rm.append_records(_produce("t", 0, batch), **args)  # type: ignore[misc]
            assert topic["partition_responses"][0]["error_code"] == ErrorCode.NOT_ENOUGH_REPLICAS
            assert p.log_end_offset == 1
        finally:
            lg.close()

    asyncio.run(run())


def _topic(name: str, n: int = 1) -> TopicImage:
    regs = {i: PartitionRegistration((NODE,), (NODE,), NODE, 0) for i in range(n)}
    return TopicImage(name, uuid.uuid4(), regs)


def test_image_keeps_topic_order_and_shares_unchanged_topics() -> None:
    image = MetadataImage("c", NODE, {NODE: BrokerRegistration(NODE, "h", 1)})
    a, b, c = _topic("a"), _topic("b"), _topic("c")
    image = image.with_topics({"a": a, "b": b, "c": c})
    a2 = TopicImage("a", a.topic_id, {0: PartitionRegistration((NODE,), (NODE,), NODE, 1)})
    changed = image.with_topics({"a": a2})
    assert list(changed.topics_by_name) == ["a", "b", "c"]  # changed in place
    assert changed.topic("b") is b and changed.topic_by_id(a.topic_id) is a2
    recreated = TopicImage("a", uuid.uuid4(), {})
    again = changed.with_topics({"a": recreated, "c": None})
    assert list(again.topics_by_name) == ["b", "a"]  # a new id goes last; c is gone
    assert again.topic_by_id(a.topic_id) is None and again.topic_by_id(c.topic_id) is None
    assert image.topic("c") is c  # images never change
    assert again.partition("b", 0) == PartitionRegistration((NODE,), (NODE,), NODE, 0)


def test_local_publisher_rebuilds_a_changed_topic_once_on_read(tmp_path: Path) -> None:
    store = MetadataStore(tmp_path)
    hosted: dict[tuple[str, int], Partition] = {}
    lookups: list[tuple[str, int]] = []

    def lookup(topic: str, index: int) -> Partition | None:
        lookups.append((topic, index))
        return hosted.get((topic, index))

    pub = LocalMetadataPublisher(store, lookup, BrokerRegistration(NODE, "h", 1), "cid")
    store.topic_listener = pub.topic_changed
    rec = store.add_topic("big", 1000, {})
    for i in range(999):  # the last partition's log is not made yet
        p = _partition("big", i)
        p.state_listener = pub.partition_changed
        hosted[("big", i)] = p
        pub.topic_changed("big")
    assert lookups == []  # nothing is built until someone reads
    image = pub.image()
    assert len(lookups) == 1000 and pub.image() is image  # one rebuild, then the same image
    topic = image.topic("big")
    assert topic is not None and topic.topic_id == rec.topic_id and topic.num_partitions == 1000
    assert topic.partitions[999] is UNASSIGNED and topic.partitions[999].leader == NO_LEADER
    hosted[("big", 5)].isr = [NODE, 2]  # a partition's listener reaches the image
    assert pub.image().partition("big", 5) == PartitionRegistration((NODE,), (NODE, 2), NODE, 0)
    assert pub.image().topic("big") is not topic
    store.remove_topic("big")
    assert pub.image().topic("big") is None and pub.image().cluster_id == "cid"
