"""One load tool's answer, whichever tool produced it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class LoadResult:
    records: int
    records_per_s: float
    record_size: int
    p50_ms: float = float("nan")
    p99_ms: float = float("nan")
    p999_ms: float = float("nan")

    @property
    def mb_per_s(self) -> float:
        """Payload throughput in MB/s (10^6 bytes), from the record rate — the tools' own 'MB' is MiB."""
        return self.records_per_s * self.record_size / 1e6


def back_to_back(results: Sequence[LoadResult]) -> LoadResult:
    """Several runs of one load as one: all their records over the sum of their own timed spans
    (each tool's rate leaves out its start, so the sum does too).  Throughput runs only: latency
    percentiles do not add up, so none is kept."""
    if not results:
        raise ValueError("no runs to combine")
    records = sum(r.records for r in results)
    seconds = sum(r.records / r.records_per_s for r in results)
    return LoadResult(records=records, records_per_s=records / seconds, record_size=results[0].record_size)
