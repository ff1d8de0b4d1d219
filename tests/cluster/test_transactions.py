"""Transactions on a 3-broker cluster (issues 11 and 13): __transaction_state is replicated (RF 3), a
transactional id is coordinated by the leader of its partition, markers reach partitions led by the other
brokers (WriteTxnMarkers) and partition leaders verify with the coordinating broker (AddPartitionsToTxn
v4+, KIP-890). Through confluent-kafka's transactional producer and read_committed consumers: commits
are seen once and whole, aborts never; SIGKILL of the coordinating broker mid-transaction loses nothing
committed and leaves no hanging transaction; a second producer with the same id fences the first.
Real ZooKeeper, three broker processes."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from tests.cluster.conftest import Cluster, wait_for
from tests.wire import WireClient

pytestmark = pytest.mark.timeout(300)

PARTITIONS = 3


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(
        tmp_path_factory.mktemp("transactions"),
        zookeeper.connect_string,
        overrides={
            "transaction.state.log.replication.factor": "3",
            "transaction.state.log.min.isr": "2",
            "transaction.state.log.num.partitions": "3",
            "offsets.topic.replication.factor": "3",
            "offsets.topic.num.partitions": "3",
            "min.insync.replicas": "2",
            "group.initial.rebalance.delay.ms": "0",
        },
    )
    try:
        c.start()
        yield c
    finally:
        c.stop()


def live(cluster: Cluster) -> list[int]:
    return [n for n, b in cluster.brokers.items() if b.process is not None and b.process.poll() is None]


def create_topic(cluster: Cluster, topic: str) -> None:
    with WireClient(cluster.brokers[live(cluster)[0]].bootstrap) as w:
        r = w.request(19, 5, {"timeout_ms": 30000, "validate_only": False, "topics": [
            {"name": topic, "num_partitions": PARTITIONS, "replication_factor": 3, "assignments": [], "configs": []}]})  # fmt: skip
    assert r["topics"][0]["error_code"] == 0, r

    def leaders() -> set[int]:
        with WireClient(cluster.bootstrap.split(",")[0]) as w:
            md = w.request(3, 12, {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
        return {p["leader_id"] for p in md["topics"][0]["partitions"]}

    wait_for(lambda: -1 not in leaders() and len(leaders()) > 1, 60, f"{topic}'s leaders spread over brokers")


def coordinator_of(cluster: Cluster, txn_id: str) -> int:
    def found() -> int | None:
        with WireClient(cluster.brokers[live(cluster)[0]].bootstrap) as w:
            r = w.request(10, 4, {"key_type": 1, "coordinator_keys": [txn_id]})
        c = r["coordinators"][0]
        return c["node_id"] if c["error_code"] == 0 else None

    return wait_for(found, 60, f"the coordinator of {txn_id}")  # type: ignore[return-value]


def producer(cluster: Cluster, txn_id: str) -> Producer:
    p = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": txn_id, "linger.ms": 5,
                  "transaction.timeout.ms": 60000})  # fmt: skip
    p.init_transactions(60)
    return p


def send(p: Producer, topic: str, values: list[str]) -> None:
    for i, v in enumerate(values):
        p.produce(topic, v.encode(), partition=i % PARTITIONS)
    p.flush(30)


def wait_for_live_leaders(cluster: Cluster, topic: str) -> None:
    """Every partition of ``topic`` led by a live broker, as a live broker's Metadata says. After a kill,
    the partitions the dead broker led are leaderless until the controller has elected their new leaders;
    librdkafka keeps a leaderless partition it was told of in its metadata cache, and its watermark query
    then fails with "Unknown partition" until the cache entry is refreshed (minutes), so the reads
    below start only once the election is done."""

    def led() -> bool:
        alive = live(cluster)
        with WireClient(cluster.brokers[alive[0]].bootstrap) as w:
            md = w.request(3, 12, {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
        partitions = md["topics"][0]["partitions"]
        return len(partitions) == PARTITIONS and all(p["leader_id"] in alive for p in partitions)

    wait_for(led, 60, f"{topic}'s partitions led by live brokers")


def read_committed(cluster: Cluster, topic: str) -> list[str]:
    """Every committed value of ``topic``, read to the high watermark of every partition: a
    read_committed consumer gets there only when no transaction is left open (the last stable offset
    has caught up), so a hanging transaction fails here."""
    wait_for_live_leaders(cluster, topic)
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"rc-{uuid.uuid4().hex[:6]}",
                  "isolation.level": "read_committed", "enable.auto.commit": False})  # fmt: skip
    # The high watermarks, by a read_uncommitted client (a read_committed one is told the LSO instead).
    hw = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "hw", "isolation.level": "read_uncommitted"})
    try:
        ends = {}
        for p in range(PARTITIONS):
            ends[p] = wait_for(lambda p=p: hw.get_watermark_offsets(TopicPartition(topic, p), timeout=5), 30,
                               "watermarks")[1]  # type: ignore[index]  # fmt: skip
        c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        values: list[str] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for m in c.consume(500, 0.5):
                if not m.error():
                    values.append(m.value().decode())
            positions = {tp.partition: tp.offset for tp in c.position([TopicPartition(topic, p) for p in range(PARTITIONS)])}
            # read_committed reaches the high watermark only when no transaction is left open there
            if all(ends[p] == 0 or positions[p] >= ends[p] for p in range(PARTITIONS)):
                return values
        raise AssertionError(
            f"read_committed consumer stuck at {positions} below the high watermarks {ends} (hanging transaction?)"
        )
    finally:
        c.close()
        hw.close()


def test_commits_seen_whole_aborts_never_across_brokers(cluster: Cluster) -> None:
    topic = "txn-spread"
    create_topic(cluster, topic)
    p = producer(cluster, "txn-spread-id")
    committed, aborted = [], []
    for n in range(3):
        values = [f"t{n}-{i}" for i in range(30)]
        p.begin_transaction()
        send(p, topic, values)
        if n == 1:
            p.abort_transaction(30)
            aborted += values
        else:
            p.commit_transaction(30)
            committed += values
    seen = read_committed(cluster, topic)
    assert sorted(seen) == sorted(committed), (len(seen), len(committed))


def test_coordinator_killed_mid_transaction_loses_nothing_committed(cluster: Cluster) -> None:
    topic = "txn-kill"
    txn_id = "txn-kill-id"
    create_topic(cluster, topic)
    p = producer(cluster, txn_id)
    p.begin_transaction()
    send(p, topic, [f"before-{i}" for i in range(30)])
    p.commit_transaction(30)
    coordinator = coordinator_of(cluster, txn_id)
    p.begin_transaction()
    send(p, topic, [f"open-{i}" for i in range(30)])
    cluster.brokers[coordinator].process.kill()  # type: ignore[union-attr]
    cluster.brokers[coordinator].process.wait()  # type: ignore[union-attr]
    try:
        p.commit_transaction(90)
        open_committed = True
    except KafkaException:
        open_committed = False  # the producer gave up: a new instance aborts it below
    p2 = producer(cluster, txn_id)  # fences the first; an open transaction is aborted, a committed one stays
    p2.begin_transaction()
    send(p2, topic, [f"after-{i}" for i in range(30)])
    p2.commit_transaction(60)
    assert coordinator_of(cluster, txn_id) != coordinator
    cluster.brokers[coordinator].start(timeout_s=60)
    seen = read_committed(cluster, topic)
    expected = [f"before-{i}" for i in range(30)] + [f"after-{i}" for i in range(30)]
    if open_committed:
        expected += [f"open-{i}" for i in range(30)]
    assert sorted(seen) == sorted(expected), (open_committed, len(seen))


def test_a_second_producer_fences_the_first(cluster: Cluster) -> None:
    topic = "txn-fence"
    create_topic(cluster, topic)
    first = producer(cluster, "txn-fence-id")
    first.begin_transaction()
    send(first, topic, ["zombie"])
    second = producer(cluster, "txn-fence-id")
    with pytest.raises(KafkaException):
        first.commit_transaction(30)
    second.begin_transaction()
    send(second, topic, ["live"])
    second.commit_transaction(30)
    assert read_committed(cluster, topic) == ["live"]


def test_coordinator_killed_right_after_commit_keeps_the_commit(cluster: Cluster) -> None:
    """SIGKILL of the coordinating broker as soon as EndTxn(commit) is answered: the coordinator answers
    once PrepareCommit is in __transaction_state (acks=all), maybe before every marker is written, so
    the new leader of its partition must finish the commit (re-send the markers). Every committed
    record is seen and the last stable offset reaches the high watermark everywhere."""
    topic = "txn-kill-commit"
    txn_id = "txn-kill-commit-id"
    create_topic(cluster, topic)
    p = producer(cluster, txn_id)
    coordinator = coordinator_of(cluster, txn_id)
    p.begin_transaction()
    values = [f"c-{i}" for i in range(60)]
    send(p, topic, values)
    p.commit_transaction(30)
    cluster.brokers[coordinator].process.kill()  # type: ignore[union-attr]
    cluster.brokers[coordinator].process.wait()  # type: ignore[union-attr]
    try:
        # the killed broker is named until its ZooKeeper session expires and its partitions get new leaders
        wait_for(lambda: coordinator_of(cluster, txn_id) != coordinator, 60, "a new coordinator")
        seen = read_committed(cluster, topic)
        assert sorted(seen) == sorted(values), len(seen)
        p2 = producer(cluster, txn_id)  # the new coordinator serves the id: no transaction is left pending
        p2.begin_transaction()
        send(p2, topic, ["next"])
        p2.commit_transaction(60)
        assert sorted(read_committed(cluster, topic)) == sorted(values + ["next"])
    finally:
        cluster.brokers[coordinator].start(timeout_s=60)
