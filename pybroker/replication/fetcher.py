"""Follower replication: fetcher tasks that copy the leaders' logs (Kafka's ReplicaFetcherManager,
ReplicaFetcherThread and AbstractFetcherThread, as asyncio tasks).

One ``ReplicaFetcher`` task per (leader broker, fetcher id) — ``num.replica.fetchers`` of them per
leader, a partition's fetcher id from a stable hash of its name.  A partition joins its fetcher
when this broker becomes its follower (``ReplicaFetcherManager.add_fetcher_for_partitions``) and
first *truncates*: it asks the leader (OffsetForLeaderEpoch) where the follower's latest leader
epoch ends and cuts its log there, since anything past it was never committed under the new
leader (KIP-101, KIP-279).  Then it fetches in a loop, appends the leader's batches as they are
(``append_as_follower``) and follows the leader's high watermark.

Errors as Kafka's fetcher: OFFSET_OUT_OF_RANGE resets to the leader's log end (truncating) or
log start (starting the log over there); FENCED_LEADER_EPOCH parks the partition until the
controller's next state for it arrives (``add_fetcher_for_partitions`` with the new epoch);
NOT_LEADER_OR_FOLLOWER, UNKNOWN_LEADER_EPOCH and the like back the partition off for
``replica.fetch.backoff.ms``; a connection failure backs the whole fetcher off.
"""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pybroker.protocol.errors import ErrorCode
from pybroker.replication.leader_endpoint import (
    UNDEFINED_EPOCH,
    UNDEFINED_OFFSET,
    EpochEndOffset,
    FetchParams,
    FetchPartition,
    FetchPartitionResult,
    LeaderEndpoint,
    LeaderEndpointError,
    LeaderOffsetError,
    TopicPartition,
)
from pybroker.storage.errors import StorageError

if TYPE_CHECKING:
    from pybroker.replication.partition import Partition

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReplicaFetcherConfig:
    """Kafka's replica.* keys (defaults as Kafka's)."""

    num_replica_fetchers: int = 1
    replica_fetch_max_bytes: int = 1024 * 1024  # per partition
    replica_fetch_response_max_bytes: int = 10 * 1024 * 1024
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_min_bytes: int = 1
    replica_fetch_backoff_ms: int = 1000

    @classmethod
    def from_broker_config(cls, config) -> ReplicaFetcherConfig:
        """From a BrokerConfig (or anything with ``get(key)``); keys it lacks keep the default."""

        def value(key: str, default: int) -> int:
            try:
                v = config.get(key)
            except (KeyError, AttributeError):
                return default
            return default if v is None else int(v)

        d = cls()
        return cls(
            num_replica_fetchers=max(1, value("num.replica.fetchers", d.num_replica_fetchers)),
            replica_fetch_max_bytes=value("replica.fetch.max.bytes", d.replica_fetch_max_bytes),
            replica_fetch_response_max_bytes=value(
                "replica.fetch.response.max.bytes", d.replica_fetch_response_max_bytes
            ),
            replica_fetch_wait_max_ms=value("replica.fetch.wait.max.ms", d.replica_fetch_wait_max_ms),
            replica_fetch_min_bytes=value("replica.fetch.min.bytes", d.replica_fetch_min_bytes),
            replica_fetch_backoff_ms=value("replica.fetch.backoff.ms", d.replica_fetch_backoff_ms),
        )

    @property
    def fetch_params(self) -> FetchParams:
        return FetchParams(
            self.replica_fetch_wait_max_ms,
            self.replica_fetch_min_bytes,
            self.replica_fetch_response_max_bytes,
        )


@dataclass(frozen=True)
class InitialFetchState:
    """What a partition joins its fetcher with (Kafka's InitialFetchState)."""

    leader_id: int
    leader_epoch: int
    init_offset: int  # the follower's high watermark: where fetching starts if nothing is truncated


@dataclass
class PartitionFetchState:
    fetch_offset: int
    leader_epoch: int
    truncating: bool = True
    fenced: bool = False  # FENCED_LEADER_EPOCH: wait for the controller's next state
    delayed_until: float = 0.0  # loop time

    def is_ready(self, now: float) -> bool:
        return not self.fenced and now >= self.delayed_until


PartitionLookup = Callable[[str, int], "Partition | None"]


