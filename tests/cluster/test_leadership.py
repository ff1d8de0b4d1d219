"""ElectLeaders and partition reassignments on a real 3-broker cluster (ZooKeeper and three
``python -m pybroker serve`` processes), through confluent-kafka's and kafka-python's AdminClients and raw
requests sent to a broker that is not the controller (forwarded through ZooKeeper)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import ElectionType
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import TopicPartition
from kafka.admin import KafkaAdminClient

from pybroker.protocol.errors import ErrorCode
from tests.cluster.conftest import Cluster, wait_for
from tests.cluster.test_replication import consume_all, produce
from tests.wire import WireClient

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    # No automatic rebalance: only ElectLeaders moves leadership back to the preferred replica.
    c = Cluster(tmp_path_factory.mktemp("leadership"), zookeeper.connect_string,
                overrides={"auto.leader.rebalance.enable": "false"})
    try:
        c.start()
        yield c
    finally:
        c.stop()


def create_topic(cluster: Cluster, name: str, assignment: list[int]) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(name, 1, replica_assignment=[assignment])], operation_timeout=30)[name].result(60)
    wait_for(lambda: partition(cluster, name, assignment[-1]).isr and
             sorted(partition(cluster, name, assignment[-1]).isr) == sorted(assignment), what=f"{name}'s full ISR")


def partition(cluster: Cluster, topic: str, node: int):
    return cluster.metadata(node, topic).topics[topic].partitions[0]


def controller(cluster: Cluster) -> int:
    return cluster.metadata_of(cluster.bootstrap).controller_id


def elect_raw(cluster: Cluster, node: int, topic: str, election_type: int) -> tuple[int, int, str | None]:
    """ElectLeaders v2 sent to ``node``: (top-level error, the partition's error, its message)."""
    with WireClient(cluster.brokers[node].bootstrap) as w:
        r = w.request(43, 2, {"election_type": election_type, "timeout_ms": 30000,
                              "topic_partitions": [{"topic": topic, "partitions": [0]}]})
    [result] = r["replica_election_results"]
    [p] = result["partition_result"]
    return r["error_code"], p["error_code"], p["error_message"]


def ck_elect(cluster: Cluster, election_type: ElectionType, topic: str):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    # (confluent-kafka 2.16.1's elect_leaders fails with SystemError when given operation_timeout)
    result = admin.elect_leaders(election_type, [CkTopicPartition(topic, 0)]).result(60)
    return result[CkTopicPartition(topic, 0)]


def test_preferred_election_moves_leadership_back(cluster: Cluster) -> None:
    create_topic(cluster, "pref", [1, 2, 3])
    assert partition(cluster, "pref", 2).leader == 1
    # Already preferred: ELECTION_NOT_NEEDED (confluent-kafka reports it as the partition's error).
    error = ck_elect(cluster, ElectionType.PREFERRED, "pref")
    assert error is not None and error.code() == ErrorCode.ELECTION_NOT_NEEDED
    cluster.brokers[1].stop()  # controlled shutdown: leadership moves to 2
    wait_for(lambda: partition(cluster, "pref", 2).leader == 2, what="leader 2")
    cluster.brokers[1].start(timeout_s=60)
    wait_for(lambda: sorted(partition(cluster, "pref", 2).isr) == [1, 2, 3], what="broker 1 back in the ISR")
    time.sleep(0.5)
    assert partition(cluster, "pref", 2).leader == 2  # no automatic rebalance
    assert ck_elect(cluster, ElectionType.PREFERRED, "pref") is None
    # The answer came after the election: every broker shows broker 1 leading at once or very soon.
    for node in cluster.brokers:
        wait_for(lambda n=node: partition(cluster, "pref", n).leader == 1, timeout_s=10, what=f"leader 1 on {node}")
    # Again, from a broker that is not the controller (forwarded through ZooKeeper), raw and at v2.
    other = next(n for n in cluster.brokers if n != controller(cluster))
    assert elect_raw(cluster, other, "pref", 0)[:2] == (ErrorCode.NONE, ErrorCode.ELECTION_NOT_NEEDED)


def test_elect_leaders_errors(cluster: Cluster) -> None:
    other = next(n for n in cluster.brokers if n != controller(cluster))
    assert elect_raw(cluster, other, "no-such-topic", 0)[:2] == (ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    top, part, _ = elect_raw(cluster, other, "no-such-topic", 7)
    assert (top, part) == (ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_REQUEST)
    wait_for(lambda: partition(cluster, "pref", 1).leader == 1, what="pref led by 1")
    # Every partition (topic_partitions null) while all are led by their preferred replica: Kafka lists
    # every topic and leaves out the partitions that need no election, so no partition to report.
    with WireClient(cluster.brokers[other].bootstrap) as w:
        r = w.request(43, 2, {"election_type": 0, "timeout_ms": 30000, "topic_partitions": None})
    assert r["error_code"] == 0
    assert {t["topic"]: t["partition_result"] for t in r["replica_election_results"]}["pref"] == []
    assert all(t["partition_result"] == [] for t in r["replica_election_results"])
    # kafka-python (ElectLeaders at the version it picks) names the partition: ELECTION_NOT_NEEDED, which
    # it does not raise.
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        response = admin.elect_leaders(0, {"pref": [0]}, timeout_ms=30000)
        assert [(r.topic, [(p.partition_id, p.error_code) for p in r.partition_result])
                for r in response.replica_election_results] == [("pref", [(0, ErrorCode.ELECTION_NOT_NEEDED)])]
    finally:
        admin.close()


def test_elect_leaders_times_out_when_the_controller_does_not_answer(cluster: Cluster) -> None:
    ctrl = controller(cluster)
    other = next(n for n in cluster.brokers if n != ctrl)
    with WireClient(cluster.brokers[other].bootstrap) as w, frozen(cluster, ctrl):  # shorter than its session
        t0 = time.monotonic()
        r = w.request(43, 2, {"election_type": 0, "timeout_ms": 1000,
                              "topic_partitions": [{"topic": "pref", "partitions": [0]}]})
        elapsed = time.monotonic() - t0
    assert r["error_code"] == ErrorCode.NONE
    assert r["replica_election_results"][0]["partition_result"][0]["error_code"] == ErrorCode.REQUEST_TIMED_OUT
    assert 0.9 < elapsed < 2.5
    assert controller(cluster) == ctrl  # it stayed the controller: the timeout was the request's
    assert elect_raw(cluster, other, "pref", 0)[:2] == (ErrorCode.NONE, ErrorCode.ELECTION_NOT_NEEDED)


def test_unclean_election_of_an_out_of_sync_replica(cluster: Cluster) -> None:
    create_topic(cluster, "unclean", [2, 3])
    cluster.brokers[3].kill9()
    wait_for(lambda: partition(cluster, "unclean", 1).isr == [2], what="ISR [2]")
    acked: list[int] = []
    assert produce(cluster.bootstrap, "unclean", range(50), acked).flush(30) == 0
    cluster.brokers[2].kill9()
    wait_for(lambda: partition(cluster, "unclean", 1).leader == -1, what="the partition offline")
    cluster.brokers[3].start(timeout_s=60)
    try:
        time.sleep(1)
        assert partition(cluster, "unclean", 1).leader == -1  # unclean.leader.election.enable is off
        error = ck_elect(cluster, ElectionType.PREFERRED, "unclean")
        assert error is not None and error.code() == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
        assert ck_elect(cluster, ElectionType.UNCLEAN, "unclean") is None
        p = partition(cluster, "unclean", 1)
        assert (p.leader, p.isr) == (3, [3])
        error = ck_elect(cluster, ElectionType.UNCLEAN, "unclean")  # it has a leader now
        assert error is not None and error.code() == ErrorCode.ELECTION_NOT_NEEDED
    finally:
        cluster.brokers[2].start(timeout_s=60)
    wait_for(lambda: sorted(partition(cluster, "unclean", 1).isr) == [2, 3], what="broker 2 back (truncated)")


def test_unclean_election_without_a_live_replica(cluster: Cluster) -> None:
    create_topic(cluster, "nobody", [2])
    cluster.brokers[2].kill9()
    try:
        wait_for(lambda: partition(cluster, "nobody", 1).leader == -1, what="the partition offline")
        other = next(n for n in (1, 3) if n != controller(cluster))
        assert elect_raw(cluster, other, "nobody", 1)[:2] == (ErrorCode.NONE, ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE)
    finally:
        cluster.brokers[2].start(timeout_s=60)


def frozen(cluster: Cluster, node: int):
    """SIGSTOP for a moment (shorter than the ZooKeeper session): still registered, fetching nothing."""
    pid = cluster.brokers[node].pid
    assert pid is not None

    class Frozen:
        def __enter__(self) -> None:
            os.kill(pid, signal.SIGSTOP)

        def __exit__(self, *exc: object) -> None:
            os.kill(pid, signal.SIGCONT)

    return Frozen()


def reassign_raw(cluster: Cluster, node: int, topic: str, replicas: list[int] | None) -> tuple[int, int]:
    """AlterPartitionReassignments v1 of partition 0 sent to ``node``: (top-level error, the partition's)."""
    with WireClient(cluster.brokers[node].bootstrap) as w:
        r = w.request(45, 1, {"timeout_ms": 5000, "allow_replication_factor_change": True, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0, "replicas": replicas}]}]})
    return r["error_code"], r["responses"][0]["partitions"][0]["error_code"]


