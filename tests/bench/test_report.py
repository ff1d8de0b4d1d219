"""Medians, ratios, the comparison table and the RESULTS.md section writer."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from bench.compare import Workload, all_workloads, select
from bench.report import Measurement, compare_table, render_section, summarize, write_section
from bench.stats import median, percentile, ratio


def test_percentile_nearest_rank() -> None:
    values = list(range(1, 101))  # 1..100
    assert percentile(values, 0.5) == 50
    assert percentile(values, 0.99) == 99
    assert percentile(values, 0.999) == 100
    assert percentile(values, 0.0) == 1
    assert math.isnan(percentile([], 0.5))
    with pytest.raises(ValueError):
        percentile(values, 99)


def test_median_skips_missing_values_and_ratio_guards() -> None:
    assert median([3.0, float("nan"), 1.0, 2.0]) == 2.0
    assert math.isnan(median([float("nan")]))
    assert ratio(150.0, 100.0) == 1.5
    assert math.isnan(ratio(1.0, 0.0))
    assert math.isnan(ratio(float("nan"), 2.0))


def _m(
    system: str,
    mb: float,
    p99: float = float("nan"),
    rss: float = 100.0,
    cpu: float = float("nan"),
    kernel: float = 0.4,
    loader: float = 0.9,
) -> Measurement:
    return Measurement(
        system, "java", "produce/1KiB/p1/acks1", mb * 1000, mb, p99_ms=p99, rss_mb=rss, cpu_s=cpu,
        payload_bytes=2e9, kernel_share=kernel, loader_cpu_busy=loader, elapsed_s=10.0,
    )  # fmt: skip


def test_summaries_are_medians_and_ratios_are_pybroker_over_kafka() -> None:
    runs = [
        _m("pybroker", 90, p99=4, rss=40, cpu=2.0, kernel=0.3, loader=0.97),
        _m("kafka", 200, p99=2, rss=400, cpu=6.0),
        _m("kafka-constrained", 120, p99=9, rss=300, cpu=9.0),
        _m("pybroker", 100, p99=6, rss=50, cpu=3.0),
        _m("kafka", 100, p99=4, rss=420, cpu=8.0),
        _m("pybroker", 500, p99=5, rss=45, cpu=2.2, kernel=0.5, loader=1.0),
        _m("kafka", 150, p99=3, rss=410, cpu=7.0),
    ]
    summaries = summarize(runs)
    assert [s.system for s in summaries] == ["kafka", "kafka-constrained", "pybroker"]  # reference first
    kafka, constrained, pybroker = summaries
    assert (kafka.mb_per_s, pybroker.mb_per_s, pybroker.runs) == (150, 100, 3)
    assert (kafka.cpu_s_per_gb, pybroker.cpu_s_per_gb) == (3.5, 1.1)  # CPU s over 2 GB, median of runs
    table = compare_table(summaries)
    header = [cell.strip() for cell in table.splitlines()[0].strip("|").split("|")]
    assert header[6:10] == ["CPU s/GB", "kernel %", "broker CPU %", "loader CPU %"]
    assert header[-3] == "CPU s/GB ÷ Kafka"
    pybroker_row = next(line for line in table.splitlines() if line.startswith("| pybroker"))
    cells = [cell.strip() for cell in pybroker_row.strip("|").split("|")]
    assert cells[6] == "1.10"
    assert cells[7] == "40"  # the median run's kernel share of the broker's CPU
    assert cells[8] == "22"  # the median run's CPU time over its wall time: 2.2 s in 10 s
    assert cells[9] == "97"  # the median run's busy share of the loaders' CPUs
    # MB/s 100/150, CPU s/GB 1.1/3.5 (never to the constrained row's 4.5), p99 5/3, RSS 45/410
    assert cells[-4:] == ["0.67×", "0.31×", "1.67×", "0.11×"]
    for system in ("kafka", "kafka-constrained"):
        row = next(line for line in table.splitlines() if line.startswith(f"| {system} "))
        assert row.rstrip(" |").endswith("– | – | – | –")


def test_results_section_is_replaced_not_duplicated(tmp_path: Path) -> None:
    path = tmp_path / "RESULTS.md"
    first = render_section(
        "bench.compare", "Title", "2026-01-01", "2 vCPU", "python -m bench.compare", "| a |"
    )
    write_section(path, "bench.compare", first)
    write_section(path, "bench.scaling", render_section("bench.scaling", "S", "d", "m", "cmd", "| s |"))
    second = render_section(
        "bench.compare", "Title", "2026-02-02", "2 vCPU", "python -m bench.compare", "| b |"
    )
    write_section(path, "bench.compare", second)
    text = path.read_text()
    assert text.startswith("# Benchmark results")
    assert text.count("<!-- begin bench.compare -->") == 1
    assert "2026-02-02" in text and "2026-01-01" not in text
    assert "| b |" in text and "| a |" not in text
    assert "| s |" in text  # the other command's section survives
    assert "- Command: `python -m bench.compare`" in text


def test_workload_selection_pulls_in_the_peak_a_paced_run_needs() -> None:
    chosen = select(all_workloads(quick=False), "at-half-peak/1KiB/p1/acks1")
    assert Workload("produce", 1024, 1, "1") in chosen
    assert [w.name for w in chosen] == ["produce/1KiB/p1/acks1", "at-half-peak/1KiB/p1/acks1"]
    assert len(all_workloads(quick=False)) == 12 + 6 + 2 + 1
    assert len(all_workloads(quick=False, sustained=True)) == 12 + 6 + 2 + 1 + 2
    with pytest.raises(SystemExit):
        select(all_workloads(quick=False), "nothing/*")
