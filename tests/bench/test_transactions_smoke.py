"""CI smoke run of bench.transactions at a toy size: it must run to the end on pybroker and print its
table.  Only the exit code and the table's shape are checked — never a time or a rate."""

from __future__ import annotations

import pytest

from tests.bench.bench_process import run_bench


@pytest.mark.timeout(200)
def test_transactions_bench_runs_at_a_toy_size() -> None:
    argv = ["--systems", "pybroker", "--runs", "1"]
    argv += ["--megabytes", "4", "--warmup-mib", "1"]
    result = run_bench("bench.transactions", *argv, timeout_s=180)
    rows = [line for line in result.stdout.splitlines() if line.startswith("| pybroker |")]
    assert len(rows) == 1, result.stdout
    cells = [cell.strip() for cell in rows[0].strip("|").split("|")]
    assert len(cells) == 6 and float(cells[1]) > 0 and float(cells[3]) > 0, rows[0]
