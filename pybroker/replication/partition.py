"""A partition on one broker: the log plus leader, leader epoch, replicas, ISR and high watermark
(Kafka's kafka.cluster.Partition).

The high watermark is kept distinct from the log end offset even on one broker: it advances when
every in-sync replica has the data.  With a single replica the ISR is just this broker, so the
high watermark follows the log end offset at once and ``acks=all`` completes immediately.

In a cluster the controller makes this broker the partition's leader (``make_leader``) or a
follower of another broker (``make_follower``); older leader epochs are ignored.  As leader the
partition keeps each follower's fetch state (``ReplicaState``: log end offset, last caught-up
time) from their replica fetches (``fetch_for_follower``), advances the high watermark to the
smallest log end offset of the ISR, and changes the ISR through the injected
``AlterPartitionManager``: a follower that has not caught up for ``replica.lag.time.max.ms`` is
removed (``maybe_shrink_isr``, called periodically), one that reaches the high watermark within
this leader's epoch is added back.  As follower the fetcher appends the leader's batches
(``append_as_follower``), truncates (``truncate_to``) and follows the leader's high watermark.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, NamedTuple

from pybroker.protocol.errors import ErrorCode
from pybroker.replication.alter_partition import AlterPartitionManager, LeaderAndIsr
from pybroker.storage.errors import OffsetOutOfRangeError, UnexpectedAppendOffsetError

if TYPE_CHECKING:
    from pybroker.storage import AppendInfo, Log
    from pybroker.storage.file_slice import FileSlice

UNKNOWN_OFFSET = -1
DEFAULT_REPLICA_LAG_TIME_MAX_MS = 30_000  # Kafka's replica.lag.time.max.ms default


class NotLeaderOrFollowerError(Exception):
    """This broker is not the partition's leader (NOT_LEADER_OR_FOLLOWER)."""


class ReplicaState:
    """The leader's view of one follower (Kafka's Replica / ReplicaState)."""

    __slots__ = (
        "broker_id",
        "log_end_offset",
        "log_start_offset",
        "last_caught_up_time_ms",
        "last_fetch_leader_log_end_offset",
        "last_fetch_time_ms",
    )

    def __init__(self, broker_id: int) -> None:
        self.broker_id = broker_id
        self.log_end_offset = UNKNOWN_OFFSET
        self.log_start_offset = UNKNOWN_OFFSET
        self.last_caught_up_time_ms = 0
        self.last_fetch_leader_log_end_offset = UNKNOWN_OFFSET
        self.last_fetch_time_ms = 0

    def update_fetch_state(
        self, fetch_offset: int, log_start_offset: int, fetch_time_ms: int, leader_end_offset: int
    ) -> None:
        """A replica fetch at ``fetch_offset``: the follower has everything below it.  It counts
        as caught up at this fetch when it asked for the leader's log end, or at its previous
        fetch when it now has what the leader had then (Kafka's updateFetchStateOrThrow)."""
        if fetch_offset >= leader_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, fetch_time_ms)
        elif fetch_offset >= self.last_fetch_leader_log_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, self.last_fetch_time_ms)
        self.log_end_offset = fetch_offset
        self.log_start_offset = log_start_offset
        self.last_fetch_leader_log_end_offset = leader_end_offset
        self.last_fetch_time_ms = fetch_time_ms

    def reset(self, now_ms: int, leader_end_offset: int, in_sync: bool) -> None:
        """This broker just became leader: nothing is known of the follower's log yet; an ISR
        member counts as caught up now, so it gets a full lag period to fetch."""
        self.log_end_offset = UNKNOWN_OFFSET
        self.log_start_offset = UNKNOWN_OFFSET
        self.last_caught_up_time_ms = now_ms if in_sync else 0
        self.last_fetch_leader_log_end_offset = UNKNOWN_OFFSET
        self.last_fetch_time_ms = 0

    def is_caught_up(self, leader_end_offset: int, now_ms: int, max_lag_ms: int) -> bool:
        return leader_end_offset == self.log_end_offset or now_ms - self.last_caught_up_time_ms <= max_lag_ms


