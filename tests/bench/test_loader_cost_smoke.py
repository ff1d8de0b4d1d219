"""CI smoke run of bench.loader_cost at a toy size against pybroker: it must run to the end and print
the loader's CPU and librdkafka's view of the requests.  Only the shape and the counts are checked —
never a time or a rate."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(200)
def test_loader_cost_runs_at_a_toy_size() -> None:
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    )
    argv = [sys.executable, "-m", "bench.loader_cost", "--systems", "pybroker", "--runs", "1"]
    argv += ["--mib", "16", "--warmup-mib", "1", "--no-fill-page-cache"]  # the compare smoke run fills it
    result = subprocess.run(argv, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    header = next(line for line in result.stdout.splitlines() if line.startswith("| system |"))
    names = [cell.strip() for cell in header.strip("|").split("|")]
    rows = [line for line in result.stdout.splitlines() if line.startswith("| pybroker |")]
    assert len(rows) == 1, result.stdout
    cells = dict(zip(names, (cell.strip() for cell in rows[0].strip("|").split("|")), strict=True))
    # 16 MiB of 1 KiB records went out in Produce requests librdkafka counted, in batches of records.
    assert int(cells["Produce requests"].replace(",", "")) >= 1
    assert 0 < float(cells["KB per request"].replace(",", "")) <= 1100
    assert float(cells["records per batch"].replace(",", "")) >= 1
    assert float(cells["Python thread s"]) > 0  # the loader's own thread was measured
