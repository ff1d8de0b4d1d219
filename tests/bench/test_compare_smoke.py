"""CI smoke run of the side-by-side benchmark: it must run to the end against both brokers.

Only the exit code and the table's shape are checked — never a time or a rate.
"""

from __future__ import annotations

import pytest

from tests.bench.bench_process import run_bench


@pytest.mark.timeout(400)
def test_quick_compare_runs_against_pybroker_and_kafka() -> None:
    result = run_bench(
        "bench.compare", "--quick", "--systems", "pybroker,kafka",
        # Every flag of the full harness, at toy sizes: the sustained row, the warm-up, pinning.
        "--sustained", "--gib", "0.008", "--warmup-mib", "2", "--sustained-gib", "0.016",
        timeout_s=380,
    )  # fmt: skip
    rows = [line for line in result.stdout.splitlines() if line.startswith("| ")]
    assert rows and rows[0].startswith("| system | loader | workload")
    header = [cell.strip() for cell in rows[0].strip("|").split("|")]
    cpu_column = header.index("CPU s/GB")
    kernel_column = header.index("kernel %")
    loader_column = header.index("loader CPU %")
    broker_column = header.index("broker CPU %")
    systems = {row.split("|")[1].strip() for row in rows[1:]}
    assert systems == {"pybroker", "kafka"}
    workloads = {row.split("|")[3].strip().strip("`") for row in rows[1:]}
    assert {
        "produce/1KiB/p1/acks1", "consume/1KiB/p1", "at-half-peak/1KiB/p1/acks1", "sustained/1KiB/p1/acks1"
    } <= workloads  # fmt: skip
    # Every pybroker row that has a Kafka row carries a ratio (the cell is a number followed by ×).
    pybroker_rows = [row for row in rows[1:] if row.startswith("| pybroker")]
    assert all(row.count("×") >= 1 for row in pybroker_rows)
    # Every row moving data reports the broker's CPU-seconds per GB as a number, and the kernel's share
    # of it where /proc's 10 ms clock ticks saw any CPU time (toy loads may cost less than a tick).
    kernel_shares: dict[str, list[float]] = {}
    for row in rows[1:]:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        if "e2e-serial" not in cells[2]:
            float(cells[cpu_column].replace(",", ""))
            if cells[kernel_column] != "–":
                kernel_shares.setdefault(cells[0], []).append(float(cells[kernel_column]))
    assert set(kernel_shares) == {"pybroker", "kafka"}, rows
    assert all(0 <= share <= 100 for shares in kernel_shares.values() for share in shares), kernel_shares
    # With the loaders pinned apart from the broker, every row says how busy their CPUs were.
    if "loaders to CPU" in result.stdout:
        busy = [float(row.strip("|").split("|")[loader_column]) for row in rows[1:]]
        assert all(0 <= share <= 100 for share in busy), rows
    # And how much of a core the broker kept busy (a broker has more threads than one: no upper bound).
    assert all(float(row.strip("|").split("|")[broker_column]) >= 0 for row in rows[1:]), rows
    assert "warmed up: 2 MiB per shape and loader" in result.stdout
    assert "CPUs: " in result.stdout
    assert "memory settled: sync " in result.stdout and "page cache kept full: " in result.stdout
