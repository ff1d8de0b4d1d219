"""Smoke run of bench.produce_isolation at a toy size against pybroker: it runs to the end and
prints its table."""

from __future__ import annotations

from bench import produce_isolation


def test_produce_isolation_runs(capsys) -> None:
    produce_isolation.main(["--systems", "pybroker", "--runs", "1", "--probes", "20", "--seconds", "2", "--no-pin"])
    out = capsys.readouterr().out
    assert "| pybroker | 1 |" in out and "bulk MB/s" in out
