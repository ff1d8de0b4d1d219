"""A transaction left open past its ``transaction.timeout.ms`` is aborted by the broker: its records
never reach read_committed, the last stable offset moves past the ABORT marker, and the producer is
fenced (its epoch was bumped).

Broker-agnostic: ``INTEGRATION_BROKER=kafka`` runs the same checks against Apache Kafka.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from confluent_kafka import IsolationLevel, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from compat_tests.scenarios.support import wait_for

from .conftest import launch

TIMEOUT_S = 30.0


def test_open_transaction_is_aborted_on_its_timeout(tmp_path: Path) -> None:
    broker = launch(tmp_path, {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"})
    broker.start()
    try:
        bootstrap = broker.bootstrap
        topic = f"txto-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(TIMEOUT_S)
        producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "transactional.id": f"to-{uuid.uuid4().hex[:8]}",
                "transaction.timeout.ms": 3000,
            }
        )
        producer.init_transactions(TIMEOUT_S)
        producer.begin_transaction()
        for i in range(4):
            producer.produce(topic, value=b"hanging-%d" % i)
        producer.flush(TIMEOUT_S)
        tp = TopicPartition(topic, 0)

        def latest(level: IsolationLevel) -> int:
            return admin.list_offsets({tp: OffsetSpec.latest()}, isolation_level=level)[tp].result().offset

        assert latest(IsolationLevel.READ_COMMITTED) == 0
        # 4 records and the ABORT marker: the LSO reaches the log end once the broker aborted it.
        wait_for(
            lambda: latest(IsolationLevel.READ_COMMITTED) == 5 == latest(IsolationLevel.READ_UNCOMMITTED),
            30,
            "the broker to abort the timed-out transaction",
        )
        with pytest.raises(KafkaException):
            producer.commit_transaction(TIMEOUT_S)
    finally:
        broker.stop()
