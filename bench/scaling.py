"""How pybroker (and Apache Kafka beside it) scale: partition count, log size, connection count.

    python -m bench.scaling                               # 1,000 and 10,000 partitions, 1 vs 5 GiB logs, 100 connections
    python -m bench.scaling --parts partitions --partitions 1000,10000 --systems pybroker,kafka
    python -m bench.scaling --parts logsize --log-sizes-gib 1,20
    python -m bench.scaling --write-results

- partitions: one topic with N partitions on one broker — creation time (CreateTopics of up to
  5,000, then CreatePartitions in steps of 5,000, until Metadata shows every partition with a
  leader), Metadata latency for all topics (median of 5; through librdkafka, and on the wire:
  request sent to response read, no client parsing), produce spread over all
  partitions (confluent-kafka, 1 KiB records round-robin), graceful stop time, start time until
  Metadata lists every partition again, and broker RSS (peak before the restart, and after it).
- logsize: one partition filled to S GiB of 16 KiB records; round trip of a raw Fetch (64 KiB,
  max_wait_ms=0) for records at the start, the middle and the end of the log (median and p99 of
  samples spread over nearby offsets).
- connections: 100 connections each alternating Produce and Fetch (one request in flight each).

Every broker runs in its own temporary directory, deleted afterwards (logs of 20 GiB included).
A benchmark: it prints tables, it never asserts a time.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import shlex
import socket
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from bench import connections, processes
from bench.report import markdown_table, render_section, write_section
from bench.stats import median, percentile
from bench.sysstat import cpu_seconds, load_average, machine_description, peak_rss_mb, rss_mb
from bench.systems import SYSTEMS, broker_pid, kafka_jvm_descriptions, make_broker
from compat_tests.brokers import encode_request, read_response, split_bootstrap
from pybroker.protocol import codec
from pybroker.protocol.api import REQUESTS
from tests.wire import WireClient

RESULTS_PATH = Path(__file__).resolve().parent / "RESULTS.md"
PARTS = ("partitions", "logsize", "connections")


def _fmt(value: float, digits: int = 2) -> str:
    return "–" if value != value else (f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.{digits}f}")


def wait_for_partitions(admin: AdminClient, topic: str, partitions: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            meta = admin.list_topics(topic, timeout=10).topics.get(topic)
        except Exception:  # noqa: BLE001 - the broker may still be starting: poll again
            meta = None
        if meta is not None and meta.error is None and len(meta.partitions) == partitions:
            if all(p.leader >= 0 for p in meta.partitions.values()):
                return
        time.sleep(0.05)  # poll interval of a deadline-bounded wait
    raise TimeoutError(f"{topic} did not show {partitions} partitions with leaders in {timeout_s} s")


def metadata_ms(admin: AdminClient, samples: int = 5) -> float:
    """A client's view: librdkafka's Metadata round trip plus building its Python objects."""
    times = []
    for _ in range(samples):
        started = time.perf_counter()
        admin.list_topics(timeout=60)
        times.append((time.perf_counter() - started) * 1000)
    return median(times)


METADATA = 3


def metadata_wire_ms(bootstrap: str, samples: int = 5) -> float:
    """The broker's view: a Metadata v12 request for every topic sent and its response frame read
    whole on a raw socket, nothing decoded (the client's parsing left out)."""
    body = codec.encode(REQUESTS[METADATA], 12, {"topics": None, "allow_auto_topic_creation": False})
    host, port = split_bootstrap(bootstrap)
    times = []
    with socket.create_connection((host, port), timeout=60) as sock:
        for correlation_id in range(samples + 1):  # the first (connection warm-up) is untimed
            request = encode_request(METADATA, 12, correlation_id, body, b"bench-scaling", flexible_header=True)
            started = time.perf_counter()
            sock.sendall(request)
            read_response(sock)
            if correlation_id:
                times.append((time.perf_counter() - started) * 1000)
    return median(times)


def produce_spread(bootstrap: str, topic: str, partitions: int, records: int) -> float:
    """MB/s of 1 KiB records sent round-robin over every partition."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "1",
            "linger.ms": 5,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    value = b"x" * 1024
    producer.produce(topic, value, partition=0)
    producer.flush(60)
    started = time.perf_counter()
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.005)
    if producer.flush(600):
        raise processes.ToolError("spread produce could not deliver every record")
    return records * 1024 / (time.perf_counter() - started) / 1e6


# Partitions per CreateTopics/CreatePartitions request: Kafka's controller refuses a request that
# would write over 10,000 metadata records (a topic of 10,000 partitions is 10,001), so larger
# topics are made as Kafka users make them: created, then grown, on both systems alike.
PARTITIONS_PER_REQUEST = 5000


def create_topic_in_steps(admin: AdminClient, topic: str, partitions: int) -> None:
    created = min(partitions, PARTITIONS_PER_REQUEST)
    admin.create_topics([NewTopic(topic, created, 1)], request_timeout=600)[topic].result(600)
    while created < partitions:
        created = min(partitions, created + PARTITIONS_PER_REQUEST)
        admin.create_partitions([NewPartitions(topic, created)], request_timeout=600)[topic].result(600)


def partitions_row(system: str, partitions: int, records: int) -> list[str]:
    with tempfile.TemporaryDirectory(prefix=f"scaling-{system}-") as tmp:
        broker = make_broker(system, Path(tmp))
        try:
            bootstrap = broker.start()
            admin = AdminClient({"bootstrap.servers": bootstrap})
            topic = f"scale-{partitions}"
            started = time.perf_counter()
            create_topic_in_steps(admin, topic, partitions)
            wait_for_partitions(admin, topic, partitions, 600)
            create_s = time.perf_counter() - started
            meta_ms = metadata_ms(admin)
            wire_ms = metadata_wire_ms(bootstrap)
            cpu_before = cpu_seconds(broker_pid(broker))
            mb_s = produce_spread(bootstrap, topic, partitions, records)
            spread_cpu_gb = (cpu_seconds(broker_pid(broker)) - cpu_before) / (records * 1024 / 1e9)
            peak_before = peak_rss_mb(broker_pid(broker))
            del admin
            gc.collect()
            started = time.perf_counter()
            broker.stop()
            stop_s = time.perf_counter() - started
            started = time.perf_counter()
            bootstrap = broker.start(timeout_s=600)
            admin = AdminClient({"bootstrap.servers": bootstrap})
            wait_for_partitions(admin, topic, partitions, 600)
            start_s = time.perf_counter() - started
            rss_after = rss_mb(broker_pid(broker))
            meta_after_ms = metadata_ms(admin)
            wire_after_ms = metadata_wire_ms(bootstrap)
            del admin
            gc.collect()
        finally:
            processes.stop_all()
            broker.stop()
    row = [system, f"{partitions:,}", _fmt(create_s), _fmt(meta_ms), _fmt(meta_after_ms), _fmt(wire_ms)]
    row += [_fmt(wire_after_ms), _fmt(mb_s, 1)]
    row += [_fmt(spread_cpu_gb)]
    row += [_fmt(stop_s), _fmt(start_s), _fmt(stop_s + start_s), _fmt(peak_before, 0), _fmt(rss_after, 0)]
    print("  " + " | ".join(row), flush=True)
    return row


PARTITIONS_HEADER = [
    "system", "partitions", "create s", "Metadata ms", "Metadata ms after restart", "Metadata wire ms",
    "Metadata wire ms after restart", "spread produce MB/s",
    "spread CPU s/GB", "stop s", "start→Metadata s", "restart s", "peak RSS MB", "RSS after restart MB",
]  # fmt: skip


def fill_log(bootstrap: str, topic: str, gib: float) -> int:
    """Write ``gib`` GiB of 16 KiB records into partition 0; returns the record count."""
    records = int(gib * 2**30) // 16384
    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5, "batch.size": 1_000_000,
         "queue.buffering.max.kbytes": 1_048_576}
    )  # fmt: skip
    value = b"y" * 16384
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, value, partition=0)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(1800):
        raise processes.ToolError("log fill could not deliver every record")
    return records


FETCH = 1
SEEK_STRIDE = 97  # offsets between the samples around one position, so each takes its own index lookup


def seek_latencies_ms(bootstrap: str, topic: str, offset: int, samples: int, records: int) -> list[float]:
    """Round trips of one Fetch (v12, max_wait_ms=0, 64 KiB) for a record near ``offset``: the
    samples read offsets spread around it, on one connection, one request in flight.

    A raw request rather than a consumer: a stock consumer's own long poll in flight (500 ms at
    the log end) would be measured instead of the broker's lookup and read."""
    first = max(0, min(offset - samples // 2 * SEEK_STRIDE, records - samples * SEEK_STRIDE))
    targets = [min(records - 1, first + i * SEEK_STRIDE) for i in range(samples)]
    latencies = []
    with WireClient(bootstrap, client_id=b"bench-scaling") as client:
        for i, at in enumerate([targets[0], *targets]):  # the first fetch (connection warm-up) is untimed
            body = {
                "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 65536, "isolation_level": 0,
                "topics": [{"topic": topic, "partitions": [
                    {"partition": 0, "fetch_offset": at, "log_start_offset": -1, "partition_max_bytes": 65536}
                ]}],
            }  # fmt: skip
            started = time.perf_counter()
            response = client.request(FETCH, 12, body)
            elapsed_ms = (time.perf_counter() - started) * 1000
            partition = response["responses"][0]["partitions"][0]
            if partition["error_code"] != 0 or not partition["records"]:
                raise processes.ToolError(f"no record at offset {at}: error {partition['error_code']}")
            if i:
                latencies.append(elapsed_ms)
    return latencies


def logsize_rows(system: str, gib: float, samples: int) -> list[list[str]]:
    with tempfile.TemporaryDirectory(prefix=f"scaling-{system}-log-") as tmp:
        broker = make_broker(system, Path(tmp))
        try:
            bootstrap = broker.start()
            admin = AdminClient({"bootstrap.servers": bootstrap})
            topic = "big-log"
            admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(60)
            started = time.perf_counter()
            cpu_before = cpu_seconds(broker_pid(broker))
            records = fill_log(bootstrap, topic, gib)
            fill_mb_s = records * 16384 / (time.perf_counter() - started) / 1e6
            fill_cpu_gb = (cpu_seconds(broker_pid(broker)) - cpu_before) / (records * 16384 / 1e9)
            rows = []
            for where, offset in (("start", 0), ("middle", records // 2), ("end", records - 1)):
                latencies = sorted(seek_latencies_ms(bootstrap, topic, offset, samples, records))
                rows.append(
                    [system, f"{gib:g}", where, f"{offset:,}", _fmt(median(latencies)),
                     _fmt(percentile(latencies, 0.99)), _fmt(fill_mb_s, 0), _fmt(fill_cpu_gb), _fmt(rss_mb(broker_pid(broker)), 0)]
                )  # fmt: skip
                print("  " + " | ".join(rows[-1]), flush=True)
            del admin
            gc.collect()
        finally:
            processes.stop_all()
            broker.stop()
    return rows


LOGSIZE_HEADER = [
    "system",
    "log GiB",
    "read at",
    "around offset",
    "fetch p50 ms",
    "fetch p99 ms",
    "fill MB/s",
    "fill CPU s/GB",
    "RSS MB",
]


def connections_row(system: str, count: int, seconds: float) -> list[str]:
    with tempfile.TemporaryDirectory(prefix=f"scaling-{system}-conn-") as tmp:
        broker = make_broker(system, Path(tmp))
        try:
            bootstrap = broker.start()
            admin = AdminClient({"bootstrap.servers": bootstrap})
            admin.create_topics([NewTopic("conns", 10, 1)])["conns"].result(60)
            wait_for_partitions(admin, "conns", 10, 60)
            result = connections.run(bootstrap, "conns", 10, count, seconds)
            peak = peak_rss_mb(broker_pid(broker))
            del admin
            gc.collect()
        finally:
            broker.stop()
    row = [system, str(count), _fmt(result.requests_per_s, 0), _fmt(result.produce_p50_ms), _fmt(result.produce_p99_ms),
           _fmt(result.fetch_p50_ms), _fmt(result.fetch_p99_ms), str(result.errors), _fmt(peak, 0)]  # fmt: skip
    print("  " + " | ".join(row), flush=True)
    return row


CONNECTIONS_HEADER = [
    "system", "connections", "requests/s", "produce p50 ms", "produce p99 ms", "fetch p50 ms", "fetch p99 ms",
    "error codes", "peak RSS MB",
]  # fmt: skip


def _csv(text: str, kind: type) -> list:
    return [kind(part) for part in text.split(",") if part.strip()]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.scaling",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--parts", default=",".join(PARTS), help="comma-separated: " + ",".join(PARTS))
    parser.add_argument("--systems", default="pybroker,kafka")
    parser.add_argument("--partitions", default="1000,10000", help="partition counts")
    parser.add_argument(
        "--spread-records", type=int, default=200_000, help="1 KiB records in the spread produce"
    )
    parser.add_argument("--log-sizes-gib", default="1,5", help="log sizes to compare (e.g. 1,20)")
    parser.add_argument("--seek-samples", type=int, default=30)
    parser.add_argument("--logsize-systems", default="pybroker", help="systems for the log-size part")
    parser.add_argument("--connections", type=int, default=100)
    parser.add_argument("--connection-seconds", type=float, default=10)
    parser.add_argument("--write-results", action="store_true")
    args = parser.parse_args(argv)
    parts = _csv(args.parts, str)
    systems = sorted(_csv(args.systems, str), key=lambda s: s != "kafka")
    for system in [*systems, *_csv(args.logsize_systems, str)]:
        if system not in SYSTEMS:
            parser.error(f"unknown system {system!r}")
    processes.sigterm_as_interrupt()
    load = load_average()
    sections = []
    try:
        if "partitions" in parts:
            print("partitions:", flush=True)
            rows = [
                partitions_row(s, n, args.spread_records) for n in _csv(args.partitions, int) for s in systems
            ]
            sections.append("### Partitions on one broker\n\n" + markdown_table(PARTITIONS_HEADER, rows))
        if "logsize" in parts:
            print("log size:", flush=True)
            rows = [
                row
                for gib in _csv(args.log_sizes_gib, float)
                for s in sorted(_csv(args.logsize_systems, str), key=lambda s: s != "kafka")
                for row in logsize_rows(s, gib, args.seek_samples)
            ]
            sections.append(
                "### Fetch latency by log size (one partition, 16 KiB records)\n\n"
                + markdown_table(LOGSIZE_HEADER, rows)
            )
        if "connections" in parts:
            print("connections:", flush=True)
            rows = [connections_row(s, args.connections, args.connection_seconds) for s in systems]
            sections.append(
                f"### {args.connections} concurrent connections (Produce + Fetch, one in flight each)\n\n"
                + markdown_table(CONNECTIONS_HEADER, rows)
            )
    except KeyboardInterrupt:
        print("interrupted: brokers and tools stopped", file=sys.stderr)
        return 130
    finally:
        processes.stop_all()
    body = "\n\n".join(sections)
    print("\n" + body)
    if args.write_results:
        command = "python -m bench.scaling " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
        section = render_section(
            "bench.scaling",
            "Scaling: partitions, log size, connections",
            datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            machine_description(),
            command.strip(),
            body,
            notes=[
                "One run each (these are scale limits, not rates to take medians of); same settings as bench.compare.",
                f"Apache Kafka's JVM: `{kafka_jvm_descriptions()['kafka']}` (kafka-server-start.sh's); "
                f"load average when started: {load}; broker and loaders not pinned.",
            ],
        )
        write_section(RESULTS_PATH, "bench.scaling", section)
        print(f"wrote {RESULTS_PATH.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