class FollowerFetchResult(NamedTuple):
    """What the leader answers one partition of a replica fetch."""

    error: ErrorCode
    records: FileSlice | None
    high_watermark: int
    log_start_offset: int
    last_stable_offset: int
    log_end_offset: int


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
        "_acks_waiters",
        "_data_listeners",
        "local_id",
        "partition_epoch",
        "leader_epoch_start_offset",
        "_remote",
        "alter_partition",
        "_inflight",
        "replica_lag_time_max_ms",
        "clock",
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
        self._acks_waiters: list[tuple[int, asyncio.Future[ErrorCode]]] = []
        # Callables run after every append (long-poll fetches registered on this partition).
        self._data_listeners: set[Callable[[], None]] = set()
        self.high_watermark = log_.log_end_offset
        self.min_insync_replicas = 1  # the topic's min.insync.replicas; acks=all needs this many in the ISR
        self.local_id = node_id  # this broker
        self.partition_epoch = 0  # the controller's version of leader/ISR/replicas (zk version)
        self.leader_epoch_start_offset: int | None = log_.log_end_offset
        self._remote: dict[int, ReplicaState] = {}  # followers, when this broker leads
        # Where ISR changes go; None on a single broker (its ISR never changes).
        self.alter_partition: AlterPartitionManager | None = None
        self._inflight: LeaderAndIsr | None = None  # an ISR change submitted, not yet answered
        self.replica_lag_time_max_ms = DEFAULT_REPLICA_LAG_TIME_MAX_MS
        self.clock: Callable[[], int] = _now_ms  # milliseconds; tests move time by hand

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

    @property
    def is_leader(self) -> bool:
        return self._leader_id == self.local_id

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        """The ISR including a replica whose addition is in flight: waiting for more replicas is
        always safe, so the high watermark and acks=all count it at once (Kafka's maximalIsr)."""
        inflight = self._inflight
        if inflight is None or len(inflight.isr) <= len(self._isr):
            return self._isr
        return inflight.isr

    @property
    def isr_change_in_flight(self) -> bool:
        """An ISR change was submitted to the controller and not answered yet."""
        return self._inflight is not None

    def remote_replica(self, broker_id: int) -> ReplicaState | None:
        return self._remote.get(broker_id)

    def _maybe_advance_high_watermark(self, now_ms: int | None = None) -> bool:
        """HW = the smallest log end offset of the (maximal) ISR, and of any follower caught up
        to the leader's log end that may join it; it never moves back (Kafka's
        maybeIncrementLeaderHW).  Advancing completes acks=all waiters and wakes readers."""
        leo = self.log.log_end_offset
        new_hw = leo
        if self._remote:
            if now_ms is None:
                now_ms = self.clock()
            isr = self.maximal_isr
            for replica in self._remote.values():
                if replica.log_end_offset < new_hw and (
                    replica.broker_id in isr
                    or replica.is_caught_up(leo, now_ms, self.replica_lag_time_max_ms)
                    and replica.log_end_offset >= 0
                ):
                    new_hw = replica.log_end_offset
        if new_hw > self.high_watermark:
            self.high_watermark = new_hw
            if self._acks_waiters:  # (the tests of _complete_acks_waiters and notify_data, without their calls)
                self._complete_acks_waiters()
            if self._data_listeners:
                self.notify_data()  # consumers read below the high watermark: there is news
            return True
        if self.high_watermark > leo:
            # Only after truncation (DeleteRecords never lowers the log end): keep it consistent.
            self.high_watermark = leo
        return False

    def update_follower_offset(self, replica: int, fetch_offset: int) -> None:
        """A follower has everything below ``fetch_offset`` (shorthand of
        ``update_follower_fetch_state`` for callers without the other fetch fields)."""
        self.update_follower_fetch_state(replica, fetch_offset, UNKNOWN_OFFSET, self.clock())

    def update_follower_fetch_state(
        self, replica_id: int, fetch_offset: int, log_start_offset: int, now_ms: int
    ) -> bool:
        """Record a replica fetch from ``replica_id``: its position, then maybe expand the ISR and
        advance the high watermark.  False when the replica is not one of this partition's."""
        replica = self._remote.get(replica_id)
        if replica is None:
            return False
        replica.update_fetch_state(fetch_offset, log_start_offset, now_ms, self.log.log_end_offset)
        self._maybe_expand_isr(replica)
        self._maybe_advance_high_watermark(now_ms)
        return True

    # -- leadership changes (from the controller) ------------------------------------------
    def _is_stale(self, leader_epoch: int, partition_epoch: int) -> bool:
        if leader_epoch != self._leader_epoch:
            return leader_epoch < self._leader_epoch
        return partition_epoch < self.partition_epoch

    def make_leader(
        self,
        leader_epoch: int,
        isr: Iterable[int],
        replicas: Iterable[int],
        partition_epoch: int,
        now_ms: int | None = None,
    ) -> bool:
        """Become (or stay) the leader at ``leader_epoch`` with this ISR and replica set (Kafka's
        makeLeader).  A state older than the current one (smaller leader epoch, or the same epoch
        with a smaller partition epoch) is ignored: returns False.  True when it was applied.

        A new leader epoch starts at the log end offset: the epoch is written to the leader-epoch
        cache now, so followers asking OffsetForLeaderEpoch for the previous epoch learn where it
        ended before anything is written in the new one."""
        if self._is_stale(leader_epoch, partition_epoch):
            log.info(
                "%s-%d: ignoring leader state epoch %d/%d, older than %d/%d",
                self.topic,
                self.index,
                leader_epoch,
                partition_epoch,
                self._leader_epoch,
                self.partition_epoch,
            )
            return False
        if now_ms is None:
            now_ms = self.clock()
        new_epoch = not self.is_leader or leader_epoch != self._leader_epoch
        isr_t = tuple(isr)
        leo = self.log.log_end_offset
        remote: dict[int, ReplicaState] = {}
        for r in replicas:
            if r == self.local_id:
                continue
            state = self._remote.get(r) if not new_epoch else None
            if state is None:
                state = ReplicaState(r)
                state.reset(now_ms, leo, r in isr_t)
            remote[r] = state
        self._remote = remote
        self.partition_epoch = partition_epoch
        self._inflight = None
        if new_epoch:
            self.leader_epoch_start_offset = leo
            self.log.leader_epochs.assign(leader_epoch, leo)
            log.info(
                "%s-%d: leader at epoch %d from offset %d, ISR %s",
                self.topic,
                self.index,
                leader_epoch,
                leo,
                list(isr_t),
            )
        self._replicas = tuple(replicas)
        self._isr = isr_t
        self._leader_epoch = leader_epoch
        self._leader_id = self.local_id
        self._state_changed()
        # A follower's high watermark may lie below what was committed; it only moves forward
        # from here, as followers report their positions.
        self._maybe_advance_high_watermark(now_ms)
        self._complete_acks_waiters()
        return True

    def make_follower(
        self,
        leader_id: int,
        leader_epoch: int,
        isr: Iterable[int],
        replicas: Iterable[int],
        partition_epoch: int,
    ) -> bool:
        """Follow ``leader_id`` at ``leader_epoch`` (Kafka's makeFollower).  Older states are
        ignored (False).  Returns True when the state was applied; the caller (re)starts the
        fetcher when the leader or the epoch changed.  acks=all waiters answer
        NOT_LEADER_OR_FOLLOWER: this broker cannot tell whether the write will be kept."""
        if self._is_stale(leader_epoch, partition_epoch):
            log.info(
                "%s-%d: ignoring follower state epoch %d/%d, older than %d/%d",
                self.topic,
                self.index,
                leader_epoch,
                partition_epoch,
                self._leader_epoch,
                self.partition_epoch,
            )
            return False
        self._remote = {}
        self._inflight = None
        self.leader_epoch_start_offset = None
        self.partition_epoch = partition_epoch
        self._replicas = tuple(replicas)
        self._isr = tuple(isr)
        self._leader_epoch = leader_epoch
        self._leader_id = leader_id
        self._state_changed()
        self._fail_acks_waiters(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        # Long-poll fetches on this partition wake and answer NOT_LEADER_OR_FOLLOWER.
        self.notify_data()
        return True

    # -- ISR changes (as leader) -----------------------------------------------------------
    def _is_follower_in_sync(self, replica: ReplicaState) -> bool:
        start = self.leader_epoch_start_offset
        leo = replica.log_end_offset
        return start is not None and leo >= self.high_watermark and leo >= start

    def _maybe_expand_isr(self, replica: ReplicaState) -> None:
        if (
            self._inflight is None
            and self.alter_partition is not None
            and self.is_leader
            and replica.broker_id not in self._isr
            and replica.broker_id in self._replicas
            and self._is_follower_in_sync(replica)
        ):
            log.info(
                "%s-%d: expanding ISR %s with %d", self.topic, self.index, list(self._isr), replica.broker_id
            )
            self._submit((*self._isr, replica.broker_id))

    def out_of_sync_replicas(self, now_ms: int, max_lag_ms: int | None = None) -> list[int]:
        """ISR followers that have not caught up to the log end for ``max_lag_ms``."""
        if max_lag_ms is None:
            max_lag_ms = self.replica_lag_time_max_ms
        leo = self.log.log_end_offset
        out = []
        for r in self._isr:
            if r == self.local_id:
                continue
            replica = self._remote.get(r)
            if replica is None or not replica.is_caught_up(leo, now_ms, max_lag_ms):
                out.append(r)
        return out

    def maybe_shrink_isr(self, now_ms: int | None = None) -> bool:
        """Propose an ISR without the followers that lag (Kafka's maybeShrinkIsr, run
        periodically).  The ISR only changes when the controller commits it; until then acks=all
        still waits for them.  True when a change was submitted."""
        if not self.is_leader or self._inflight is not None or self.alter_partition is None:
            return False
        if now_ms is None:
            now_ms = self.clock()
        out = self.out_of_sync_replicas(now_ms)
        if not out:
            return False
        new_isr = tuple(r for r in self._isr if r not in out)
        log.info(
            "%s-%d: shrinking ISR from %s to %s (out of sync: %s, leader end offset %d, HW %d)",
            self.topic,
            self.index,
            list(self._isr),
            list(new_isr),
            out,
            self.log.log_end_offset,
            self.high_watermark,
        )
        self._submit(new_isr)
        return True

    def _submit(self, new_isr: tuple[int, ...]) -> None:
        assert self.alter_partition is not None
        proposed = LeaderAndIsr(self.local_id, self._leader_epoch, new_isr, self.partition_epoch)
        self._inflight = proposed
        task = asyncio.get_running_loop().create_task(self._alter(proposed))
        _background.add(task)
        task.add_done_callback(_background.discard)

    async def _alter(self, proposed: LeaderAndIsr) -> None:
        assert self.alter_partition is not None
        try:
            result = await self.alter_partition.submit(self.topic, self.index, proposed)
        except Exception:  # a broken controller connection: propose again on the next check
            log.exception("%s-%d: AlterPartition failed", self.topic, self.index)
            if self._inflight is proposed:
                self._inflight = None
            return
        if self._inflight is not proposed:
            return  # superseded by a leadership change meanwhile
        self._inflight = None
        state = result.state
        if result.error != ErrorCode.NONE or state is None:
            log.info(
                "%s-%d: ISR change to %s refused: %s",
                self.topic,
                self.index,
                list(proposed.isr),
                ErrorCode(result.error).name,
            )
            return
        if state.leader_epoch != self._leader_epoch or not self.is_leader:
            return
        self.partition_epoch = state.partition_epoch
        self.isr = state.isr
        log.info(
            "%s-%d: ISR now %s (partition epoch %d)",
            self.topic,
            self.index,
            list(state.isr),
            state.partition_epoch,
        )
        # A smaller ISR may let the high watermark move; a smaller one may fail acks=all waiters.
        self._maybe_advance_high_watermark()
        self._complete_acks_waiters()

    # -- produce ---------------------------------------------------------------------------
    def append_as_leader(
        self,
        buf: bytearray | memoryview,
        batches: list,
        now_ms: int,
        on_written: Callable[[BaseException | None], None] | None = None,
    ):
        """Append as the leader.  With ``on_written`` the log's writer thread writes the bytes
        (``Log.append_async``): the returned info is ``pending`` and ``on_written(error)`` runs on
        the loop once they are in the log, after the high watermark moved over them."""
        if self._leader_id != self.local_id:  # not is_leader
            raise NotLeaderOrFollowerError(f"{self.topic}-{self.index}: leader is {self._leader_id}")
        if on_written is None:
            info = self.log.append(buf, batches, leader_epoch=self._leader_epoch, now_ms=now_ms)
        else:
            info = self.log.append_async(
                buf,
                batches,
                leader_epoch=self._leader_epoch,
                now_ms=now_ms,
                on_written=lambda error: self._written(error, on_written),
            )
            if info.pending:
                return info
        # Readers are woken once: by the high watermark's advance, else (followers wait for the
        # log end, not the high watermark) here.
        if not info.duplicate and not self._maybe_advance_high_watermark(now_ms):
            self.notify_data()
        return info

    def _written(self, error: BaseException | None, then: Callable[[BaseException | None], None]) -> None:
        if error is None and self.is_leader and not self._maybe_advance_high_watermark():
            self.notify_data()
        then(error)

    def append_marker_as_leader(
        self,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        now_ms: int,
        transaction_version: int = 0,
    ):
        """Write a transaction marker (WriteTxnMarkers); readers of the LSO are woken."""
        if not self.is_leader:
            raise NotLeaderOrFollowerError(f"{self.topic}-{self.index}: leader is {self._leader_id}")
        info = self.log.append_marker(
            producer_id,
            producer_epoch,
            commit,
            coordinator_epoch,
            leader_epoch=self.leader_epoch,
            now_ms=now_ms,
            transaction_version=transaction_version,
        )
        if not self._maybe_advance_high_watermark(now_ms):
            self.notify_data()
        return info

    @property
    def effective_min_isr(self) -> int:
        """Kafka's effectiveMinIsr: min.insync.replicas, but never more than the replication factor (a
        topic of fewer replicas than min.insync.replicas still takes acks=all writes once all of its
        replicas have them)."""
        return min(self.min_insync_replicas, max(len(self._replicas), 1))

    def has_enough_replicas(self) -> bool:
        """acks=all may append: the committed ISR has the effective min.insync.replicas members (Kafka's
        appendRecordsToLeader check; NOT_ENOUGH_REPLICAS otherwise)."""
        return len(self._isr) >= self.effective_min_isr

    def check_enough_replicas_reach_offset(self, required_offset: int) -> tuple[bool, ErrorCode]:
        """(done, error) for an acks=all write ending below ``required_offset`` (Kafka's
        checkEnoughReplicasReachOffset): done once the high watermark passed it, with
        NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR shrank below min.insync.replicas meanwhile."""
        if not self.is_leader:
            return False, ErrorCode.NOT_LEADER_OR_FOLLOWER
        if self.high_watermark >= required_offset:
            if len(self.maximal_isr) >= self.effective_min_isr:
                return True, ErrorCode.NONE
            return True, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return False, ErrorCode.NONE

    def wait_replicated(self, last_offset: int) -> asyncio.Future[ErrorCode] | None:
        """None when the write ending at ``last_offset`` is already below the high watermark with
        enough replicas (acks=all satisfied); otherwise a future of the error code to answer."""
        done, error = self.check_enough_replicas_reach_offset(last_offset + 1)
        if done and error == ErrorCode.NONE:
            return None  # (every acks=all write of a partition without followers: no future made)
        fut: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
        if done or error != ErrorCode.NONE:
            fut.set_result(error)
            return fut
        self._acks_waiters.append((last_offset, fut))
        return fut

    def _complete_acks_waiters(self) -> None:
        if not self._acks_waiters:
            return
        still = []
        for offset, fut in self._acks_waiters:
            if fut.done():
                continue
            done, error = self.check_enough_replicas_reach_offset(offset + 1)
            if done or error != ErrorCode.NONE:
                fut.set_result(error)
            else:
                still.append((offset, fut))
        self._acks_waiters = still

    def _fail_acks_waiters(self, error: ErrorCode) -> None:
        for _, fut in self._acks_waiters:
            if not fut.done():
                fut.set_result(error)
        self._acks_waiters = []

    # -- replica fetches (as leader) -------------------------------------------------------
    def check_current_leader_epoch(self, current_leader_epoch: int) -> ErrorCode:
        """A request's CurrentLeaderEpoch against ours (-1: the client does not say)."""
        if current_leader_epoch < 0 or current_leader_epoch == self._leader_epoch:
            return ErrorCode.NONE
        if current_leader_epoch < self._leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        return ErrorCode.UNKNOWN_LEADER_EPOCH

    def check_leader(self, current_leader_epoch: int = -1) -> ErrorCode:
        """Kafka's getLocalLog(currentLeaderEpoch, requireLeader=true): the epoch first, then
        whether this broker leads."""
        error = self.check_current_leader_epoch(current_leader_epoch)
        if error == ErrorCode.NONE and not self.is_leader:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return error

    def fetch_for_follower(
        self,
        replica_id: int,
        fetch_offset: int,
        current_leader_epoch: int,
        max_bytes: int,
        log_start_offset: int,
        now_ms: int,
        min_one_batch: bool = True,
    ) -> FollowerFetchResult:
        """Serve one partition of a replica fetch: records from ``fetch_offset`` up to the log end
        (not the high watermark), and the follower's position recorded before the answer's high
        watermark is taken, so the follower learns at once what its own fetch committed."""
        error = self.check_leader(current_leader_epoch)
        if error != ErrorCode.NONE:
            return self._follower_error(error)
        if replica_id not in self._remote:
            # Kafka's followerReplicaOrThrow: the follower may have newer metadata than this
            # leader (a reassignment it heard of first), so UNKNOWN_LEADER_EPOCH, retriable.
            log.debug(
                "%s-%d: replica fetch from %d, not one of the replicas %s at epoch %d/%d",
                self.topic,
                self.index,
                replica_id,
                list(self._replicas),
                self._leader_epoch,
                self.partition_epoch,
            )
            return self._follower_error(ErrorCode.UNKNOWN_LEADER_EPOCH)
        try:
            records = self.log.read(fetch_offset, max_bytes, None, min_one_batch)
        except OffsetOutOfRangeError:
            return self._follower_error(ErrorCode.OFFSET_OUT_OF_RANGE)
        self.update_follower_fetch_state(replica_id, fetch_offset, log_start_offset, now_ms)
        return FollowerFetchResult(
            ErrorCode.NONE,
            records,
            self.high_watermark,
            self.log.log_start_offset,
            self.last_stable_offset,
            self.log.log_end_offset,
        )

    def _follower_error(self, error: ErrorCode) -> FollowerFetchResult:
        return FollowerFetchResult(error, None, -1, -1, -1, -1)

    # -- the follower side -----------------------------------------------------------------
    def append_as_follower(self, records: bytes | bytearray | memoryview, now_ms: int) -> AppendInfo | None:
        """Append a replica fetch's records with the leader's offsets and epochs."""
        if self.is_leader:
            raise NotLeaderOrFollowerError(f"{self.topic}-{self.index}: this broker leads it")
        try:
            return self.log.append_as_follower(records, now_ms=now_ms)
        except UnexpectedAppendOffsetError as e:
            leo = self.log.log_end_offset
            if not (leo == self.log.log_start_offset and e.first_offset < leo <= e.last_offset):
                raise
            # An empty log starting inside the leader's first batch (the leader's log start offset
            # moved into it by DeleteRecords): start the log at that batch instead (as Kafka's
            # appendRecordsToFollowerOrFutureReplica); the leader's log start offset is applied
            # again after the append.
            log.info(
                "%s-%d: first fetched batch starts at %d, before the log start %d: starting the log there",
                self.topic,
                self.index,
                e.first_offset,
                leo,
            )
            self.truncate_fully_and_start_at(e.first_offset, now_ms)
            return self.log.append_as_follower(records, now_ms=now_ms)

    def update_follower_high_watermark(
        self, leader_high_watermark: int, leader_log_start_offset: int
    ) -> None:
        """The leader's high watermark and log start offset from a fetch answer: a follower's high
        watermark is the leader's, bounded by its own log (Kafka's maybeUpdateHighWatermark);
        records the leader deleted are deleted here too."""
        leo = self.log.log_end_offset
        if self.log.log_start_offset < leader_log_start_offset <= leo:
            self.log.delete_records_before(leader_log_start_offset)
        new_hw = max(self.log.log_start_offset, min(leader_high_watermark, leo))
        if new_hw != self.high_watermark:
            self.high_watermark = new_hw
            self.notify_data()

    def truncate_to(self, offset: int, now_ms: int) -> None:
        """Cut the log at ``offset`` (divergence from the leader, by leader epoch)."""
        if self.log.truncate_to(offset, now_ms):
            self.high_watermark = min(self.high_watermark, self.log.log_end_offset)

    def truncate_fully_and_start_at(self, offset: int, now_ms: int) -> None:
        self.log.truncate_fully_and_start_at(offset, now_ms)
        self.high_watermark = offset

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
        self._inflight = None
        # Wake long-poll fetches now, so they answer for the partition's removal instead of timing out.
        self.notify_data()
        self._data_listeners.clear()


# ISR changes in flight: kept referenced until they finish (the event loop holds tasks weakly).
_background: set[asyncio.Task] = set()


def _now_ms() -> int:
    return int(time.time() * 1000)
