"""Consumer lag per group and partition, and a small in-memory history of it for the console.

Lag is what ``kafka-consumer-groups --describe`` prints: the partition's log end offset as a
read_uncommitted consumer sees it (ListOffsets LATEST, i.e. the high watermark) minus the group's
committed offset.  Partitions without a committed offset have no lag (the tool prints "-").
Kafka itself exposes none of this broker-side; it is what people run Burrow or an exporter for.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from dataclasses import dataclass

from pybroker.metrics.view import ClusterView

log = logging.getLogger(__name__)

HISTORY_SAMPLES = 720  # per group: an hour at the default 5 s interval


@dataclass(frozen=True, slots=True)
class PartitionLag:
    group_id: str
    topic: str
    partition: int
    committed_offset: int
    log_end_offset: int  # the high watermark: what ListOffsets LATEST answers a consumer

    @property
    def lag(self) -> int:
        return self.log_end_offset - self.committed_offset


def consumer_lag(view: ClusterView, group_ids: list[str] | None = None) -> list[PartitionLag]:
    """Lag rows of every (or the named) group's committed partitions that still exist."""
    if group_ids is None:
        group_ids = [g.group_id for g in view.groups()]
    rows = []
    for group_id in group_ids:
        for (topic, partition), committed in sorted(view.committed_offsets(group_id).items()):
            hw = view.high_watermark(topic, partition)
            if hw is not None and committed >= 0:
                rows.append(PartitionLag(group_id, topic, partition, committed, hw))
    return rows


class LagHistory:
    """The total lag of each group over time: a ring of (unix ms, total lag) per group, sampled on
    the event loop every ``interval_s``; groups that disappear lose their history."""

    def __init__(self, view: ClusterView, interval_s: float, samples: int = HISTORY_SAMPLES) -> None:
        self.view = view
        self.interval_s = interval_s
        self.samples = samples
        self.series: dict[str, deque[tuple[int, int]]] = {}

    def sample(self, now_ms: int | None = None) -> None:
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        totals: dict[str, int] = {g.group_id: 0 for g in self.view.groups()}
        for row in consumer_lag(self.view, list(totals)):
            totals[row.group_id] += row.lag
        for group_id in [g for g in self.series if g not in totals]:
            del self.series[group_id]
        for group_id, total in totals.items():
            ring = self.series.get(group_id)
            if ring is None:
                ring = self.series[group_id] = deque(maxlen=self.samples)
            ring.append((now_ms, total))

    def of(self, group_id: str) -> list[tuple[int, int]]:
        return list(self.series.get(group_id, ()))

    async def run(self) -> None:
        while True:
            try:
                self.sample()
            except Exception:
                log.exception("sampling consumer lag failed")
            await asyncio.sleep(self.interval_s)
