"""The share partition's in-flight window as runs (InFlightBatch): one acquisition lock per acquire, runs
split by partial acknowledgements, lock expiry and the delivery-count limit inside a run, and a random
walk checked offset by offset against a per-offset model of the same rules."""

from __future__ import annotations

import random

from pybroker.coordinator.clock import FakeClock
from pybroker.coordinator.share.share_partition import (
    AcknowledgementBatch,
    AcquiredRecords,
    RecordState,
    SharePartition,
    StateBatch,
)
from pybroker.protocol.errors import ErrorCode

GAP, ACCEPT, RELEASE, REJECT, RENEW = 0, 1, 2, 3, 4
LOCK_MS = 30_000


def make(clock: FakeClock, **kw: int) -> SharePartition:
    return SharePartition("g", "t", 0, 0, clock, record_lock_duration_ms=LOCK_MS, **kw)


def ack(first: int, last: int, *types: int) -> AcknowledgementBatch:
    return AcknowledgementBatch(first, last, tuple(types))


def runs(sp: SharePartition) -> list[tuple[int, int, str, int]]:
    return [(r.first_offset, r.last_offset, r.state.name, r.delivery_count) for r in sp._batches]


def timers(clock: FakeClock) -> int:
    return sum(1 for _, _, t in clock._heap if not t.cancelled)


def test_one_acquisition_is_one_run_and_one_timer() -> None:
    clock = FakeClock()
    sp = make(clock)
    assert sp.acquire("a", 0, 999, 500) == [AcquiredRecords(0, 499, 1)]
    assert runs(sp) == [(0, 499, "ACQUIRED", 1)]
    assert timers(clock) == 1
    sp.acquire("b", 0, 999, 500)
    assert runs(sp) == [(0, 499, "ACQUIRED", 1), (500, 999, "ACQUIRED", 1)]  # another member, another lock
    assert timers(clock) == 2
    assert sp.acknowledge("a", [ack(0, 499, ACCEPT)]) == ErrorCode.NONE
    assert timers(clock) == 1  # a's lock cancelled with its last record
    assert runs(sp) == [(500, 999, "ACQUIRED", 1)] and sp.start_offset == 500


def test_partial_acknowledgement_splits_a_run_and_the_rest_keeps_its_lock() -> None:
    clock = FakeClock()
    sp = make(clock)
    sp.acquire("a", 0, 9, 10)
    assert sp.acknowledge("a", [ack(3, 5, ACCEPT, RELEASE, REJECT)]) == ErrorCode.NONE
    assert runs(sp) == [
        (0, 2, "ACQUIRED", 1), (3, 3, "ACKNOWLEDGED", 1), (4, 4, "AVAILABLE", 1),
        (5, 5, "ARCHIVED", 1), (6, 9, "ACQUIRED", 1),
    ]
    assert timers(clock) == 1
    assert sp.state_batches() == [
        StateBatch(0, 2, RecordState.ACQUIRED, 1), StateBatch(3, 3, RecordState.ACKNOWLEDGED, 1),
        StateBatch(4, 4, RecordState.AVAILABLE, 1), StateBatch(5, 5, RecordState.ARCHIVED, 1),
        StateBatch(6, 9, RecordState.ACQUIRED, 1),
    ]
    # the rest of the acquisition still expires together, at the first acquisition's deadline
    clock.advance(LOCK_MS)
    assert runs(sp) == [
        (0, 2, "AVAILABLE", 1), (3, 3, "ACKNOWLEDGED", 1), (4, 4, "AVAILABLE", 1),
        (5, 5, "ARCHIVED", 1), (6, 9, "AVAILABLE", 1),
    ]
    # a re-acquisition over the split run hands out the available pieces, one lock for all of them
    assert sp.acquire("b", 0, 9, 100) == [AcquiredRecords(0, 2, 2), AcquiredRecords(4, 4, 2), AcquiredRecords(6, 9, 2)]
    assert timers(clock) == 1
    assert sp.acknowledge("b", [ack(0, 2, ACCEPT), ack(4, 4, ACCEPT), ack(6, 9, ACCEPT)]) == ErrorCode.NONE
    assert (sp.start_offset, runs(sp), timers(clock)) == (10, [], 0)


