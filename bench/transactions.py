"""Transactional produce throughput: a confluent-kafka (librdkafka) transactional producer sends
1 KiB records and commits a transaction every 100 ms; MB/s, transactions/s and the broker's CPU
seconds per GB per system, with the ratios to Apache Kafka (stock JVM options, as bench.compare).
Each broker start is warmed up with 256 MiB of the same load first (Kafka's JIT).  A benchmark:
prints, never asserts.

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

from bench.sysstat import cpu_seconds
from bench.systems import broker_pid, make_broker


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


def one_run(
    system: str, megabytes: int, record_size: int, txn_ms: int, warmup_mib: int
) -> tuple[float, float, float]:
    """(MB/s, transactions/s, broker CPU seconds per GB) of one measured run after a warm-up."""
    with tempfile.TemporaryDirectory(prefix="pybroker-bench-") as tmp:
        broker = make_broker(system, Path(tmp))
        bootstrap = broker.start()
        try:
            transactional_produce(bootstrap, warmup_mib, record_size, txn_ms)  # connections, JIT
            pid = broker_pid(broker)
            cpu_before = cpu_seconds(pid)
            mb_s, txn_s = transactional_produce(bootstrap, megabytes, record_size, txn_ms)
            cpu = cpu_seconds(pid) - cpu_before
            return mb_s, txn_s, cpu / (megabytes * 2**20 / 1e9)
        finally:
            broker.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--systems", default="pybroker,kafka")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--megabytes", type=int, default=1024, help="MiB sent per run (default 1 GiB)")
    ap.add_argument("--record-size", type=int, default=1024)
    ap.add_argument("--txn-ms", type=int, default=100, help="commit a transaction this often")
    ap.add_argument("--warmup-mib", type=int, default=256, help="warm-up volume per broker start")
    ap.add_argument("--quick", action="store_true", help="one run of 64 MiB per system")
    args = ap.parse_args()
    if args.quick:
        args.runs, args.megabytes, args.warmup_mib = 1, 64, 8
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    results: dict[str, list[tuple[float, float, float]]] = {s: [] for s in systems}
    for _ in range(args.runs):
        for system in systems:  # interleaved, so machine drift hits both alike
            mb_s, txn_s, cpu_gb = one_run(
                system, args.megabytes, args.record_size, args.txn_ms, args.warmup_mib
            )
            results[system].append((mb_s, txn_s, cpu_gb))
            print(f"{system:9} {mb_s:8.1f} MB/s {txn_s:6.1f} txn/s {cpu_gb:6.2f} CPU s/GB", flush=True)
    print(
        f"\n| system | MB/s | transactions/s | CPU s/GB | MB/s ÷ Kafka | CPU s/GB ÷ Kafka |  "
        f"({args.record_size} B records, a commit every {args.txn_ms} ms, {args.megabytes} MiB, "
        f"median of {args.runs})"
    )
    print("|---|---|---|---|---|---|")
    medians = {s: [statistics.median(r[i] for r in rs) for i in range(3)] for s, rs in results.items()}
    for system, (mb_s, txn_s, cpu_gb) in medians.items():
        kafka = medians.get("kafka")
        ratios = (f"{mb_s / kafka[0]:.2f}×", f"{cpu_gb / kafka[2]:.2f}×") if kafka else ("-", "-")
        print(f"| {system} | {mb_s:.1f} | {txn_s:.1f} | {cpu_gb:.2f} | {ratios[0]} | {ratios[1]} |")


if __name__ == "__main__":
    main()
