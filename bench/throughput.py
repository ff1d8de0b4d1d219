"""Produce then consume N bytes of fixed-size records through one partition; print MB/s and the
broker's peak RSS.  A benchmark, not a test: it never asserts a time.

    python -m bench.throughput                       # 1 GiB of 1 KiB records, pybroker on uvloop
    python -m bench.throughput --loop asyncio        # the same on asyncio's own event loop
    python -m bench.throughput --bootstrap H:P       # against an already running broker (no RSS)
    python -m bench.throughput --runs 3 --loop both  # medians of 3 runs, uvloop and asyncio interleaved

The producer is confluent-kafka (librdkafka); the data is then consumed twice, by confluent-kafka
(Python, with a per-record cost in the client) and by kcat (C), each in its own process on the
same two cores as the broker, so a client-bound figure is possible.  MB/s = 10^6 bytes/s.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition

from bench.sysstat import cpu_seconds, peak_rss_mb
from compat_tests.brokers import PyBroker


def produce(bootstrap: str, topic: str, total_bytes: int, record_size: int) -> tuple[int, float]:
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "1",
            "linger.ms": 5,
            "batch.size": 1_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
            "queue.buffering.max.messages": 1_000_000,
            "enable.idempotence": False,
            "compression.type": "none",
        }
    )
    value = b"x" * record_size
    n = total_bytes // record_size
    errors = []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(err)

    # Warm the connection and metadata before timing.
    p.produce(topic, value, partition=0, on_delivery=on_delivery)
    p.flush(30)
    t0 = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                p.produce(topic, value, partition=0, on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.005)
    remaining = p.flush(300)
    elapsed = time.perf_counter() - t0
    if errors or remaining:
        raise SystemExit(f"produce failed: {errors[:3]} remaining={remaining}")
    return n + 1, elapsed


def consume(bootstrap: str, topic: str, expected: int) -> tuple[int, float]:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4()}",
            "enable.auto.commit": False,
            "fetch.max.bytes": 52_428_800,
            "max.partition.fetch.bytes": 10_485_760,
            "queued.max.messages.kbytes": 1_048_576,
            "fetch.wait.max.ms": 100,
            "isolation.level": "read_uncommitted",
        }
    )
    c.assign([TopicPartition(topic, 0, 0)])
    got = 0
    nbytes = 0
    t0 = time.perf_counter()
    deadline = t0 + 600
    while got < expected and time.perf_counter() < deadline:
        for m in c.consume(num_messages=10_000, timeout=1.0):
            if m.error():
                raise SystemExit(f"consume error: {m.error()}")
            got += 1
            nbytes += len(m.value())
    elapsed = time.perf_counter() - t0
    c.close()
    if got < expected:
        raise SystemExit(f"consumed only {got} of {expected}")
    return nbytes, elapsed


def consume_kcat(bootstrap: str, topic: str, expected: int, record_size: int) -> tuple[int, float]:
    """kcat (librdkafka in C) reads without a per-record Python cost, so it shows the broker's side."""
    t0 = time.perf_counter()
    out = subprocess.run(
        [
            "kcat",
            "-C",
            "-b",
            bootstrap,
            "-t",
            topic,
            "-p",
            "0",
            "-o",
            "beginning",
            "-e",
            "-q",
            "-f",
            "%o\n",
            "-X",
            "fetch.max.bytes=52428800",
        ],
        capture_output=True,
        timeout=600,
        check=True,
    )
    elapsed = time.perf_counter() - t0
    got = out.stdout.count(b"\n")
    if got < expected:
        raise SystemExit(f"kcat consumed only {got} of {expected}: {out.stderr[-500:]!r}")
    return got * record_size, elapsed


def one_run(args, loop: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="pybroker-bench-") as tmp:
        broker = None
        if args.bootstrap:
            bootstrap = args.bootstrap
        else:
            broker = PyBroker(
                tmp,
                overrides={"log.segment.bytes": str(256 * 1024 * 1024)},
                extra_args=["--event-loop", loop],
                env={"PYBROKER_SENDFILE": "0" if args.no_sendfile else "1"},
            )
            bootstrap = broker.start()
        try:
            topic = f"bench-{uuid.uuid4().hex[:8]}"
            n, p_elapsed = produce(bootstrap, topic, args.bytes, args.record_size)
            produced_bytes = n * args.record_size
            c_bytes, c_elapsed = consume(bootstrap, topic, n)
            k_bytes, k_elapsed = consume_kcat(bootstrap, topic, n, args.record_size)
            row = {
                "loop": loop,
                "records": n,
                "produce_MBps": produced_bytes / p_elapsed / 1e6,
                "consume_MBps": c_bytes / c_elapsed / 1e6,
                "kcat_consume_MBps": k_bytes / k_elapsed / 1e6,
                "rss_MB": peak_rss_mb(broker.pid) if broker else float("nan"),
                "broker_cpu_s": cpu_seconds(broker.pid) if broker else float("nan"),
            }
        finally:
            if broker is not None:
                broker.stop()
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bytes", type=lambda s: int(float(s)), default=1 << 30)
    ap.add_argument("--record-size", type=int, default=1024)
    ap.add_argument("--bootstrap")
    ap.add_argument("--loop", choices=["uvloop", "asyncio", "both"], default="uvloop")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument(
        "--no-sendfile", action="store_true", help="serve fetches by pread only (PYBROKER_SENDFILE=0)"
    )
    args = ap.parse_args()
    loops = ["uvloop", "asyncio"] if args.loop == "both" else [args.loop]
    rows = []
    for _ in range(args.runs):
        for loop in loops:  # interleaved, so machine drift hits every variant alike
            row = one_run(args, loop)
            rows.append(row)
            print(
                f"{row['loop']:8} records={row['records']:,} produce={row['produce_MBps']:.1f} MB/s "
                f"consume={row['consume_MBps']:.1f} MB/s kcat_consume={row['kcat_consume_MBps']:.1f} MB/s peak_rss={row['rss_MB']:.1f} MB cpu={row['broker_cpu_s']:.1f}s",
                flush=True,
            )
    print(
        f"\nmedians of {args.runs} run(s), {args.bytes / 2**30:.2f} GiB of {args.record_size} B records, one partition:"
    )
    print(f"{'loop':8} {'produce MB/s':>12} {'consume MB/s':>12} {'kcat consume':>12} {'peak RSS MB':>11}")
    for loop in loops:
        rs = [r for r in rows if r["loop"] == loop]
        print(
            f"{loop:8} {statistics.median(r['produce_MBps'] for r in rs):12.1f} "
            f"{statistics.median(r['consume_MBps'] for r in rs):12.1f} "
            f"{statistics.median(r['kcat_consume_MBps'] for r in rs):12.1f} {statistics.median(r['rss_MB'] for r in rs):11.1f}"
        )


if __name__ == "__main__":
    main()