def test_accepting_everything_joins_the_pieces_again() -> None:
    clock = FakeClock()
    sp = make(clock)
    sp.acquire("a", 0, 9, 10)
    sp.acknowledge("a", [ack(1, 1, ACCEPT), ack(3, 3, ACCEPT)])
    assert runs(sp) == [(0, 0, "ACQUIRED", 1), (1, 1, "ACKNOWLEDGED", 1), (2, 2, "ACQUIRED", 1),
                        (3, 3, "ACKNOWLEDGED", 1), (4, 9, "ACQUIRED", 1)]
    sp.acknowledge("a", [ack(2, 2, ACCEPT), ack(4, 9, ACCEPT)])
    assert runs(sp) == [(0, 0, "ACQUIRED", 1), (1, 9, "ACKNOWLEDGED", 1)]


def test_renewing_part_of_a_run_moves_only_that_part_to_a_new_lock() -> None:
    clock = FakeClock()
    sp = make(clock)
    sp.acquire("a", 0, 9, 10)
    clock.advance(20_000)
    assert sp.acknowledge("a", [ack(3, 5, RENEW)], allow_renew=True) == ErrorCode.NONE
    assert timers(clock) == 2
    clock.advance(10_000)  # the acquisition's lock: 0-2 and 6-9 go back, 3-5 stay with a
    assert [sp.record_state(o) for o in (2, 3, 5, 6)] == [
        (RecordState.AVAILABLE, 1), (RecordState.ACQUIRED, 1), (RecordState.ACQUIRED, 1), (RecordState.AVAILABLE, 1)]
    assert timers(clock) == 1
    clock.advance(20_000)  # the renewal's lock
    assert runs(sp) == [(0, 9, "AVAILABLE", 1)]
    assert timers(clock) == 0


def test_delivery_count_limit_inside_a_run() -> None:
    clock = FakeClock()
    sp = make(clock, delivery_count_limit=2)
    sp.acquire("a", 0, 9, 10)
    sp.acknowledge("a", [ack(0, 4, RELEASE)])  # 0-4 delivered once
    assert sp.acquire("b", 0, 9, 10) == [AcquiredRecords(0, 4, 2)]
    clock.advance(LOCK_MS)  # both locks: a's 5-9 (count 1) back to AVAILABLE, b's 0-4 (count 2) archived
    assert sp.start_offset == 5
    assert runs(sp) == [(5, 9, "AVAILABLE", 1)]
    assert sp.acquire("c", 0, 9, 3) == [AcquiredRecords(5, 7, 2)]
    sp.acknowledge("c", [ack(5, 7, RELEASE, ACCEPT, RELEASE)])
    assert sp.start_offset == 8  # 5 and 7 reached the limit, 6 accepted
    assert runs(sp) == [(8, 9, "AVAILABLE", 1)]


def test_a_failed_acknowledgement_splits_nothing() -> None:
    clock = FakeClock()
    sp = make(clock)
    sp.acquire("a", 0, 9, 10)
    assert sp.acknowledge("a", [ack(2, 3, ACCEPT), ack(8, 10, ACCEPT)]) == ErrorCode.INVALID_RECORD_STATE
    assert sp.acknowledge("a", [ack(2, 4, ACCEPT, 9, ACCEPT)]) == ErrorCode.INVALID_REQUEST
    assert runs(sp) == [(0, 9, "ACQUIRED", 1)]


def test_from_state_fills_the_gaps_and_joins_equal_runs() -> None:
    clock = FakeClock()
    persisted = [StateBatch(2, 4, RecordState.ACKNOWLEDGED, 1), StateBatch(6, 7, RecordState.ACQUIRED, 2),
                 StateBatch(8, 9, RecordState.AVAILABLE, 2)]
    sp = SharePartition.from_state("g", "t", 0, 0, persisted, clock)
    assert runs(sp) == [(0, 1, "AVAILABLE", 0), (2, 4, "ACKNOWLEDGED", 1), (5, 5, "AVAILABLE", 0),
                        (6, 9, "AVAILABLE", 2)]
    assert sp.acquire("a", 0, 20, 100) == [AcquiredRecords(0, 1, 1), AcquiredRecords(5, 5, 1),
                                           AcquiredRecords(6, 9, 3), AcquiredRecords(10, 20, 1)]


