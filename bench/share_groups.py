"""Share-group consume throughput: 3 KafkaShareConsumers (kafka-clients 4.3.1) on 1 partition, 1 KiB
records, explicit acknowledgement (every record ACCEPTed, committed per poll). A benchmark: prints,
never asserts.

    python -m bench.share_groups                      # pybroker, 20 000 records
    python -m bench.share_groups --with-kafka         # Apache Kafka 4.3.1 too, same load, with the ratio
    python -m bench.share_groups --records 200000 --runs 3
    python -m bench.share_groups --client confluent   # confluent-kafka's ShareConsumer (librdkafka) instead
    python -m bench.share_groups --py-spy /tmp/share.svg  # py-spy's profile of the broker over the runs

The clock runs from the first delivered record to the last one of the topic (JVM start-up and the
share group's first heartbeat are left out); each consumer prints one JSON line per record, a cost
both brokers share. The broker's CPU seconds (user + system, all its threads, from /proc) over the same
span are reported per GB consumed: on a machine the consumers share with the broker, a steadier figure
than MB/s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.sysstat import cpu_seconds
from compat_tests.brokers import PyBroker
from compat_tests.clients.java43 import java43_command
from compat_tests.clients.share_consume import REPO_ROOT, SHARE_CLIENTS, share_consume_command
from pybroker._compiled import PURE_PYTHON_ENV

RECORD_BYTES = 1024
CONSUMERS = 3


def load(bootstrap: str, topic: str, records: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20})
    value = b"x" * RECORD_BYTES
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(60)


def consume_seconds(bootstrap: str, topic: str, records: int, client: str, pid: int) -> tuple[float, float, list[int]]:
    """Seconds from the first record delivered to the last, the broker's CPU seconds over that span, and
    how many records each consumer got."""
    group = f"bench-share-{uuid.uuid4().hex[:8]}"
    subprocess.run(
        java43_command("alter-configs", "--bootstrap", bootstrap, "--group", group, "--set", "share.auto.offset.reset=earliest"),
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    lock = threading.Lock()
    seen: set[int] = set()
    per_consumer = [0] * CONSUMERS
    first: list[float] = []
    cpu_first: list[float] = []
    done = threading.Event()
    procs = [
        subprocess.Popen(
            share_consume_command(client, "--bootstrap", bootstrap, "--topic", topic, "--group", group,
                                  "--ack", "accept", "--deadline-ms", "600000"),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=REPO_ROOT,
        )  # fmt: skip
        for _ in range(CONSUMERS)
    ]

    def pump(i: int, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            event: dict[str, Any] = json.loads(line)
            if event.get("event") != "record":
                continue
            with lock:
                if not first:
                    first.append(time.monotonic())
                    cpu_first.append(cpu_seconds(pid))
                seen.add(event["offset"])
                per_consumer[i] += 1
                if len(seen) >= records:
                    done.set()

    for i, p in enumerate(procs):
        threading.Thread(target=pump, args=(i, p), daemon=True).start()
    finished = done.wait(600)
    end = time.monotonic()
    cpu_end = cpu_seconds(pid)
    for p in procs:
        p.kill()
        p.wait(30)
    if not finished:
        raise SystemExit(f"only {len(seen)} of {records} records delivered within 600 s")
    return end - first[0], cpu_end - cpu_first[0], per_consumer


def run(kind: str, records: int, runs: int, client: str, py_spy: str | None = None) -> list[tuple[float, float]]:
    """(MB/s, broker CPU-s/GB) of each run."""
    from compat_tests.reference.apache_kafka import ApacheKafka

    rates = []
    with tempfile.TemporaryDirectory() as tmp:
        # py-spy sees Python frames only: profile the broker's source, not its Cython-compiled modules.
        env = {PURE_PYTHON_ENV: "1"} if py_spy else None
        launcher: Any = ApacheKafka(Path(tmp)) if kind == "kafka" else PyBroker(Path(tmp), env=env)
        launcher.start()
        profiler = None
        try:
            for _ in range(runs):
                topic = f"bench-share-{uuid.uuid4().hex[:8]}"
                load(launcher.bootstrap, topic, records)
                if py_spy and profiler is None:  # from the first consume on (the loads are profiled too)
                    fmt = "raw" if py_spy.endswith(".txt") else "flamegraph"  # raw: collapsed stacks
                    profiler = subprocess.Popen(["py-spy", "record", "--nonblocking", "-f", fmt, "-o", py_spy,
                                                 "--pid", str(launcher.pid)], stdout=subprocess.DEVNULL)  # fmt: skip
                seconds, cpu, split = consume_seconds(launcher.bootstrap, topic, records, client, launcher.pid)
                gb = records * RECORD_BYTES / 1e9
                mb_s = gb * 1e3 / seconds
                rates.append((mb_s, cpu / gb))
                print(f"{kind:9} {client} {records} records in {seconds:.2f} s: {records / seconds:,.0f} records/s, "
                      f"{mb_s:.1f} MB/s, broker {cpu:.2f} CPU-s = {cpu / gb:.1f} CPU-s/GB (per consumer {split})",
                      flush=True)
        finally:
            if profiler is not None:
                profiler.send_signal(2)  # SIGINT: py-spy writes its output and exits
                profiler.wait(60)
            launcher.stop()
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--with-kafka", action="store_true")
    parser.add_argument("--client", choices=SHARE_CLIENTS, default="java", help="whose share consumer")
    parser.add_argument("--py-spy", metavar="SVG", help="record pybroker's profile to SVG (py-spy flame graph; collapsed stacks if it ends .txt)")
    args = parser.parse_args()
    results = {"pybroker": run("pybroker", args.records, args.runs, args.client, args.py_spy)}
    if args.with_kafka:
        results["kafka"] = run("kafka", args.records, args.runs, args.client)
    medians = {
        kind: (statistics.median(r[0] for r in rows), statistics.median(r[1] for r in rows)) for kind, rows in results.items()
    }
    print(f"\n{'system':9} {'MB/s (median)':>14} {'CPU-s/GB (median)':>18}")
    for kind, (mb_s, cpu_gb) in medians.items():
        print(f"{kind:9} {mb_s:14.1f} {cpu_gb:18.1f}")
    if "kafka" in medians:
        print(f"pybroker / kafka: {medians['pybroker'][0] / medians['kafka'][0]:.2f} (MB/s), "
              f"{medians['pybroker'][1] / medians['kafka'][1]:.2f} (CPU-s/GB)")


if __name__ == "__main__":
    main()
