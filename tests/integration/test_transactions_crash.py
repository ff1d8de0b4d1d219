"""kill -9 in the middle of a transaction: after the restart the coordinator and the logs recover
it from disk, read_committed never sees it half-done, and the broker aborts it on its timeout."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from compat_tests.brokers import PyBroker
from compat_tests.clients.confluent import ConfluentClient
from compat_tests.scenarios.support import wait_for

CLIENT = ConfluentClient()
TIMEOUT_S = 30.0


def read_all(bootstrap: str, topic: str, isolation: str, settle_s: float = 2.0) -> list[bytes]:
    """Every record readable now at ``isolation`` (until nothing new arrives for ``settle_s``)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"r-{uuid.uuid4().hex[:8]}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + TIMEOUT_S
        quiet_since = time.monotonic()
        eof = False
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                if eof and time.monotonic() - quiet_since > settle_s:
                    break
                continue
            if msg.error():
                eof = True  # partition EOF: caught up to the (isolation's) end
                continue
            got.append(msg.value())
            quiet_since = time.monotonic()
        return got
    finally:
        consumer.close()


def test_kill9_mid_transaction_is_never_half_visible_and_times_out(tmp_path: Path) -> None:
    broker = PyBroker(
        tmp_path, overrides={"transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"}
    )
    broker.start()
    try:
        bootstrap = broker.bootstrap
        topic = "txn-crash"
        CLIENT.create_topic(bootstrap, topic, partitions=1)
        txn_id = f"crash-{uuid.uuid4().hex[:8]}"
        producer = Producer(
            {"bootstrap.servers": bootstrap, "transactional.id": txn_id, "transaction.timeout.ms": 12000}
        )
        producer.init_transactions(TIMEOUT_S)
        producer.begin_transaction()
        for i in range(3):
            producer.produce(topic, value=b"committed-%d" % i)
        producer.commit_transaction(TIMEOUT_S)
        producer.begin_transaction()
        for i in range(5):
            producer.produce(topic, value=b"open-%d" % i)
        producer.flush(TIMEOUT_S)
        assert read_all(bootstrap, topic, "read_uncommitted")[-5:] == [b"open-%d" % i for i in range(5)]

        broker.kill9()
        broker.start()
        committed = [b"committed-%d" % i for i in range(3)]
        # Recovered from disk: the open transaction still holds back read_committed ...
        assert read_all(bootstrap, topic, "read_committed") == committed
        # ... until the coordinator aborts it on its timeout (12 s from its start).
        from confluent_kafka import IsolationLevel
        from confluent_kafka.admin import AdminClient, OffsetSpec

        admin = AdminClient({"bootstrap.servers": bootstrap})
        tp = TopicPartition(topic, 0)

        def latest(level: IsolationLevel) -> int:
            return admin.list_offsets({tp: OffsetSpec.latest()}, isolation_level=level)[tp].result().offset

        assert latest(IsolationLevel.READ_COMMITTED) == 4  # the open transaction's first offset
        # records, COMMIT marker, open records, ABORT marker: the LSO reaches the end
        wait_for(
            lambda: latest(IsolationLevel.READ_COMMITTED) == 10 == latest(IsolationLevel.READ_UNCOMMITTED),
            40,
            "the broker to abort the timed-out transaction",
        )
        assert read_all(bootstrap, topic, "read_committed") == committed
        assert read_all(bootstrap, topic, "read_uncommitted") == committed + [
            b"open-%d" % i for i in range(5)
        ]

        # The old producer instance was fenced by the abort; a new one continues the transactional id.
        again = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id})
        again.init_transactions(TIMEOUT_S)
        again.begin_transaction()
        again.produce(topic, value=b"after")
        again.commit_transaction(TIMEOUT_S)
        assert read_all(bootstrap, topic, "read_committed") == committed + [b"after"]

        # And the whole state survives a second crash right after the commit.
        broker.kill9()
        broker.start()
        assert read_all(bootstrap, topic, "read_committed") == committed + [b"after"]
    finally:
        broker.stop()


def test_kill9_between_prepare_commit_and_the_markers_completes_the_commit_on_restart(tmp_path: Path) -> None:
    """The coordinator wrote PrepareCommit (EndTxn answered: the outcome is durable) but no marker reached
    the partition when the broker died. On restart it replays PrepareCommit and writes the markers, as
    Kafka's TransactionStateManager does: the commit becomes visible to read_committed, whole.

    The markers are held back by a test-only hook that makes them fail as on a failed disk
    (pybroker/coordinator/transaction/service.py FAIL_MARKERS_ENV); the restart runs without it."""
    from pybroker.coordinator.transaction.service import FAIL_MARKERS_ENV

    topic = "txn-prepared"
    broker = PyBroker(tmp_path, env={FAIL_MARKERS_ENV: topic})
    broker.start()
    try:
        bootstrap = broker.bootstrap
        CLIENT.create_topic(bootstrap, topic, partitions=1)
        txn_id = f"prepared-{uuid.uuid4().hex[:8]}"
        producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id})
        producer.init_transactions(TIMEOUT_S)
        producer.begin_transaction()
        values = [b"prepared-%d" % i for i in range(4)]
        for value in values:
            producer.produce(topic, value=value)
        producer.commit_transaction(TIMEOUT_S)  # answered once PrepareCommit is written
        assert read_all(bootstrap, topic, "read_uncommitted") == values
        assert read_all(bootstrap, topic, "read_committed", settle_s=1.0) == []  # no COMMIT marker yet
        assert "PrepareCommit" in _transaction_state(bootstrap, txn_id)

        broker.kill9()
        broker.extra_env.pop(FAIL_MARKERS_ENV)
        broker.start()
        wait_for(lambda: _transaction_state(bootstrap, txn_id) == "CompleteCommit", 30, "CompleteCommit")
        assert read_all(bootstrap, topic, "read_committed") == values
        again = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id})
        again.init_transactions(TIMEOUT_S)
        again.begin_transaction()
        again.produce(topic, value=b"after")
        again.commit_transaction(TIMEOUT_S)
        assert read_all(bootstrap, topic, "read_committed") == [*values, b"after"]
    finally:
        broker.stop()


def _transaction_state(bootstrap: str, transactional_id: str) -> str:
    """DescribeTransactions (API 65) on the wire: the coordinator's state name for the id."""
    from tests.wire import WireClient

    with WireClient(bootstrap) as wire:
        answer = wire.request(65, 0, {"transactional_ids": [transactional_id]})
    (state,) = answer["transaction_states"]
    assert state["error_code"] == 0, state
    return state["transaction_state"]
