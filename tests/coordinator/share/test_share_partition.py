"""The share-partition state machine: acquire, accept, release, reject, lock expiry, delivery limit, bounds."""

from __future__ import annotations

from pybroker.coordinator.clock import FakeClock
from pybroker.coordinator.share.share_partition import (
    AcknowledgementBatch,
    AcquiredRecords,
    RecordState,
    SharePartition,
    StateBatch,
)
from pybroker.protocol.errors import ErrorCode

ACCEPT, RELEASE, REJECT, GAP = 1, 2, 3, 0


def make(clock: FakeClock, **kw: int) -> SharePartition:
    return SharePartition("g", "t", 0, 0, clock, record_lock_duration_ms=30_000, **kw)


def ack(first: int, last: int, *types: int) -> AcknowledgementBatch:
    return AcknowledgementBatch(first, last, tuple(types))


def test_each_record_goes_to_one_member_at_a_time() -> None:
    clock = FakeClock()
    sp = make(clock)
    assert sp.acquire("a", 0, 9, max_records=4) == [AcquiredRecords(0, 3, 1)]
    assert sp.next_fetch_offset() == 4
    # b fetches the same log range: only the records a does not hold
    assert sp.acquire("b", 0, 9, max_records=100) == [AcquiredRecords(4, 9, 1)]
    assert sp.acquire("c", 0, 9, max_records=100) == []
    assert sp.next_fetch_offset() == 10
    assert sp.record_state(2) == (RecordState.ACQUIRED, 1)


def test_accept_moves_start_offset_and_drops_records() -> None:
    clock = FakeClock()
    sp = make(clock)
    sp.acquire("a", 0, 4, 10)
    assert sp.acknowledge("a", [ack(1, 2, ACCEPT)]) == ErrorCode.NONE
    assert sp.start_offset == 0  # offset 0 still acquired
    assert sp.acknowledge("a", [ack(0, 0, ACCEPT)]) == ErrorCode.NONE
    assert sp.start_offset == 3
    assert sp.record_state(1) is None
    assert sp.in_flight_count() == 2


def test_release_redelivers_with_a_higher_delivery_count() -> None:
    clock = FakeClock()
    sp = make(clock)
    sp.acquire("a", 0, 2, 10)
    assert sp.acknowledge("a", [ack(0, 2, ACCEPT, RELEASE, ACCEPT)]) == ErrorCode.NONE
    assert sp.record_state(1) == (RecordState.AVAILABLE, 1)
    assert sp.next_fetch_offset() == 1
    assert sp.acquire("b", 1, 2, 10) == [AcquiredRecords(1, 1, 2)]


def test_reject_archives_for_good() -> None:
    clock = FakeClock()
    sp = make(clock)
    sp.acquire("a", 0, 2, 10)
    assert sp.acknowledge("a", [ack(1, 1, REJECT)]) == ErrorCode.NONE
    assert sp.record_state(1) == (RecordState.ARCHIVED, 1)
    assert sp.acknowledge("a", [ack(0, 0, RELEASE), ack(2, 2, RELEASE)]) == ErrorCode.NONE
    assert sp.acquire("b", 0, 2, 10) == [AcquiredRecords(0, 0, 2), AcquiredRecords(2, 2, 2)]


def test_gap_acknowledgement_archives_the_offset() -> None:
    clock = FakeClock()
    sp = make(clock)
    sp.acquire("a", 0, 2, 10)
    assert sp.acknowledge("a", [ack(0, 2, ACCEPT, GAP, ACCEPT)]) == ErrorCode.NONE
    assert sp.start_offset == 3


def test_lock_expiry_releases_for_redelivery() -> None:
    clock = FakeClock()
    sp = make(clock)
    sp.acquire("a", 0, 1, 10)
    clock.advance(29_999)
    assert sp.record_state(0) == (RecordState.ACQUIRED, 1)
    clock.advance(1)
    assert sp.record_state(0) == (RecordState.AVAILABLE, 1)
    # the expired member can no longer acknowledge
    assert sp.acknowledge("a", [ack(0, 0, ACCEPT)]) == ErrorCode.INVALID_RECORD_STATE
    assert sp.acquire("b", 0, 1, 10) == [AcquiredRecords(0, 1, 2)]


