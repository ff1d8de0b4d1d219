"""pybroker side by side with Apache Kafka 4.3.1: the same loads, the same settings, interleaved runs.

    python -m bench.compare                      # every workload, 3 runs, both systems
    python -m bench.compare --quick              # a smoke run (1 KiB, one partition, small volumes)
    python -m bench.compare --workloads 'produce/1KiB/*,consume/1KiB/*' --runs 5
    python -m bench.compare --systems pybroker --write-results

Each run starts each system afresh (Kafka first, then pybroker, so drift hits both alike), runs every
selected workload with two loaders — Kafka's own tools (ProducerPerformance, ConsumerPerformance,
EndToEndLatency from the kafka-tools jar) and confluent-kafka from Python — and stops it.  The table
holds medians over runs.  Workloads:

- ``produce/<size>/p<N>/acks<A>``: peak rate, fresh topic with N partitions.
- ``consume/<size>/p<N>``: read back what was just produced (page cache), all partitions.
- ``at-half-peak/1KiB/p1/acks<A>``: produce paced at half of Kafka's peak rate for the same
  workload and loader, measured earlier in the same invocation.  Java: ProducerPerformance
  --throughput (send → ack latency).  confluent: true end-to-end latency, a consumer in another
  process timing each record from send to receipt.
- ``e2e-serial/1KiB/p1/acks1``: Kafka's EndToEndLatency (one record in flight at a time).

Broker peak RSS is VmHWM of the broker process, reset before each workload; CPU s is the broker's
user+system time during the workload.  A benchmark: it prints, it never asserts a time.
"""

from __future__ import annotations

import argparse
import datetime
import fnmatch
import gc
import shlex
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from bench import confluent_load, kafka_tools, processes
from bench.load_result import LoadResult
from bench.report import Measurement, compare_table, render_section, summarize, write_section
from bench.stats import median
from bench.sysstat import cpu_seconds, machine_description, peak_rss_mb, reset_peak_rss
from bench.systems import SYSTEMS, Broker, broker_pid, make_broker

LOADERS = ("java", "confluent")
RESULTS_PATH = Path(__file__).resolve().parent / "RESULTS.md"
SIZE_LABELS = {100: "100B", 1024: "1KiB", 16384: "16KiB"}


@dataclass(frozen=True)
class Workload:
    kind: str  # produce | consume | at-half-peak | e2e-serial
    record_size: int
    partitions: int
    acks: str = "1"

    @property
    def name(self) -> str:
        base = f"{self.kind}/{SIZE_LABELS.get(self.record_size, f'{self.record_size}B')}/p{self.partitions}"
        return base if self.kind == "consume" else f"{base}/acks{self.acks.replace('all', 'all')}"

    @property
    def peak(self) -> Workload:
        """The peak-rate workload a paced one takes half of."""
        return Workload("produce", self.record_size, self.partitions, self.acks)


def all_workloads(quick: bool) -> list[Workload]:
    if quick:
        return [
            Workload("produce", 1024, 1, "1"),
            Workload("consume", 1024, 1),
            Workload("at-half-peak", 1024, 1, "1"),
            Workload("e2e-serial", 1024, 1, "1"),
        ]
    produce = [
        Workload("produce", size, partitions, acks)
        for size in (100, 1024, 16384)
        for partitions in (1, 8)
        for acks in ("1", "all")
    ]
    consume = [Workload("consume", size, partitions) for size in (100, 1024, 16384) for partitions in (1, 8)]
    paced = [Workload("at-half-peak", 1024, 1, acks) for acks in ("1", "all")]
    return [*produce, *consume, *paced, Workload("e2e-serial", 1024, 1, "1")]


def select(workloads: Sequence[Workload], patterns: str | None) -> list[Workload]:
    """Workloads whose name matches any comma-separated glob; a paced one pulls in its peak."""
    if not patterns:
        return list(workloads)
    globs = [p.strip() for p in patterns.split(",") if p.strip()]
    chosen = {w for w in workloads if any(fnmatch.fnmatchcase(w.name, g) for g in globs)}
    chosen |= {w.peak for w in chosen if w.kind == "at-half-peak"}
    if not chosen:
        raise SystemExit(f"no workload matches {patterns!r}; names look like {workloads[0].name}")
    return [w for w in workloads if w in chosen] + [w for w in chosen if w not in workloads]


