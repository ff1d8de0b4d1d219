"""Kafka source semantics that must hold on pybroker as on Apache Kafka."""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions
from pyspark.errors import StreamingQueryException

from spark_examples.events import create_topic
from tests.spark.conftest import unique_topic


def produce_values(
    bootstrap: str, topic: str, partition: int, values: list[str], config: dict | None = None
) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, **(config or {})})
    for value in values:
        producer.produce(topic, value=value.encode(), partition=partition)
    assert producer.flush(30) == 0


def stream(spark, bootstrap: str, topic: str, **options: str):
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def run_available_now(df, name: str, checkpoint: str):
    query = (
        df.selectExpr("CAST(value AS STRING) AS value", "partition", "offset")
        .writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    return query


def test_max_offsets_per_trigger(spark, bootstrap, tmp_path):
    topic = unique_topic("mopt")
    create_topic(bootstrap, topic, 2)
    for partition in range(2):
        produce_values(bootstrap, topic, partition, [f"{partition}-{i}" for i in range(150)])
    query = run_available_now(
        stream(spark, bootstrap, topic, startingOffsets="earliest", maxOffsetsPerTrigger="40"),
        "mopt",
        str(tmp_path),
    )
    assert query.exception() is None
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"] > 0]
    assert max(sizes) <= 40 and sum(sizes) == 300 and len(sizes) >= 8, sizes
    rows = spark.sql("SELECT value FROM mopt").collect()
    assert sorted(r.value for r in rows) == sorted(f"{p}-{i}" for p in range(2) for i in range(150))


def test_min_partitions(spark, bootstrap):
    topic = unique_topic("minp")
    create_topic(bootstrap, topic, 2)
    for partition in range(2):
        produce_values(bootstrap, topic, partition, [f"{partition}-{i}" for i in range(100)])
    df = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("minPartitions", "6")
        .load()
    )
    assert df.rdd.getNumPartitions() >= 6
    assert sorted(r.value.decode() for r in df.select("value").collect()) == sorted(
        f"{p}-{i}" for p in range(2) for i in range(100)
    )


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_fail_on_data_loss_after_delete_records(spark, bootstrap, tmp_path, fail_on_data_loss):
    """The checkpoint says "resume at 100"; records 100..149 are deleted before the restart."""
    topic = unique_topic("loss")
    create_topic(bootstrap, topic, 1)
    produce_values(bootstrap, topic, 0, [str(i) for i in range(100)])
    options = {"startingOffsets": "earliest", "failOnDataLoss": str(fail_on_data_loss).lower()}
    output = str(tmp_path / "out")

    def run():
        query = (
            stream(spark, bootstrap, topic, **options)
            .selectExpr("CAST(value AS STRING) AS value")
            .writeStream.format("parquet")  # a sink that can resume from its checkpoint (memory cannot)
            .option("path", output)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        try:
            query.awaitTermination(120)
        except StreamingQueryException:
            pass  # kept in query.exception(), asserted below
        return query

    first = run()
    assert first.exception() is None

    produce_values(bootstrap, topic, 0, [str(i) for i in range(100, 200)])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_records([TopicPartition(topic, 0, 150)]).values():
        future.result(30)

    second = run()
    if fail_on_data_loss:
        assert second.exception() is not None, "the lost offsets 100..149 must fail the query"
    else:
        assert second.exception() is None
        values = sorted(int(r.value) for r in spark.read.parquet(output).collect())
        assert values == list(range(100)) + list(range(150, 200))


def test_new_partitions_are_picked_up(spark, bootstrap, tmp_path):
    topic = unique_topic("grow")
    create_topic(bootstrap, topic, 2)
    query = (
        stream(spark, bootstrap, topic, startingOffsets="earliest")
        .selectExpr("CAST(value AS STRING) AS value", "partition")
        .writeStream.format("memory")
        .queryName("grow")
        .option("checkpointLocation", str(tmp_path))
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    try:
        for partition in range(2):
            produce_values(bootstrap, topic, partition, [f"{partition}-{i}" for i in range(10)])
        wait_for_rows(spark, query, "grow", 20)
        admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the future resolves
        futures = admin.create_partitions([NewPartitions(topic, 4)])
        futures[topic].result(30)
        for partition in (2, 3):
            produce_values(bootstrap, topic, partition, [f"{partition}-{i}" for i in range(10)])
        wait_for_rows(spark, query, "grow", 40)
        rows = spark.sql("SELECT value, partition FROM grow").collect()
        assert sorted(r.value for r in rows) == sorted(f"{p}-{i}" for p in range(4) for i in range(10))
    finally:
        query.stop()


def wait_for_rows(spark, query, table: str, count: int, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert query.exception() is None, query.exception()
        if spark.sql(f"SELECT count(*) AS n FROM {table}").collect()[0].n >= count:
            return
        query.awaitTermination(0.3)
    raise AssertionError(f"{table}: fewer than {count} rows after {timeout_s}s")


def test_read_committed(spark, bootstrap):
    """kafka.isolation.level=read_committed over non-transactional data reads every record."""
    topic = unique_topic("rc")
    create_topic(bootstrap, topic, 1)
    produce_values(bootstrap, topic, 0, [f"plain-{i}" for i in range(20)])

    def read(isolation: str) -> list[str]:
        df = (
            spark.read.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("kafka.isolation.level", isolation)
            .option("startingOffsets", json.dumps({topic: {"0": -2}}))
            .load()
        )
        return sorted(r.value.decode() for r in df.select("value").collect())

    expected = sorted(f"plain-{i}" for i in range(20))
    assert read("read_committed") == expected
    assert read("read_uncommitted") == expected