def list_raw(cluster: Cluster, node: int) -> list[dict]:
    with WireClient(cluster.brokers[node].bootstrap) as w:
        r = w.request(46, 0, {"timeout_ms": 5000, "topics": None})
    assert r["error_code"] == 0
    return r["topics"]


def test_reassignment_cancel_and_list(cluster: Cluster) -> None:
    wait_for(lambda: len(cluster.metadata_of(cluster.bootstrap).brokers) == 3, what="every broker up")
    ctrl = controller(cluster)
    f = next(n for n in cluster.brokers if n != ctrl)  # the broker kept from catching up
    a, b = (n for n in sorted(cluster.brokers) if n != f)
    create_topic(cluster, "cancel", [a, b])
    asked = b if b != ctrl else a  # a broker that is not the controller: the requests are forwarded
    # Raw requests while f is frozen (a client's metadata refresh could pick f and hang on it).
    with frozen(cluster, f):  # f fetches nothing: the reassignment stays in progress
        assert reassign_raw(cluster, asked, "cancel", [b, f]) == (0, 0)
        assert list_raw(cluster, asked) == [{"name": "cancel", "partitions": [
            {"partition_index": 0, "replicas": [b, f, a], "adding_replicas": [f], "removing_replicas": [a]}]}]
        assert reassign_raw(cluster, asked, "cancel", None) == (0, 0)  # cancel
        assert list_raw(cluster, ctrl) == []
    # The original replicas back (in the order they have in the reassigning set, as Kafka's revert).
    wait_for(lambda: sorted(partition(cluster, "cancel", ctrl).replicas) == [a, b], what="the replicas back")
    tp = TopicPartition("cancel", 0)
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        assert admin.list_partition_reassignments(timeout_ms=10000) == {}
        errors = admin.alter_partition_reassignments(
            {tp: None, TopicPartition("cancel", 5): [a], TopicPartition("nope", 0): [a]}, timeout_ms=10000
        )
        assert {(k.topic, k.partition): (v.errno if v else 0) for k, v in errors.items()} == {
            ("cancel", 0): ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, ("cancel", 5): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        }
        errors = admin.alter_partition_reassignments({tp: [a, 9]}, timeout_ms=10000)
        assert errors[tp].errno == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    finally:
        admin.close()


