"""Moving replicas between log dirs in a cluster while records are produced with acks=all: the
leader's replica and a follower's each move (the follower keeps fetching into whichever log is
current, the leader keeps serving its followers), the ISR stays whole and every record is kept."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.scenarios.test_log_dir_moves import ALTER_REPLICA_LOG_DIRS, NONE, consume_all
from compat_tests.scenarios.test_newest_versions import call

from .conftest import Cluster, wait_for

THROTTLE = "replica.alter.log.dirs.io.max.bytes.per.second"


@pytest.fixture(scope="module")
def two_dir_cluster(zookeeper, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    # The copies start throttled, so that they overlap the produce for a while; the test lifts it.
    c = Cluster(tmp_path_factory.mktemp("cluster"), zookeeper.connect_string, overrides={THROTTLE: "300000"},
                log_dirs=2)  # fmt: skip
    try:
        c.start()
        yield c
    finally:
        c.stop()


def hosting(broker, topic: str) -> list[Path]:  # noqa: ANN001
    return [d for d in broker.log_dirs if (d / f"{topic}-0").is_dir()]


def futures(broker, topic: str) -> list[Path]:  # noqa: ANN001
    return [p / "00000000000000000000.log" for d in broker.log_dirs for p in d.glob(f"{topic}-0.*-future")]


def test_leader_and_follower_replicas_move_while_producing(two_dir_cluster: Cluster) -> None:
    cluster = two_dir_cluster
    topic = "moving"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(30)
    wait_for(lambda: all(len(cluster.metadata(n, topic).topics[topic].partitions[0].isr) == 3 for n in (1, 2, 3)),
             what="the ISR")  # fmt: skip
    leader = cluster.metadata(1, topic).topics[topic].partitions[0].leader
    follower = next(n for n in (1, 2, 3) if n != leader)

    produced: list[bytes] = []
    stop = threading.Event()

    def keep_producing() -> None:
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 2})
        i = 0
        while not stop.is_set():
            value = f"r{i}-".encode() + b"x" * 500
            producer.produce(topic, value, partition=0)
            produced.append(value)
            producer.poll(0)
            i += 1
            if i % 200 == 0:
                producer.flush(30)
        assert producer.flush(60) == 0

    thread = threading.Thread(target=keep_producing)
    thread.start()
    try:
        wait_for(lambda: len(produced) > 3000, what="records before the moves")
        for node in (leader, follower):
            broker = cluster.brokers[node]
            [source] = hosting(broker, topic)
            [destination] = [d for d in broker.log_dirs if d != source]
            answer = call(broker.bootstrap, ALTER_REPLICA_LOG_DIRS, 2,
                          {"dirs": [{"path": str(destination), "topics": [{"name": topic, "partitions": [0]}]}]})  # fmt: skip
            assert answer["results"][0]["partitions"][0]["error_code"] == NONE, answer
        for node in (leader, follower):
            broker = cluster.brokers[node]
            wait_for(lambda b=broker: futures(b, topic) and futures(b, topic)[0].stat().st_size, what="copying")
        copying_at = len(produced)
        wait_for(lambda: len(produced) > copying_at + 2000, what="records produced during the copies")
        for node in (leader, follower):  # the throttle goes: the copies catch up with the produce
            answer = call(cluster.brokers[node].bootstrap, 44, 1, {"validate_only": False, "resources": [{
                "resource_type": 4, "resource_name": str(node),
                "configs": [{"name": THROTTLE, "config_operation": 0, "value": "1000000000"}]}]})  # fmt: skip
            assert answer["responses"][0]["error_code"] == NONE, answer
        for node in (leader, follower):
            broker = cluster.brokers[node]
            wait_for(lambda b=broker: len(hosting(b, topic)) == 1 and not futures(b, topic), 90, f"broker {node}'s move")
    finally:
        stop.set()
        thread.join(120)
    assert "moving the replica failed" not in "".join(cluster.brokers[n].log_path.read_text() for n in (1, 2, 3))
    isr = cluster.metadata(1, topic).topics[topic].partitions[0].isr
    wait_for(lambda: len(cluster.metadata(1, topic).topics[topic].partitions[0].isr) == 3, 30, f"the ISR ({isr})")
    assert consume_all(cluster.bootstrap, topic, len(produced)) == produced
