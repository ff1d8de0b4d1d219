"""Fixtures for the Spark tests: one real broker per module, one local[2] SparkSession for the run.

SPARK_TEST_BROKER=apache runs the same tests against the reference Apache Kafka instead of pybroker.
Without PySpark installed (``bash scripts/install-deps.sh spark``) the tests are skipped, except under
CI=true where that is an error.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

if not os.environ.get("CI"):
    pytest.importorskip("pyspark", reason="PySpark is not installed: bash scripts/install-deps.sh spark")

from confluent_kafka import Consumer, TopicPartition  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402

from compat_tests.brokers import PyBroker  # noqa: E402
from spark_examples.common import build_spark  # noqa: E402

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    workdir = tmp_path_factory.mktemp("broker")
    if os.environ.get("SPARK_TEST_BROKER") == "apache":
        from compat_tests.reference.apache_kafka import ApacheKafka

        broker = ApacheKafka(workdir)
    else:
        broker = PyBroker(workdir)
    address = broker.start()
    try:
        yield address
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = build_spark("pybroker-spark-tests")
    try:
        yield session
    finally:
        session.stop()


def unique_topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def read_all(bootstrap: str, topic: str, partitions: int, min_records: int, timeout_s: float = 120) -> list:
    """Every record of ``topic`` once at least ``min_records`` are there (deadline ``timeout_s``)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        records: list = []
        next_offset: dict[int, int] = {}
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for message in consumer.consume(500, timeout=0.5):
                if message.error() is None:
                    records.append(message)
                    next_offset[message.partition()] = message.offset() + 1
            if len(records) < min_records:
                continue
            marks = [
                consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                for p in range(partitions)
            ]
            if all(next_offset.get(p, low) >= high for p, (low, high) in enumerate(marks)):
                return records
        raise AssertionError(
            f"{topic}: {len(records)} records after {timeout_s}s, wanted at least {min_records}"
        )
    finally:
        consumer.close()


def results_by_key(records: list) -> dict[str, dict]:
    """Result records keyed by their key; identical duplicates (at-least-once sink) collapse, different values fail."""
    import json

    results: dict[str, dict] = {}
    for record in records:
        key = record.key().decode()
        value = json.loads(record.value())
        if key in results and results[key] != value:
            raise AssertionError(f"two different results for {key}: {results[key]} and {value}")
        results[key] = value
    return results


def checkpoint_dir(tmp_path: Path) -> str:
    return str(tmp_path / "checkpoint")
