"""One load tool's answer, whichever tool produced it."""

from __future__ import annotations

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