def test_batch_optimized_acquisition_takes_the_rest_of_the_batch() -> None:
    clock = FakeClock()
    sp = make(clock, max_in_flight_records=12)
    ends = [9, 19, 29]  # log batches 0-9, 10-19, 20-29
    # 4 records asked, the batch holding the 4th goes out whole: acquired whole (a soft limit)
    assert sp.acquire("a", 0, 29, 4, ends) == [AcquiredRecords(0, 9, 1)]
    assert timers(clock) == 1
    # the in-flight bound (12) stops new records at 11, inside batch 10-19: its end still comes along
    assert sp.acquire("b", 10, 29, 100, ends) == [AcquiredRecords(10, 19, 1)]
    assert sp.in_flight_count() == 20 and not sp.can_acquire()
    # released records inside a batch: the re-acquisition goes on to the batch's end, over what is taken
    sp.acknowledge("b", [ack(12, 17, RELEASE, ACCEPT, RELEASE, RELEASE, ACCEPT, RELEASE)])
    assert sp.acquire("c", 10, 19, 1, ends) == [AcquiredRecords(12, 12, 2), AcquiredRecords(14, 15, 2),
                                                AcquiredRecords(17, 17, 2)]
    # record_limit (no batch offsets): strict
    sp.acknowledge("a", [ack(0, 9, RELEASE)])
    assert sp.acquire("d", 0, 29, 4) == [AcquiredRecords(0, 3, 2)]
    # the fetched range ends inside a batch (the high watermark): no further than it
    assert sp.acquire("d", 0, 7, 1, ends) == [AcquiredRecords(4, 7, 2)]


def test_from_state_with_overlapping_batches_the_later_wins() -> None:
    clock = FakeClock()
    persisted = [StateBatch(0, 5, RecordState.ARCHIVED, 1), StateBatch(3, 8, RecordState.AVAILABLE, 2),
                 StateBatch(10, 11, RecordState.ACQUIRED, 1)]
    sp = SharePartition.from_state("g", "t", 0, 2, persisted, clock)
    assert sp.start_offset == 3
    assert runs(sp) == [(3, 8, "AVAILABLE", 2), (9, 9, "AVAILABLE", 0), (10, 11, "AVAILABLE", 1)]


# -- a random walk against the per-offset rules ------------------------------------------------------------


class _Model:
    """The same rules, one entry per offset and one timer deadline per offset (how the window was kept
    before it was kept as runs)."""

    def __init__(self, limit: int, max_in_flight: int) -> None:
        self.limit, self.max_in_flight = limit, max_in_flight
        self.start = self.end = 0
        self.recs: dict[int, list] = {}  # offset -> [state, count, member, deadline]

    def acquire(  # noqa: PLR0913
        self, now: int, member: str, first: int, last: int, max_records: int, ends: list[int] | None = None
    ) -> list[tuple[int, int]]:
        got: list[tuple[int, int]] = []
        self._walk(now, member, max(first, self.start), last, max_records, got, bounded=True)
        if got and ends:
            tail = got[-1][0]
            batch_end = min(min(e for e in ends if e >= tail), last) if any(e >= tail for e in ends) else tail
            self._walk(now, member, tail + 1, batch_end, batch_end - tail, got, bounded=False)
        return got

    def _walk(  # noqa: PLR0913
        self, now: int, member: str, offset: int, last: int, max_records: int, got: list, *, bounded: bool
    ) -> None:
        n = 0
        while offset <= last and n < max_records:
            rec = self.recs.get(offset)
            if rec is None:
                if offset != self.end or (bounded and self.end - self.start >= self.max_in_flight):
                    break
                rec = self.recs[offset] = [RecordState.AVAILABLE, 0, None, None]
                self.end = offset + 1
            if rec[0] == RecordState.AVAILABLE:
                rec[:] = [RecordState.ACQUIRED, rec[1] + 1, member, now + LOCK_MS]
                got.append((offset, rec[1]))
                n += 1
            offset += 1

    def _release(self, rec: list) -> None:
        rec[:] = [RecordState.ARCHIVED if rec[1] >= self.limit else RecordState.AVAILABLE, rec[1], None, None]

    def acknowledge(self, now: int, member: str, first: int, types: list[int]) -> ErrorCode:
        for i in range(len(types)):
            rec = self.recs.get(first + i)
            if rec is None or rec[0] != RecordState.ACQUIRED or rec[2] != member:
                return ErrorCode.INVALID_RECORD_STATE
        for i, t in enumerate(types):
            rec = self.recs[first + i]
            if t == ACCEPT:
                rec[:] = [RecordState.ACKNOWLEDGED, rec[1], None, None]
            elif t in (REJECT, GAP):
                rec[:] = [RecordState.ARCHIVED, rec[1], None, None]
            elif t == RENEW:
                rec[3] = now + LOCK_MS
            else:
                self._release(rec)
        self.advance()
        return ErrorCode.NONE

    def release_member(self, member: str) -> None:
        for rec in self.recs.values():
            if rec[0] == RecordState.ACQUIRED and rec[2] == member:
                self._release(rec)
        self.advance()

    def expire(self, now: int) -> None:
        for rec in self.recs.values():
            if rec[0] == RecordState.ACQUIRED and rec[3] <= now:
                self._release(rec)
        self.advance()

    def advance(self) -> None:
        while self.start < self.end and self.recs[self.start][0] in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED):
            del self.recs[self.start]
            self.start += 1


