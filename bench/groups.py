"""Consumer-group figures: how long 3 members take from subscribe() to all 6 partitions assigned,
and how many synchronous commits per second one client gets.  A benchmark: prints, never asserts.

    python -m bench.groups                 # pybroker, medians of 3 runs
    python -m bench.groups --with-kafka    # Apache Kafka 4.3.1 too, interleaved, with ratios

Both brokers run with group.initial.rebalance.delay.ms=0 (Kafka's default 3 s delay would
dominate the rebalance figure).  Clients: confluent-kafka (librdkafka) and kafka-python.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.structs import OffsetAndMetadata

from compat_tests.brokers import PyBroker

SETTINGS = {"group.initial.rebalance.delay.ms": "0"}


def rebalance_seconds(bootstrap: str, topic: str) -> float:
    group = f"bench-{uuid.uuid4().hex[:8]}"
    members = [
        Consumer({"bootstrap.servers": bootstrap, "group.id": group, "session.timeout.ms": 6000})
        for _ in range(3)
    ]
    t0 = time.monotonic()
    for m in members:
        m.subscribe([topic])
    deadline = t0 + 60
    while time.monotonic() < deadline:
        for m in members:
            m.poll(0.01)
        if all(m.assignment() for m in members) and sum(len(m.assignment()) for m in members) == 6:
            break
    else:
        raise SystemExit("the group did not settle within 60 s")
    elapsed = time.monotonic() - t0
    for m in members:
        m.close()
    return elapsed


def confluent_commits_per_s(bootstrap: str, topic: str, n: int) -> float:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"commit-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
        }
    )
    t0 = time.monotonic()
    for i in range(n):
        c.commit(offsets=[TopicPartition(topic, 0, i + 1)], asynchronous=False)
    rate = n / (time.monotonic() - t0)
    c.close()
    return rate


def kafka_python_commits_per_s(bootstrap: str, topic: str, n: int) -> float:
    c = KafkaConsumer(
        bootstrap_servers=bootstrap, group_id=f"commit-{uuid.uuid4().hex[:8]}", enable_auto_commit=False
    )
    t0 = time.monotonic()
    for i in range(n):
        c.commit({KafkaTopicPartition(topic, 0): OffsetAndMetadata(i + 1, "", -1)})
    rate = n / (time.monotonic() - t0)
    c.close()
    return rate


def one_run(system: str, commits: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="pybroker-bench-") as tmp:
        if system == "kafka":
            from compat_tests.reference.apache_kafka import ApacheKafka

            broker = ApacheKafka(Path(tmp), overrides=SETTINGS)
        else:
            broker = PyBroker(tmp, overrides=SETTINGS)
        bootstrap = broker.start()
        try:
            topic = f"groups-{uuid.uuid4().hex[:8]}"
            admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the result arrives
            admin.create_topics([NewTopic(topic, 6, 1)])[topic].result()
            return {
                "system": system,
                "rebalance_s": rebalance_seconds(bootstrap, topic),
                "confluent_commits": confluent_commits_per_s(bootstrap, topic, commits),
                "kafka_python_commits": kafka_python_commits_per_s(bootstrap, topic, commits),
            }
        finally:
            broker.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--commits", type=int, default=2000)
    ap.add_argument("--with-kafka", action="store_true")
    args = ap.parse_args()
    systems = ["pybroker", "kafka"] if args.with_kafka else ["pybroker"]
    rows = []
    for _ in range(args.runs):
        for system in systems:  # interleaved, so machine drift hits both alike
            row = one_run(system, args.commits)
            rows.append(row)
            print(
                f"{system:9} rebalance {row['rebalance_s']:.3f} s  commits/s confluent {row['confluent_commits']:.0f}"
                f"  kafka-python {row['kafka_python_commits']:.0f}",
                flush=True,
            )
    print(f"\nmedians of {args.runs} runs (3 members, 6 partitions, initial rebalance delay 0):")
    med = {}
    for system in systems:
        rs = [r for r in rows if r["system"] == system]
        med[system] = {
            k: statistics.median(r[k] for r in rs)
            for k in ("rebalance_s", "confluent_commits", "kafka_python_commits")
        }
        m = med[system]
        print(
            f"{system:9} rebalance {m['rebalance_s']:.3f} s  commits/s confluent {m['confluent_commits']:.0f}"
            f"  kafka-python {m['kafka_python_commits']:.0f}"
        )
    if "kafka" in med:
        p, k = med["pybroker"], med["kafka"]
        print(
            f"pybroker/Kafka: rebalance time {p['rebalance_s'] / k['rebalance_s']:.2f}x, "
            f"commit rate {p['confluent_commits'] / k['confluent_commits']:.2f}x (confluent), "
            f"{p['kafka_python_commits'] / k['kafka_python_commits']:.2f}x (kafka-python)"
        )


if __name__ == "__main__":
    main()
