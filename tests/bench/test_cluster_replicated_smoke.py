"""CI smoke run of bench.cluster_replicated at a toy size: three pybroker brokers with ZooKeeper take an
acks=all load on an RF 3 topic and the benchmark prints its table.  Only the exit code and the table's
shape are checked — never a time or a rate."""

from __future__ import annotations

import pytest

from tests.bench.bench_process import run_bench

HEADER = "| system | MB/s | broker CPU-s/GB | p50 ack ms | p99 ack ms |"


@pytest.mark.timeout(120)
def test_cluster_replicated_bench_runs_at_a_toy_size() -> None:
    args = ("--setups", "pybroker-3", "--runs", "1", "--gib", "0.016", "--warmup-gib", "0.001")  # CPU above the 10 ms tick
    lines = run_bench("bench.cluster_replicated", *args, timeout_s=110).stdout.splitlines()
    assert HEADER in lines, lines
    rows = [line for line in lines[lines.index(HEADER) + 2 :] if line.startswith("|")]
    assert len(rows) == 1 and rows[0].startswith("| pybroker, 3 brokers + ZooKeeper |"), lines
    cells = [cell.strip() for cell in rows[0].strip("|").split("|")]
    assert len(cells) == 5 and all(float(cell.replace(",", "")) > 0 for cell in cells[1:]), rows[0]
