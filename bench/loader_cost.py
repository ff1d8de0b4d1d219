"""Where the produce loader's time goes, against each broker: is a row loader-bound?

    python -m bench.loader_cost                       # kafka and pybroker, 3 interleaved runs of 1 GiB
    python -m bench.loader_cost --systems pybroker --runs 1 --mib 16
    python -m bench.loader_cost --loader java --partitions 8   # Kafka's ProducerPerformance, as `p8/acks1`

The same load as bench.compare's confluent ``produce/1KiB/p1/acks1`` row (``confluent_load.produce_timed``
with its producer settings), in a fresh process on the loader CPU, with librdkafka's statistics on.
Per run it prints the MB/s, the loader process's CPU seconds (user, system, and per thread: the Python
thread that calls ``produce()`` and runs the delivery callbacks, librdkafka's broker thread), and from
librdkafka's statistics the Produce requests sent, their average size, records per batch and the
request round-trip time.  When both brokers get the same requests and the loader's Python thread is
busy the whole run, the row's MB/s is the loader's, whatever the broker's round trip.

``--loader java`` runs bench.compare's Java loader instead (Kafka's ProducerPerformance, its JVM on the
loader CPU, ``--print-metrics``): the JVM's CPU seconds and, from the producer's own metrics, the Produce
requests it sent, their average size, records per request, batch size, request latency and how much of
its network thread's time went waiting in select.  If the loader spends more CPU per byte against one
broker, these say whether it sent that broker smaller or more requests.  A benchmark: it prints, it never
asserts a time.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import sys
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from bench import confluent_load, kafka_tools, pinning, processes
from bench.page_cache import PageCacheFill
from bench.stats import median
from bench.sysstat import load_average, machine_description, user_and_system_seconds
from bench.systems import make_broker

RECORD_SIZE = 1024


def _thread_cpu_seconds() -> dict[str, float]:
    """CPU seconds of this process's threads: "python" (the main thread, which calls ``produce()``
    and runs the delivery callbacks), librdkafka's broker threads summed as "rdk:broker", others by name."""
    totals: dict[str, float] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            name = Path(f"/proc/self/task/{tid}/comm").read_text().strip()
            user, system = user_and_system_seconds("self", tid)
        except OSError:
            continue  # the thread ended
        if int(tid) == os.getpid():
            name = "python"
        elif name.startswith("rdk:broker"):
            name = "rdk:broker"
        totals[name] = totals.get(name, 0.0) + user + system
    return totals


def measure_here(bootstrap: str, topic: str, records: int, acks: str) -> dict[str, float]:
    """One produce run in this process (``child``): what it cost the loader and what librdkafka saw."""
    stats: list[str] = []
    producer = confluent_load._producer(
        bootstrap, acks, linger_ms=5, **{"statistics.interval.ms": 500, "stats_cb": stats.append}
    )
    usage, threads = resource.getrusage(resource.RUSAGE_SELF), _thread_cpu_seconds()
    elapsed, _latencies = confluent_load.produce_timed(bootstrap, topic, records, RECORD_SIZE, acks, producer)
    usage_after, threads_after = resource.getrusage(resource.RUSAGE_SELF), _thread_cpu_seconds()
    deadline = time.monotonic() + 5
    seen = len(stats)
    while len(stats) == seen and time.monotonic() < deadline:  # statistics taken after the last response
        producer.poll(0.1)
    last = json.loads(stats[-1])
    brokers = [b for b in last["brokers"].values() if b.get("nodeid", -1) >= 0]
    broker = max(brokers, key=lambda b: b["tx"])  # the partition leader's connection
    batches = last["topics"][topic]
    return {
        "mb_per_s": records * RECORD_SIZE / elapsed / 1e6,
        "loader_user_s": usage_after.ru_utime - usage.ru_utime,
        "loader_sys_s": usage_after.ru_stime - usage.ru_stime,
        "python_thread_s": threads_after["python"] - threads["python"],
        "rdk_broker_thread_s": threads_after.get("rdk:broker", 0.0) - threads.get("rdk:broker", 0.0),
        "requests": broker["tx"],
        "request_kb": broker["txbytes"] / max(1, broker["tx"]) / 1000,
        "records_per_batch": batches["batchcnt"]["avg"],
        "rtt_avg_ms": broker["rtt"]["avg"] / 1000,
        "rtt_p99_ms": broker["rtt"]["p99"] / 1000,
        "seconds": elapsed,
    }


