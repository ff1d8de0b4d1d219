"""One share partition: the in-flight records of a (share group, topic partition) pair (KIP-932).

Kafka's ``SharePartition`` keeps a window of in-flight records between the share-partition start
offset (SPSO) and end offset (SPEO). Each record in the window is AVAILABLE, ACQUIRED (by one member,
under an acquisition lock), ACKNOWLEDGED or ARCHIVED. Records below the start offset are done; records
at or past ``end_offset`` have never been acquired. The start offset moves forward over a prefix of
ACKNOWLEDGED/ARCHIVED records, which is what bounds the window (and memory) together with
``group.share.partition.max.record.locks``.

Kafka stores the window as batches (InFlightBatch) with optional per-offset state once a partial
acknowledgement splits one. This keeps it as a list of runs: consecutive offsets in one state, with one
delivery count, member and acquisition lock, split where an operation changes part of a run and joined
again when neighbours become alike. An acquire, an acknowledgement of whole ranges and a lock expiry cost
per run, not per record; a fetch's records share one acquisition lock (one timer), as Kafka schedules one
timer task per acquired batch. Each offset still has exactly the state a per-offset map would give it.
"""

from __future__ import annotations

import logging
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from functools import partial
from typing import TypedDict, Unpack

from pybroker.coordinator.clock import Clock, TimerHandle
from pybroker.protocol.errors import ErrorCode

logger = logging.getLogger(__name__)

DEFAULT_DELIVERY_COUNT_LIMIT = 5
DEFAULT_RECORD_LOCK_DURATION_MS = 30_000
DEFAULT_MAX_RECORD_LOCKS = 2000


class RecordState(IntEnum):
    """Kafka's ``RecordState``; the values are the delivery states written to ``__share_group_state``."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


_DONE = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


class AcknowledgeType(IntEnum):
    """The acknowledgement types of ShareFetch/ShareAcknowledge (GAP marks an offset with no record)."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4  # KIP-1222 (ShareFetch/ShareAcknowledge v2): keep the record, restart its acquisition lock


@dataclass(frozen=True)
class AcquiredRecords:
    """A contiguous range handed to a member, as ShareFetch's AcquiredRecords entry carries it."""

    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True)
class StateBatch:
    """A contiguous range of in-flight records with one state and delivery count (the persisted form)."""

    first_offset: int
    last_offset: int
    delivery_state: RecordState
    delivery_count: int


@dataclass(frozen=True)
class AcknowledgementBatch:
    """ShareFetch/ShareAcknowledge AcknowledgementBatches: one type for the range, or one per offset."""

    first_offset: int
    last_offset: int
    acknowledge_types: tuple[int, ...]


class _AcquisitionLock:
    """One acquisition's lock (Kafka's AcquisitionLockTimerTask): a timer for every offset one acquire (or
    one renewal) gave ``member_id``. When it fires, the offsets still ACQUIRED under it are released.
    ``acquired`` counts those offsets, so the timer is cancelled once the last of them is acknowledged."""

    __slots__ = ("member_id", "timer", "acquired")

    def __init__(self, member_id: str) -> None:
        self.member_id = member_id
        self.timer: TimerHandle | None = None
        self.acquired = 0

    def drop(self, count: int) -> None:
        """``count`` of its offsets left the ACQUIRED state (acknowledged, released or renewed elsewhere)."""
        self.acquired -= count
        if self.acquired <= 0 and self.timer is not None:
            self.timer.cancel()
            self.timer = None


