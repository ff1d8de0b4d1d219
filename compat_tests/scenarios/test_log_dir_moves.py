"""Moving a replica between a broker's log dirs (AlterReplicaLogDirs, KIP-113) through Kafka 4.3.1's
``kafka-reassign-partitions.sh`` (a plan with ``log_dirs``: the Java Admin's alterReplicaLogDirs, and
describeReplicaLogDirs for --verify) and ``kafka-log-dirs.sh`` (describeLogDirs), on a broker this
module starts with two log dirs.

The move is throttled (``--replica-alter-log-dirs-throttle``, the broker's
replica.alter.log.dirs.io.max.bytes.per.second) so that it is seen under way: the destination dir
holds the future replica (isFuture), --verify says it is still in progress, and records produced
meanwhile are taken.  Then the throttle goes, the move completes, and every record produced before,
during and after it is consumed, in order, from the replica's new dir.

Under ``--broker kafka-cluster`` / ``pybroker-cluster`` the broker is a 3-node cluster of that kind with
two log dirs on every node; a replica's requests (the plan, AlterReplicaLogDirs, ``kafka-log-dirs
--broker-list``) go to the broker that holds it, as the Java Admin sends them (a ``TopicPartitionReplica``
names its broker).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from compat_tests.brokers import PyBroker
from compat_tests.conftest import CLUSTER_BROKERS
from compat_tests.kafka_tools import run_tool
from compat_tests.reference import kafka_probe
from compat_tests.scenarios.test_newest_versions import call

from .support import cluster_launcher, is_cluster, partition_leader, wait_for

ALTER_REPLICA_LOG_DIRS = 34
NONE, UNKNOWN_TOPIC_OR_PARTITION, REPLICA_NOT_AVAILABLE, LOG_DIR_NOT_FOUND = 0, 3, 9, 57
THROTTLE_BYTES_PER_S = 100_000
VALUE = b"v" * 1000


@pytest.fixture(scope="module")
def two_dirs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A broker of the kind under test, with two log dirs (the session's broker has one); on a cluster run,
    a 3-node cluster of that kind with two log dirs on every node."""
    kind = request.config.getoption("--broker")
    if request.config.getoption("--bootstrap"):
        pytest.skip("starts its own broker with two log dirs")
    workdir = tmp_path_factory.mktemp("two-dirs")
    if kind in CLUSTER_BROKERS:
        launcher: Any = cluster_launcher(kind, workdir, {}, log_dirs=2)
    elif kind == "kafka":
        from compat_tests.reference.apache_kafka import ApacheKafka

        launcher = ApacheKafka(workdir, log_dirs=2)
    else:
        launcher = PyBroker(workdir, log_dirs=2)
    launcher.start()
    try:
        yield launcher
    finally:
        launcher.stop()


def dirs_of(launcher: Any, node: int) -> list[Path]:
    """The log dirs of broker ``node``, as configured."""
    return launcher.log_dirs(node) if is_cluster(launcher) else list(launcher.log_dirs)


def create_topic(bootstrap: str, topic: str, partitions: int = 1) -> None:
    # One replica, so min.insync.replicas 1 (a cluster's default is 2, which acks=all could never meet).
    run_tool("kafka-topics", "--bootstrap-server", bootstrap, "--create", "--topic", topic,
             "--partitions", str(partitions), "--replication-factor", "1",
             "--config", "min.insync.replicas=1").check()  # fmt: skip


def produce(bootstrap: str, topic: str, tag: str, count: int) -> list[bytes]:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    values = [f"{tag}-{i}-".encode() + VALUE for i in range(count)]
    for value in values:
        producer.produce(topic, value, partition=0)
    assert producer.flush(60) == 0
    return values


def consume_all(bootstrap: str, topic: str, count: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < count and time.monotonic() < deadline:
            for message in consumer.consume(500, 1.0):
                assert message.error() is None, message.error()
                got.append(message.value())
    finally:
        consumer.close()
    return got


def log_dirs_of(bootstrap: str, topic: str, node: int, partition: int = 0) -> dict[str, dict[str, Any]]:
    """kafka-log-dirs --describe --broker-list ``node``: log dir -> {"partition" entry} for
    ``topic``-``partition`` on that broker (absent: not there)."""
    out = run_tool("kafka-log-dirs", "--bootstrap-server", bootstrap, "--describe", "--topic-list", topic,
                   "--broker-list", str(node)).check()  # fmt: skip
    document = json.loads(next(line for line in out.stdout.splitlines() if line.startswith("{")))
    [broker] = document["brokers"]
    assert broker["broker"] == node, broker
    found = {}
    for log_dir in broker["logDirs"]:
        assert log_dir["error"] is None, log_dir
        for p in log_dir["partitions"]:
            if p["partition"] == f"{topic}-{partition}":
                found[str(Path(log_dir["logDir"]).resolve())] = p
    return found


def reassign(bootstrap: str, plan: Path, *args: str) -> str:
    done = run_tool("kafka-reassign-partitions", "--bootstrap-server", bootstrap,
                    "--reassignment-json-file", str(plan), *args).check()  # fmt: skip
    return done.stdout


def test_move_a_replica_with_kafka_reassign_partitions(two_dirs: Any, tmp_path: Path) -> None:
    bootstrap = two_dirs.bootstrap
    topic = f"move-{int(time.time() * 1000)}"
    create_topic(bootstrap, topic)
    node, _ = partition_leader(bootstrap, topic)  # the broker with the only replica
    before = produce(bootstrap, topic, "before", 2000)  # ~2 MB: some 20 s at the throttle
    [source] = log_dirs_of(bootstrap, topic, node)
    # The dirs as configured (what the request names) by their resolved path (what the lookups compare).
    configured = {str(Path(d).resolve()): str(d) for d in dirs_of(two_dirs, node)}
    [destination] = [d for d in configured if d != source]
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [node], "log_dirs": [configured[destination]]}]}))  # fmt: skip

    out = reassign(bootstrap, plan, "--execute", "--replica-alter-log-dirs-throttle", str(THROTTLE_BYTES_PER_S))
    assert (
        f"Successfully started moving log directory to {configured[destination]} for replica {topic}-0 with broker {node}"
        in out
    ), out

    # Under way: the future replica is in the destination dir, behind the current one.
    during_move = wait_for(lambda: (found := log_dirs_of(bootstrap, topic, node)).get(destination) and found,
                           what="the future replica in the destination dir")  # fmt: skip
    assert during_move[destination]["isFuture"] is True, during_move
    assert during_move[source]["isFuture"] is False, during_move
    assert during_move[destination]["offsetLag"] > 0, during_move
    assert f"Reassignment of replica {topic}-0-{node} is still in progress." in reassign(bootstrap, plan, "--verify")
    during = produce(bootstrap, topic, "during", 200)

    # The throttle goes: the move completes (--verify then clears the throttle it set).
    run_tool("kafka-configs", "--bootstrap-server", bootstrap, "--alter", "--entity-type", "brokers",
             "--entity-name", str(node), "--delete-config",
             "replica.alter.log.dirs.io.max.bytes.per.second").check()  # fmt: skip

    def moved() -> bool:
        found = log_dirs_of(bootstrap, topic, node)
        return set(found) == {destination} and found[destination]["isFuture"] is False

    wait_for(moved, timeout_s=60, what="the replica to be only in the destination dir")
    out = reassign(bootstrap, plan, "--verify")
    assert f"Reassignment of replica {topic}-0-{node} completed successfully." in out, out
    after = produce(bootstrap, topic, "after", 100)
    expected = before + during + after
    assert consume_all(bootstrap, topic, len(expected)) == expected
    assert log_dirs_of(bootstrap, topic, node)[destination]["size"] > len(expected) * len(VALUE)


