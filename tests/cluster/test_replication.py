"""Replication across real broker processes: RF 3 topics, acks=all, leader failover, ISR rejoin,
NOT_ENOUGH_REPLICAS (tests/cluster/conftest.py starts ZooKeeper and three brokers)."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from pybroker.cli.client import KafkaClient
from pybroker.protocol.errors import ErrorCode
from pybroker.records.builder import SimpleRecord, build_batch
from tests.cluster.conftest import Cluster, wait_for
from tests.wire import WireClient

pytestmark = pytest.mark.timeout(120)


def create_topic(cluster: Cluster, name: str, partitions: int = 3, rf: int = 3, configs: dict | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    topic = NewTopic(name, partitions, rf, config=configs or {})
    future = admin.create_topics([topic], operation_timeout=30)[name]
    future.result(timeout=60)


def full_isr(cluster: Cluster, node: int, topic: str, rf: int = 3) -> bool:
    t = cluster.metadata(node, topic).topics[topic]
    return bool(t.partitions) and all(
        len(p.isr) == rf and p.leader >= 0 and not p.offline for p in t.partitions.values()
    )


def produce(bootstrap: str, topic: str, values: range, acked: list[int], **extra) -> Producer:
    p = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5, **extra}
    )

    def done(err, msg) -> None:
        if err is None:
            acked.append(int(msg.value()))

    for v in values:
        p.produce(topic, str(v).encode(), key=str(v).encode(), on_delivery=done)
        p.poll(0)
    return p


def consume_all(bootstrap: str, topic: str, partitions: int, expect: int, timeout_s: float = 30) -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.time()}", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, i, 0) for i in range(partitions)])
    seen: list[int] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(seen) < expect and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                seen.append(int(m.value()))
        # Anything more (a duplicate) arrives within a moment.
        end = time.monotonic() + 1
        while time.monotonic() < end:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                seen.append(int(m.value()))
    finally:
        c.close()
    return seen


def test_rf3_topic_metadata_on_every_broker(cluster: Cluster) -> None:
    create_topic(cluster, "rf3")
    for node in cluster.brokers:
        md = cluster.metadata(node, "rf3")
        assert sorted(md.brokers) == [1, 2, 3]
        assert md.controller_id in (1, 2, 3)
        t = md.topics["rf3"]
        assert t.error_code == 0
        assert sorted(t.partitions) == [0, 1, 2]
        for p in t.partitions.values():
            assert sorted(p.replicas) == [1, 2, 3]
            wait_for(lambda n=node: full_isr(cluster, n, "rf3"), what=f"full ISR on broker {node}")
            assert p.leader == p.replicas[0]  # the preferred replica leads a new topic
    # Leaders spread over the brokers (Kafka's placement: one preferred leader each).
    leaders = {p.leader for p in cluster.metadata(1, "rf3").topics["rf3"].partitions.values()}
    assert leaders == {1, 2, 3}


def test_replication_factor_above_live_brokers_is_refused(cluster: Cluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    with pytest.raises(KafkaException) as e:
        admin.create_topics([NewTopic("rf4", 1, 4)])["rf4"].result(timeout=30)
    assert e.value.args[0].code() == ErrorCode.INVALID_REPLICATION_FACTOR


def test_acks_all_produce_and_consume(cluster: Cluster) -> None:
    create_topic(cluster, "acks-all")
    acked: list[int] = []
    p = produce(cluster.bootstrap, "acks-all", range(1000), acked)
    assert p.flush(60) == 0
    assert sorted(acked) == list(range(1000))
    # Every replica has every record: the followers' log end offsets reach the leader's.
    wait_for(lambda: full_isr(cluster, 1, "acks-all"), what="full ISR")
    seen = consume_all(cluster.bootstrap, "acks-all", 3, 1000)
    assert sorted(seen) == list(range(1000))


def test_leader_kill_fails_over_without_loss_and_the_broker_rejoins(cluster: Cluster) -> None:
    create_topic(cluster, "failover", configs={"min.insync.replicas": "2"})
    victim = cluster.metadata(1, "failover").topics["failover"].partitions[0].leader
    acked: list[int] = []
    p = produce(cluster.bootstrap, "failover", range(0, 2000), acked, **{"message.timeout.ms": 60000})
    p.flush(30)
    cluster.brokers[victim].kill9()
    others = [n for n in cluster.brokers if n != victim]

    def new_leader() -> bool:
        part = cluster.metadata(others[0], "failover").topics["failover"].partitions[0]
        return part.leader in others and victim not in part.isr

    wait_for(new_leader, timeout_s=30, what="a new leader of partition 0 from the ISR")
    for v in range(2000, 4000):
        p.produce("failover", str(v).encode(), key=str(v).encode(),
                  on_delivery=lambda err, msg: acked.append(int(msg.value())) if err is None else None)
        p.poll(0)
    assert p.flush(60) == 0
    assert sorted(acked) == list(range(4000))  # the producer continued; everything acknowledged
    seen = consume_all(cluster.bootstrap, "failover", 3, 4000)
    assert len(seen) == len(set(seen)), "duplicates"
    assert set(acked) <= set(seen), f"{len(set(acked) - set(seen))} acknowledged records lost"
    # The killed broker restarts, truncates/catches up and rejoins every ISR.
    cluster.brokers[victim].start(timeout_s=60)
    wait_for(lambda: full_isr(cluster, victim, "failover"), timeout_s=40, what="the restarted broker in the ISR")


def test_not_enough_replicas_when_two_of_three_are_down(cluster: Cluster) -> None:
    create_topic(cluster, "min-isr", partitions=1, configs={"min.insync.replicas": "2"})
    wait_for(lambda: full_isr(cluster, 1, "min-isr"), what="full ISR")
    leader = cluster.metadata(1, "min-isr").topics["min-isr"].partitions[0].leader
    down = [n for n in cluster.brokers if n != leader]
    for n in down:
        cluster.brokers[n].kill9()
    try:
        def isr_shrunk() -> bool:
            part = cluster.metadata(leader, "min-isr").topics["min-isr"].partitions[0]
            return part.leader == leader and part.isr == [leader]

        wait_for(isr_shrunk, timeout_s=40, what="the ISR shrunk to the leader")
        batch = build_batch([SimpleRecord(b"k", b"v")])
        with KafkaClient(cluster.brokers[leader].bootstrap) as c:
            body = {
                "transactional_id": None, "acks": -1, "timeout_ms": 5000,
                "topic_data": [{"name": "min-isr", "partition_data": [{"index": 0, "records": bytes(batch)}]}],
            }
            resp = c.send(0, body, node=leader)
            code = resp["responses"][0]["partition_responses"][0]["error_code"]
            assert code == ErrorCode.NOT_ENOUGH_REPLICAS
            body["acks"] = 1  # acks=1 is still accepted by the leader alone
            resp = c.send(0, body, node=leader)
            assert resp["responses"][0]["partition_responses"][0]["error_code"] == ErrorCode.NONE
    finally:
        for n in down:
            cluster.brokers[n].start(timeout_s=60)
    wait_for(lambda: full_isr(cluster, leader, "min-isr"), timeout_s=40, what="the ISR restored")


@pytest.mark.parametrize("controller", [False, True], ids=["follower-broker", "controller-broker"])
def test_controlled_shutdown_moves_leadership_before_exit(cluster: Cluster, controller: bool) -> None:
    topic = f"controlled-{int(controller)}"
    create_topic(cluster, topic, partitions=6)
    wait_for(lambda: full_isr(cluster, 1, topic), what="full ISR")
    md = cluster.metadata(1, topic)
    victim = md.controller_id if controller else next(n for n in cluster.brokers if n != md.controller_id)
    led = [p.partition for p in md.topics[topic].partitions.values() if p.leader == victim]
    assert led, "the victim leads some partitions"
    broker = cluster.brokers[victim]
    assert broker.stop() == 0  # SIGTERM; exits 0
    log = broker.log_path.read_text()
    assert "controlled shutdown: leadership moved" in log
    others = [n for n in cluster.brokers if n != victim]
    t = cluster.metadata(others[0], topic).topics[topic]
    assert all(p.leader in others for p in t.partitions.values())
    broker.start(timeout_s=60)
    wait_for(lambda: full_isr(cluster, victim, topic), timeout_s=40, what="the broker back in the ISR")


def test_group_members_on_different_brokers_share_one_coordinator(cluster: Cluster) -> None:
    """Each consumer bootstraps from a different broker; they still form one group (one coordinator:
    for now the controller broker) and split the partitions, and a commit is read back."""
    create_topic(cluster, "grouped")
    nodes = list(cluster.brokers.values())
    consumers = [
        Consumer({"bootstrap.servers": nodes[i].bootstrap, "group.id": "split", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
        for i in range(2)
    ]
    try:
        for c in consumers:
            c.subscribe(["grouped"])

        def split() -> bool:
            for c in consumers:
                c.poll(0.2)
            a = [{tp.partition for tp in c.assignment()} for c in consumers]
            return bool(a[0]) and bool(a[1]) and not (a[0] & a[1]) and a[0] | a[1] == {0, 1, 2}

        wait_for(split, timeout_s=60, what="two members splitting three partitions")
        first = consumers[0]
        tp = sorted(first.assignment(), key=lambda t: t.partition)[0]
        first.commit(offsets=[TopicPartition("grouped", tp.partition, 7)], asynchronous=False)
        got = consumers[1].committed([TopicPartition("grouped", tp.partition)], timeout=10)
        assert got[0].offset == 7
    finally:
        for c in consumers:
            c.close()


def test_producer_ids_are_unique_across_brokers(cluster: Cluster) -> None:
    """Each broker hands out ids from its own ZooKeeper-claimed block: idempotent producers that reach
    different brokers never share an id (a shared id would make one leader take the other producer's
    batches for its own sequence)."""
    pids = []
    for node, broker in cluster.brokers.items():
        if broker.process is None or broker.process.poll() is not None:
            continue
        with WireClient(broker.bootstrap) as wire:
            for _ in range(3):
                answer = wire.request(22, 4, {"transactional_id": None, "transaction_timeout_ms": 60000,
                                              "producer_id": -1, "producer_epoch": -1})  # fmt: skip
                assert answer["error_code"] == 0, (node, answer)
                pids.append(answer["producer_id"])
    assert len(pids) >= 6
    assert len(set(pids)) == len(pids), pids


def test_topic_config_change_reaches_every_broker(cluster: Cluster) -> None:
    """IncrementalAlterConfigs on one broker writes /config/topics/<topic>; every broker applies it:
    DescribeConfigs on each shows it, and each partition leader enforces it (max.message.bytes)."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    create_topic(cluster, "configs", partitions=3)
    first = next(iter(cluster.brokers.values())).bootstrap
    resource = ConfigResource(
        "topic",
        "configs",
        incremental_configs=[ConfigEntry("max.message.bytes", "2000", incremental_operation=AlterConfigOpType.SET)],
    )
    alter = AdminClient({"bootstrap.servers": first})  # referenced until its futures resolve
    for future in alter.incremental_alter_configs([resource]).values():
        future.result(30)
    for node, broker in cluster.brokers.items():
        if broker.process is None or broker.process.poll() is not None:
            continue
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})

        def shown(admin: AdminClient = admin) -> bool:
            configs = admin.describe_configs([ConfigResource("topic", "configs")])
            entries = next(iter(configs.values())).result(30)
            return entries["max.message.bytes"].value == "2000"

        wait_for(shown, what=f"broker {node} to show the new max.message.bytes")
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "message.max.bytes": 100_000})
    results: list[str] = []
    for partition in range(3):  # leaders spread over the brokers
        producer.produce("configs", b"x" * 5000, partition=partition,
                         on_delivery=lambda err, msg: results.append(err.name() if err else "ok"))  # fmt: skip
    producer.flush(30)
    assert results == ["MSG_SIZE_TOO_LARGE"] * 3
