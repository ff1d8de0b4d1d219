"""ElectLeaders and partition reassignments on a 3-broker cluster (issue 11), through the wire and
confluent-kafka's AdminClient: a preferred election moves leadership back to a returned broker, an unclean
election makes an out-of-sync replica lead an offline partition, a reassignment moves a partition's
replicas with every record intact, and a broker that is not the controller answers with the
controller's result (the request forwarded through ZooKeeper, as Kafka 4's brokers forward it to the
controller). Real ZooKeeper, three broker processes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, ElectionType, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.cluster.conftest import Cluster, wait_for
from tests.wire import WireClient

pytestmark = pytest.mark.timeout(300)

NONE, ELECTION_NOT_NEEDED, NO_REASSIGNMENT_IN_PROGRESS = 0, 84, 85
PREFERRED, UNCLEAN = 0, 1


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(
        tmp_path_factory.mktemp("partition-admin"),
        zookeeper.connect_string,
        overrides={"auto.leader.rebalance.enable": "false", "min.insync.replicas": "1"},
    )
    try:
        c.start()
        yield c
    finally:
        c.stop()


def request(cluster: Cluster, node: int, api_key: int, version: int, body: dict) -> dict:
    with WireClient(cluster.brokers[node].bootstrap) as w:
        return w.request(api_key, version, body)


def live(cluster: Cluster) -> list[int]:
    return [n for n, b in cluster.brokers.items() if b.process is not None and b.process.poll() is None]


def controller(cluster: Cluster) -> int:
    def found() -> int | None:
        ids = {request(cluster, n, 3, 12, {"topics": [], "allow_auto_topic_creation": False})["controller_id"]
               for n in live(cluster)}  # fmt: skip
        (cid,) = ids if len(ids) == 1 else (None,)
        return cid if cid in live(cluster) else None

    return wait_for(found, 60, "one live controller named by every broker")  # type: ignore[return-value]


def partition(cluster: Cluster, node: int, topic: str, index: int = 0) -> dict:
    answer = request(cluster, node, 3, 12, {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
    return next(p for p in answer["topics"][0]["partitions"] if p["partition_index"] == index)


def create(cluster: Cluster, topic: str, replicas: list[int]) -> None:
    body = {"timeout_ms": 30000, "validate_only": False, "topics": [{
        "name": topic, "num_partitions": -1, "replication_factor": -1, "configs": [],
        "assignments": [{"partition_index": 0, "broker_ids": replicas}]}]}  # fmt: skip
    assert request(cluster, live(cluster)[0], 19, 5, body)["topics"][0]["error_code"] == NONE
    wait_for(lambda: partition(cluster, replicas[0], topic)["isr_nodes"] == replicas, 60, f"{topic} in sync")


def elect(cluster: Cluster, node: int, election_type: int, topic: str) -> int:
    body = {"election_type": election_type, "topic_partitions": [{"topic": topic, "partitions": [0]}],
            "timeout_ms": 30000}  # fmt: skip
    (result,) = request(cluster, node, 43, 2, body)["replica_election_results"]
    return result["partition_result"][0]["error_code"]


def produce(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    for i in range(count):
        producer.produce(topic, f"r{i}".encode(), partition=0)
    assert producer.flush(60) == 0


def consume(bootstrap: str, topic: str, count: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})  # fmt: skip
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []

    def take() -> bool:  # everything fetched so far (one record per wait_for round took 0.2 s a record)
        values.extend(m.value() for m in consumer.consume(count, 0.5) if not m.error())
        return len(values) >= count

    try:
        wait_for(take, 60, f"{count} records of {topic}")
    finally:
        consumer.close()
    return values


def test_preferred_election_returns_leadership_on_any_broker(cluster: Cluster) -> None:
    create(cluster, "preferred", [1, 2])
    others = [n for n in live(cluster) if n != controller(cluster)]
    assert elect(cluster, others[0], PREFERRED, "preferred") == ELECTION_NOT_NEEDED  # forwarded
    assert elect(cluster, controller(cluster), PREFERRED, "preferred") == ELECTION_NOT_NEEDED
    cluster.brokers[1].stop()
    wait_for(lambda: partition(cluster, 2, "preferred")["leader_id"] == 2, 60, "broker 2 leads while 1 is down")
    cluster.brokers[1].start(timeout_s=60)
    wait_for(lambda: partition(cluster, 2, "preferred")["isr_nodes"] in ([2, 1], [1, 2]), 60, "1 back in the ISR")
    assert partition(cluster, 2, "preferred")["leader_id"] == 2  # auto.leader.rebalance.enable=false
    assert elect(cluster, controller(cluster), PREFERRED, "preferred") == NONE
    for node in live(cluster):  # answered once the new leader is known (here: on every broker soon after)
        wait_for(lambda node=node: partition(cluster, node, "preferred")["leader_id"] == 1, 30, f"broker {node}")
    # confluent-kafka's AdminClient finds the controller itself.
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    results = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("preferred", 0)]).result(timeout=60)
    (error,) = results.values()
    assert error is not None and error.code() == ELECTION_NOT_NEEDED, results


def test_unclean_election_makes_an_out_of_sync_replica_lead(cluster: Cluster) -> None:
    create(cluster, "unclean", [2, 3])
    cluster.brokers[3].stop()
    produce(cluster.bootstrap, "unclean", 10)  # min.insync.replicas=1: broker 2 alone acknowledges
    wait_for(lambda: partition(cluster, 2, "unclean")["isr_nodes"] == [2], 60, "the ISR shrunk to broker 2")
    cluster.brokers[2].stop()
    cluster.brokers[3].start(timeout_s=60)
    wait_for(lambda: partition(cluster, 3, "unclean")["leader_id"] == -1, 60, "the partition offline")
    assert elect(cluster, controller(cluster), PREFERRED, "unclean") != NONE  # the preferred replica is down
    assert elect(cluster, controller(cluster), UNCLEAN, "unclean") == NONE
    wait_for(lambda: partition(cluster, 3, "unclean")["leader_id"] == 3, 30, "broker 3 leads")
    assert elect(cluster, controller(cluster), UNCLEAN, "unclean") == ELECTION_NOT_NEEDED
    cluster.brokers[2].start(timeout_s=60)
    wait_for(lambda: len(live(cluster)) == 3 and partition(cluster, 2, "unclean")["isr_nodes"] in ([3, 2], [2, 3]),
             60, "broker 2 back, truncated to broker 3's log")  # fmt: skip


def test_reassignment_moves_replicas_with_every_record(cluster: Cluster) -> None:
    create(cluster, "moving", [1, 2])
    produce(cluster.bootstrap, "moving", 200)
    node = controller(cluster)
    other = next(n for n in live(cluster) if n != node)
    body = {"timeout_ms": 30000, "allow_replication_factor_change": True,
            "topics": [{"name": "moving", "partitions": [{"partition_index": 0, "replicas": [2, 3]}]}]}  # fmt: skip
    # Sent to a broker that is not the controller: forwarded to it through ZooKeeper.
    answer = request(cluster, other, 45, 1, body)
    assert answer["error_code"] == NONE and answer["responses"][0]["partitions"][0]["error_code"] == NONE, answer
    wait_for(lambda: partition(cluster, 2, "moving")["replica_nodes"] == [2, 3], 60, "the new replicas")
    wait_for(lambda: request(cluster, other, 46, 0, {"timeout_ms": 30000, "topics": None})["topics"] == [], 60,
             "no reassignment listed")  # fmt: skip
    assert partition(cluster, 2, "moving")["leader_id"] in (2, 3)
    values = consume(cluster.bootstrap, "moving", 200)
    assert values == [f"r{i}".encode() for i in range(200)]
    cancel = dict(body, topics=[{"name": "moving", "partitions": [{"partition_index": 0, "replicas": None}]}])
    answer = request(cluster, node, 45, 1, cancel)
    assert answer["responses"][0]["partitions"][0]["error_code"] == NO_REASSIGNMENT_IN_PROGRESS, answer
