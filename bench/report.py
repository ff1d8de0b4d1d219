"""Benchmark tables: per-run measurements → medians per (system, loader, workload) → a Markdown
table with pybroker/Kafka ratios, and the section of ``bench/RESULTS.md`` each command owns."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.stats import median, ratio

REFERENCE_SYSTEM = "kafka"
SUBJECT_SYSTEM = "pybroker"
# Row order within a workload: the reference, its constrained variant, then pybroker.
SYSTEM_RANK = {REFERENCE_SYSTEM: 0, "kafka-constrained": 1, SUBJECT_SYSTEM: 2}


@dataclass(frozen=True)
class Measurement:
    """One workload run once against one system."""

    system: str
    loader: str
    workload: str
    records_per_s: float
    mb_per_s: float
    p50_ms: float = float("nan")
    p99_ms: float = float("nan")
    p999_ms: float = float("nan")
    rss_mb: float = float("nan")
    cpu_s: float = float("nan")
    payload_bytes: float = float("nan")  # record payload the workload moved through the broker
    kernel_share: float = float("nan")  # of the broker's CPU time, the part spent in the kernel
    # How busy the loaders' CPUs were while the load ran (near 1: the loader, not the broker, set the rate).
    loader_cpu_busy: float = float("nan")
    elapsed_s: float = float("nan")  # the load's wall time, the tool's start included

    @property
    def broker_cores(self) -> float:
        """The broker's CPU time over the load's wall time: how many cores it kept busy (1.0: one)."""
        return ratio(self.cpu_s, self.elapsed_s)

    @property
    def cpu_s_per_gb(self) -> float:
        """Broker CPU-seconds per 10^9 bytes of payload: its cost, whatever the rate."""
        return ratio(self.cpu_s, self.payload_bytes / 1e9)


@dataclass(frozen=True)
class Summary:
    """Medians over the runs of one (system, loader, workload)."""

    system: str
    loader: str
    workload: str
    runs: int
    records_per_s: float
    mb_per_s: float
    p50_ms: float
    p99_ms: float
    p999_ms: float
    rss_mb: float
    cpu_s: float
    cpu_s_per_gb: float
    kernel_share: float
    loader_cpu_busy: float
    broker_cores: float


_MEDIAN_FIELDS = (
    "records_per_s",
    "mb_per_s",
    "p50_ms",
    "p99_ms",
    "p999_ms",
    "rss_mb",
    "cpu_s",
    "cpu_s_per_gb",
    "kernel_share",
    "loader_cpu_busy",
    "broker_cores",
)


def summarize(measurements: Iterable[Measurement]) -> list[Summary]:
    """Medians per (loader, workload, system), in first-seen order of (loader, workload)."""
    groups: dict[tuple[str, str, str], list[Measurement]] = {}
    for m in measurements:
        groups.setdefault((m.loader, m.workload, m.system), []).append(m)
    summaries = []
    for (loader, workload, system), runs in groups.items():
        # CPU s/GB is a median of per-run ratios (each run's cost), not a ratio of medians.
        medians = {name: median(getattr(run, name) for run in runs) for name in _MEDIAN_FIELDS}
        summaries.append(Summary(system, loader, workload, len(runs), **medians))
    order = {key: i for i, key in enumerate(dict.fromkeys((s.loader, s.workload) for s in summaries))}
    summaries.sort(key=lambda s: (order[(s.loader, s.workload)], SYSTEM_RANK.get(s.system, 3), s.system))
    return summaries


def reference_for(summaries: Sequence[Summary], subject: Summary) -> Summary | None:
    for s in summaries:
        if s.system == REFERENCE_SYSTEM and (s.loader, s.workload) == (subject.loader, subject.workload):
            return s
    return None


def _fmt(value: float, digits: int = 1) -> str:
    if math.isnan(value):
        return "–"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}"


def _fmt_ratio(value: float) -> str:
    return "–" if math.isnan(value) else f"{value:.2f}×"


COMPARE_HEADER = (
    "| system | loader | workload | runs | records/s | MB/s | CPU s/GB | kernel % | broker CPU % | loader CPU % | p50 ms | p99 ms | p99.9 ms "
    "| peak RSS MB | CPU s | MB/s ÷ Kafka | CPU s/GB ÷ Kafka | p99 ÷ Kafka | RSS ÷ Kafka |"
)


def compare_table(summaries: Sequence[Summary]) -> str:
    """Markdown table; the ratio columns are filled on pybroker rows that have a Kafka row."""
    lines = [COMPARE_HEADER, "|" + "---|" * (COMPARE_HEADER.count("|") - 1)]
    for s in summaries:
        ref = reference_for(summaries, s) if s.system == SUBJECT_SYSTEM else None
        mb_ratio = ratio(s.mb_per_s, ref.mb_per_s) if ref else float("nan")
        cpu_ratio = ratio(s.cpu_s_per_gb, ref.cpu_s_per_gb) if ref else float("nan")
        p99_ratio = ratio(s.p99_ms, ref.p99_ms) if ref else float("nan")
        rss_ratio = ratio(s.rss_mb, ref.rss_mb) if ref else float("nan")
        cells = [
            s.system,
            s.loader,
            f"`{s.workload}`",
            str(s.runs),
            _fmt(s.records_per_s, 0),
            _fmt(s.mb_per_s),
            _fmt(s.cpu_s_per_gb, 2),
            _fmt(100 * s.kernel_share, 0),
            _fmt(100 * s.broker_cores, 0),
            _fmt(100 * s.loader_cpu_busy, 0),
            _fmt(s.p50_ms, 2),
            _fmt(s.p99_ms, 2),
            _fmt(s.p999_ms, 2),
            _fmt(s.rss_mb, 0),
            _fmt(s.cpu_s),
            _fmt_ratio(mb_ratio),
            _fmt_ratio(cpu_ratio),
            _fmt_ratio(p99_ratio),
            _fmt_ratio(rss_ratio),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def render_section(
    name: str, title: str, date: str, machine: str, command: str, body: str, notes: Sequence[str] = ()
) -> str:
    """One command's section of RESULTS.md, fenced by markers so a re-run replaces only it."""
    parts = [
        f"<!-- begin {name} -->",
        f"## {title}",
        "",
        f"- Date: {date}",
        f"- Machine: {machine}",
        f"- Command: `{command}`",
        *(f"- {note}" for note in notes),
        "",
        body.rstrip("\n"),
        f"<!-- end {name} -->",
    ]
    return "\n".join(parts) + "\n"


RESULTS_PREAMBLE = (
    "# Benchmark results\n\n"
    "Written by the benchmark commands (`python -m bench.compare --write-results`, "
    "`python -m bench.scaling --write-results`); each replaces only its own section. "
    "Medians of the runs; MB/s = 10^6 bytes of record payload per second; ratios are "
    "pybroker ÷ Apache Kafka measured in the same run.\n\n"
)


def write_section(path: Path, name: str, section: str) -> None:
    """Replace the section called ``name`` in ``path`` (or append it), keeping the other sections."""
    text = path.read_text() if path.exists() else RESULTS_PREAMBLE
    pattern = re.compile(rf"<!-- begin {re.escape(name)} -->.*?<!-- end {re.escape(name)} -->\n?", re.DOTALL)
    if pattern.search(text):
        text = pattern.sub(lambda _match: section, text, count=1)
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.write_text(text)