def test_reassignment_completes_with_data_intact(cluster: Cluster) -> None:
    wait_for(lambda: len(cluster.metadata_of(cluster.bootstrap).brokers) == 3, what="every broker up")
    create_topic(cluster, "move", [1, 2])
    acked: list[int] = []
    assert produce(cluster.bootstrap, "move", range(3000), acked).flush(30) == 0
    tp = TopicPartition("move", 0)
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        assert admin.alter_partition_reassignments({tp: [2, 3]}, timeout_ms=10000) == {tp: None}
        wait_for(lambda: admin.list_partition_reassignments(timeout_ms=5000) == {}, what="the reassignment to finish")
    finally:
        admin.close()
    for node in cluster.brokers:
        wait_for(lambda n=node: partition(cluster, "move", n).replicas == [2, 3] and
                 sorted(partition(cluster, "move", n).isr) == [2, 3], what=f"replicas [2, 3] on {node}")
    assert partition(cluster, "move", 1).leader in (2, 3)
    # Broker 1 dropped its replica; every record is there, read from the new replicas.
    wait_for(lambda: not (cluster.brokers[1].data_dir / "move-0").exists(), what="broker 1's log removed")
    assert sorted(consume_all(cluster.bootstrap, "move", 1, 3000)) == list(range(3000))
    # And the old leader is not needed to read it.
    cluster.brokers[2].stop()
    try:
        wait_for(lambda: partition(cluster, "move", 1).leader == 3, what="leader 3")
        assert sorted(consume_all(cluster.bootstrap, "move", 1, 3000)) == list(range(3000))
    finally:
        cluster.brokers[2].start(timeout_s=60)



METADATA_VERSIONS = (1, 5, 9, 12)  # v1 (first with a null "every topic"), v5 offline replicas, v9 flexible


def metadata_views(bootstrap: str, topic: str) -> dict[str, tuple]:
    """The topic's partition 0 as a broker answers it through every cached path: every topic and the
    topic by name, at versions of different layouts (raw requests), and confluent-kafka's list_topics:
    view -> (leader, replicas, ISR, offline replicas or None where the version has none)."""
    views: dict[str, tuple] = {}
    with WireClient(bootstrap) as w:
        for version in METADATA_VERSIONS:
            for shape, topics in (("all", None), ("named", [{"name": topic}])):
                body: dict = {"topics": topics}
                if version >= 4:
                    body["allow_auto_topic_creation"] = False
                [t] = [t for t in w.request(3, version, body)["topics"] if t["name"] == topic]
                [p] = t["partitions"]
                offline = sorted(p["offline_replicas"]) if version >= 5 else None
                views[f"v{version} {shape}"] = (p["leader_id"], sorted(p["replica_nodes"]), sorted(p["isr_nodes"]), offline)
    p = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30).topics[topic].partitions[0]
    views["list_topics"] = (p.leader, sorted(p.replicas), sorted(p.isrs), None)
    return views