class InFlightBatch:
    """A run of consecutive in-flight offsets [first_offset, last_offset] in one state, with one delivery
    count, held (when ACQUIRED) by one member under one acquisition lock.

    Kafka's InFlightBatch keeps a fetched batch's range with one state until a partial acknowledgement
    splits it into per-offset states. Here the window is a list of such runs, split at the offsets where
    an acquire, acknowledgement or lock expiry changes part of a run and joined again when neighbours
    become equal, so every operation costs per run touched, not per record, while every offset keeps
    its own state exactly as a per-offset map would."""

    __slots__ = ("first_offset", "last_offset", "state", "delivery_count", "member_id", "lock")

    def __init__(  # noqa: PLR0913
        self,
        first_offset: int,
        last_offset: int,
        state: RecordState,
        delivery_count: int,
        member_id: str | None = None,
        lock: _AcquisitionLock | None = None,
    ) -> None:
        self.first_offset = first_offset
        self.last_offset = last_offset
        self.state = state
        self.delivery_count = delivery_count
        self.member_id = member_id
        self.lock = lock

    @property
    def size(self) -> int:
        return self.last_offset - self.first_offset + 1

    def same_as(self, other: InFlightBatch) -> bool:
        return (
            self.state == other.state
            and self.delivery_count == other.delivery_count
            and self.member_id == other.member_id
            and self.lock is other.lock
        )

    def __repr__(self) -> str:
        return (f"InFlightBatch({self.first_offset}-{self.last_offset}, {self.state.name}, "
                f"count={self.delivery_count}, member={self.member_id})")


def _unlocked(state: RecordState) -> RecordState:
    """A persisted state after a (re)load: an acquisition lock does not outlive its broker."""
    return RecordState.AVAILABLE if state == RecordState.ACQUIRED else state


def _first_offset(batch: InFlightBatch) -> int:
    return batch.first_offset


class SharePartitionOptions(TypedDict, total=False):
    """SharePartition's keyword settings (the group's configs), passed on by ``from_state``."""

    delivery_count_limit: int
    record_lock_duration_ms: int
    max_in_flight_records: int
    on_state_change: Callable[[SharePartition], None] | None


