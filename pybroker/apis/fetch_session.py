"""Incremental fetch sessions (KIP-227), as Kafka's FetchSession / FetchSessionCache / FetchManager.

A consumer that fetches many partitions sends them all once (a *full* fetch with epoch 0) and gets
a session id back; later *incremental* fetches (epoch 1, 2, ...) name only the partitions whose
fetch position changed, plus those to forget, and the response carries only partitions with
something new: records, an error, or a changed high watermark or log start offset.  The broker
keeps, per session, each partition's last request parameters and last reported offsets.

Pure bookkeeping, no I/O: the Fetch handler asks ``FetchSessions.context`` which partitions to read
and hands the per-partition results to ``FetchContext.finish`` to learn what to send.
"""

from __future__ import annotations

import itertools
import logging
import random
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from pybroker.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
# Kafka's min.incremental.fetch.session.eviction.ms: a session unused this long may be evicted.
EVICTION_MS = 120_000

# (topic name before Fetch v13, topic id from v13 on; partition index)
PartitionKey = tuple[str | uuid.UUID, int]


def next_epoch(epoch: int) -> int:
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == 2**31 - 1 else epoch + 1


@dataclass(slots=True)
class FetchItem:
    """One partition to read: what the client asked for (now or, in a session, earlier)."""

    key: PartitionKey
    fetch_offset: int
    max_bytes: int
    leader_epoch: int


@dataclass(slots=True)
class PartitionResult:
    """What this fetch found for one partition (the fields a session compares)."""

    error_code: int
    high_watermark: int
    log_start_offset: int
    record_bytes: int


@dataclass(slots=True)
class CachedPartition:
    fetch_offset: int
    max_bytes: int
    leader_epoch: int
    high_watermark: int = -1
    log_start_offset: int = -1

    def must_respond(self, result: PartitionResult) -> bool:
        """Whether an incremental response includes the partition; records what it reports."""
        respond = result.record_bytes > 0
        if self.high_watermark != result.high_watermark:
            respond = True
            self.high_watermark = result.high_watermark
        if self.log_start_offset != result.log_start_offset:
            respond = True
            self.log_start_offset = result.log_start_offset
        if result.error_code != ErrorCode.NONE:
            # Reset, so the partition is reported again once the error has gone away.
            self.high_watermark = -1
            respond = True
        return respond


class FetchSession:
    __slots__ = ("id", "uses_topic_ids", "partitions", "epoch", "created_ms", "last_used_ms")

    def __init__(self, session_id: int, uses_topic_ids: bool, now_ms: int) -> None:
        self.id = session_id
        self.uses_topic_ids = uses_topic_ids
        self.partitions: OrderedDict[PartitionKey, CachedPartition] = OrderedDict()
        self.epoch = next_epoch(INITIAL_EPOCH)
        self.created_ms = now_ms
        self.last_used_ms = now_ms


class SessionError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class FetchContext:
    """What one Fetch request reads (``items``) and, once read, what it answers (``finish``)."""

    def __init__(
        self, items: list[FetchItem], finish: Callable[[list[PartitionResult]], tuple[int, list[bool]]]
    ) -> None:
        self.items = items
        self._finish = finish

    def finish(self, results: list[PartitionResult]) -> tuple[int, list[bool]]:
        """(session id for the response, which of ``items`` the response includes)."""
        return self._finish(results)