def test_alter_replica_log_dirs_errors(two_dirs: Any) -> None:
    """What Apache Kafka 4.3.1 answers for each partition of an AlterReplicaLogDirs request."""
    bootstrap = two_dirs.bootstrap
    topic = f"errors-{int(time.time() * 1000)}"
    create_topic(bootstrap, topic, partitions=2)
    # Each broker that holds a replica (on one broker: both partitions) is asked about its own.
    holders: dict[int, tuple[str, list[int]]] = {}
    for partition in (0, 1):
        node, address = partition_leader(bootstrap, topic, partition)
        holders.setdefault(node, (address, []))[1].append(partition)

    for node, (address, held) in holders.items():
        first, second = (str(d) for d in dirs_of(two_dirs, node))

        def codes(path: str, version: int = 2, address: str = address, held: list[int] = held) -> dict[tuple[str, int], int]:
            body = {"dirs": [{"path": path, "topics": [{"name": topic, "partitions": [*held, 7]},
                                                       {"name": "no-such-topic", "partitions": [0]}]}]}  # fmt: skip
            answer = call(address, ALTER_REPLICA_LOG_DIRS, version, body)
            return {(t["topic_name"], p["partition_index"]): p["error_code"] for t in answer["results"] for p in t["partitions"]}

        for path in ("/no/such/dir", first + "/", "relative/dir"):
            assert set(codes(path).values()) == {LOG_DIR_NOT_FOUND}, path
        for path, version in ((first, 1), (second, 2)):
            assert codes(path, version) == {
                **{(topic, p): NONE for p in held},
                (topic, 7): UNKNOWN_TOPIC_OR_PARTITION,
                ("no-such-topic", 0): UNKNOWN_TOPIC_OR_PARTITION,
            }
            # Empty partitions move at once: all of them end up in that dir.
            resolved = str(Path(path).resolve())
            for p in held:
                wait_for(lambda r=resolved, n=node, p=p: set(log_dirs_of(bootstrap, topic, n, p)) == {r},
                         what=f"{topic}-{p} in {path}")  # fmt: skip
    assert sorted(p for _, held in holders.values() for p in held) == [0, 1]


def test_a_broker_without_the_replica_answers_replica_not_available(
    request: pytest.FixtureRequest, broker: Any, bootstrap: str, unique_topic: str
) -> None:
    """In a cluster: AlterReplicaLogDirs, to one of its own log dirs, on a broker that holds no replica of
    the partition answers REPLICA_NOT_AVAILABLE (Kafka maps its NotLeaderOrFollowerException so)."""
    if broker is None or request.config.getoption("--broker") not in CLUSTER_BROKERS:
        pytest.skip("needs a cluster this run started (another broker holds the only replica)")
    host, _, port = bootstrap.split(",")[0].rpartition(":")
    endpoints, _ = kafka_probe.topic_metadata(host, int(port), None)
    holder, other = sorted(endpoints)[:2]
    run_tool("kafka-topics", "--bootstrap-server", bootstrap, "--create", "--topic", unique_topic,
             "--replica-assignment", str(holder)).check()  # fmt: skip
    address = "{}:{}".format(*endpoints[other])
    body = {"dirs": [{"path": str(broker.data_dir(other)), "topics": [{"name": unique_topic, "partitions": [0]}]}]}

    def code() -> int:
        return call(address, ALTER_REPLICA_LOG_DIRS, 2, body)["results"][0]["partitions"][0]["error_code"]

    # UNKNOWN_TOPIC_OR_PARTITION until that broker's metadata has the new topic.
    assert wait_for(lambda: code() != UNKNOWN_TOPIC_OR_PARTITION and code(), what="metadata") == REPLICA_NOT_AVAILABLE