@dataclass(frozen=True)
class Volume:
    """How much each workload moves: bytes per produce run, bounded in records."""

    bytes_per_run: int
    max_records: int
    min_records: int
    paced_seconds: float
    serial_records: int

    def records(self, record_size: int) -> int:
        return max(self.min_records, min(self.max_records, self.bytes_per_run // record_size))


FULL = Volume(128_000_000, 1_500_000, 10_000, paced_seconds=10, serial_records=5000)
QUICK = Volume(16_000_000, 100_000, 5_000, paced_seconds=3, serial_records=500)


class Session:
    """One system started once; runs workloads against it and records what they cost the broker."""

    def __init__(self, system: str, broker: Broker, bootstrap: str, volume: Volume) -> None:
        self.system = system
        self.broker = broker
        self.bootstrap = bootstrap
        self.volume = volume
        self.admin = AdminClient({"bootstrap.servers": bootstrap})
        self.filled: dict[tuple[str, int, int], tuple[str, int]] = {}  # data consume workloads read

    def new_topic(self, partitions: int) -> str:
        topic = f"bench-{uuid.uuid4().hex[:10]}"
        self.admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(60)
        return topic

    def measure(self, loader: str, workload: Workload, load: Callable[[], LoadResult]) -> Measurement:
        pid = broker_pid(self.broker)
        reset_peak_rss(pid)
        cpu_before = cpu_seconds(pid)
        result = load()
        return Measurement(
            system=self.system,
            loader=loader,
            workload=workload.name,
            records_per_s=result.records_per_s,
            mb_per_s=result.mb_per_s,
            p50_ms=result.p50_ms,
            p99_ms=result.p99_ms,
            p999_ms=result.p999_ms,
            rss_mb=peak_rss_mb(pid),
            cpu_s=cpu_seconds(pid) - cpu_before,
        )

    def produce_untimed(self, loader: str, topic: str, records: int, size: int) -> None:
        if loader == "java":
            kafka_tools.producer_performance(self.bootstrap, topic, records, size, "1")
        else:
            confluent_load.produce(self.bootstrap, topic, records, size, "1")

    def run(self, loader: str, workload: Workload, paced_rate: float) -> Measurement:
        size, partitions, acks = workload.record_size, workload.partitions, workload.acks
        records = self.volume.records(size)
        if workload.kind == "produce":
            topic = self.new_topic(partitions)
            if loader == "java":
                measurement = self.measure(
                    loader,
                    workload,
                    lambda: kafka_tools.producer_performance(self.bootstrap, topic, records, size, acks),
                )
            else:
                measurement = self.measure(
                    loader,
                    workload,
                    lambda: confluent_load.produce(self.bootstrap, topic, records, size, acks),
                )
            self.filled.setdefault((loader, size, partitions), (topic, records))
            return measurement
        if workload.kind == "consume":
            if (loader, size, partitions) not in self.filled:
                topic = self.new_topic(partitions)
                self.produce_untimed(loader, topic, records, size)
                self.filled[(loader, size, partitions)] = (topic, records)
            topic, stored = self.filled[(loader, size, partitions)]
            if loader == "java":
                return self.measure(
                    loader,
                    workload,
                    lambda: kafka_tools.consumer_performance(self.bootstrap, topic, stored, size),
                )
            return self.measure(
                loader,
                workload,
                lambda: confluent_load.consume(self.bootstrap, topic, stored, size, partitions),
            )
        if workload.kind == "at-half-peak":
            topic = self.new_topic(partitions)
            paced = max(1, int(paced_rate * self.volume.paced_seconds))
            if loader == "java":
                return self.measure(
                    loader,
                    workload,
                    lambda: kafka_tools.producer_performance(
                        self.bootstrap, topic, paced, size, acks, throughput=paced_rate
                    ),
                )
            return self.measure(
                loader,
                workload,
                lambda: confluent_load.end_to_end_at_rate(
                    self.bootstrap, topic, paced, size, paced_rate, acks, partitions
                ),
            )
        if workload.kind == "e2e-serial":
            topic = self.new_topic(partitions)
            serial = self.volume.serial_records
            return self.measure(
                loader,
                workload,
                lambda: kafka_tools.end_to_end_latency(self.bootstrap, topic, serial, size, acks),
            )
        raise ValueError(f"unknown workload kind {workload.kind!r}")


def applies(loader: str, workload: Workload) -> bool:
    return not (workload.kind == "e2e-serial" and loader != "java")  # Kafka's own tool only


class PeakRates:
    """Peak records/s seen so far, per (system, loader, workload): the base of the paced runs."""

    def __init__(self) -> None:
        self.seen: dict[tuple[str, str, str], list[float]] = {}

    def add(self, m: Measurement) -> None:
        self.seen.setdefault((m.system, m.loader, m.workload), []).append(m.records_per_s)

    def half_of(self, loader: str, workload: Workload, own_system: str) -> tuple[float, str]:
        """Half of Kafka's median peak; without a Kafka figure, half of this system's own."""
        for system in ("kafka", own_system):
            rates = self.seen.get((system, loader, workload.peak.name))
            if rates:
                return median(rates) / 2, system
        raise RuntimeError(f"no peak measured for {workload.peak.name} ({loader})")


def run_session(
    system: str,
    run_index: int,
    loaders: Sequence[str],
    workloads: Sequence[Workload],
    volume: Volume,
    peaks: PeakRates,
    notes: set[str],
) -> list[Measurement]:
    measurements = []
    with tempfile.TemporaryDirectory(prefix=f"bench-{system}-") as tmp:
        broker = make_broker(system, Path(tmp))
        try:
            started = time.perf_counter()
            bootstrap = broker.start()
            print(
                f"run {run_index + 1}: {system} ready at {bootstrap} in {time.perf_counter() - started:.1f} s"
            )
            session = Session(system, broker, bootstrap, volume)
            ordered = sorted(workloads, key=lambda w: w.kind == "at-half-peak")  # peaks first
            for loader in loaders:
                for workload in ordered:
                    if not applies(loader, workload):
                        continue
                    rate = 0.0
                    if workload.kind == "at-half-peak":
                        rate, base = peaks.half_of(loader, workload, system)
                        if base != "kafka":
                            notes.add("at-half-peak rates are half of pybroker's own peak (Kafka not run)")
                    m = session.run(loader, workload, rate)
                    if workload.kind == "produce":
                        peaks.add(m)
                    measurements.append(m)
                    print(
                        f"  {system:8} {loader:9} {workload.name:28} {m.records_per_s:12,.0f} rec/s "
                        f"{m.mb_per_s:8.1f} MB/s  p50 {m.p50_ms:7.2f}  p99 {m.p99_ms:8.2f}  "
                        f"p99.9 {m.p999_ms:8.2f} ms  rss {m.rss_mb:6.0f} MB  cpu {m.cpu_s:5.1f} s",
                        flush=True,
                    )
        finally:
            processes.stop_all()
            gc.collect()  # let librdkafka clients close before their broker goes away
            broker.stop()
    return measurements


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.compare",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="smoke run: 1 KiB, one partition, small volumes")
    parser.add_argument("--runs", type=int, default=None, help="runs per system (default 3; 1 with --quick)")
    parser.add_argument(
        "--workloads", help="comma-separated globs over workload names, e.g. 'produce/1KiB/*'"
    )
    parser.add_argument("--systems", default="pybroker,kafka", help="comma-separated: pybroker,kafka")
    parser.add_argument("--loaders", default=",".join(LOADERS), help="comma-separated: java,confluent")
    parser.add_argument("--write-results", action="store_true", help="write the table into bench/RESULTS.md")
    args = parser.parse_args(argv)
    args.systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    args.loaders = [s.strip() for s in args.loaders.split(",") if s.strip()]
    for system in args.systems:
        if system not in SYSTEMS:
            parser.error(f"unknown system {system!r}")
    for loader in args.loaders:
        if loader not in LOADERS:
            parser.error(f"unknown loader {loader!r}")
    if args.runs is None:
        args.runs = 1 if args.quick else 3
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    processes.sigterm_as_interrupt()
    workloads = select(all_workloads(args.quick), args.workloads)
    volume = QUICK if args.quick else FULL
    if "java" in args.loaders:
        kafka_tools.install()
    # Kafka first in every run: its peak is the base of the paced workloads of both systems.
    systems = sorted(args.systems, key=lambda s: s != "kafka")
    peaks = PeakRates()
    notes: set[str] = set()
    measurements: list[Measurement] = []
    try:
        for run_index in range(args.runs):
            for system in systems:
                measurements += run_session(system, run_index, args.loaders, workloads, volume, peaks, notes)
    except KeyboardInterrupt:
        print("interrupted: brokers and tools stopped", file=sys.stderr)
        return 130
    finally:
        processes.stop_all()
    table = compare_table(summarize(measurements))
    print(f"\nmedians of {args.runs} run(s):\n")
    print(table)
    for note in sorted(notes):
        print(f"note: {note}")
    if args.write_results:
        command = "python -m bench.compare " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
        section = render_section(
            "bench.compare",
            "pybroker vs Apache Kafka 4.3.1" + (" (quick)" if args.quick else ""),
            datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            machine_description(),
            command.strip(),
            table,
            notes=[
                f"Runs per system: {args.runs}, interleaved (Kafka, pybroker, Kafka, …); medians shown.",
                "Both brokers: log.segment.bytes=1073741824, topics created with the stated partition "
                "count, log.flush.* at defaults (no fsync per message). Kafka's JVM: -Xms128m -Xmx512m "
                "(its RSS includes that heap); the Java tools run with -Xms512m -Xmx512m.",
                "Loaders on the same machine as the broker: Kafka's ProducerPerformance/ConsumerPerformance/"
                "EndToEndLatency 4.3.1 (default client settings but acks) and confluent-kafka "
                "(librdkafka) from Python.",
                *sorted(notes),
            ],
        )
        write_section(RESULTS_PATH, "bench.compare", section)
        print(f"wrote {RESULTS_PATH.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
