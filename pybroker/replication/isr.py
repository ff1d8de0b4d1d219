"""The leader's periodic ISR check (Kafka's isr-expiration task in ReplicaManager)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pybroker.replication.partition import Partition

log = logging.getLogger(__name__)


async def run_isr_expiration(
    partitions: Callable[[], Iterable[Partition]], replica_lag_time_max_ms: int
) -> None:
    """Every half ``replica.lag.time.max.ms``, each partition this broker leads proposes an ISR
    without the followers that have not caught up for that long.  Runs until cancelled."""
    interval_s = max(replica_lag_time_max_ms, 2) / 2 / 1000
    while True:
        await asyncio.sleep(interval_s)
        for p in list(partitions()):
            if not p.is_leader:
                continue
            try:
                p.maybe_shrink_isr()
            except Exception:  # one partition's failure must not stop the others' checks
                log.exception("ISR check of %s-%d failed", p.topic, p.index)
