"""Spark's Kafka source over transactional data: with ``kafka.isolation.level=read_committed`` it
gets exactly the committed records (aborted ones and the markers' offsets are skipped), and the
default read_uncommitted gets the aborted ones too.  ``SPARK_TEST_BROKER=apache`` runs it on Kafka."""

from __future__ import annotations

import uuid

from confluent_kafka import Producer

from spark_examples.events import create_topic
from tests.spark.conftest import unique_topic


def test_read_committed_gets_exactly_the_committed_records(spark, bootstrap) -> None:
    topic = unique_topic("txn")
    create_topic(bootstrap, topic, 1)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"spark-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(30)
    expected_committed, expected_all = [], []
    for n in range(6):
        commit = n % 3 != 1  # transactions 1 and 4 are aborted
        producer.begin_transaction()
        for i in range(5):
            value = f"t{n}-{i}-{'c' if commit else 'a'}"
            producer.produce(topic, value=value.encode())
            expected_all.append(value)
            if commit:
                expected_committed.append(value)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.flush(30)
            producer.abort_transaction(30)

    def read(isolation: str) -> list[str]:
        df = (
            spark.read.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("kafka.isolation.level", isolation)
            .load()
        )
        rows = df.selectExpr("CAST(value AS STRING) AS value", "offset").orderBy("offset").collect()
        return [r.value for r in rows]

    assert read("read_committed") == expected_committed
    assert read("read_uncommitted") == expected_all