def test_acknowledge_cancels_the_lock() -> None:
    clock = FakeClock()
    sp = make(clock)
    sp.acquire("a", 0, 0, 10)
    clock.advance(10_000)
    sp.acknowledge("a", [ack(0, 0, RELEASE)])
    sp.acquire("b", 0, 0, 10)
    # the first acquisition's timer (due at 30 s) must not release b's acquisition (due at 40 s)
    clock.advance(29_000)
    assert sp.record_state(0) == (RecordState.ACQUIRED, 2)
    clock.advance(1_000)
    assert sp.record_state(0) == (RecordState.AVAILABLE, 2)


def test_delivery_count_limit_archives_on_release_and_on_expiry() -> None:
    clock = FakeClock()
    sp = make(clock, delivery_count_limit=2)
    sp.acquire("a", 0, 1, 10)
    sp.acknowledge("a", [ack(0, 1, RELEASE)])
    assert sp.acquire("a", 0, 1, 10) == [AcquiredRecords(0, 1, 2)]
    sp.acknowledge("a", [ack(0, 0, RELEASE)])
    assert sp.record_state(0) is None and sp.start_offset == 1  # archived: the start offset moved past it
    assert sp.record_state(1) == (RecordState.ACQUIRED, 2)
    clock.advance(30_000)  # offset 1's second lock expires
    assert sp.record_state(1) is None  # archived and below the start offset now
    assert sp.start_offset == 2
    assert sp.acquire("b", 0, 1, 10) == []


def test_acknowledging_someone_elses_or_unacquired_records_fails_atomically() -> None:
    clock = FakeClock()
    sp = make(clock)
    sp.acquire("a", 0, 1, 10)
    sp.acquire("b", 0, 3, 10)
    assert sp.acknowledge("a", [ack(0, 0, ACCEPT), ack(2, 2, ACCEPT)]) == ErrorCode.INVALID_RECORD_STATE
    assert sp.record_state(0) == (RecordState.ACQUIRED, 1)  # nothing applied
    assert sp.acknowledge("a", [ack(5, 5, ACCEPT)]) == ErrorCode.INVALID_RECORD_STATE
    assert sp.acknowledge("a", [ack(0, 1, ACCEPT, ACCEPT, ACCEPT)]) == ErrorCode.INVALID_REQUEST
    assert sp.acknowledge("a", [ack(0, 0, 7)]) == ErrorCode.INVALID_REQUEST
    assert sp.acknowledge("a", [ack(1, 0, ACCEPT)]) == ErrorCode.INVALID_REQUEST


def test_member_leaving_releases_only_its_records() -> None:
    clock = FakeClock()
    sp = make(clock)
    sp.acquire("a", 0, 1, 10)
    sp.acquire("b", 0, 3, 10)
    assert sp.release_acquired_records("a") == 2
    assert sp.record_state(0) == (RecordState.AVAILABLE, 1)
    assert sp.record_state(2) == (RecordState.ACQUIRED, 1)
    assert sp.acquire("c", 0, 3, 10) == [AcquiredRecords(0, 1, 2)]


def test_in_flight_window_is_bounded() -> None:
    clock = FakeClock()
    sp = make(clock, max_in_flight_records=5)
    assert sp.acquire("a", 0, 99, 100) == [AcquiredRecords(0, 4, 1)]
    assert not sp.can_acquire()
    assert sp.acquire("b", 0, 99, 100) == []
    sp.acknowledge("a", [ack(0, 1, ACCEPT)])
    assert sp.can_acquire()
    assert sp.acquire("b", 5, 99, 100) == [AcquiredRecords(5, 6, 1)]
    assert sp.in_flight_count() == 5


def test_state_batches_round_trip_and_acquired_becomes_available() -> None:
    clock = FakeClock()
    sp = make(clock)
    sp.acquire("a", 0, 5, 10)
    sp.acknowledge("a", [ack(0, 0, ACCEPT), ack(2, 2, REJECT), ack(3, 3, RELEASE)])
    batches = sp.state_batches()
    assert sp.start_offset == 1
    assert batches == [
        StateBatch(1, 1, RecordState.ACQUIRED, 1),
        StateBatch(2, 2, RecordState.ARCHIVED, 1),
        StateBatch(3, 3, RecordState.AVAILABLE, 1),
        StateBatch(4, 5, RecordState.ACQUIRED, 1),
    ]
    sp.close()
    again = SharePartition.from_state("g", "t", 0, sp.start_offset, batches, clock)
    assert again.record_state(1) == (RecordState.AVAILABLE, 1)
    assert again.record_state(2) == (RecordState.ARCHIVED, 1)
    assert again.end_offset == 6
    assert again.acquire("b", 0, 10, 10) == [AcquiredRecords(1, 1, 2), AcquiredRecords(3, 5, 2),
                                              AcquiredRecords(6, 10, 1)]


