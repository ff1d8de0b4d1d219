"""Runs the storage log cleaner over every ``cleanup.policy=compact`` partition, periodically.

``__consumer_offsets`` is the first user; any compacted topic shares the same pass.  A log that
received nothing since it was last cleaned is skipped, so an idle broker does no work.  Logs belong
to the event loop, so each log's pass is split: the loop snapshots the segments, a worker thread
does the reading, decoding and rewriting (seconds for a large log, which would otherwise stall
every client), and the loop swaps the results in.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from pybroker import config as broker_config
from pybroker.storage.cleaner import (
    apply_cleaning,
    clean_log,
    cleanable_upper_bound,
    compute_cleaning,
    last_records_of_active_producers,
    log_clean_stats,
    snapshot_segments,
)

if TYPE_CHECKING:
    from pybroker.coordinator.services import CoordinatorServices
    from pybroker.replication.partition import Partition

log = logging.getLogger(__name__)

CLEANER_BACKOFF_MS = 15_000  # Kafka's log.cleaner.backoff.ms


class CompactionTask:
    def __init__(self, services: CoordinatorServices, interval_ms: int = CLEANER_BACKOFF_MS) -> None:
        self.services = services
        self.interval_ms = interval_ms
        self._cleaned_up_to: dict[tuple[str, int], int] = {}
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_ms / 1000)
            try:
                await self.run_once_in_thread()
            except Exception:
                log.exception("log cleaner pass failed")

    def _due(self) -> list[tuple[tuple[str, int], Partition, int]]:
        """(key, partition, delete.retention.ms) of every compacted partition with new data."""
        due = []
        for partition in list(self.services.all_partitions()):
            key = (partition.topic, partition.index)
            lg = partition.log
            if "compact" not in lg.config.cleanup_policy.split(","):
                continue
            if self._cleaned_up_to.get(key) == lg.log_end_offset or len(lg.segments) < 2:
                continue
            rec = self.services.topic(key[0])
            effective = broker_config.effective_topic_config(self.services.config, rec.configs if rec else {})
            due.append((key, partition, int(effective["delete.retention.ms"])))
        return due

    async def run_once_in_thread(self, now_ms: int | None = None) -> int:
        """As ``run_once``, with each log's reading and rewriting done in a worker thread."""
        loop = asyncio.get_running_loop()
        removed = 0
        for key, partition, retention_ms in self._due():
            if self.services.partition(*key) is not partition:
                continue  # deleted while an earlier log of this pass was being cleaned
            now = int(time.time() * 1000) if now_ms is None else now_ms
            lg = partition.log
            end = lg.log_end_offset
            snapshots = snapshot_segments(lg)
            results, stats = await loop.run_in_executor(
                None,
                compute_cleaning,
                snapshots,
                now,
                retention_ms,
                cleanable_upper_bound(lg),
                last_records_of_active_producers(lg),
            )
            if partition.log is not lg:
                continue  # moved to another log dir meanwhile (AlterReplicaLogDirs): its files are gone
            stats.segments_rewritten, stats.segments_deleted = apply_cleaning(lg, results)
            log_clean_stats(lg, stats)
            removed += stats.records_removed
            self._cleaned_up_to[key] = end
        return removed

    def run_once(self, now_ms: int | None = None) -> int:
        """Clean every compacted partition with new data in the calling thread; returns the records removed."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        removed = 0
        for key, partition, retention_ms in self._due():
            end = partition.log.log_end_offset
            removed += clean_log(partition.log, now, retention_ms).records_removed
            self._cleaned_up_to[key] = end
        return removed