class FetchSessions:
    """The broker's session cache (``max.incremental.fetch.session.cache.slots`` sessions)."""

    def __init__(self, max_slots: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_slots = max_slots
        self._clock = clock
        self._sessions: dict[int, FetchSession] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def context(
        self,
        session_id: int,
        epoch: int,
        uses_topic_ids: bool,
        requested: list[FetchItem],
        forgotten: Iterable[PartitionKey],
    ) -> FetchContext:
        """Raises SessionError for an unknown session or an unexpected epoch (the response then
        carries only that error, as in Kafka)."""
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID:
                self._sessions.pop(session_id, None)  # a full fetch closes the session it names
            if epoch == FINAL_EPOCH:
                return FetchContext(requested, lambda results: (INVALID_SESSION_ID, [True] * len(results)))
            return FetchContext(requested, lambda results: self._create(uses_topic_ids, requested, results))
        session = self._sessions.get(session_id)
        if session is None:
            raise SessionError(ErrorCode.FETCH_SESSION_ID_NOT_FOUND, f"fetch session {session_id} not found")
        if session.epoch != epoch:
            raise SessionError(
                ErrorCode.INVALID_FETCH_SESSION_EPOCH,
                f"fetch session {session_id} expected epoch {session.epoch}, got {epoch}",
            )
        if session.uses_topic_ids != uses_topic_ids:
            raise SessionError(
                ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR,
                f"fetch session {session_id} was created {'with' if session.uses_topic_ids else 'without'}"
                " topic ids",
            )
        for item in requested:
            cached = session.partitions.get(item.key)
            if cached is None:
                session.partitions[item.key] = CachedPartition(
                    item.fetch_offset, item.max_bytes, item.leader_epoch
                )
            else:
                cached.fetch_offset, cached.max_bytes, cached.leader_epoch = (
                    item.fetch_offset,
                    item.max_bytes,
                    item.leader_epoch,
                )
        for key in forgotten:
            session.partitions.pop(key, None)
        if not session.partitions:
            # Everything forgotten: the session ends and this fetch is answered without one.
            del self._sessions[session.id]
            return FetchContext(requested, lambda results: (INVALID_SESSION_ID, [True] * len(results)))
        session.last_used_ms = self._now_ms()
        session.epoch = next_epoch(session.epoch)
        expected_epoch = session.epoch
        items = [
            FetchItem(k, c.fetch_offset, c.max_bytes, c.leader_epoch) for k, c in session.partitions.items()
        ]

        def finish(results: list[PartitionResult]) -> tuple[int, list[bool]]:
            if self._sessions.get(session.id) is not session or session.epoch != expected_epoch:
                # Another fetch of this session overtook this one while it waited (a duplicate).
                raise SessionError(
                    ErrorCode.INVALID_FETCH_SESSION_EPOCH, f"fetch session {session.id} moved on meanwhile"
                )
            include = []
            for item, result in zip(items, results, strict=True):
                cached = session.partitions.get(item.key)
                respond = cached is not None and cached.must_respond(result)
                if respond:
                    # Reported partitions go to the back, so a byte limit does not starve the others.
                    session.partitions.move_to_end(item.key)
                include.append(respond)
            return session.id, include

        return FetchContext(items, finish)

    def _create(
        self, uses_topic_ids: bool, items: list[FetchItem], results: list[PartitionResult]
    ) -> tuple[int, list[bool]]:
        include = [True] * len(results)
        now = self._now_ms()
        if len(self._sessions) >= self.max_slots and not self._evict(now, len(items)):
            return INVALID_SESSION_ID, include
        session_id = self._new_id()
        session = FetchSession(session_id, uses_topic_ids, now)
        for item, result in zip(items, results, strict=True):
            session.partitions[item.key] = CachedPartition(
                item.fetch_offset,
                item.max_bytes,
                item.leader_epoch,
                result.high_watermark if result.error_code == ErrorCode.NONE else -1,
                result.log_start_offset,
            )
        self._sessions[session_id] = session
        return session_id, include

    def _evict(self, now_ms: int, size: int) -> bool:
        """Kafka's rule: evict a session unused for EVICTION_MS, else the smallest one older than
        EVICTION_MS if it has fewer partitions than the new one."""
        if not self._sessions:
            return False
        stalest = min(self._sessions.values(), key=lambda s: s.last_used_ms)
        if now_ms - stalest.last_used_ms > EVICTION_MS:
            del self._sessions[stalest.id]
            return True
        old_enough = [s for s in self._sessions.values() if now_ms - s.created_ms > EVICTION_MS]
        if not old_enough:
            return False
        smallest = min(old_enough, key=lambda s: (len(s.partitions), s.id))
        if len(smallest.partitions) > size:
            return False
        del self._sessions[smallest.id]
        return True

    def _new_id(self) -> int:
        for _ in itertools.count():
            session_id = random.randint(1, 2**31 - 1)
            if session_id not in self._sessions:
                return session_id
        raise AssertionError("unreachable")
