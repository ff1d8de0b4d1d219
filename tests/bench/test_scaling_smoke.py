"""CI smoke run of bench.scaling at toy sizes: every part must run to the end on pybroker.

Only the exit code and the tables' shape are checked — never a time or a rate. (The log-size
part once failed before measuring anything, unnoticed, because nothing ran it.)
"""

from __future__ import annotations

import pytest

from tests.bench.bench_process import run_bench


@pytest.mark.timeout(300)
def test_scaling_runs_every_part_at_toy_sizes() -> None:
    argv = ["--systems", "pybroker", "--partitions", "40"]
    argv += ["--spread-records", "2000", "--log-sizes-gib", "0.01", "--seek-samples", "3"]
    argv += ["--connections", "4", "--connection-seconds", "1"]
    result = run_bench("bench.scaling", *argv, timeout_s=280)
    tables = {}
    for line in result.stdout.splitlines():
        if line.startswith("| system"):
            header = line
            tables[header] = []
        elif line.startswith("| pybroker"):
            tables[header].append(line)
    headers = sorted(tables)
    assert [h.split("|")[2].strip() for h in headers] == ["connections", "log GiB", "partitions"], headers
    counts = sorted(len(rows) for rows in tables.values())
    assert counts == [1, 1, 3], tables  # one row each, and start/middle/end for the log size
