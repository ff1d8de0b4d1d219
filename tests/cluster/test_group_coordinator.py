"""Consumer groups in a cluster: __consumer_offsets is replicated (RF 3 here), a group's coordinator is the
leader of its partition, and when that broker dies the group moves to the new leader with every committed
offset (Kafka's GroupCoordinator onElection/onResignation). Real ZooKeeper, three broker processes."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from pybroker.protocol.errors import ErrorCode
from tests.cluster.conftest import Cluster, wait_for
from tests.wire import WireClient

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(
        tmp_path_factory.mktemp("groups"),
        zookeeper.connect_string,
        overrides={"offsets.topic.replication.factor": "3", "offsets.topic.num.partitions": "3",
                   "group.initial.rebalance.delay.ms": "0"},
    )  # fmt: skip
    try:
        c.start()
        yield c
    finally:
        c.stop()


def live(cluster: Cluster) -> list[int]:
    return [n for n, b in cluster.brokers.items() if b.process is not None and b.process.poll() is None]


def find_coordinator(bootstrap: str, group: str) -> tuple[int, int]:
    """(error code, node id) of FindCoordinator v3 for a group, on the wire."""
    with WireClient(bootstrap) as wire:
        answer = wire.request(10, 3, {"key": group, "key_type": 0})
    return answer["error_code"], answer["node_id"]


def coordinator_of(cluster: Cluster, group: str) -> int:
    def found() -> int | None:
        answers = {find_coordinator(cluster.brokers[n].bootstrap, group) for n in live(cluster)}
        if len(answers) == 1:
            (error, node) = answers.pop()
            if error == ErrorCode.NONE and node in live(cluster):
                return node
        return None

    return wait_for(found, 60, f"every live broker to name one live coordinator for {group}")  # type: ignore[return-value]


def consume(bootstrap: str, group: str, topic: str, count: int) -> list[int]:
    """Consume ``count`` records as a member of ``group``, committing each; the offsets read."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "session.timeout.ms": 6000})  # fmt: skip
    consumer.subscribe([topic])
    offsets: list[int] = []
    deadline = time.monotonic() + 90
    try:
        while len(offsets) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            offsets.append(msg.offset())
            consumer.commit(message=msg, asynchronous=False)
    finally:
        consumer.close()
    return offsets


def test_committed_offsets_survive_the_coordinator_broker(cluster: Cluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for future in admin.create_topics([NewTopic("events", 1, 3)]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(10):
        producer.produce("events", value=b"%d" % i)
    assert producer.flush(30) == 0

    group = "survivor"
    assert consume(cluster.bootstrap, group, "events", 4) == [0, 1, 2, 3]
    coordinator = coordinator_of(cluster, group)
    # The offsets partition is replicated: every broker holds the commit.
    offsets_topic = cluster.metadata(coordinator, "__consumer_offsets").topics["__consumer_offsets"]
    assert all(len(p.replicas) == 3 for p in offsets_topic.partitions.values())

    cluster.brokers[coordinator].kill9()
    moved = coordinator_of(cluster, group)
    assert moved != coordinator
    # The new coordinator loaded the group from its replica of the partition: the commit is there.
    bootstrap = ",".join(cluster.brokers[n].bootstrap for n in live(cluster))
    reader = AdminClient({"bootstrap.servers": bootstrap})  # referenced until its futures resolve
    committed = reader.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, [TopicPartition("events", 0)])]
    )
    (result,) = committed.values()
    assert result.result(30).topic_partitions[0].offset == 4
    assert consume(bootstrap, group, "events", 6) == [4, 5, 6, 7, 8, 9]
    # A broker that is not the coordinator answers group requests NOT_COORDINATOR.
    other = next(n for n in live(cluster) if n != moved)
    with WireClient(cluster.brokers[other].bootstrap) as wire:
        answer = wire.request(12, 4, {"group_id": group, "generation_id": 1, "member_id": "m",
                                      "group_instance_id": None})  # fmt: skip
    assert answer["error_code"] == ErrorCode.NOT_COORDINATOR
