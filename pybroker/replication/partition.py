"""A partition as its leader sees it: the log plus leader epoch, ISR and high watermark.

The high watermark is kept distinct from the log end offset even on one broker: it advances when
every in-sync replica has the data.  With a single replica the ISR is just this broker, so the
high watermark follows the log end offset at once and ``acks=all`` completes immediately; when
followers arrive they report their fetch offsets through ``update_follower_offset`` and the same
waiters complete later.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pybroker.storage import Log

log = logging.getLogger(__name__)


class Partition:
    __slots__ = (
        "topic",
        "index",
        "topic_id",
        "log",
        "_leader_id",
        "_leader_epoch",
        "_replicas",
        "_isr",
        "state_listener",
        "high_watermark",
        "min_insync_replicas",
        "_follower_offsets",
        "_acks_waiters",
        "_data_listeners",
    )

    def __init__(
        self, topic: str, index: int, topic_id: uuid.UUID, log_: Log, node_id: int, leader_epoch: int = 0
    ):
        self.topic = topic
        self.index = index
        self.topic_id = topic_id
        self.log = log_
        # Told (with this partition) whenever leader, epoch, replicas or ISR change: Metadata caches
        # its encoding of them per topic.  Set before the partition is published.
        self.state_listener: Callable[[Partition], None] | None = None
        self._leader_id = node_id
        self._leader_epoch = leader_epoch
        self._replicas: tuple[int, ...] = (node_id,)
        self._isr: tuple[int, ...] = (node_id,)
        self._follower_offsets: dict[int, int] = {}
        self._acks_waiters: list[tuple[int, asyncio.Future[None]]] = []
        # Callables run after every append (long-poll fetches registered on this partition).
        self._data_listeners: set[Callable[[], None]] = set()
        self.high_watermark = log_.log_end_offset
        self.min_insync_replicas = 1  # the topic's min.insync.replicas; acks=all needs this many in the ISR

    # -- leadership state (what Metadata reports) -------------------------------------------
    # Replicas and ISR are tuples, so they cannot change in place without the listener hearing.
    @property
    def leader_id(self) -> int:
        return self._leader_id

    @leader_id.setter
    def leader_id(self, value: int) -> None:
        self._leader_id = value
        self._state_changed()

    @property
    def leader_epoch(self) -> int:
        return self._leader_epoch

    @leader_epoch.setter
    def leader_epoch(self, value: int) -> None:
        self._leader_epoch = value
        self._state_changed()

    @property
    def replicas(self) -> tuple[int, ...]:
        return self._replicas

    @replicas.setter
    def replicas(self, value: Iterable[int]) -> None:
        self._replicas = tuple(value)
        self._state_changed()

    @property
    def isr(self) -> tuple[int, ...]:
        return self._isr

    @isr.setter
    def isr(self, value: Iterable[int]) -> None:
        self._isr = tuple(value)
        self._state_changed()

    def _state_changed(self) -> None:
        if self.state_listener is not None:
            self.state_listener(self)

    # -- offsets ---------------------------------------------------------------------------
    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def last_stable_offset(self) -> int:
        """The first offset of the earliest ongoing transaction, bounded by the high watermark."""
        unstable = self.log.first_unstable_offset()
        return self.high_watermark if unstable is None else min(unstable, self.high_watermark)

    def _maybe_advance_high_watermark(self) -> None:
        new_hw = self.log.log_end_offset
        for replica in self.isr:
            if replica != self.leader_id:
                new_hw = min(new_hw, self._follower_offsets.get(replica, self.high_watermark))
        if new_hw > self.high_watermark:
            self.high_watermark = new_hw
            self._complete_acks_waiters()
        elif new_hw < self.high_watermark:
            # Only after truncation (DeleteRecords never lowers the log end): keep it consistent.
            self.high_watermark = new_hw

    def update_follower_offset(self, replica: int, fetch_offset: int) -> None:
        self._follower_offsets[replica] = fetch_offset
        self._maybe_advance_high_watermark()

    # -- produce ---------------------------------------------------------------------------
    def append_as_leader(self, buf: bytearray, batches: list, now_ms: int):
        info = self.log.append(buf, batches, leader_epoch=self.leader_epoch, now_ms=now_ms)
        if not info.duplicate:
            self._maybe_advance_high_watermark()
            self.notify_data()
        return info

    def append_marker_as_leader(
        self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int, now_ms: int
    ):
        """Write a transaction marker (WriteTxnMarkers); readers of the LSO are woken."""
        info = self.log.append_marker(
            producer_id,
            producer_epoch,
            commit,
            coordinator_epoch,
            leader_epoch=self.leader_epoch,
            now_ms=now_ms,
        )
        self._maybe_advance_high_watermark()
        self.notify_data()
        return info

    def has_enough_replicas(self) -> bool:
        return len(self.isr) >= self.min_insync_replicas

    def wait_replicated(self, last_offset: int) -> asyncio.Future[None] | None:
        """None when ``last_offset`` is already below the high watermark (acks=all satisfied)."""
        if last_offset < self.high_watermark:
            return None
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._acks_waiters.append((last_offset, fut))
        return fut

    def _complete_acks_waiters(self) -> None:
        if not self._acks_waiters:
            return
        hw = self.high_watermark
        still = []
        for offset, fut in self._acks_waiters:
            if offset < hw:
                if not fut.done():
                    fut.set_result(None)
            elif not fut.done():
                still.append((offset, fut))
        self._acks_waiters = still

    # -- fetch -----------------------------------------------------------------------------
    def add_data_listener(self, fn: Callable[[], None]) -> None:
        self._data_listeners.add(fn)

    def remove_data_listener(self, fn: Callable[[], None]) -> None:
        self._data_listeners.discard(fn)

    def notify_data(self) -> None:
        if self._data_listeners:
            for fn in list(self._data_listeners):
                fn()

    def fetch_upper_bound(self, read_committed: bool) -> int:
        return self.last_stable_offset if read_committed else self.high_watermark

    def close(self) -> None:
        for _, fut in self._acks_waiters:
            if not fut.done():
                fut.cancel()
        self._acks_waiters.clear()
        # Wake long-poll fetches now, so they answer for the partition's removal instead of timing out.
        self.notify_data()
        self._data_listeners.clear()
