"""Spark batch-read throughput on pybroker and Apache Kafka in the same run (not a test).

    python -m spark_examples.bench_read [--records 1000000] [--record-bytes 200] [--partitions 4]

Each broker gets the same records (confluent-kafka producer); the read is timed around one batch
``read.format("kafka")`` query that touches every value (``sum(length(value))``).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer

from compat_tests.brokers import PyBroker
from compat_tests.reference.apache_kafka import ApacheKafka
from spark_examples.common import build_spark
from spark_examples.events import create_topic


def fill(bootstrap: str, topic: str, records: int, record_bytes: int, partitions: int) -> None:
    create_topic(bootstrap, topic, partitions)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 1_000_000, "acks": "1"})
    value = b"x" * record_bytes
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value=value, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(300) == 0


def timed_read(spark, bootstrap: str, topic: str) -> tuple[int, float]:
    started = time.monotonic()
    row = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .load()
        .selectExpr("count(*) AS n", "sum(length(value)) AS bytes")
        .collect()[0]
    )
    return row.n, time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--record-bytes", type=int, default=200)
    parser.add_argument("--partitions", type=int, default=4)
    args = parser.parse_args()
    spark = build_spark("bench-read")
    workdir = Path(tempfile.mkdtemp(prefix="spark-bench-"))
    for name, broker in (("pybroker", PyBroker(workdir / "pybroker")), ("apache-kafka", ApacheKafka(workdir / "kafka"))):
        bootstrap = broker.start()
        try:
            fill(bootstrap, "bench", args.records, args.record_bytes, args.partitions)
            timed_read(spark, bootstrap, "bench")  # warm-up: JIT, consumer pools
            rows, seconds = timed_read(spark, bootstrap, "bench")
            assert rows == args.records, f"{name}: read {rows} rows, produced {args.records}"
            print(f"{name}: {rows} rows of {args.record_bytes} B in {seconds:.2f}s = {rows / seconds:,.0f} rows/s")
        finally:
            broker.stop()
    spark.stop()


if __name__ == "__main__":
    main()
