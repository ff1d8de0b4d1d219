"""pybroker side by side with Apache Kafka 4.3.1: the same loads, the same settings, interleaved runs.

    python -m bench.compare                      # every short workload, 3 runs, pybroker and stock Kafka
    python -m bench.compare --quick              # a smoke run (1 KiB, one partition, small volumes)
    python -m bench.compare --workloads 'produce/1KiB/*,consume/1KiB/*' --runs 5
    python -m bench.compare --sustained          # also the sustained rows (>= 6 GiB written each)
    python -m bench.compare --systems pybroker,kafka,kafka-constrained --write-results

Each run starts each system afresh (Kafka first, then pybroker, so drift hits both alike), moves a
warm-up volume through it (with each loader 256 MiB produced in each produce shape, 1 and 8
partitions at acks=1 and acks=all, and one of them consumed: Kafka's JIT compiles its hot paths before
anything is timed), runs every selected workload with two loaders — Kafka's own tools
(ProducerPerformance, ConsumerPerformance, EndToEndLatency from the kafka-tools jar) and
confluent-kafka from Python — and stops it.  The table holds medians over runs.  Workloads:

- ``produce/<size>/p<N>/acks<A>``: peak rate, fresh topic with N partitions, 1 GiB of payload.
- ``consume/<size>/p<N>``: read back what was just produced (page cache), all partitions, three
  times over (each read a fresh loader process; ``--quick`` once).
- ``at-half-peak/1KiB/p1/acks<A>``: produce paced at half of Kafka's peak rate for the same
  workload and loader, measured earlier in the same invocation.  Java: ProducerPerformance
  --throughput (send → ack latency; the first 5 s of records, the producer's own start, are left out
  of the percentiles with its --warmup-records).  confluent: true end-to-end latency, a consumer in another
  process timing each record from send to receipt.
- ``e2e-serial/1KiB/p1/acks1``: Kafka's EndToEndLatency (one record in flight at a time).
- ``sustained/1KiB/p<N>/acks1`` (with ``--sustained``): peak-rate produce of 6 GiB, past the page
  cache's easy phase, where the kernel's copy into it dominates both brokers.

Systems: ``kafka`` runs with the JVM options of Kafka's own start script (kafka-server-start.sh), the
base of every ratio; ``kafka-constrained`` (optional) with the small heap the compat suite uses.
Where the machine has two CPUs or more, the broker runs on one (``taskset``) and the loaders on the
others (``--no-pin`` turns that off).  Broker peak RSS is VmHWM of the broker process, reset before
each workload; CPU s is the broker's user+system time during the workload, and CPU s/GB that per
10^9 bytes of payload moved.  Before each workload the page cache is filled with clean, cold pages
until 512 MiB are free, after a sync (``bench/page_cache.py``; ``--no-fill-page-cache`` turns that
off), so that each broker writes into the same memory state.  A benchmark: it prints, it never asserts a time.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import fnmatch
import gc
import shlex
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from bench import confluent_load, kafka_tools, pinning, processes
from bench.load_result import LoadResult, back_to_back
from bench.page_cache import DEFAULT_TARGET_FREE, PageCacheFill
from bench.report import Measurement, compare_table, render_section, summarize, write_section
from bench.stats import median, ratio
from bench.sysstat import (
    busy_share,
    cpu_idle_seconds,
    cpu_seconds,
    load_average,
    machine_description,
    meminfo_bytes,
    peak_rss_mb,
    reset_peak_rss,
    user_and_system_seconds,
)
from bench.systems import SYSTEMS, Broker, broker_pid, kafka_jvm_descriptions, make_broker

LOADERS = ("java", "confluent")
RESULTS_PATH = Path(__file__).resolve().parent / "RESULTS.md"
SIZE_LABELS = {100: "100B", 1024: "1KiB", 16384: "16KiB"}


@dataclass(frozen=True)
class Workload:
    kind: str  # produce | consume | at-half-peak | e2e-serial | sustained
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


def all_workloads(quick: bool, sustained: bool = False) -> list[Workload]:
    if quick:
        short = [
            Workload("produce", 1024, 1, "1"),
            Workload("consume", 1024, 1),
            Workload("at-half-peak", 1024, 1, "1"),
            Workload("e2e-serial", 1024, 1, "1"),
        ]
        return [*short, Workload("sustained", 1024, 1, "1")] if sustained else short
    produce = [
        Workload("produce", size, partitions, acks)
        for size in (100, 1024, 16384)
        for partitions in (1, 8)
        for acks in ("1", "all")
    ]
    consume = [Workload("consume", size, partitions) for size in (100, 1024, 16384) for partitions in (1, 8)]
    paced = [Workload("at-half-peak", 1024, 1, acks) for acks in ("1", "all")]
    long = [Workload("sustained", 1024, partitions, "1") for partitions in (1, 8)] if sustained else []
    return [*produce, *consume, *paced, Workload("e2e-serial", 1024, 1, "1"), *long]


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
    """How much each workload moves: payload bytes per produce run, and the warm-up before them."""

    bytes_per_run: int
    min_records: int
    paced_seconds: float
    serial_records: int
    warmup_bytes: int
    sustained_bytes: int
    consume_passes: int = 1  # times a consume workload reads its data back

    def records(self, record_size: int, sustained: bool = False) -> int:
        total = self.sustained_bytes if sustained else self.bytes_per_run
        return max(self.min_records, -(-total // record_size))


GIB = 2**30
# at-half-peak (Java): seconds of records before the latencies count.  The producer's first second
# waits ~0.3-0.5 s for its connections and JIT; its rate limiter then sends the backlog in a burst,
# and that burst's queueing lasted into the 3rd second on pybroker and the 4th on Kafka in 12 s runs
# at 61,000 records/s (2026-11-28; from the 5th second on, both: ~1 ms average, <= 20 ms maximum).
PACED_WARM_UP_S = 5.0
# (partitions, acks) of the warm-up's produce runs: the shapes of the produce workloads.
WARM_UP_SHAPES = ((1, "1"), (1, "all"), (8, "1"), (8, "all"))
FULL = Volume(
    GIB,
    10_000,
    paced_seconds=10,
    serial_records=5000,
    warmup_bytes=256 * 2**20,
    sustained_bytes=6 * GIB,
    consume_passes=3,
)
QUICK = Volume(
    16_000_000, 5_000, paced_seconds=3, serial_records=500, warmup_bytes=4_000_000, sustained_bytes=24_000_000
)


def scaled(volume: Volume, gib: float | None, warmup_mib: float | None, sustained_gib: float | None) -> Volume:
    """The volume with any of its sizes given on the command line instead."""
    changes: dict[str, int] = {}
    if gib is not None:
        changes["bytes_per_run"] = int(gib * GIB)
    if warmup_mib is not None:
        changes["warmup_bytes"] = int(warmup_mib * 2**20)
    if sustained_gib is not None:
        changes["sustained_bytes"] = int(sustained_gib * GIB)
    return dataclasses.replace(volume, **changes)


class Session:
    """One system started once; runs workloads against it and records what they cost the broker."""

    def __init__(
        self,
        system: str,
        broker: Broker,
        bootstrap: str,
        volume: Volume,
        fill: PageCacheFill | None = None,
        loader_cpus: frozenset[int] = frozenset(),
    ) -> None:
        self.system = system
        self.loader_cpus = loader_cpus  # whose busy share each measurement reports (none: not pinned)
        self.fill = fill
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
        if self.fill is not None:
            # The same memory state before every workload of every system.
            sync_s, read = self.fill.settle()
            print(
                f"  memory settled: sync {sync_s:.1f} s; page cache kept full: {read / GIB:.2f} GiB read, "
                f"{meminfo_bytes('MemFree') >> 20} MiB free"
            )
        reset_peak_rss(pid)
        cpu_before = cpu_seconds(pid)
        user_before, system_before = user_and_system_seconds(pid)
        idle_before, started = cpu_idle_seconds(self.loader_cpus), time.perf_counter()
        result = load()
        elapsed, loader_idle = time.perf_counter() - started, cpu_idle_seconds(self.loader_cpus) - idle_before
        user_after, system_after = user_and_system_seconds(pid)
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
            payload_bytes=float(result.records * result.record_size),
            kernel_share=ratio(system_after - system_before, user_after + system_after - user_before - system_before),
            loader_cpu_busy=busy_share(self.loader_cpus, loader_idle, elapsed),
            elapsed_s=elapsed,
        )

    def warm_up(self, loaders: Sequence[str]) -> float:
        """Untimed: with each loader, produce the warm-up volume in each produce shape the workloads
        use (1 or 8 partitions, acks=1 and acks=all: Kafka's JIT compiles each path, the idempotent
        producer's included), then consume the first; seconds taken.  A single 256 MiB one-partition
        warm-up left Kafka's first produce rows on code not yet compiled: with it, Kafka's Java
        `p1/acks1` cost 6.1-6.3 CPU-s/GB, after the four shapes 3.3-3.4 (2026-11-28)."""
        if self.volume.warmup_bytes <= 0:
            return 0.0
        started = time.perf_counter()
        records = -(-self.volume.warmup_bytes // 1024)
        for loader in loaders:
            first = ""
            for partitions, acks in WARM_UP_SHAPES:
                topic = self.new_topic(partitions)
                first = first or topic
                self.produce_untimed(loader, topic, records, 1024, acks)
            if loader == "java":
                kafka_tools.consumer_performance(self.bootstrap, first, records, 1024)
            else:
                confluent_load.consume(self.bootstrap, first, records, 1024, 1)
        return time.perf_counter() - started

    def produce_untimed(self, loader: str, topic: str, records: int, size: int, acks: str = "1") -> None:
        if loader == "java":
            kafka_tools.producer_performance(self.bootstrap, topic, records, size, acks)
        else:
            confluent_load.produce(self.bootstrap, topic, records, size, acks)

    def run(self, loader: str, workload: Workload, paced_rate: float) -> Measurement:
        size, partitions, acks = workload.record_size, workload.partitions, workload.acks
        records = self.volume.records(size, sustained=workload.kind == "sustained")
        # Generous: a tool is stopped only when it runs slower than 2 MB/s (a hung broker, not a slow one).
        timeout_s = max(600.0, records * size / 2e6)
        if workload.kind in ("produce", "sustained"):
            topic = self.new_topic(partitions)
            if loader == "java":
                measurement = self.measure(
                    loader,
                    workload,
                    lambda: kafka_tools.producer_performance(
                        self.bootstrap, topic, records, size, acks, timeout_s=timeout_s
                    ),
                )
            else:
                measurement = self.measure(
                    loader,
                    workload,
                    lambda: confluent_load.produce(self.bootstrap, topic, records, size, acks),
                )
            if workload.kind == "produce":
                self.filled.setdefault((loader, size, partitions), (topic, records))
            return measurement
        if workload.kind == "consume":
            if (loader, size, partitions) not in self.filled:
                topic = self.new_topic(partitions)
                self.produce_untimed(loader, topic, records, size)
                self.filled[(loader, size, partitions)] = (topic, records)
            topic, stored = self.filled[(loader, size, partitions)]

            def read_once() -> LoadResult:
                if loader == "java":
                    return kafka_tools.consumer_performance(self.bootstrap, topic, stored, size, timeout_s)
                return confluent_load.consume(self.bootstrap, topic, stored, size, partitions, timeout_s)

            # Read back several times, each a fresh loader process: one 1 GiB read takes ~1.5 s, and
            # single reads of the same data varied 445-734 MB/s from run to run (2026-11-28).
            passes = self.volume.consume_passes
            return self.measure(loader, workload, lambda: back_to_back([read_once() for _ in range(passes)]))
        if workload.kind == "at-half-peak":
            topic = self.new_topic(partitions)
            paced = max(1, int(paced_rate * self.volume.paced_seconds))
            if loader == "java":
                # The first PACED_WARM_UP_S of records are left out of the percentiles: without that
                # the p99 of a 10 s run was the producer's own start and catch-up (either broker).
                warm_up = max(1, int(paced_rate * PACED_WARM_UP_S))
                return self.measure(
                    loader,
                    workload,
                    lambda: kafka_tools.producer_performance(
                        self.bootstrap, topic, warm_up + paced, size, acks, throughput=paced_rate,
                        warmup_records=warm_up,
                    ),  # fmt: skip
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
    pins: pinning.Pinning,
    fill: PageCacheFill | None = None,
) -> list[Measurement]:
    measurements = []
    with tempfile.TemporaryDirectory(prefix=f"bench-{system}-") as tmp:
        broker = make_broker(system, Path(tmp), command_prefix=pins.broker_prefix())
        try:
            started = time.perf_counter()
            bootstrap = broker.start()
            print(
                f"run {run_index + 1}: {system} ready at {bootstrap} in {time.perf_counter() - started:.1f} s"
            )
            session = Session(system, broker, bootstrap, volume, fill, pins.loader_cpus)
            warm_s = session.warm_up(loaders)
            if warm_s:
                print(
                    f"  {system:8} warmed up: {volume.warmup_bytes / 2**20:,.0f} MiB per shape and loader"
                    f" in {warm_s:.1f} s"
                )
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
                        f"{m.mb_per_s:8.1f} MB/s  {m.cpu_s_per_gb:6.2f} CPU s/GB  p50 {m.p50_ms:7.2f}  "
                        f"p99 {m.p99_ms:8.2f}  p99.9 {m.p999_ms:8.2f} ms  rss {m.rss_mb:6.0f} MB  "
                        f"cpu {m.cpu_s:5.1f} s ({100 * m.broker_cores:3.0f} % of a core)  "
                        f"loader CPUs {100 * m.loader_cpu_busy:3.0f} % busy",
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
    parser.add_argument("--sustained", action="store_true", help="add the sustained rows (6 GiB produced each)")
    parser.add_argument(
        "--systems", default="pybroker,kafka", help="comma-separated: " + ",".join(SYSTEMS)
    )
    parser.add_argument("--loaders", default=",".join(LOADERS), help="comma-separated: java,confluent")
    parser.add_argument("--gib", type=float, help="payload per produce workload in GiB (default 1; --quick 16 MB)")
    parser.add_argument(
        "--warmup-mib", type=float, help="warm-up volume per produce shape and loader (default 256 MiB)"
    )
    parser.add_argument("--sustained-gib", type=float, help="payload per sustained workload (default 6 GiB)")
    parser.add_argument(
        "--no-pin", action="store_true", help="let broker and loaders share every CPU (no taskset)"
    )
    parser.add_argument(
        "--no-fill-page-cache",
        action="store_true",
        help="measure in whatever memory state the machine is in (see bench/page_cache.py)",
    )
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
    if not args.loaders:
        parser.error("no loader")
    if args.runs is None:
        args.runs = 1 if args.quick else 3
    return args


def tree_revision() -> str:
    """The commit measured (with '+changes' when the tree differs from it), for the results notes."""
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", "pybroker"],
            cwd=root, capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+changes" if dirty else "")


def _times(n: int) -> str:
    return {1: "once", 2: "twice"}.get(n, f"{n} times")


def result_notes(args: argparse.Namespace, volume: Volume, pins: pinning.Pinning, load: str) -> list[str]:
    jvms = kafka_jvm_descriptions()
    kafka_rows = [
        f"`{name}`{'' if name in args.systems else ' (not run)'}: `{options}`" for name, options in jvms.items()
    ]
    return [
        f"pybroker at {tree_revision()}; load average when started: {load}.",
        f"Runs per system: {args.runs}, interleaved (Kafka, pybroker, Kafka, …); medians shown "
        "(CPU s/GB: median of each run's broker CPU-seconds ÷ payload GB; kernel %: the share of "
        "that CPU time the broker spent in the kernel, its system time in /proc/PID/stat: the total is the "
        "scheduler's run time, its split into user and kernel time is sampled at the kernel's clock tick; "
        "broker CPU %: its CPU time over the load's wall time, 100 = one core; "
        "loader CPU %: how busy the loaders' CPUs were during the timed load, its tool's start included: "
        "wall time less their idle time in /proc/stat; near 100 the loader, not the broker, set the rate).",
        f"Volume: {volume.bytes_per_run / GIB:g} GiB of payload per produce workload (consume reads it back "
        f"{_times(volume.consume_passes)}, each time in a fresh loader process), "
        f"{volume.sustained_bytes / GIB:g} GiB per sustained one; after each broker start "
        f"{volume.warmup_bytes / 2**20:g} MiB are produced untimed with each loader in each of "
        f"{len(WARM_UP_SHAPES)} shapes (1 and 8 partitions, acks=1 and acks=all) and one of them consumed "
        "(warm-up, JIT).",
        "Apache Kafka 4.3.1's JVM: " + "; ".join(kafka_rows) + ". Ratios are to `kafka`.",
        "Both brokers: log.segment.bytes=1073741824, topics created with the stated partition "
        "count, log.flush.* at defaults (no fsync per message); the Java tools run with -Xms512m -Xmx512m.",
        f"CPUs: {pins.describe()}.",
        "Memory state: "
        + (
            "as found (--no-fill-page-cache)."
            if args.no_fill_page_cache
            else "before each workload what earlier ones left dirty is written back (sync) and the page "
            f"cache is filled with clean, cold pages until {DEFAULT_TARGET_FREE >> 20} MiB are free or free "
            "memory stops falling, as on a long-running server (bench/page_cache.py: on this VM a page taken "
            "from memory left free costs a fault into the host, one reclaimed from the cache does not)."
        ),
        "Loaders on the same machine as the broker: Kafka's ProducerPerformance/ConsumerPerformance/"
        "EndToEndLatency 4.3.1 (default client settings but acks) and confluent-kafka "
        "(librdkafka) from Python.",
    ]


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    processes.sigterm_as_interrupt()
    workloads = select(all_workloads(args.quick, args.sustained), args.workloads)
    volume = scaled(QUICK if args.quick else FULL, args.gib, args.warmup_mib, args.sustained_gib)
    load = load_average()
    pins = pinning.plan(enabled=not args.no_pin)
    pins.pin_loaders()
    print(f"CPUs: {pins.describe()}; load average {load}", flush=True)
    if "java" in args.loaders:
        kafka_tools.install()
    # Kafka first in every run: its peak is the base of the paced workloads of every system.
    systems = sorted(args.systems, key=lambda s: {"kafka": 0, "kafka-constrained": 1}.get(s, 2))
    peaks = PeakRates()
    notes: set[str] = set()
    measurements: list[Measurement] = []
    fill = None if args.no_fill_page_cache else PageCacheFill(Path(tempfile.gettempdir()))
    try:
        for run_index in range(args.runs):
            for system in systems:
                measurements += run_session(
                    system, run_index, args.loaders, workloads, volume, peaks, notes, pins, fill
                )
    except KeyboardInterrupt:
        print("interrupted: brokers and tools stopped", file=sys.stderr)
        return 130
    finally:
        processes.stop_all()
        if fill is not None:
            fill.close()
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
            notes=[*result_notes(args, volume, pins, load), *sorted(notes)],
        )
        write_section(RESULTS_PATH, "bench.compare", section)
        print(f"wrote {RESULTS_PATH.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