def test_on_state_change_fires_on_acknowledge_and_expiry_not_acquire() -> None:
    clock = FakeClock()
    seen: list[int] = []
    sp = SharePartition("g", "t", 0, 0, clock, on_state_change=lambda p: seen.append(p.start_offset))
    sp.acquire("a", 0, 1, 10)
    assert seen == []
    sp.acknowledge("a", [ack(0, 0, ACCEPT)])
    assert seen == [1]
    clock.advance(30_000)
    assert seen == [1, 1]


def test_log_start_moving_past_the_window() -> None:
    clock = FakeClock()
    sp = make(clock)
    sp.acquire("a", 0, 3, 10)
    sp.advance_to_log_start(2)
    assert sp.start_offset == 2
    sp.advance_to_log_start(10)
    assert (sp.start_offset, sp.end_offset) == (10, 10)
    assert sp.acquire("a", 10, 10, 10) == [AcquiredRecords(10, 10, 1)]


def test_renew_restarts_the_lock_and_needs_renew_acks() -> None:
    clock = FakeClock()
    sp = make(clock)
    sp.acquire("a", 0, 0, 10)
    assert sp.acknowledge("a", [ack(0, 0, 4)]) == ErrorCode.INVALID_REQUEST  # RENEW outside a renew request
    clock.advance(20_000)
    assert sp.acknowledge("a", [ack(0, 0, 4)], allow_renew=True) == ErrorCode.NONE
    clock.advance(20_000)  # 40 s after the acquisition, 20 s after the renewal
    assert sp.record_state(0) == (RecordState.ACQUIRED, 1)
    clock.advance(10_000)
    assert sp.record_state(0) == (RecordState.AVAILABLE, 1)


def test_a_state_write_carries_the_start_offset_from_before_its_change() -> None:
    """Kafka's SharePartition writes the state with the start offset it had when the change was made and
    moves it over the finished records only after the write (maybeUpdateCachedStateAndOffsets)."""
    clock = FakeClock()
    written: list[tuple[int, list[StateBatch]]] = []
    sp = SharePartition("g", "t", 0, 0, clock, on_state_change=lambda p: written.append(p.persisted_state()))
    sp.acquire("a", 0, 4, 10)
    sp.acknowledge("a", [ack(0, 1, ACCEPT)])
    assert sp.start_offset == 2
    assert written[-1] == (0, [StateBatch(0, 1, RecordState.ACKNOWLEDGED, 1), StateBatch(2, 4, RecordState.ACQUIRED, 1)])
    sp.acknowledge("a", [ack(2, 2, REJECT)])
    assert written[-1] == (2, [StateBatch(2, 2, RecordState.ARCHIVED, 1), StateBatch(3, 4, RecordState.ACQUIRED, 1)])
    sp.acknowledge("a", [ack(3, 3, RELEASE)])  # nothing finished at the head: the start offset stays
    assert written[-1] == (3, [StateBatch(3, 3, RecordState.AVAILABLE, 1), StateBatch(4, 4, RecordState.ACQUIRED, 1)])
    sp.acknowledge("a", [ack(4, 4, ACCEPT)])
    assert written[-1] == (3, [StateBatch(3, 3, RecordState.AVAILABLE, 1), StateBatch(4, 4, RecordState.ACKNOWLEDGED, 1)])
    assert (sp.start_offset, sp.next_fetch_offset()) == (3, 3)
    # loaded from that state, the share partition moves its start offset over the finished head itself
    again = SharePartition.from_state("g", "t", 0, 0, [StateBatch(0, 4, RecordState.ACKNOWLEDGED, 1)], clock)
    assert (again.start_offset, again.persisted_state()) == (5, (5, []))
    # an offset moved from outside starts afresh there
    sp.reset_start_offset(7)
    assert sp.persisted_state() == (7, [])
