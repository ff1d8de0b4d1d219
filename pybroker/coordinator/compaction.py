"""Runs the storage log cleaner over every ``cleanup.policy=compact`` partition, periodically.

``__consumer_offsets`` is the first user; any compacted topic shares the same pass.  The pass runs
on the event loop (logs belong to it) and skips a log that received nothing since it was last
cleaned, so an idle broker does no work.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from pybroker import config as broker_config
from pybroker.storage.cleaner import clean_log

if TYPE_CHECKING:
    from pybroker.broker import Broker

log = logging.getLogger(__name__)

CLEANER_BACKOFF_MS = 15_000  # Kafka's log.cleaner.backoff.ms


class CompactionTask:
    def __init__(self, broker: Broker, interval_ms: int = CLEANER_BACKOFF_MS) -> None:
        self.broker = broker
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
                self.run_once()
            except Exception:
                log.exception("log cleaner pass failed")

    def run_once(self, now_ms: int | None = None) -> int:
        """Clean every compacted partition with new data; returns the records removed."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        removed = 0
        for key, partition in list(self.broker.partitions.items()):
            lg = partition.log
            if "compact" not in lg.config.cleanup_policy.split(","):
                continue
            end = lg.log_end_offset
            if self._cleaned_up_to.get(key) == end or len(lg.segments) < 2:
                continue
            rec = self.broker.topic(key[0])
            effective = broker_config.effective_topic_config(self.broker.config, rec.configs if rec else {})
            stats = clean_log(lg, now, int(effective["delete.retention.ms"]))
            removed += stats.records_removed
            self._cleaned_up_to[key] = end
        return removed