class SharePartition:
    """The in-flight state machine of one share partition; the event loop owns it (no locking)."""

    def __init__(
        self,
        group_id: str,
        topic: str,
        partition: int,
        start_offset: int,
        clock: Clock,
        *,
        delivery_count_limit: int = DEFAULT_DELIVERY_COUNT_LIMIT,
        record_lock_duration_ms: int = DEFAULT_RECORD_LOCK_DURATION_MS,
        max_in_flight_records: int = DEFAULT_MAX_RECORD_LOCKS,
        on_state_change: Callable[[SharePartition], None] | None = None,
    ) -> None:
        self.group_id = group_id
        self.topic = topic
        self.partition = partition
        self.clock = clock
        self.delivery_count_limit = delivery_count_limit
        self.record_lock_duration_ms = record_lock_duration_ms
        self.max_in_flight_records = max_in_flight_records
        # Called after a change the durable state must record (acknowledge, release, lock expiry,
        # start-offset move): the share coordinator's WriteShareGroupState in Kafka.
        self.on_state_change = on_state_change
        self.state_epoch = 0
        self.start_offset = start_offset
        self.end_offset = start_offset  # the next offset never acquired
        # Kafka's cachedState: runs covering [start_offset, end_offset) without gaps, in offset order.
        self._batches: list[InFlightBatch] = []
        # What the state write of the latest change carries (``persisted_state``): the start offset the
        # share partition had before that change moved it, and the done runs the move dropped.
        self._write_start_offset = start_offset
        self._write_head: list[StateBatch] = []

    # -- durable state ------------------------------------------------------------------------------

    @classmethod
    def from_state(
        cls,
        group_id: str,
        topic: str,
        partition: int,
        start_offset: int,
        state_batches: Iterable[StateBatch],
        clock: Clock,
        **kwargs: Unpack[SharePartitionOptions],
    ) -> SharePartition:
        """Rebuild from persisted state: records ACQUIRED when the state was written are AVAILABLE again
        (their locks died with the broker), as Kafka's ``maybeInitialize`` does. Offsets between the start
        and a persisted batch that were never persisted were AVAILABLE, never delivered."""
        sp = cls(group_id, topic, partition, start_offset, clock, **kwargs)
        batches = [b for b in state_batches if b.last_offset >= start_offset]
        if batches:
            sp.end_offset = max(b.last_offset for b in batches) + 1
            ordered = all(a.last_offset < b.first_offset for a, b in zip(batches, batches[1:], strict=False))
            if ordered:  # as the share coordinator keeps them: one pass
                cursor = start_offset
                for batch in batches:
                    first = max(batch.first_offset, start_offset)
                    if first > cursor:
                        sp._batches.append(InFlightBatch(cursor, first - 1, RecordState.AVAILABLE, 0))
                    sp._batches.append(InFlightBatch(first, batch.last_offset, _unlocked(batch.delivery_state),
                                                     batch.delivery_count))
                    cursor = batch.last_offset + 1
            else:
                sp._batches = [InFlightBatch(start_offset, sp.end_offset - 1, RecordState.AVAILABLE, 0)]
                for batch in batches:  # a later batch wins where two overlap
                    i, j = sp._isolate(max(batch.first_offset, start_offset), batch.last_offset)
                    for run in sp._batches[i:j]:
                        run.state = _unlocked(batch.delivery_state)
                        run.delivery_count = batch.delivery_count
            sp._coalesce()
        sp._advance_start_offset()
        sp._write_start_offset = sp.start_offset
        return sp

    def state_batches(self) -> list[StateBatch]:
        """The in-flight window as ranges of equal state and delivery count (what Kafka persists)."""
        out: list[StateBatch] = []
        for run in self._batches:
            if out and out[-1].delivery_state == run.state and out[-1].delivery_count == run.delivery_count:
                last = out[-1]
                out[-1] = StateBatch(last.first_offset, run.last_offset, last.delivery_state, last.delivery_count)
            else:
                out.append(StateBatch(run.first_offset, run.last_offset, run.state, run.delivery_count))
        return out

    def persisted_state(self) -> tuple[int, list[StateBatch]]:
        """(start offset, state batches) of the WriteShareGroupState for the latest change.

        Kafka's SharePartition writes the state with the start offset it has when the change is made
        (``writeShareGroupState`` reads the ``startOffset`` field) and moves the start offset over the
        records that change finished only once the write has completed (``rollbackOrProcessStateUpdates``
        calls ``maybeUpdateCachedStateAndOffsets`` after it). So the share coordinator holds the start offset
        from before the latest acknowledgement, with the records it acknowledged as state batches at or
        past it (counted in its delivery-complete count): after records 0-3 are accepted one acknowledgement
        at a time, the state says start offset 3 and [3-3 ACKNOWLEDGED]; after one acknowledgement of 0-4,
        start offset 0 and [0-4 ACKNOWLEDGED]. That is what DescribeShareGroupOffsets reports; a share
        partition loaded from it moves its start offset past those records again."""
        return self._write_start_offset, self._write_head + self.state_batches()

    # -- inspection -----------------------------------------------------------------------------------

    def record_state(self, offset: int) -> tuple[RecordState, int] | None:
        """(state, delivery count) of an in-flight offset; None below the start or past the end offset."""
        if not self.start_offset <= offset < self.end_offset:
            return None
        run = self._batches[self._index(offset)]
        return run.state, run.delivery_count

    def in_flight_count(self) -> int:
        return self.end_offset - self.start_offset

    def lag(self, high_watermark: int) -> int:
        """Records from the start offset up to the high watermark not yet acknowledged or archived
        (what DescribeShareGroupOffsets v1 reports)."""
        done = sum(run.size for run in self._batches if run.state in _DONE)
        return max(high_watermark - self.start_offset - done, 0)

    def next_fetch_offset(self) -> int:
        """Where the next fetch for this share partition reads the log: the first AVAILABLE record in
        flight, or the end offset when every in-flight record is taken or done."""
        for run in self._batches:
            if run.state == RecordState.AVAILABLE:
                return run.first_offset
        return self.end_offset

    def can_acquire(self) -> bool:
        """Whether a fetch could acquire anything: an AVAILABLE record in flight, or room in the window."""
        return self.next_fetch_offset() < self.end_offset or self.in_flight_count() < self.max_in_flight_records

    def acquirable_through(self, first_offset: int, max_records: int) -> int:
        """The last offset ``acquire(member, first_offset, last, max_records)`` could take, whatever
        ``last``: how far the log must be read for it (a fetch reads no further)."""
        remaining = max_records
        offset = max(first_offset, self.start_offset)
        if offset < self.end_offset:
            for run in self._batches[self._index(offset) :]:
                if run.state == RecordState.AVAILABLE:
                    n = run.last_offset - max(run.first_offset, offset) + 1
                    if n >= remaining:
                        return max(run.first_offset, offset) + remaining - 1
                    remaining -= n
        room = self.max_in_flight_records - self.in_flight_count()
        return self.end_offset + max(min(remaining, room), 0) - 1

    # -- the runs ---------------------------------------------------------------------------------------

    def _index(self, offset: int) -> int:
        """The index of the run holding ``offset`` (which must be in flight)."""
        return bisect_right(self._batches, offset, key=_first_offset) - 1

    def _split(self, offset: int) -> int:
        """Make ``offset`` (start_offset <= offset <= end_offset) the first offset of a run; its index
        (len(runs) for the end offset)."""
        if offset >= self.end_offset:
            return len(self._batches)
        i = self._index(offset)
        run = self._batches[i]
        if run.first_offset == offset:
            return i
        tail = InFlightBatch(offset, run.last_offset, run.state, run.delivery_count, run.member_id, run.lock)
        run.last_offset = offset - 1
        self._batches.insert(i + 1, tail)
        return i + 1

    def _isolate(self, first: int, last: int) -> tuple[int, int]:
        """Split the runs so that runs[i:j] cover exactly [first, last] (within the window)."""
        i = self._split(first)
        return i, self._split(last + 1)

    def _coalesce(self) -> None:
        """Join neighbouring runs that are alike (same state, count, member and lock)."""
        runs = self._batches
        if len(runs) < 2:
            return
        out = [runs[0]]
        for run in runs[1:]:
            prev = out[-1]
            if prev.same_as(run):
                prev.last_offset = run.last_offset
            else:
                out.append(run)
        self._batches = out

    # -- acquire ----------------------------------------------------------------------------------------

    def acquire(
        self,
        member_id: str,
        first_offset: int,
        last_offset: int,
        max_records: int,
        batch_last_offsets: Sequence[int] = (),
    ) -> list[AcquiredRecords]:
        """Acquire up to ``max_records`` records of the fetched log range [first_offset, last_offset] for
        ``member_id``: AVAILABLE in-flight records are re-acquired, offsets past the end offset join the
        window while it holds fewer than ``max_in_flight_records``. Each acquisition increments the
        delivery count; the records acquired by one call share one acquisition lock of
        ``record_lock_duration_ms`` (Kafka schedules one timer task per acquired batch).

        ``batch_last_offsets``, the last offsets of the fetched log batches, asks for Kafka's
        batch-optimized acquisition (ShareAcquireMode 0, the clients' default): ``max_records`` is then a
        soft limit, and an acquisition that stops inside a batch goes on to that batch's end, so the batch
        that goes out whole is acquired whole. Without it the limit is strict (ShareAcquireMode 1,
        record_limit)."""
        out: list[AcquiredRecords] = []
        lock = _AcquisitionLock(member_id)
        taken = self._take(lock, max(first_offset, self.start_offset), last_offset, max_records, out, bounded=True)
        if out and batch_last_offsets:
            tail = out[-1].last_offset
            k = bisect_left(batch_last_offsets, tail)
            if k < len(batch_last_offsets):
                batch_end = min(batch_last_offsets[k], last_offset)
                if batch_end > tail:
                    # as Kafka, past the in-flight bound too: the batch's records are in the response anyway
                    taken += self._take(lock, tail + 1, batch_end, batch_end - tail, out, bounded=False)
        if out:
            lock.acquired = taken
            lock.timer = self.clock.call_later(self.record_lock_duration_ms, partial(self._lock_expired, lock))
            self._coalesce()
        return out

    def _take(  # noqa: PLR0913
        self, lock: _AcquisitionLock, offset: int, last_offset: int, max_records: int, out: list[AcquiredRecords],
        *, bounded: bool,
    ) -> int:
        """Acquire for ``lock``'s member up to ``max_records`` AVAILABLE or new records of [offset,
        last_offset] (new ones within the in-flight bound if ``bounded``), adding their ranges to ``out``;
        how many were acquired."""
        member_id = lock.member_id
        remaining = max_records

        def took(first: int, last: int, count: int) -> None:
            if out and out[-1].last_offset == first - 1 and out[-1].delivery_count == count:
                out[-1] = AcquiredRecords(out[-1].first_offset, last, count)
            else:
                out.append(AcquiredRecords(first, last, count))

        if offset < self.end_offset and remaining > 0:
            i = self._index(offset)
            while i < len(self._batches) and remaining > 0:
                run = self._batches[i]
                if run.first_offset > last_offset:
                    break
                if run.state != RecordState.AVAILABLE:
                    i += 1
                    continue
                lo = max(run.first_offset, offset)
                hi = min(run.last_offset, last_offset, lo + remaining - 1)
                i, j = self._isolate(lo, hi)  # one run: [lo, hi] lies inside ``run``
                acquired = self._batches[i]
                acquired.state = RecordState.ACQUIRED
                acquired.delivery_count += 1
                acquired.member_id = member_id
                acquired.lock = lock
                remaining -= hi - lo + 1
                took(lo, hi, acquired.delivery_count)
                i = j
        # New records join the window after the records it holds, up to its bound.
        if offset <= self.end_offset <= last_offset and remaining > 0:
            room = self.max_in_flight_records - self.in_flight_count() if bounded else remaining
            n = min(remaining, last_offset - self.end_offset + 1, room)
            if n > 0:
                first = self.end_offset
                self._batches.append(InFlightBatch(first, first + n - 1, RecordState.ACQUIRED, 1, member_id, lock))
                self.end_offset = first + n
                remaining -= n
                took(first, first + n - 1, 1)
        return max_records - remaining

    # -- acknowledge / release --------------------------------------------------------------------------

    def _held_by(self, member_id: str, first: int, last: int) -> bool:
        """Whether every offset of [first, last] is in flight and ACQUIRED by ``member_id``."""
        if first < self.start_offset or last >= self.end_offset:
            return False
        i = self._index(first)
        while i < len(self._batches):
            run = self._batches[i]
            if run.first_offset > last:
                break
            if run.state != RecordState.ACQUIRED or run.member_id != member_id:
                return False
            i += 1
        return True

    def acknowledge(
        self, member_id: str, batches: Iterable[AcknowledgementBatch], *, allow_renew: bool = False
    ) -> ErrorCode:
        """Apply a member's acknowledgements. All or nothing, as Kafka's ``acknowledge``: every offset
        must be in flight and ACQUIRED by this member (else INVALID_RECORD_STATE), and the types must be
        one per range or one per offset, each 0..3 (else INVALID_REQUEST); the first error in offset
        order is the answer."""
        plan: list[tuple[int, int, AcknowledgeType]] = []
        for batch in batches:
            if batch.last_offset < batch.first_offset or not batch.acknowledge_types:
                return ErrorCode.INVALID_REQUEST
            types = batch.acknowledge_types
            if len(types) not in (1, batch.last_offset - batch.first_offset + 1):
                return ErrorCode.INVALID_REQUEST
            # one type per offset: runs of equal types are applied as one range
            first = batch.first_offset
            for k in range(len(types)):
                if k + 1 < len(types) and types[k + 1] == types[k]:
                    continue
                last = batch.last_offset if len(types) == 1 else batch.first_offset + k
                try:
                    ack = AcknowledgeType(types[k])
                except ValueError:
                    return ErrorCode.INVALID_REQUEST
                if ack == AcknowledgeType.RENEW and not allow_renew:
                    return ErrorCode.INVALID_REQUEST
                if not self._held_by(member_id, first, last):
                    return ErrorCode.INVALID_RECORD_STATE
                plan.append((first, last, ack))
                first = last + 1
        renewal: _AcquisitionLock | None = None
        for first, last, ack in plan:
            i, j = self._isolate(first, last)
            for run in self._batches[i:j]:
                if ack == AcknowledgeType.ACCEPT:
                    self._finish(run, RecordState.ACKNOWLEDGED)
                elif ack in (AcknowledgeType.REJECT, AcknowledgeType.GAP):
                    self._finish(run, RecordState.ARCHIVED)
                elif ack == AcknowledgeType.RENEW:
                    if run.state != RecordState.ACQUIRED:
                        continue  # acknowledged earlier in this request
                    if renewal is None:
                        renewal = _AcquisitionLock(member_id)
                    self._move_lock(run, renewal)
                else:
                    self._release(run)
        if renewal is not None and renewal.acquired > 0:
            renewal.timer = self.clock.call_later(self.record_lock_duration_ms, partial(self._lock_expired, renewal))
        self._coalesce()
        if any(ack != AcknowledgeType.RENEW for _, _, ack in plan):
            self._changed()
        return ErrorCode.NONE

    def release_acquired_records(self, member_id: str) -> int:
        """A member left (or its share session closed): its acquired records become AVAILABLE again
        (ARCHIVED if their delivery count has reached the limit). Returns how many were released."""
        released = 0
        for run in self._batches:
            if run.state == RecordState.ACQUIRED and run.member_id == member_id:
                released += run.size
                self._release(run)
        if released:
            self._coalesce()
            self._changed()
        return released

    def _lock_expired(self, lock: _AcquisitionLock) -> None:
        lock.timer = None
        expired = [run for run in self._batches if run.lock is lock and run.state == RecordState.ACQUIRED]
        if not expired:
            return
        logger.debug(
            "acquisition lock of %s-%d offsets %s (member %s) expired", self.topic, self.partition,
            ", ".join(f"{r.first_offset}-{r.last_offset}" for r in expired), lock.member_id,
        )
        for run in expired:
            self._release(run)
        self._coalesce()
        self._changed()

    def _release(self, run: InFlightBatch) -> None:
        # A delivery attempt has ended without acceptance: once the count reaches the limit the record
        # is archived, never delivered again (KIP-932; KIP-1240 spells out the >= comparison).
        if run.delivery_count >= self.delivery_count_limit:
            self._finish(run, RecordState.ARCHIVED)
        else:
            self._finish(run, RecordState.AVAILABLE)

    @staticmethod
    def _finish(run: InFlightBatch, state: RecordState) -> None:
        if run.lock is not None:
            if run.state == RecordState.ACQUIRED:
                run.lock.drop(run.size)
            run.lock = None
        run.state = state
        run.member_id = None

    @staticmethod
    def _move_lock(run: InFlightBatch, lock: _AcquisitionLock) -> None:
        """RENEW: the run's records are held under a new lock from now (the old one no longer counts them)."""
        if run.lock is not None and run.lock is not lock:
            run.lock.drop(run.size)
        if run.lock is not lock:
            lock.acquired += run.size
        run.lock = lock

    def _changed(self) -> None:
        self._write_start_offset = self.start_offset  # the write carries the start offset before the move
        self._write_head = self._advance_start_offset()
        if self.on_state_change is not None:
            self.on_state_change(self)

    def _advance_start_offset(self) -> list[StateBatch]:
        """Move the start offset over the done runs at the head of the window; those runs, as state batches."""
        k = 0
        for run in self._batches:
            if run.state not in _DONE:
                break
            k += 1
        if not k:
            return []
        dropped = [StateBatch(r.first_offset, r.last_offset, r.state, r.delivery_count) for r in self._batches[:k]]
        del self._batches[:k]
        self.start_offset = self._batches[0].first_offset if self._batches else self.end_offset
        return dropped

    # -- offsets moved from outside ---------------------------------------------------------------------

    def _cancel_locks(self) -> None:
        for run in self._batches:
            if run.lock is not None and run.lock.timer is not None:
                run.lock.timer.cancel()
                run.lock.timer = None

    def reset_start_offset(self, offset: int) -> None:
        """AlterShareGroupOffsets (only allowed on an empty group) or log truncation below the window:
        drop the window and start afresh at ``offset``."""
        self._cancel_locks()
        self._batches.clear()
        self.start_offset = self.end_offset = offset
        self._write_start_offset, self._write_head = offset, []
        self.state_epoch += 1
        if self.on_state_change is not None:
            self.on_state_change(self)

    def advance_to_log_start(self, log_start_offset: int) -> None:
        """Records deleted by retention below the window's start are gone: archive what was in flight
        below ``log_start_offset`` and move the start offset up to it."""
        if log_start_offset <= self.start_offset:
            return
        if self.start_offset < self.end_offset:
            i, j = self._isolate(self.start_offset, min(log_start_offset, self.end_offset) - 1)
            for run in self._batches[i:j]:
                self._finish(run, RecordState.ARCHIVED)
        if log_start_offset > self.end_offset:
            self._batches.clear()
            self.start_offset = self.end_offset = log_start_offset
        self._changed()

    def close(self) -> None:
        """Cancel every acquisition lock (broker shutdown or partition unloaded)."""
        self._cancel_locks()