class ReplicaFetcher:
    """One task fetching the partitions this broker follows on one leader broker."""

    def __init__(
        self,
        name: str,
        endpoint: LeaderEndpoint,
        partitions: PartitionLookup,
        config: ReplicaFetcherConfig,
        clock: Callable[[], int] | None = None,
    ) -> None:
        self.name = name
        self.endpoint = endpoint
        self._lookup = partitions
        self.config = config
        self._clock = clock or (lambda: int(time.time() * 1000))
        self.states: dict[TopicPartition, PartitionFetchState] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._stopping = False

    # ---- membership ----
    def add_partitions(self, initial: dict[TopicPartition, InitialFetchState]) -> None:
        for tp, init in initial.items():
            current = self.states.get(tp)
            if current is not None and current.leader_epoch == init.leader_epoch and not current.fenced:
                continue  # same leader and epoch: keep going where it is (Kafka does the same)
            self.states[tp] = PartitionFetchState(init.init_offset, init.leader_epoch)
        self._wake.set()

    def remove_partitions(self, tps) -> None:
        for tp in tps:
            self.states.pop(tp, None)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self.run(), name=self.name)

    async def shutdown(self) -> None:
        task, self._task = self._task, None
        self._stopping = True
        self._wake.set()
        if task is not None:
            # The flag ends the loop even if a cancellation meets a wake-up in the same loop turn
            # (asyncio.wait_for may then return instead of raising, before Python 3.12).
            task.cancel()
            await asyncio.wait({task})
            if not task.cancelled() and task.exception() is not None:
                log.error("%s ended with %r", self.name, task.exception())
        await self.endpoint.close()

    # ---- the loop (Kafka's doWork: maybeTruncate, then maybeFetch) ----
    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        backoff_s = self.config.replica_fetch_backoff_ms / 1000
        while not self._stopping:
            try:
                await self._maybe_truncate()
                fetched = await self._maybe_fetch()
            except LeaderEndpointError as e:
                log.info("%s: %s; backing off %d ms", self.name, e, self.config.replica_fetch_backoff_ms)
                await self._sleep(backoff_s)
                continue
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s: unexpected error; backing off", self.name)
                await self._sleep(backoff_s)
                continue
            if not fetched:
                # Nothing ready: wait for a partition to join or the earliest back-off to end.
                now = loop.time()
                waits = [s.delayed_until - now for s in self.states.values() if not s.fenced]
                timeout = max(0.0, min(waits)) if waits else None
                await self._sleep(timeout)

    async def _sleep(self, seconds: float | None) -> None:
        self._wake.clear()
        # asyncio.timeout, not wait_for: before Python 3.12, wait_for returns instead of raising when a
        # cancellation and a wake-up meet in one loop turn, and a fetcher cancelled at shutdown (by
        # asyncio.run, for one that shutdown() never saw) would loop on and keep the process alive.
        try:
            async with asyncio.timeout(seconds):
                await self._wake.wait()
        except TimeoutError:
            pass

    def _partition(self, tp: TopicPartition, state: PartitionFetchState) -> Partition | None:
        """The local partition while it still follows this fetcher's leader at the state's epoch."""
        p = self._lookup(*tp)
        if p is None or p.leader_id != self.endpoint.leader_id or p.leader_epoch != state.leader_epoch:
            return None
        return p

    def _still(self, tp: TopicPartition, state: PartitionFetchState) -> bool:
        return self.states.get(tp) is state

    # ---- truncation ----
    async def _maybe_truncate(self) -> None:
        now = asyncio.get_running_loop().time()
        with_epochs: dict[TopicPartition, tuple[int, int]] = {}
        for tp, state in list(self.states.items()):
            if not state.truncating or not state.is_ready(now):
                continue
            p = self._partition(tp, state)
            if p is None:
                self.states.pop(tp, None)
                continue
            latest = p.log.latest_epoch
            if latest == UNDEFINED_EPOCH:
                # No epoch information here (Kafka's partitionsWithoutEpochs): truncate to the
                # high watermark, everything above it may be gone from the leader.
                self._truncate(p, tp, state, p.high_watermark)
                continue
            with_epochs[tp] = (state.leader_epoch, latest)
        if not with_epochs:
            return
        answers = await self.endpoint.fetch_epoch_end_offsets(with_epochs)
        for tp, answer in answers.items():
            current = self.states.get(tp)
            if current is None or not current.truncating or tp not in with_epochs:
                continue
            if current.leader_epoch != with_epochs[tp][0]:
                continue  # the partition rejoined with a new epoch meanwhile
            p = self._partition(tp, current)
            if p is None:
                self.states.pop(tp, None)
                continue
            if answer.error != ErrorCode.NONE:
                self._partition_error(tp, current, answer.error, "OffsetForLeaderEpoch")
                continue
            offset, complete = self._truncation_offset(p, answer)
            self._truncate(p, tp, current, offset, complete)

    def _truncation_offset(self, p: Partition, leader: EpochEndOffset) -> tuple[int, bool]:
        """Where the follower's log diverges from the leader's (Kafka's getOffsetTruncationState);
        False when the follower must ask again with its (now smaller) latest epoch."""
        leo = p.log_end_offset
        if leader.end_offset == UNDEFINED_OFFSET:
            # The leader knows nothing of this epoch: keep what is certainly committed.
            return min(p.high_watermark, leo), True
        if leader.leader_epoch == UNDEFINED_EPOCH:
            return min(leader.end_offset, leo), True
        follower_epoch, follower_end = p.log.end_offset_for_epoch(leader.leader_epoch)
        if follower_end == UNDEFINED_OFFSET:
            return min(leader.end_offset, leo), True
        if follower_epoch == leader.leader_epoch:
            # Both logs agree up to where that epoch ends on the leader.
            return min(leader.end_offset, leo), True
        # The follower never had the leader's epoch: cut to where its own older epoch ends and ask
        # again with the epoch before it.
        return min(leader.end_offset, follower_end, leo), False

    def _truncate(
        self, p: Partition, tp: TopicPartition, state: PartitionFetchState, offset: int, complete: bool = True
    ) -> None:
        if offset < p.log_end_offset:
            log.info(
                "%s: truncating %s-%d from %d to %d (leader epoch %d)",
                self.name,
                tp[0],
                tp[1],
                p.log_end_offset,
                offset,
                state.leader_epoch,
            )
            p.truncate_to(offset, self._clock())
        state.fetch_offset = offset
        state.truncating = not complete

    # ---- fetching ----
    async def _maybe_fetch(self) -> bool:
        now = asyncio.get_running_loop().time()
        wanted: list[FetchPartition] = []
        requested: dict[TopicPartition, tuple[PartitionFetchState, int]] = {}
        for tp, state in list(self.states.items()):
            if state.truncating or not state.is_ready(now):
                continue
            p = self._partition(tp, state)
            if p is None:
                self.states.pop(tp, None)
                continue
            wanted.append(
                FetchPartition(
                    tp[0],
                    tp[1],
                    p.topic_id,
                    state.fetch_offset,
                    state.leader_epoch,
                    p.log_start_offset,
                    self.config.replica_fetch_max_bytes,
                )
            )
            requested[tp] = (state, state.fetch_offset)
        if not wanted:
            return False
        results = await self.endpoint.fetch(wanted, self.config.fetch_params)
        for tp, result in results.items():
            entry = requested.get(tp)
            if entry is None:
                continue
            state, offset = entry
            # Kafka's check: a partition whose state changed while the fetch was out is skipped.
            if not self._still(tp, state) or state.fetch_offset != offset or state.truncating:
                continue
            p = self._partition(tp, state)
            if p is None:
                self.states.pop(tp, None)
                continue
            await self._process(p, tp, state, result)
        return True

    async def _process(
        self, p: Partition, tp: TopicPartition, state: PartitionFetchState, result: FetchPartitionResult
    ) -> None:
        """Kafka's processPartitionData and its error cases."""
        if result.error == ErrorCode.NONE:
            try:
                info = p.append_as_follower(result.records, self._clock()) if result.records else None
            except StorageError as e:
                log.error("%s: append to %s-%d failed: %s; backing off", self.name, tp[0], tp[1], e)
                self._delay(state)
                return
            if info is not None:
                state.fetch_offset = info.last_offset + 1
            p.update_follower_high_watermark(result.high_watermark, result.log_start_offset)
            return
        if result.error == ErrorCode.OFFSET_OUT_OF_RANGE:
            await self._handle_out_of_range(p, tp, state)
            return
        self._partition_error(tp, state, result.error, "Fetch")

    async def _handle_out_of_range(
        self, p: Partition, tp: TopicPartition, state: PartitionFetchState
    ) -> None:
        """Kafka's fetchOffsetAndTruncate: behind the leader's log start, start over there; past its
        log end (an unclean election), truncate to it."""
        try:
            leader_end = await self.endpoint.fetch_latest_offset(tp, state.leader_epoch)
            if not self._still(tp, state):
                return
            leo = p.log_end_offset
            if leader_end < leo:
                log.warning(
                    "%s: %s-%d is at %d, past the leader's log end %d: truncating",
                    self.name,
                    tp[0],
                    tp[1],
                    leo,
                    leader_end,
                )
                p.truncate_to(leader_end, self._clock())
                state.fetch_offset = leader_end
                return
            leader_start = await self.endpoint.fetch_earliest_offset(tp, state.leader_epoch)
            if not self._still(tp, state):
                return
            if leader_start > p.log_end_offset:
                log.info(
                    "%s: %s-%d ends at %d, before the leader's log start %d: starting over there",
                    self.name,
                    tp[0],
                    tp[1],
                    p.log_end_offset,
                    leader_start,
                )
                p.truncate_fully_and_start_at(leader_start, self._clock())
            state.fetch_offset = max(leader_start, p.log_end_offset)
        except LeaderOffsetError as e:
            self._partition_error(tp, state, e.error, "ListOffsets")

    def _partition_error(
        self, tp: TopicPartition, state: PartitionFetchState, error: ErrorCode, what: str
    ) -> None:
        if error == ErrorCode.FENCED_LEADER_EPOCH:
            # This broker's epoch is older than the leader's: its metadata is behind.  Nothing to
            # do until the controller's newer state arrives (add_fetcher_for_partitions).
            log.info("%s: %s for %s-%d fenced at epoch %d", self.name, what, tp[0], tp[1], state.leader_epoch)
            state.fenced = True
            return
        log.debug("%s: %s for %s-%d: %s; backing off", self.name, what, tp[0], tp[1], ErrorCode(error).name)
        self._delay(state)

    def _delay(self, state: PartitionFetchState) -> None:
        state.delayed_until = asyncio.get_running_loop().time() + self.config.replica_fetch_backoff_ms / 1000