# ProducerPerformance --print-metrics lines: "producer-metrics:request-total:{client-id=...} : 65536.000"
_JAVA_METRIC = re.compile(r"^producer-metrics:([a-z-]+):\{client-id=[^}]*\}\s*:\s*(\S+)\s*$", re.MULTILINE)


def parse_java_metrics(output: str) -> dict[str, float]:
    return {name: float(value) for name, value in _JAVA_METRIC.findall(output)}


def measure_java(bootstrap: str, topic: str, records: int, acks: str) -> dict[str, float]:
    """One ProducerPerformance run (the JVM inherits this process's loader CPUs), with its CPU time
    taken from the kernel's accounting of the reaped child."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    output = processes.run(
        kafka_tools.java_command(
            "ProducerPerformance",
            "--bootstrap-server", bootstrap,
            "--topic", topic,
            "--num-records", str(records),
            "--record-size", str(RECORD_SIZE),
            "--throughput", "-1",
            "--command-property", f"acks={acks}",
            "--print-metrics",
        ),
        max(600.0, records * RECORD_SIZE / 2e6),
        "ProducerPerformance",
    )  # fmt: skip
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = kafka_tools.parse_producer_performance(output, RECORD_SIZE)
    metrics = parse_java_metrics(output)
    requests = metrics["request-total"]
    return {
        "mb_per_s": result.records_per_s * RECORD_SIZE / 1e6,
        "loader_user_s": after.ru_utime - before.ru_utime,
        "loader_sys_s": after.ru_stime - before.ru_stime,
        "loader_cpu_s_per_gb": (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
        / (records * RECORD_SIZE / 1e9),
        "requests": requests,
        "request_kb": metrics["outgoing-byte-total"] / max(1.0, requests) / 1000,
        "records_per_request": metrics["records-per-request-avg"],
        "batch_kb": metrics["batch-size-avg"] / 1000,
        "request_latency_ms": metrics["request-latency-avg"],
        "io_wait_ratio": metrics["io-wait-ratio"],
        "select_per_request": metrics["select-total"] / max(1.0, requests),
    }


JAVA_COLUMNS = [
    ("MB/s", "mb_per_s", "{:.1f}"),
    ("loader user s", "loader_user_s", "{:.2f}"),
    ("loader sys s", "loader_sys_s", "{:.2f}"),
    ("loader CPU-s/GB", "loader_cpu_s_per_gb", "{:.2f}"),
    ("Produce requests", "requests", "{:,.0f}"),
    ("KB per request", "request_kb", "{:,.1f}"),
    ("records per request", "records_per_request", "{:,.1f}"),
    ("batch KB", "batch_kb", "{:.1f}"),
    ("request latency ms", "request_latency_ms", "{:.2f}"),
    ("io-wait ratio", "io_wait_ratio", "{:.2f}"),
    ("selects per request", "select_per_request", "{:.2f}"),
]

COLUMNS = [
    ("MB/s", "mb_per_s", "{:.1f}"),
    ("loader user s", "loader_user_s", "{:.2f}"),
    ("loader sys s", "loader_sys_s", "{:.2f}"),
    ("Python thread s", "python_thread_s", "{:.2f}"),
    ("rdk broker thread s", "rdk_broker_thread_s", "{:.2f}"),
    ("Produce requests", "requests", "{:,.0f}"),
    ("KB per request", "request_kb", "{:,.0f}"),
    ("records per batch", "records_per_batch", "{:,.0f}"),
    ("RTT avg ms", "rtt_avg_ms", "{:.2f}"),
    ("RTT p99 ms", "rtt_p99_ms", "{:.2f}"),
]


def row(label: str, figures: dict[str, float], columns: list[tuple[str, str, str]] = COLUMNS) -> str:
    return "| " + " | ".join([label, *(fmt.format(figures[key]) for _, key, fmt in columns)]) + " |"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "child":
        bootstrap, topic, records, acks = argv[1], argv[2], int(argv[3]), argv[4]
        print(json.dumps(measure_here(bootstrap, topic, records, acks)))
        return 0
    parser = argparse.ArgumentParser(prog="python -m bench.loader_cost", description=__doc__.split("\n\n")[0])
    parser.add_argument("--systems", default="kafka,pybroker")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--mib", type=int, default=1024, help="MiB of 1 KiB records per run")
    parser.add_argument("--warmup-mib", type=int, default=256, help="produced once per broker before the runs")
    parser.add_argument("--acks", default="1")
    parser.add_argument("--loader", choices=("confluent", "java"), default="confluent")
    parser.add_argument("--partitions", type=int, default=1, help="of the topic each run writes")
    parser.add_argument(
        "--no-fill-page-cache", action="store_true", help="no sync and page-cache fill before each run"
    )
    args = parser.parse_args(argv)
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    pins = pinning.plan(enabled=True)
    records = args.mib * 2**20 // RECORD_SIZE
    columns = JAVA_COLUMNS if args.loader == "java" else COLUMNS
    results: dict[str, list[dict[str, float]]] = {s: [] for s in systems}
    with tempfile.TemporaryDirectory(prefix="loader-cost-") as tmp:
        brokers = {s: make_broker(s, Path(tmp) / s, command_prefix=pins.broker_prefix()) for s in systems}
        fill = None if args.no_fill_page_cache else PageCacheFill(Path(tempfile.gettempdir()))
        try:
            bootstraps = {s: broker.start() for s, broker in brokers.items()}
            pins.pin_loaders()
            admins = {s: AdminClient({"bootstrap.servers": b}) for s, b in bootstraps.items()}

            def run(system: str, count: int) -> dict[str, float]:
                topic = f"loader-cost-{uuid.uuid4().hex[:8]}"
                admins[system].create_topics([NewTopic(topic, args.partitions, 1)])[topic].result(60)
                if args.loader == "java":
                    return measure_java(bootstraps[system], topic, count, args.acks)
                child = processes.start(
                    [sys.executable, "-m", "bench.loader_cost", "child", bootstraps[system], topic, str(count),
                     args.acks]
                )  # fmt: skip
                try:
                    out = processes.wait_output(child, max(600.0, count * RECORD_SIZE / 2e6), "loader_cost")
                finally:
                    processes.stop(child)
                return json.loads(out.strip().splitlines()[-1])

            for system in systems:
                run(system, args.warmup_mib * 2**20 // RECORD_SIZE)
            for index in range(args.runs):
                for system in systems:
                    if fill is not None:
                        fill.settle()  # the loader's 1 GiB queue meets the same memory state each run
                    figures = run(system, records)
                    results[system].append(figures)
                    print(row(f"{system} run {index + 1}", figures, columns), flush=True)
        finally:
            processes.stop_all()
            if fill is not None:
                fill.close()
            for broker in brokers.values():
                broker.stop()
    print(f"\n{machine_description()}; load average {load_average()}; {pins.describe()}")
    loader = "Kafka's ProducerPerformance" if args.loader == "java" else "confluent-kafka"
    print(f"{loader} produce, 1 KiB records, acks={args.acks}, {args.partitions} partition(s), {args.mib} MiB "
          f"per run, medians of {args.runs} interleaved runs\n")  # fmt: skip
    print("| system | " + " | ".join(name for name, _, _ in columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    for system in systems:
        print(row(system, {key: median(r[key] for r in results[system]) for _, key, _ in columns}, columns))
    return 0


if __name__ == "__main__":
    sys.exit(main())
