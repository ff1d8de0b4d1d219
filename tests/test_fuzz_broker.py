"""The short version of ``python -m tools.fuzz_broker`` (which the lead runs with --frames 1000000):
mutated captured and generated requests of every advertised API, with concurrent admin requests on
shared topics over several connections, against a real broker process. Every internal error
(UNKNOWN_SERVER_ERROR answers, "internal error"/Traceback log lines), undecodable answer, hang and
crash counts as a failure."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.fuzz_broker import run

pytestmark = pytest.mark.timeout(300)


def test_short_fuzz_run_finds_no_internal_errors(tmp_path: Path) -> None:
    results = run(2000, connections=8, seed=12, workdir=tmp_path, janitor_every=500)
    assert results.frames == 2000
    assert results.outcomes["answered"] > 0 and results.outcomes["closed"] > 0, results.summary()
    assert results.failures == 0, results.summary()