class ReplicaFetcherManager:
    """The fetchers of one broker, keyed by (leader broker, fetcher id) (Kafka's
    AbstractFetcherManager).  ``endpoint_for(leader_id)`` makes the LeaderEndpoint of a leader
    broker; ``partitions`` looks up this broker's own partitions."""

    def __init__(
        self,
        broker_id: int,
        endpoint_for: Callable[[int], LeaderEndpoint],
        partitions: PartitionLookup,
        config: ReplicaFetcherConfig | None = None,
        clock: Callable[[], int] | None = None,
    ) -> None:
        self.broker_id = broker_id
        self._endpoint_for = endpoint_for
        self._partitions = partitions
        self.config = config or ReplicaFetcherConfig()
        self._clock = clock
        self.fetchers: dict[tuple[int, int], ReplicaFetcher] = {}
        self._shut_down = False

    def fetcher_id(self, tp: TopicPartition) -> int:
        return zlib.crc32(f"{tp[0]}-{tp[1]}".encode()) % self.config.num_replica_fetchers

    def add_fetcher_for_partitions(self, initial: dict[TopicPartition, InitialFetchState]) -> None:
        """Start (or move) fetching these partitions from their leaders; a partition already
        fetched from another leader leaves that fetcher.  Call after make_follower.  Once the
        manager was shut down (the broker is stopping and its logs close) nothing starts."""
        if self._shut_down:
            return
        self.remove_fetcher_for_partitions(
            [tp for tp, init in initial.items() if self._fetcher_of(tp, exclude=init.leader_id) is not None]
        )
        grouped: dict[tuple[int, int], dict[TopicPartition, InitialFetchState]] = {}
        for tp, init in initial.items():
            grouped.setdefault((init.leader_id, self.fetcher_id(tp)), {})[tp] = init
        for key, parts in grouped.items():
            fetcher = self.fetchers.get(key)
            if fetcher is None:
                name = f"ReplicaFetcher-{key[1]}-{self.broker_id}<-{key[0]}"
                fetcher = ReplicaFetcher(
                    name, self._endpoint_for(key[0]), self._partitions, self.config, self._clock
                )
                self.fetchers[key] = fetcher
                fetcher.start()
            fetcher.add_partitions(parts)

    def _fetcher_of(self, tp: TopicPartition, exclude: int | None = None) -> ReplicaFetcher | None:
        for (leader, _), fetcher in self.fetchers.items():
            if leader != exclude and tp in fetcher.states:
                return fetcher
        return None

    def remove_fetcher_for_partitions(self, tps) -> None:
        """Stop fetching these partitions (this broker became their leader, or they were deleted)."""
        tps = list(tps)
        for fetcher in self.fetchers.values():
            fetcher.remove_partitions(tps)

    async def shutdown_idle_fetchers(self) -> None:
        for key in [k for k, f in self.fetchers.items() if not f.states]:
            await self.fetchers.pop(key).shutdown()

    async def shutdown(self) -> None:
        self._shut_down = True
        fetchers, self.fetchers = self.fetchers, {}
        for fetcher in fetchers.values():
            await fetcher.shutdown()
