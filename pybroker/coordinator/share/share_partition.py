"""One share partition: the in-flight records of a (share group, topic partition) pair (KIP-932).

Kafka's ``SharePartition`` keeps a window of in-flight records between the share-partition start
offset (SPSO) and end offset (SPEO). Each record in the window is AVAILABLE, ACQUIRED (by one member,
under an acquisition lock), ACKNOWLEDGED or ARCHIVED. Records below the start offset are done; records
at or past ``end_offset`` have never been acquired. The start offset moves forward over a prefix of
ACKNOWLEDGED/ARCHIVED records, which is what bounds the window (and memory) together with
``group.share.partition.max.record.locks``.

Kafka stores the window as batches with optional per-offset state; this keeps per-offset entries,
which the max-record-locks bound keeps small (2000 by default), and merges them back into ranges
for the wire (AcquiredRecords) and for the durable state (state batches).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import IntEnum
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


class _InFlightRecord:
    __slots__ = ("state", "delivery_count", "member_id", "lock")

    def __init__(self, state: RecordState, delivery_count: int) -> None:
        self.state = state
        self.delivery_count = delivery_count
        self.member_id: str | None = None
        self.lock: TimerHandle | None = None

    def cancel_lock(self) -> None:
        if self.lock is not None:
            self.lock.cancel()
            self.lock = None


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
        self._in_flight: dict[int, _InFlightRecord] = {}

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
        (their locks died with the broker), as Kafka's ``maybeInitialize`` does."""
        sp = cls(group_id, topic, partition, start_offset, clock, **kwargs)
        for batch in state_batches:
            state = batch.delivery_state
            if state == RecordState.ACQUIRED:
                state = RecordState.AVAILABLE
            for offset in range(max(batch.first_offset, start_offset), batch.last_offset + 1):
                sp._in_flight[offset] = _InFlightRecord(state, batch.delivery_count)
                sp.end_offset = max(sp.end_offset, offset + 1)
        # Offsets between the start and a persisted batch that were never persisted were AVAILABLE.
        for offset in range(start_offset, sp.end_offset):
            sp._in_flight.setdefault(offset, _InFlightRecord(RecordState.AVAILABLE, 0))
        sp._advance_start_offset()
        return sp

    def state_batches(self) -> list[StateBatch]:
        """The in-flight window as ranges of equal state and delivery count (what Kafka persists)."""
        out: list[StateBatch] = []
        for offset in range(self.start_offset, self.end_offset):
            rec = self._in_flight[offset]
            if (
                out
                and out[-1].last_offset == offset - 1
                and out[-1].delivery_state == rec.state
                and out[-1].delivery_count == rec.delivery_count
            ):
                last = out[-1]
                out[-1] = StateBatch(last.first_offset, offset, last.delivery_state, last.delivery_count)
            else:
                out.append(StateBatch(offset, offset, rec.state, rec.delivery_count))
        return out

    # -- inspection -----------------------------------------------------------------------------------

    def record_state(self, offset: int) -> tuple[RecordState, int] | None:
        """(state, delivery count) of an in-flight offset; None below the start or past the end offset."""
        rec = self._in_flight.get(offset)
        return None if rec is None else (rec.state, rec.delivery_count)

    def in_flight_count(self) -> int:
        return self.end_offset - self.start_offset

    def lag(self, high_watermark: int) -> int:
        """Records from the start offset up to the high watermark not yet acknowledged or archived
        (what DescribeShareGroupOffsets v1 reports)."""
        done = sum(1 for r in self._in_flight.values() if r.state in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED))
        return max(high_watermark - self.start_offset - done, 0)

    def next_fetch_offset(self) -> int:
        """Where the next fetch for this share partition reads the log: the first AVAILABLE record in
        flight, or the end offset when every in-flight record is taken or done."""
        for offset in range(self.start_offset, self.end_offset):
            if self._in_flight[offset].state == RecordState.AVAILABLE:
                return offset
        return self.end_offset

    def can_acquire(self) -> bool:
        """Whether a fetch could acquire anything: an AVAILABLE record in flight, or room in the window."""
        return self.next_fetch_offset() < self.end_offset or self.in_flight_count() < self.max_in_flight_records

    # -- acquire ----------------------------------------------------------------------------------------

    def acquire(self, member_id: str, first_offset: int, last_offset: int, max_records: int) -> list[AcquiredRecords]:
        """Acquire up to ``max_records`` records of the fetched log range [first_offset, last_offset] for
        ``member_id``: AVAILABLE in-flight records are re-acquired, offsets past the end offset join the
        window while it holds fewer than ``max_in_flight_records``. Each acquisition increments the
        delivery count and starts an acquisition lock of ``record_lock_duration_ms``."""
        acquired: list[int] = []
        offset = max(first_offset, self.start_offset)
        while offset <= last_offset and len(acquired) < max_records:
            rec = self._in_flight.get(offset)
            if rec is None:
                if offset != self.end_offset or self.in_flight_count() >= self.max_in_flight_records:
                    break
                rec = _InFlightRecord(RecordState.AVAILABLE, 0)
                self._in_flight[offset] = rec
                self.end_offset = offset + 1
            if rec.state == RecordState.AVAILABLE:
                rec.state = RecordState.ACQUIRED
                rec.delivery_count += 1
                rec.member_id = member_id
                self._start_lock(offset, rec)
                acquired.append(offset)
            offset += 1
        return self._ranges(acquired)

    def _start_lock(self, offset: int, rec: _InFlightRecord) -> None:
        rec.cancel_lock()
        rec.lock = self.clock.call_later(self.record_lock_duration_ms, lambda: self._lock_expired(offset, rec))

    def _ranges(self, offsets: list[int]) -> list[AcquiredRecords]:
        out: list[AcquiredRecords] = []
        for offset in offsets:
            count = self._in_flight[offset].delivery_count
            if out and out[-1].last_offset == offset - 1 and out[-1].delivery_count == count:
                out[-1] = AcquiredRecords(out[-1].first_offset, offset, count)
            else:
                out.append(AcquiredRecords(offset, offset, count))
        return out

    # -- acknowledge / release --------------------------------------------------------------------------

    def acknowledge(
        self, member_id: str, batches: Iterable[AcknowledgementBatch], *, allow_renew: bool = False
    ) -> ErrorCode:
        """Apply a member's acknowledgements. All or nothing, as Kafka's ``acknowledge``: every offset
        must be in flight and ACQUIRED by this member (else INVALID_RECORD_STATE), and the types must be
        one per range or one per offset, each 0..3 (else INVALID_REQUEST)."""
        plan: list[tuple[int, AcknowledgeType]] = []
        for batch in batches:
            if batch.last_offset < batch.first_offset or not batch.acknowledge_types:
                return ErrorCode.INVALID_REQUEST
            n = batch.last_offset - batch.first_offset + 1
            if len(batch.acknowledge_types) not in (1, n):
                return ErrorCode.INVALID_REQUEST
            for i, offset in enumerate(range(batch.first_offset, batch.last_offset + 1)):
                raw = batch.acknowledge_types[0 if len(batch.acknowledge_types) == 1 else i]
                try:
                    ack = AcknowledgeType(raw)
                except ValueError:
                    return ErrorCode.INVALID_REQUEST
                if ack == AcknowledgeType.RENEW and not allow_renew:
                    return ErrorCode.INVALID_REQUEST
                rec = self._in_flight.get(offset)
                if rec is None or rec.state != RecordState.ACQUIRED or rec.member_id != member_id:
                    return ErrorCode.INVALID_RECORD_STATE
                plan.append((offset, ack))
        for offset, ack in plan:
            rec = self._in_flight[offset]
            if ack == AcknowledgeType.ACCEPT:
                self._finish(rec, RecordState.ACKNOWLEDGED)
            elif ack in (AcknowledgeType.REJECT, AcknowledgeType.GAP):
                self._finish(rec, RecordState.ARCHIVED)
            elif ack == AcknowledgeType.RENEW:
                self._start_lock(offset, rec)
            else:
                self._release(rec)
        if any(ack != AcknowledgeType.RENEW for _, ack in plan):
            self._changed()
        return ErrorCode.NONE

    def release_acquired_records(self, member_id: str) -> int:
        """A member left (or its share session closed): its acquired records become AVAILABLE again
        (ARCHIVED if their delivery count has reached the limit). Returns how many were released."""
        released = 0
        for offset in range(self.start_offset, self.end_offset):
            rec = self._in_flight[offset]
            if rec.state == RecordState.ACQUIRED and rec.member_id == member_id:
                self._release(rec)
                released += 1
        if released:
            self._changed()
        return released

    def _lock_expired(self, offset: int, rec: _InFlightRecord) -> None:
        if self._in_flight.get(offset) is not rec or rec.state != RecordState.ACQUIRED:
            return
        rec.lock = None
        logger.debug(
            "acquisition lock of %s-%d offset %d (member %s) expired", self.topic, self.partition,
            offset, rec.member_id,
        )
        self._release(rec)
        self._changed()

    def _release(self, rec: _InFlightRecord) -> None:
        # A delivery attempt has ended without acceptance: once the count reaches the limit the record
        # is archived, never delivered again (KIP-932; KIP-1240 spells out the >= comparison).
        if rec.delivery_count >= self.delivery_count_limit:
            self._finish(rec, RecordState.ARCHIVED)
        else:
            self._finish(rec, RecordState.AVAILABLE)

    @staticmethod
    def _finish(rec: _InFlightRecord, state: RecordState) -> None:
        rec.cancel_lock()
        rec.state = state
        rec.member_id = None

    def _changed(self) -> None:
        self._advance_start_offset()
        if self.on_state_change is not None:
            self.on_state_change(self)

    def _advance_start_offset(self) -> None:
        while self.start_offset < self.end_offset:
            rec = self._in_flight[self.start_offset]
            if rec.state not in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED):
                break
            del self._in_flight[self.start_offset]
            self.start_offset += 1

    # -- offsets moved from outside ---------------------------------------------------------------------

    def reset_start_offset(self, offset: int) -> None:
        """AlterShareGroupOffsets (only allowed on an empty group) or log truncation below the window:
        drop the window and start afresh at ``offset``."""
        for rec in self._in_flight.values():
            rec.cancel_lock()
        self._in_flight.clear()
        self.start_offset = self.end_offset = offset
        self.state_epoch += 1
        if self.on_state_change is not None:
            self.on_state_change(self)

    def advance_to_log_start(self, log_start_offset: int) -> None:
        """Records deleted by retention below the window's start are gone: archive what was in flight
        below ``log_start_offset`` and move the start offset up to it."""
        if log_start_offset <= self.start_offset:
            return
        for offset in range(self.start_offset, min(log_start_offset, self.end_offset)):
            self._finish(self._in_flight[offset], RecordState.ARCHIVED)
        if log_start_offset > self.end_offset:
            self._in_flight.clear()
            self.start_offset = self.end_offset = log_start_offset
        self._changed()

    def close(self) -> None:
        """Cancel every acquisition lock (broker shutdown or partition unloaded)."""
        for rec in self._in_flight.values():
            rec.cancel_lock()