def _ranges(got: list[tuple[int, int]]) -> list[AcquiredRecords]:
    out: list[AcquiredRecords] = []
    for offset, count in got:
        if out and out[-1].last_offset == offset - 1 and out[-1].delivery_count == count:
            out[-1] = AcquiredRecords(out[-1].first_offset, offset, count)
        else:
            out.append(AcquiredRecords(offset, offset, count))
    return out


def test_random_walk_matches_the_per_offset_rules() -> None:
    for seed in range(40):
        rng = random.Random(seed)
        clock = FakeClock()
        sp = make(clock, delivery_count_limit=3, max_in_flight_records=60)
        model = _Model(3, 60)
        members = ["a", "b", "c"]
        for step in range(300):
            op = rng.random()
            now = clock.now_ms()
            where = f"seed {seed} step {step}"
            if op < 0.3:
                member = rng.choice(members)
                first = rng.randrange(max(sp.start_offset - 3, 0), sp.end_offset + 5)
                last = first + rng.randrange(0, 40)
                n = rng.randrange(1, 30)
                bound = sp.acquirable_through(first, n)
                if rng.random() < 0.5:  # batch-optimized: log batches of 1 to 8 records from offset 0
                    ends, e = [], -1
                    while e < last + 10:
                        e += rng.randrange(1, 9)
                        ends.append(e)
                    got = sp.acquire(member, first, last, n, ends)
                    assert got == _ranges(model.acquire(now, member, first, last, n, ends)), where
                    # the fetch read the batches up to the one holding the bound: nothing past that batch
                    assert not got or got[-1].last_offset <= next((x for x in ends if x >= bound), ends[-1]), where
                else:
                    got = sp.acquire(member, first, last, n)
                    assert got == _ranges(model.acquire(now, member, first, last, n)), where
                    # a fetch reads the log only up to the bound: nothing acquired lies past it
                    assert not got or got[-1].last_offset <= bound, where
            elif op < 0.75:
                member = rng.choice(members)
                held = [o for o, r in model.recs.items() if r[0] == RecordState.ACQUIRED and r[2] == member]
                if not held or rng.random() < 0.1:
                    first, last = rng.randrange(0, sp.end_offset + 3), 0
                    last = first + rng.randrange(0, 4)
                else:
                    first = rng.choice(held)
                    last = first + rng.randrange(0, 8)
                per_offset = rng.random() < 0.5
                kinds = [ACCEPT, ACCEPT, RELEASE, REJECT, GAP, RENEW]
                types = [rng.choice(kinds) for _ in range(last - first + 1)] if per_offset else [rng.choice(kinds)]
                expected = model.acknowledge(now, member, first, types if per_offset else types * (last - first + 1))
                got = sp.acknowledge(member, [AcknowledgementBatch(first, last, tuple(types))], allow_renew=True)
                assert got == expected, where
            elif op < 0.8:
                member = rng.choice(members)
                model.release_member(member)
                sp.release_acquired_records(member)
            else:
                ms = rng.choice([1_000, 5_000, 15_000, 30_000])
                # the model expires what is due at each timer deadline in order, as the clock runs them
                deadlines = sorted({r[3] for r in model.recs.values() if r[3] is not None and r[3] <= now + ms})
                for d in deadlines:
                    model.expire(d)
                clock.advance(ms)
            assert (sp.start_offset, sp.end_offset) == (model.start, model.end), where
            for offset in range(model.start, model.end):
                rec = model.recs[offset]
                assert sp.record_state(offset) == (rec[0], rec[1]), f"{where} offset {offset}"
            # neighbours are never alike (the runs stay as few as the states allow)
            assert all(not x.same_as(y) for x, y in zip(sp._batches, sp._batches[1:], strict=False)), where
            assert sp.lag(model.end) == sum(
                1 for r in model.recs.values() if r[0] not in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED))
        # every timer left is one the window still needs
        live = {id(r.lock) for r in sp._batches if r.lock is not None and r.state == RecordState.ACQUIRED}
        assert timers(clock) == len(live), f"seed {seed}"
