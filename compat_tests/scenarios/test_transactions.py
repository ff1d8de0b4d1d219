"""Transactions (KIP-98): commit and abort, read_committed vs read_uncommitted, the last stable
offset, fencing of a zombie producer, and consume-transform-produce with offsets committed in the
transaction (send_offsets_to_transaction)."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from compat_tests.clients.base import NotSupportedByClient, Record

from .support import expressible, wait_for

TIMEOUT_S = 30.0


def require_transactions(client: Any, client_name: str) -> None:
    if not hasattr(client, "produce_transactions"):
        raise NotSupportedByClient(f"the {client_name} adapter has no transactional producer")


def values(records) -> list[bytes | None]:  # noqa: ANN001
    return [r.value for r in records]


def batch(tag: str, count: int) -> list[Record]:
    return [Record(f"{tag}-k{i}".encode(), f"{tag}-v{i}".encode()) for i in range(count)]


def test_commit_and_abort_read_committed_and_uncommitted(client, client_name, bootstrap, make_topic) -> None:
    topic = make_topic()
    first, aborted, last = batch("c1", 5), batch("ab", 4), batch("c2", 3)
    with expressible(client_name):
        require_transactions(client, client_name)
        deliveries = client.produce_transactions(
            bootstrap, topic, f"txn-{uuid.uuid4().hex[:8]}", [(first, True), (aborted, False), (last, True)]
        )
    # Committed records only, in order, never an aborted one.
    committed = client.consume_committed(bootstrap, topic, 0, start="beginning", count=9, timeout_s=8)
    assert values(committed) == values(first) + values(last)
    assert [r.offset for r in committed] == [d.offset for d in deliveries[0] + deliveries[2]]
    # read_uncommitted sees the aborted records too (the markers take offsets but are not records).
    everything = client.consume(bootstrap, topic, 0, start="beginning", count=13, timeout_s=8)
    assert values(everything) == values(first) + values(aborted) + values(last)
    offsets = [r.offset for r in everything]
    assert offsets == sorted(offsets) and offsets[5] > offsets[4] + 1  # a COMMIT marker sits between


def _producer(bootstrap: str, transactional_id: str, **extra: Any) -> Producer:
    return Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "linger.ms": 5, **extra}
    )


def _read(bootstrap: str, topic: str, isolation: str, want: int, timeout_s: float = 8.0) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex[:8]}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + timeout_s
        while len(got) < want and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                got.append(msg.value())
        return got
    finally:
        consumer.close()


def test_zombie_producer_is_fenced(bootstrap, make_topic) -> None:
    topic = make_topic()
    txn_id = f"zombie-{uuid.uuid4().hex[:8]}"
    old = _producer(bootstrap, txn_id)
    old.init_transactions(TIMEOUT_S)
    old.begin_transaction()
    old.produce(topic, value=b"from-the-zombie")
    old.flush(TIMEOUT_S)
    new = _producer(bootstrap, txn_id)
    # The new instance's InitProducerId aborts the zombie's open transaction and bumps the epoch.
    new.init_transactions(TIMEOUT_S)
    with pytest.raises(KafkaException) as raised:
        old.commit_transaction(TIMEOUT_S)
    assert raised.value.args[0].fatal() or raised.value.args[0].txn_requires_abort()
    new.begin_transaction()
    new.produce(topic, value=b"from-the-new-instance")
    new.commit_transaction(TIMEOUT_S)
    assert _read(bootstrap, topic, "read_committed", 2) == [b"from-the-new-instance"]
    assert _read(bootstrap, topic, "read_uncommitted", 2) == [b"from-the-zombie", b"from-the-new-instance"]


def test_open_transaction_holds_back_read_committed(bootstrap, make_topic) -> None:
    topic = make_topic()
    producer = _producer(bootstrap, f"open-{uuid.uuid4().hex[:8]}")
    producer.init_transactions(TIMEOUT_S)
    producer.begin_transaction()
    producer.produce(topic, value=b"pending")
    producer.flush(TIMEOUT_S)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    tp = TopicPartition(topic, 0)

    def latest(isolation: str) -> int:
        from confluent_kafka import IsolationLevel

        level = IsolationLevel.READ_COMMITTED if isolation == "committed" else IsolationLevel.READ_UNCOMMITTED
        result = admin.list_offsets({tp: OffsetSpec.latest()}, isolation_level=level)
        return result[tp].result().offset

    # ListOffsets latest: the LSO (the open transaction's first offset) vs the high watermark.
    assert (latest("committed"), latest("uncommitted")) == (0, 1)
    assert _read(bootstrap, topic, "read_committed", 1, timeout_s=3) == []
    assert _read(bootstrap, topic, "read_uncommitted", 1) == [b"pending"]
    producer.commit_transaction(TIMEOUT_S)
    # Kafka answers EndTxn once PrepareCommit is durable and writes the markers after: wait for them.
    wait_for(lambda: latest("committed") == 2, 15, "the LSO to pass the COMMIT marker")
    assert latest("uncommitted") == 2  # record + COMMIT marker
    assert _read(bootstrap, topic, "read_committed", 1) == [b"pending"]


def test_consume_transform_produce_commits_offsets_in_the_transaction(bootstrap, make_topic) -> None:
    source, sink = make_topic("-in"), make_topic("-out")
    group = f"ctp-{uuid.uuid4().hex[:8]}"
    seed = Producer({"bootstrap.servers": bootstrap})
    for i in range(10):
        seed.produce(source, value=b"in-%d" % i)
    seed.flush(TIMEOUT_S)
    producer = _producer(bootstrap, f"ctp-{uuid.uuid4().hex[:8]}")
    producer.init_transactions(TIMEOUT_S)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe([source])
    try:

        def take(n: int) -> list:
            got: list = []
            deadline = time.monotonic() + TIMEOUT_S
            while len(got) < n and time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is not None and not msg.error():
                    got.append(msg)
            assert len(got) == n
            return got

        def transform(msgs: list, commit: bool) -> None:
            producer.begin_transaction()
            for m in msgs:
                producer.produce(sink, value=m.value().replace(b"in", b"out"))
            position = [TopicPartition(source, 0, msgs[-1].offset() + 1)]
            producer.send_offsets_to_transaction(position, consumer.consumer_group_metadata(), TIMEOUT_S)
            if commit:
                producer.commit_transaction(TIMEOUT_S)
            else:
                producer.abort_transaction(TIMEOUT_S)

        def committed() -> int:
            return consumer.committed([TopicPartition(source, 0)], TIMEOUT_S)[0].offset

        transform(take(4), commit=True)
        assert committed() == 4
        second = take(3)
        transform(second, commit=False)
        assert committed() == 4  # the aborted transaction's offsets never become visible
        # Processing again from the committed position produces each output exactly once.
        consumer.seek(TopicPartition(source, 0, 4))
        transform(take(6), commit=True)
        assert committed() == 10
    finally:
        consumer.close()
    assert _read(bootstrap, sink, "read_committed", 11) == [b"out-%d" % i for i in range(10)]


@pytest.mark.parametrize("group_protocol", ["classic", "consumer"])
def test_consume_transform_produce_is_exactly_once_through_a_rebalance(
    bootstrap, make_topic, group_protocol
) -> None:
    """Two copies of a transactional consume-transform-produce loop share a group; the second joins
    while the first is working, so partitions move between them.  Every input record appears in the
    output exactly once (a transaction whose offsets commit fails after the move is aborted and the
    new owner redoes the work from the committed position).  With the classic protocol and with
    KIP-848's (``group.protocol=consumer``, member epochs checked by TxnOffsetCommit)."""
    import threading

    source, sink = make_topic("-in", partitions=2), make_topic("-out")
    group = f"eos-{uuid.uuid4().hex[:8]}"
    seed = Producer({"bootstrap.servers": bootstrap})
    expected = []
    for p in range(2):
        for i in range(20):
            value = b"p%d-%02d" % (p, i)
            expected.append(value)
            seed.produce(source, value=value, partition=p)
    seed.flush(TIMEOUT_S)
    stop = threading.Event()
    processed: dict[str, int] = {"a": 0, "b": 0}
    assigned: dict[str, list[int]] = {"a": [], "b": []}
    errors: list[BaseException] = []

    def worker(name: str) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
                **(
                    {"session.timeout.ms": 6000}
                    if group_protocol == "classic"
                    else {"group.protocol": "consumer"}
                ),
            }
        )
        producer = _producer(bootstrap, f"{group}-{name}")
        try:
            producer.init_transactions(TIMEOUT_S)
            consumer.subscribe(
                [source], on_assign=lambda _c, parts: assigned[name].extend(p.partition for p in parts)
            )
            while not stop.is_set():
                msgs = [m for m in consumer.consume(num_messages=4, timeout=0.5) if not m.error()]
                if not msgs:
                    continue
                producer.begin_transaction()
                for m in msgs:
                    producer.produce(sink, value=m.value())
                positions = consumer.position(consumer.assignment())
                try:
                    producer.send_offsets_to_transaction(
                        positions, consumer.consumer_group_metadata(), TIMEOUT_S
                    )
                    producer.commit_transaction(TIMEOUT_S)
                    processed[name] += len(msgs)
                except KafkaException as exc:
                    if not exc.args[0].txn_requires_abort():
                        raise
                    producer.abort_transaction(TIMEOUT_S)
                    # Rewind to the committed position: the work is redone (by whoever owns it now).
                    for tp in consumer.committed(consumer.assignment(), TIMEOUT_S):
                        consumer.seek(TopicPartition(tp.topic, tp.partition, max(tp.offset, 0)))
                time.sleep(0.1)  # pace the loop so the second member joins while work remains
        except BaseException as exc:  # reported by the test thread
            errors.append(exc)
        finally:
            consumer.close()

    first = threading.Thread(target=worker, args=("a",), daemon=True)
    first.start()
    deadline = time.monotonic() + 60
    while processed["a"] < 8 and time.monotonic() < deadline and not errors:
        time.sleep(0.1)
    second = threading.Thread(target=worker, args=("b",), daemon=True)
    second.start()
    try:
        got: list[bytes] = []
        while time.monotonic() < deadline and not errors:
            got = _read(bootstrap, sink, "read_committed", len(expected) + 1, timeout_s=3)
            if len(got) >= len(expected) and assigned["b"]:
                break
    finally:
        stop.set()
        first.join(TIMEOUT_S)
        second.join(TIMEOUT_S)
    assert not errors, errors
    assert assigned["b"], "the second member never got a partition: no rebalance happened"
    # Settled: nothing more arrives, and each input is in the output exactly once.
    got = _read(bootstrap, sink, "read_committed", len(expected) + 1, timeout_s=3)
    assert sorted(got) == sorted(expected)
