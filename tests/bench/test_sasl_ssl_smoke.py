"""CI smoke run of bench.sasl_ssl at a toy size: it must run to the end on pybroker over a SASL_SSL
listener (SCRAM-SHA-256 over TLS) and print its table.  Only the exit code and the table's shape are
checked — never a time or a rate."""

from __future__ import annotations

import pytest

from tests.bench.bench_process import run_bench


@pytest.mark.timeout(200)
def test_sasl_ssl_bench_runs_at_a_toy_size() -> None:
    argv = ["--systems", "pybroker", "--runs", "1"]
    argv += ["--mib", "16", "--warmup-mib", "1"]  # enough broker CPU to be above /proc's 10 ms clock tick
    result = run_bench("bench.sasl_ssl", *argv, timeout_s=180)
    rows = [line for line in result.stdout.splitlines() if line.startswith("| pybroker |")]
    assert len(rows) == 1, result.stdout
    cells = [cell.strip() for cell in rows[0].strip("|").split("|")]
    assert len(cells) == 6 and all(float(cell) > 0 for cell in cells[1:5]), rows[0]
