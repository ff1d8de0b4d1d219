"""Internal topics (``__consumer_offsets``) with librdkafka (confluent-kafka), as Apache Kafka 4.3.1
treats them, measured with ``--broker kafka``:

- a client cannot Produce into ``__consumer_offsets``: every partition answers INVALID_TOPIC_EXCEPTION
  (Kafka's ReplicaManager refuses appends to internal topics) and nothing is written;
- DeleteTopics on ``__consumer_offsets`` succeeds; every group and committed offset goes with it, and
  new groups keep working (the topic is created again on the next FindCoordinator);
- a KIP-848 member subscribing with a regex that matches ``__consumer_offsets`` is assigned its
  partitions (the coordinator resolves regexes against every topic, internal ones included).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from compat_tests.brokers import PyBroker
from compat_tests.clients.base import ClientError, Record

from .support import CLUSTER_BROKERS, cluster_launcher, expressible, wait_for

LEDGER_COLUMN = "confluent"
OFFSETS_TOPIC = "__consumer_offsets"
INVALID_TOPIC_EXCEPTION = 17  # librdkafka's KafkaError.TOPIC_EXCEPTION is the protocol code
TIMEOUT_S = 30


def _offsets_partitions(bootstrap: str) -> list[int]:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(OFFSETS_TOPIC, timeout=TIMEOUT_S)
    topic = md.topics[OFFSETS_TOPIC]
    if topic.error is not None:
        return []
    return sorted(topic.partitions)


def _commit(bootstrap: str, group: str, topic: str, offset: int) -> None:
    """A standalone commit (no subscription, generation -1), as an application seeking a group does."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    finally:
        consumer.close()


def _committed(bootstrap: str, group: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        (tp,) = consumer.committed([TopicPartition(topic, 0)], timeout=TIMEOUT_S)
        return tp.offset
    finally:
        consumer.close()


def _ensure_offsets_topic(bootstrap: str, admin: Any, topic: str) -> list[int]:
    """A commit makes the broker create ``__consumer_offsets`` if it has not yet."""
    _commit(bootstrap, f"{topic}-setup", topic, 1)
    return wait_for(lambda: _offsets_partitions(bootstrap), TIMEOUT_S, f"{OFFSETS_TOPIC} to exist")


def test_produce_to_consumer_offsets_is_refused(bootstrap, admin, make_topic) -> None:
    topic = make_topic()
    partitions = _ensure_offsets_topic(bootstrap, admin, topic)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-watermarks"})
    try:
        before = {
            p: consumer.get_watermark_offsets(TopicPartition(OFFSETS_TOPIC, p), TIMEOUT_S) for p in partitions
        }
    finally:
        consumer.close()
    errors: dict[int, KafkaError | None] = {}
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 20000})
    for p in partitions:

        def delivered(err: KafkaError | None, _msg: Any, p: int = p) -> None:
            errors[p] = err

        producer.produce(
            OFFSETS_TOPIC, key=b"not-a-group-record", value=b"junk", partition=p, on_delivery=delivered
        )
    assert producer.flush(TIMEOUT_S) == 0
    assert set(errors) == set(partitions)
    codes = {p: (err.code() if err is not None else None) for p, err in errors.items()}
    assert codes == {p: INVALID_TOPIC_EXCEPTION for p in partitions}
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-watermarks"})
    try:
        after = {
            p: consumer.get_watermark_offsets(TopicPartition(OFFSETS_TOPIC, p), TIMEOUT_S) for p in partitions
        }
    finally:
        consumer.close()
    # Nothing was appended: only the coordinator's own records could have moved a high watermark,
    # and no group was touched in between.
    assert after == before


def test_produce_to_consumer_offsets_is_refused_through_every_client(
    client, client_name, bootstrap, admin, make_topic
) -> None:
    if client_name == "kafka-python":
        pytest.skip("NOT EXPRESSIBLE by kafka-python: its producer refuses internal topics before sending")
    topic = make_topic()
    partitions = _ensure_offsets_topic(bootstrap, admin, topic)
    with expressible(client_name), pytest.raises(ClientError) as raised:
        client.produce(bootstrap, OFFSETS_TOPIC, [Record(b"k", b"v", partition=partitions[0])])
    assert raised.value.error == "INVALID_TOPIC_EXCEPTION", raised.value


