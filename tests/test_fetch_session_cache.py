"""The fetch-session cache's bookkeeping, from objects alone: slots, eviction, epochs, rotation."""

from __future__ import annotations

import pytest

from pybroker.apis.fetch_session import (
    EVICTION_MS,
    FetchItem,
    FetchSessions,
    PartitionResult,
    SessionError,
    next_epoch,
)
from pybroker.protocol.errors import ErrorCode


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> float:
        return self.ms / 1000


def items(n: int) -> list[FetchItem]:
    return [FetchItem(("t", i), 0, 1 << 20, -1) for i in range(n)]


def ok(hw: int = 0, records: int = 0) -> PartitionResult:
    return PartitionResult(ErrorCode.NONE, hw, 0, records)


def open_session(cache: FetchSessions, n: int) -> int:
    ctx = cache.context(0, 0, False, items(n), [])
    session_id, include = ctx.finish([ok() for _ in ctx.items])
    assert include == [True] * n
    return session_id


def test_full_cache_declines_until_a_session_goes_stale() -> None:
    clock = Clock()
    cache = FetchSessions(max_slots=1, clock=clock)
    first = open_session(cache, 3)
    assert first > 0
    assert open_session(cache, 5) == 0  # full, and the only session is neither stale nor old
    clock.ms += EVICTION_MS + 1
    second = open_session(cache, 5)
    assert second > 0 and len(cache) == 1
    with pytest.raises(SessionError) as info:
        cache.context(first, 1, False, [], [])
    assert info.value.code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def test_old_small_session_gives_way_to_a_bigger_one_but_not_to_a_smaller_one() -> None:
    clock = Clock()
    cache = FetchSessions(max_slots=1, clock=clock)
    small = open_session(cache, 2)
    clock.ms += EVICTION_MS + 1
    cache.context(small, 1, False, [], []).finish([ok(), ok()])  # used just now: not stale, but old
    assert open_session(cache, 1) == 0
    assert open_session(cache, 4) > 0


def test_zero_slots_never_create_a_session() -> None:
    assert open_session(FetchSessions(max_slots=0), 2) == 0


def test_reported_partitions_rotate_to_the_back() -> None:
    cache = FetchSessions(max_slots=10)
    session = open_session(cache, 3)
    ctx = cache.context(session, 1, False, [], [])
    assert [i.key[1] for i in ctx.items] == [0, 1, 2]
    _, include = ctx.finish([ok(records=10), ok(), ok()])
    assert include == [True, False, False]
    assert [i.key[1] for i in cache.context(session, 2, False, [], []).items] == [1, 2, 0]


def test_an_overtaken_fetch_answers_invalid_epoch() -> None:
    cache = FetchSessions(max_slots=10)
    session = open_session(cache, 1)
    slow = cache.context(session, 1, False, [], [])  # e.g. a long poll still waiting
    cache.context(session, 2, False, [], []).finish([ok()])
    with pytest.raises(SessionError) as info:
        slow.finish([ok()])
    assert info.value.code == ErrorCode.INVALID_FETCH_SESSION_EPOCH


def test_epochs_wrap_like_kafka() -> None:
    assert next_epoch(0) == 1
    assert next_epoch(2**31 - 1) == 1
    assert next_epoch(-1) == -1
