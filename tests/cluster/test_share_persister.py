"""Share groups in a cluster: the share-partition leader keeps a share partition's state at its share
coordinator, the leader of the key's ``__share_group_state`` partition, over the inter-broker listener
(Kafka's DefaultStatePersister). Real ZooKeeper, three broker processes, Kafka's own KafkaShareConsumer
(kafka-clients 4.3.1, the compat suite's ``share-consume`` command).

The topic partition's leader and the share coordinator are made different brokers (a group id is picked
until they are), so every state call goes over the wire:

- the share-partition leader is SIGKILLed after a consumer accepted some records: the new leader reads the
  state from the coordinator, and a new consumer of the group gets only the records not accepted;
- the coordinator broker is SIGKILLed: the new leader of the state partition reloads the state from its
  replica of the log, the leader's next write reaches it (after NOT_COORDINATOR / unreachable retries), and
  ReadShareGroupState at the new coordinator answers the whole progress.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from compat_tests.scenarios.test_share_groups import SHARE_SETTINGS, ShareConsumer, produce
from pybroker.coordinator.share.state_records import SharePartitionKey
from pybroker.protocol.errors import ErrorCode
from tests.cluster.conftest import Cluster, wait_for
from tests.wire import WireClient

pytestmark = pytest.mark.timeout(300)

FIND_COORDINATOR, METADATA, READ_SHARE_GROUP_STATE = 10, 3, 84
KEY_TYPE_SHARE = 2
GROUP = 32  # config resource type


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(
        tmp_path_factory.mktemp("share"),
        zookeeper.connect_string,
        overrides={
            **SHARE_SETTINGS,
            # records stay acquired through a failover (a 3 s lock would expire while brokers are elected)
            "group.share.record.lock.duration.ms": "30000",
            "offsets.topic.replication.factor": "3",
            "group.initial.rebalance.delay.ms": "0",
            "share.coordinator.state.topic.num.partitions": "3",
            "share.coordinator.state.topic.replication.factor": "3",
            "share.coordinator.state.topic.min.isr": "1",
        },
    )
    try:
        c.start()
        yield c
    finally:
        c.stop()


def live(cluster: Cluster) -> list[int]:
    return [n for n, b in cluster.brokers.items() if b.process is not None and b.process.poll() is None]


def all_live(cluster: Cluster) -> None:
    """Bring back the brokers an earlier case of the module killed."""
    if len(live(cluster)) < len(cluster.brokers):
        for b in cluster.brokers.values():
            if b.process is None or b.process.poll() is not None:
                b.start(timeout_s=60)
        wait_for(lambda: len(cluster.metadata_of(cluster.bootstrap).brokers) == 3, what="three brokers again")


def create_topic(cluster: Cluster, topic: str) -> None:
    with WireClient(cluster.brokers[live(cluster)[0]].bootstrap) as wire:
        answer = wire.request(19, 5, {"topics": [{"name": topic, "num_partitions": 1, "replication_factor": 3,
                                                  "assignments": [], "configs": []}],
                                      "timeout_ms": 30000, "validate_only": False})  # fmt: skip
    assert answer["topics"][0]["error_code"] == ErrorCode.NONE, answer


def partition_leader(cluster: Cluster, topic: str) -> tuple[uuid.UUID, int]:
    """(topic id, leader of partition 0) once every live broker agrees on a live leader."""

    def agreed() -> tuple[uuid.UUID, int] | None:
        seen = set()
        for n in live(cluster):
            with WireClient(cluster.brokers[n].bootstrap) as wire:
                md = wire.request(METADATA, 12, {"topics": [{"name": topic, "topic_id": uuid.UUID(int=0)}],
                                                 "allow_auto_topic_creation": False,
                                                 "include_topic_authorized_operations": False})  # fmt: skip
            [t] = md["topics"]
            if t["error_code"] != ErrorCode.NONE or not t["partitions"]:
                return None
            seen.add((t["topic_id"], t["partitions"][0]["leader_id"]))
        if len(seen) == 1:
            found = seen.pop()
            return found if found[1] in live(cluster) else None
        return None

    return wait_for(agreed, 60, f"one live leader of {topic}-0")  # type: ignore[return-value]


def share_coordinator(cluster: Cluster, key: SharePartitionKey) -> int:
    """The share coordinator of ``key`` that every live broker names (FindCoordinator v6, key type SHARE)."""

    def agreed() -> int | None:
        seen = set()
        for n in live(cluster):
            with WireClient(cluster.brokers[n].bootstrap) as wire:
                answer = wire.request(FIND_COORDINATOR, 6, {"key_type": KEY_TYPE_SHARE,
                                                            "coordinator_keys": [key.coordinator_key]})  # fmt: skip
            [c] = answer["coordinators"]
            if c["error_code"] != ErrorCode.NONE:
                return None
            seen.add(c["node_id"])
        node = seen.pop() if len(seen) == 1 else None
        return node if node in live(cluster) else None

    return wait_for(agreed, 60, f"one live share coordinator of {key}")  # type: ignore[return-value]


def split_setup(cluster: Cluster) -> tuple[str, str, SharePartitionKey, int, int]:
    """A fresh topic and a share group whose share coordinator is not the topic partition's leader:
    (topic, group, key, partition leader, share coordinator)."""
    topic = f"sp-{uuid.uuid4().hex[:8]}"
    create_topic(cluster, topic)
    topic_id, leader = partition_leader(cluster, topic)
    for _ in range(50):
        group = f"sg-{uuid.uuid4().hex[:8]}"
        key = SharePartitionKey(group, topic_id, 0)
        coordinator = share_coordinator(cluster, key)
        if coordinator != leader:
            return topic, group, key, leader, coordinator
    raise AssertionError("no group id put the share coordinator on another broker")


def read_state(cluster: Cluster, node: int, key: SharePartitionKey) -> dict:
    with WireClient(cluster.brokers[node].bootstrap) as wire:
        answer = wire.request(READ_SHARE_GROUP_STATE, 0, {"group_id": key.group_id, "topics": [
            {"topic_id": key.topic_id, "partitions": [{"partition": 0, "leader_epoch": -1}]}]})  # fmt: skip
    return answer["results"][0]["partitions"][0]


@pytest.fixture
def consumers() -> Iterator[list[ShareConsumer]]:
    started: list[ShareConsumer] = []
    yield started
    for c in started:
        c.stop()


def test_new_partition_leader_reads_the_state_from_the_coordinator(cluster: Cluster, consumers: list[ShareConsumer]) -> None:
    topic, group, key, leader, coordinator = split_setup(cluster)
    # the first consumer's first fetch initializes the state (at start offset -1, as Kafka's group coordinator
    # does; the share partition starts at share.auto.offset.reset=latest, the log end)
    first = ShareConsumer(cluster.bootstrap, topic, group)
    consumers.append(first)
    wait_for(lambda: read_state(cluster, coordinator, key)["error_code"] == ErrorCode.NONE, 60,
             "the share partition's state initialized at its coordinator")
    values = [f"v{i}" for i in range(6)]
    assert produce(cluster.bootstrap, topic, values) == list(range(6))
    for offset in range(3):
        assert first.next_record() == (offset, 1, values[offset])
        first.acknowledge("accept")
    first.kill()
    state = read_state(cluster, coordinator, key)
    assert (state["error_code"], state["start_offset"]) == (ErrorCode.NONE, 3), state

    cluster.brokers[leader].kill9()
    _, new_leader = partition_leader(cluster, topic)
    assert new_leader != leader
    # the new leader's share partition comes from the coordinator's state: 0-2 are never delivered again
    second = ShareConsumer(cluster.bootstrap, topic, group)
    consumers.append(second)
    got = []
    for _ in range(3):
        offset, _count, value = second.next_record()
        got.append((offset, value))
        second.acknowledge("accept")
    assert got == [(3, "v3"), (4, "v4"), (5, "v5")]
    assert second.no_record_for(5)
    # the write accepting 5 carried the start offset from before it, as Kafka's SharePartition writes
    assert read_state(cluster, share_coordinator(cluster, key), key)["start_offset"] == 5


def test_new_coordinator_reloads_the_state(cluster: Cluster, consumers: list[ShareConsumer]) -> None:
    all_live(cluster)
    topic, group, key, leader, coordinator = split_setup(cluster)
    first = ShareConsumer(cluster.bootstrap, topic, group)
    consumers.append(first)
    wait_for(lambda: read_state(cluster, coordinator, key)["error_code"] == ErrorCode.NONE, 60,
             "the share partition's state initialized at its coordinator")
    values = [f"w{i}" for i in range(6)]
    assert produce(cluster.bootstrap, topic, values) == list(range(6))
    for offset in range(2):
        assert first.next_record() == (offset, 1, values[offset])
        first.acknowledge("accept")
    # each acceptance is written with the start offset from before it (Kafka's SharePartition)
    assert read_state(cluster, coordinator, key)["start_offset"] == 1

    cluster.brokers[coordinator].kill9()
    new_coordinator = share_coordinator(cluster, key)
    assert new_coordinator != coordinator
    # the state partition's new leader reloaded the state from its replica of the log ...
    state = read_state(cluster, new_coordinator, key)
    assert (state["error_code"], state["start_offset"]) == (ErrorCode.NONE, 1), state
    # ... and the share-partition leader's next writes reach it
    for offset in range(2, 4):
        assert first.next_record() == (offset, 1, values[offset])
        first.acknowledge("accept")
    state = read_state(cluster, new_coordinator, key)
    assert (state["error_code"], state["start_offset"]) == (ErrorCode.NONE, 3), state
    first.kill()
    # a new consumer gets the rest, from the same share partition (its leader did not change)
    second = ShareConsumer(cluster.bootstrap, topic, group)
    consumers.append(second)
    got = []
    for _ in range(2):
        offset, _count, value = second.next_record()
        got.append((offset, value))
        second.acknowledge("accept")
    assert got == [(4, "w4"), (5, "w5")]
    assert leader in live(cluster)


def test_group_configs_are_the_clusters(cluster: Cluster, consumers: list[ShareConsumer]) -> None:
    """A group config set through one broker is every broker's (ZooKeeper's /config/groups): the share-partition
    leader starts the group at share.auto.offset.reset=earliest although another broker took the change."""
    all_live(cluster)
    topic = f"sp-{uuid.uuid4().hex[:8]}"
    create_topic(cluster, topic)
    _, leader = partition_leader(cluster, topic)
    assert produce(cluster.bootstrap, topic, ["e0", "e1"]) == [0, 1]
    group = f"sg-{uuid.uuid4().hex[:8]}"
    other = next(n for n in live(cluster) if n != leader)
    with WireClient(cluster.brokers[other].bootstrap) as wire:
        altered = wire.request(44, 1, {"resources": [{"resource_type": GROUP, "resource_name": group, "configs": [
            {"name": "share.auto.offset.reset", "config_operation": 0, "value": "earliest"}]}],
            "validate_only": False})  # fmt: skip
    assert altered["responses"][0]["error_code"] == ErrorCode.NONE, altered

    # (pybroker answers no DescribeConfigs of a GROUP yet; the ZooKeeper notification reaches the leader in
    # milliseconds, the consumer's first ShareFetch comes after its JVM started)
    consumer = ShareConsumer(cluster.bootstrap, topic, group)
    consumers.append(consumer)
    for offset in range(2):
        assert consumer.next_record() == (offset, 1, f"e{offset}")
        consumer.acknowledge("accept")