def assert_every_view(bootstrap: str, topic: str, leader: int, replicas: list[int], isr: list[int], offline: list[int]) -> None:
    for view, got in metadata_views(bootstrap, topic).items():
        assert got == (leader, replicas, isr, None if got[3] is None else offline), view


def test_every_metadata_version_follows_a_leader_and_isr_change_at_once(cluster: Cluster) -> None:
    """pybroker answers Metadata from encoded entries kept per topic and layout, and the list of every
    topic's kept per image: once a broker answers one request with a new leader or ISR, every version
    and request shape (and a real client) answers it too, with no stale layout left behind."""
    topic = "md-follow"
    create_topic(cluster, topic, [2, 3])
    for node in (1, 3):  # every path built and kept on the brokers that stay up
        assert_every_view(cluster.brokers[node].bootstrap, topic, 2, [2, 3], [2, 3], [])
    cluster.brokers[2].stop()  # controlled shutdown: leadership moves to 3, broker 2 leaves the ISR
    try:
        for node in (1, 3):
            bootstrap = cluster.brokers[node].bootstrap
            wait_for(lambda b=bootstrap: metadata_views(b, topic)["v12 named"] == (3, [2, 3], [3], [2]),
                     what=f"broker {node} to answer leader 3 with broker 2 offline")
            assert_every_view(bootstrap, topic, 3, [2, 3], [3], [2])
    finally:
        cluster.brokers[2].start(timeout_s=60)
    for node in (1, 3):
        bootstrap = cluster.brokers[node].bootstrap
        wait_for(lambda b=bootstrap: metadata_views(b, topic)["v12 named"] == (3, [2, 3], [2, 3], []),
                 what=f"broker {node} to answer broker 2 back in the ISR")
        assert_every_view(bootstrap, topic, 3, [2, 3], [2, 3], [])


def test_no_leaderless_window_after_a_broker_failure(cluster: Cluster) -> None:
    """A broker killed while leading partitions: another broker's Metadata answers name the old leader
    until the controller's election reaches it, then the new leader; never LEADER_NOT_AVAILABLE with
    leader -1 in between (Kafka's ZK-mode brokers learn of the failure from the controller's
    UpdateMetadata, which carries the new leaders too). librdkafka keeps a leaderless answer until its
    next refresh, so that window surfaced as "Unknown partition" errors."""
    ctrl = controller(cluster)
    victim, polled = [n for n in (1, 2, 3) if n != ctrl]
    topic = "failover-window"
    # Every replica set starts with the victim: it leads all twelve partitions.
    others = [polled, ctrl]
    assignment = [[victim, *(others if i % 2 else others[::-1])] for i in range(12)]
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 12, replica_assignment=assignment)], operation_timeout=30)[topic].result(60)

    def partitions() -> list[dict]:
        md = w.request(3, 12, {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
        [t] = md["topics"]
        assert t["error_code"] == ErrorCode.NONE, t
        return t["partitions"]

    with WireClient(cluster.brokers[polled].bootstrap) as w:
        wait_for(lambda: all(p["leader_id"] == victim and len(p["isr_nodes"]) == 3 for p in partitions())
                 and len(partitions()) == 12, what=f"{topic} led by {victim} with full ISRs")
        cluster.brokers[victim].kill9()
        try:
            seen: list[tuple[int, int, int]] = []  # (partition, error, leader) of every answer
            deadline = time.monotonic() + 30
            while True:
                answer = partitions()
                seen += [(p["partition_index"], p["error_code"], p["leader_id"]) for p in answer]
                if all(p["leader_id"] not in (victim, -1) for p in answer) or time.monotonic() > deadline:
                    break
            # A few more looks after the new leaders appeared: nothing goes back.
            for _ in range(20):
                seen += [(p["partition_index"], p["error_code"], p["leader_id"]) for p in partitions()]
        finally:
            cluster.brokers[victim].start(timeout_s=60)
    leaderless = [s for s in seen if s[1] == ErrorCode.LEADER_NOT_AVAILABLE or s[2] == -1]
    assert not leaderless, f"{len(leaderless)} leaderless answers, first {leaderless[:5]}"
    assert {s[0]: s[2] for s in seen} == {i: assignment[i][1] for i in range(12)}  # the new leaders
    wait_for(lambda: all(len(p.isr) == 3 for p in cluster.metadata(polled, topic).topics[topic].partitions.values()),
             what=f"{victim} back in every ISR")