@pytest.fixture(scope="module")
def own_bootstrap(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A broker of the kind under test for this module alone: deleting ``__consumer_offsets`` drops
    every group, which must not reach other modules' scenarios on the session broker."""
    external = request.config.getoption("--bootstrap")
    if external:
        pytest.skip("deletes __consumer_offsets: needs a broker of its own, not --bootstrap")
    workdir: Path = tmp_path_factory.mktemp("internal-topics")
    launcher: Any
    kind = request.config.getoption("--broker")
    if kind in CLUSTER_BROKERS:
        launcher = cluster_launcher(kind, workdir, {"group.initial.rebalance.delay.ms": "0"})
    elif kind == "kafka":
        from compat_tests.reference.apache_kafka import ApacheKafka

        launcher = ApacheKafka(workdir)
    else:
        launcher = PyBroker(workdir, overrides={"group.initial.rebalance.delay.ms": "0"})
    launcher.start()
    try:
        yield launcher.bootstrap
    finally:
        launcher.stop()


def _consume_in_group(bootstrap: str, group: str, topic: str, count: int) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    got: list[bytes] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 60
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error() is not None:
                continue
            got.append(msg.value())
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return got


def test_groups_keep_working_after_consumer_offsets_is_deleted(request, own_bootstrap, admin) -> None:
    bootstrap = own_bootstrap
    topic = f"compat-internal-{uuid.uuid4().hex[:8]}"
    # On a cluster the brokers' default replication factor, as make_topic: acks=all needs 2 in-sync replicas.
    replication = -1 if request.config.getoption("--broker") in CLUSTER_BROKERS else 1
    admin.create_topic(bootstrap, topic, partitions=1, replication_factor=replication)
    admin.produce(bootstrap, topic, [Record(f"k{i}".encode(), f"v{i}".encode()) for i in range(5)])
    old_group = f"{topic}-before"
    assert len(_consume_in_group(bootstrap, old_group, topic, 5)) == 5
    assert _committed(bootstrap, old_group, topic) == 5
    wait_for(lambda: _offsets_partitions(bootstrap), TIMEOUT_S, f"{OFFSETS_TOPIC} to exist")

    admin.delete_topic(bootstrap, OFFSETS_TOPIC)  # both brokers accept it (Kafka 4.3.1 does)

    # A new group works: it joins, consumes, commits and reads its commit back.
    new_group = f"{topic}-after"
    assert len(_consume_in_group(bootstrap, new_group, topic, 5)) == 5
    assert wait_for(lambda: _committed(bootstrap, new_group, topic) == 5, TIMEOUT_S, "the new group's commit")
    assert _offsets_partitions(bootstrap), f"{OFFSETS_TOPIC} was not created again"
    # The old group's commit went with the deleted partitions, on Kafka as on pybroker.
    assert _committed(bootstrap, old_group, topic) == -1001  # OFFSET_INVALID: nothing committed
    # And the old group itself can start over from the beginning.
    assert len(_consume_in_group(bootstrap, old_group, topic, 5)) == 5


def test_regex_subscription_is_assigned_consumer_offsets(bootstrap, admin, make_topic) -> None:
    """KIP-848 (group.protocol=consumer): the regex travels to the coordinator, which resolves it."""
    topic = make_topic()
    partitions = _ensure_offsets_topic(bootstrap, admin, topic)
    assigned: set[int] = set()
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{topic}-regex",
            "group.protocol": "consumer",
            "enable.auto.commit": False,
            "auto.offset.reset": "latest",
        }
    )

    def on_assign(_c: Any, parts: list[TopicPartition]) -> None:
        assigned.update(tp.partition for tp in parts if tp.topic == OFFSETS_TOPIC)

    try:
        consumer.subscribe([f"^{OFFSETS_TOPIC}"], on_assign=on_assign)
        deadline = time.monotonic() + 60
        while assigned != set(partitions) and time.monotonic() < deadline:
            consumer.poll(0.2)
    finally:
        consumer.close()
    assert assigned == set(partitions)
