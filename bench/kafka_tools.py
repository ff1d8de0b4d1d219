"""Apache Kafka's own load tools — ProducerPerformance, ConsumerPerformance, EndToEndLatency — run
from the ``org.apache.kafka:kafka-tools`` jar on Maven Central, and their output parsed into numbers.

The jars are resolved through ``bench/java/pom.xml`` into the project-local Maven repository with
the same helper the reference broker uses.  Each tool runs in its own JVM with a fixed heap, so its
memory behaviour is the same against either broker.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from bench import processes
from bench.load_result import LoadResult
from compat_tests.reference.maven import CACHE_DIR, build_lock, run_maven

POM_DIR = Path(__file__).resolve().parent / "java"

# A fixed heap (Xms = Xmx) for the tool JVMs: no heap growth pauses inside a measurement.
TOOL_JVM_OPTIONS = ["-Xms512m", "-Xmx512m", "-XX:+UseG1GC", "-Djava.awt.headless=true"]

TOOLS_PACKAGE = "org.apache.kafka.tools"


class ParseError(ValueError):
    """A tool's output did not contain the summary it always prints on success."""


def classpath_file() -> Path:
    digest = hashlib.sha256((POM_DIR / "pom.xml").read_bytes()).hexdigest()[:12]
    return CACHE_DIR / "kafka-tools" / f"classpath-{digest}.txt"


def install() -> str:
    """Resolve the kafka-tools jars (offline when already resolved); returns the classpath."""
    target = classpath_file()
    with build_lock("kafka-tools"):
        if target.exists():
            classpath = target.read_text().strip()
            if classpath and all(Path(jar).exists() for jar in classpath.split(os.pathsep)):
                return classpath
        target.parent.mkdir(parents=True, exist_ok=True)
        run_maven(POM_DIR, ["dependency:build-classpath", f"-Dmdep.outputFile={target}"])
        return target.read_text().strip()


def java_command(main_class: str, *args: str) -> list[str]:
    return ["java", *TOOL_JVM_OPTIONS, "-cp", install(), f"{TOOLS_PACKAGE}.{main_class}", *args]


# --- output parsers (pure functions, unit-tested) -------------------------------------------------

_NUMBER = r"([0-9]+(?:\.[0-9]+)?)"
_PRODUCER_SUMMARY = re.compile(
    rf"([0-9]+)( steady state)? records sent, {_NUMBER} records/sec \({_NUMBER} MB/sec\), {_NUMBER} ms avg latency, "
    rf"{_NUMBER} ms max latency, {_NUMBER} ms 50th, {_NUMBER} ms 95th, {_NUMBER} ms 99th, {_NUMBER} ms 99.9th"
)
_E2E_PERCENTILES = re.compile(rf"Percentiles: 50th = {_NUMBER}, 99th = {_NUMBER}, 99\.9th = {_NUMBER}")


def parse_producer_performance(output: str, record_size: int) -> LoadResult:
    """The summary line of the whole run (it is the only one with percentiles; progress lines have
    none); with ``--warmup-records``, the latency percentiles of the "steady state" line that follows
    it (the records after the warm-up), while count and rate stay the whole run's, which is what the
    broker's CPU time is divided by."""
    matches = _PRODUCER_SUMMARY.findall(output)
    whole = [m for m in matches if not m[1]]
    if not whole:
        raise ParseError(f"no ProducerPerformance summary in:\n{output[-2000:]}")
    records, _, rate, _mib, _avg, _max, p50, _p95, p99, p999 = whole[-1]
    steady = [m for m in matches if m[1]]
    if steady:
        p50, p99, p999 = steady[-1][6], steady[-1][8], steady[-1][9]
    return LoadResult(
        records=int(records),
        records_per_s=float(rate),
        record_size=record_size,
        p50_ms=float(p50),
        p99_ms=float(p99),
        p999_ms=float(p999),
    )


def parse_consumer_performance(output: str, record_size: int) -> LoadResult:
    """The CSV line under the header; the rate is fetch.nMsg.sec, which leaves out the group join."""
    lines = [line.strip() for line in output.splitlines()]
    for index, line in enumerate(lines):
        if line.startswith("start.time,"):
            header = [name.strip() for name in line.split(",")]
            values = next((v for v in lines[index + 1 :] if v.count(",") == len(header) - 1), None)
            if values is None:
                break
            row = dict(zip(header, (value.strip() for value in values.split(",")), strict=True))
            return LoadResult(
                records=int(row["data.consumed.in.nMsg"]),
                records_per_s=float(row["fetch.nMsg.sec"]),
                record_size=record_size,
            )
    raise ParseError(f"no ConsumerPerformance result in:\n{output[-2000:]}")


def parse_end_to_end_latency(output: str, records: int, record_size: int) -> LoadResult:
    """'Percentiles: 50th = a, 99th = b, 99.9th = c' (ms).  The tool keeps one record in flight, so
    its rate says nothing about the broker and is left out (NaN)."""
    match = _E2E_PERCENTILES.search(output)
    if match is None:
        raise ParseError(f"no EndToEndLatency percentiles in:\n{output[-2000:]}")
    p50, p99, p999 = (float(value) for value in match.groups())
    return LoadResult(
        records=records,
        records_per_s=float("nan"),
        record_size=record_size,
        p50_ms=p50,
        p99_ms=p99,
        p999_ms=p999,
    )


# --- runners ---------------------------------------------------------------------------------------


def producer_performance(
    bootstrap: str,
    topic: str,
    records: int,
    record_size: int,
    acks: str,
    throughput: float = -1,
    timeout_s: float = 600,
    warmup_records: int = 0,
) -> LoadResult:
    """``--throughput -1`` is the peak; a positive value paces to that many records/s.  With
    ``warmup_records``, the latency percentiles leave out the first records (the tool's
    ``--warmup-records``: the producer's own start, its JIT and first connections)."""
    warm_up = ["--warmup-records", str(warmup_records)] if warmup_records > 0 else []
    output = processes.run(
        java_command(
            "ProducerPerformance",
            "--bootstrap-server", bootstrap,
            "--topic", topic,
            "--num-records", str(records),
            "--record-size", str(record_size),
            "--throughput", str(int(throughput)) if throughput > 0 else "-1",
            "--command-property", f"acks={acks}",
            *warm_up,
        ),
        timeout_s,
        "ProducerPerformance",
    )  # fmt: skip
    return parse_producer_performance(output, record_size)


def consumer_performance(
    bootstrap: str, topic: str, records: int, record_size: int, timeout_s: float = 600
) -> LoadResult:
    output = processes.run(
        java_command(
            "ConsumerPerformance",
            "--bootstrap-server", bootstrap,
            "--topic", topic,
            "--num-records", str(records),
            "--timeout", "30000",
        ),
        timeout_s,
        "ConsumerPerformance",
    )  # fmt: skip
    return parse_consumer_performance(output, record_size)


def end_to_end_latency(
    bootstrap: str, topic: str, records: int, record_size: int, acks: str, timeout_s: float = 600
) -> LoadResult:
    output = processes.run(
        java_command(
            "EndToEndLatency",
            "--bootstrap-server", bootstrap,
            "--topic", topic,
            "--num-records", str(records),
            "--producer-acks", acks,
            "--record-size", str(record_size),
        ),
        timeout_s,
        "EndToEndLatency",
    )  # fmt: skip
    return parse_end_to_end_latency(output, records, record_size)


if __name__ == "__main__":
    import sys

    if sys.argv[1:] != ["install"]:
        raise SystemExit("usage: python -m bench.kafka_tools install")
    print(f"{len(install().split(os.pathsep))} jars resolved", flush=True)
