"""Smoke run of bench.metrics_overhead at a toy size: it runs to the end and prints both modes.
Never a time is checked."""

from __future__ import annotations

from bench import metrics_overhead


def test_metrics_overhead_runs(capsys) -> None:
    assert metrics_overhead.main(["--requests", "20", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    assert "timing off" in out and "timing on" in out
