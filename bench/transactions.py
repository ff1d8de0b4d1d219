"""Transactional produce throughput: a confluent-kafka (librdkafka) transactional producer sends
1 KiB records and commits a transaction every 100 ms; MB/s and transactions/s per system, with the
ratio to Apache Kafka.  A benchmark: prints, never asserts.

    python -m bench.transactions                      # pybroker and Kafka, medians of 3 interleaved runs
    python -m bench.transactions --quick              # one short run each (a smoke check, not a figure)
    python -m bench.transactions --systems pybroker   # one system only
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.systems import make_broker


def transactional_produce(
    bootstrap: str, megabytes: int, record_size: int, txn_ms: int
) -> tuple[float, float]:
    """(MB/s, transactions/s) for ``megabytes`` MiB of ``record_size``-byte records."""
    topic = f"txn-bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(60)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"bench-{uuid.uuid4().hex[:8]}",
            "linger.ms": 5,
            "queue.buffering.max.kbytes": 1_048_576,
            "queue.buffering.max.messages": 1_000_000,
            "compression.type": "none",
        }
    )
    producer.init_transactions(60)
    value = b"x" * record_size
    records = megabytes * 1024 * 1024 // record_size
    transactions = 0
    started = time.perf_counter()
    producer.begin_transaction()
    txn_started = started
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.005)
        now = time.perf_counter()
        if (now - txn_started) * 1000 >= txn_ms:
            producer.commit_transaction(60)
            transactions += 1
            producer.begin_transaction()
            txn_started = time.perf_counter()
    producer.commit_transaction(60)
    transactions += 1
    elapsed = time.perf_counter() - started
    return records * record_size / elapsed / 1e6, transactions / elapsed


def one_run(system: str, megabytes: int, record_size: int, txn_ms: int) -> tuple[float, float]:
    with tempfile.TemporaryDirectory(prefix="pybroker-bench-") as tmp:
        broker = make_broker(system, Path(tmp))
        bootstrap = broker.start()
        try:
            transactional_produce(bootstrap, 1, record_size, txn_ms)  # warm-up (connections, JIT)
            return transactional_produce(bootstrap, megabytes, record_size, txn_ms)
        finally:
            broker.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--systems", default="pybroker,kafka")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--megabytes", type=int, default=1024, help="MiB sent per run (default 1 GiB)")
    ap.add_argument("--record-size", type=int, default=1024)
    ap.add_argument("--txn-ms", type=int, default=100, help="commit a transaction this often")
    ap.add_argument("--quick", action="store_true", help="one run of 64 MiB per system")
    args = ap.parse_args()
    if args.quick:
        args.runs, args.megabytes = 1, 64
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    results: dict[str, list[tuple[float, float]]] = {s: [] for s in systems}
    for _ in range(args.runs):
        for system in systems:  # interleaved, so machine drift hits both alike
            mb_s, txn_s = one_run(system, args.megabytes, args.record_size, args.txn_ms)
            results[system].append((mb_s, txn_s))
            print(f"{system:9} {mb_s:8.1f} MB/s {txn_s:6.1f} txn/s", flush=True)
    print(
        f"\n| system | MB/s | transactions/s | ratio to Kafka |  "
        f"({args.record_size} B records, a commit every {args.txn_ms} ms, {args.megabytes} MiB, "
        f"median of {args.runs})"
    )
    print("|---|---|---|---|")
    medians = {s: statistics.median(r[0] for r in rs) for s, rs in results.items()}
    for system, rs in results.items():
        ratio = f"{medians[system] / medians['kafka']:.2f}×" if "kafka" in medians else "-"
        print(f"| {system} | {medians[system]:.1f} | {statistics.median(r[1] for r in rs):.1f} | {ratio} |")


if __name__ == "__main__":
    main()
