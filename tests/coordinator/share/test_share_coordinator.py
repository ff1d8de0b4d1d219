"""Durable share state: the share coordinator's operations, its records replayed into a fresh coordinator,
and a SharePartition rebuilt from them; Kafka's batch combiner."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

from pybroker.coordinator.clock import FakeClock
from pybroker.coordinator.share.batch_combiner import combine
from pybroker.coordinator.share.share_coordinator import ShareCoordinator
from pybroker.coordinator.share.share_partition import (
    AcknowledgementBatch,
    RecordState,
    SharePartition,
    StateBatch,
)
from pybroker.coordinator.share.state_records import (
    SHARE_SNAPSHOT_RECORD_TYPE,
    SHARE_UPDATE_RECORD_TYPE,
    SharePartitionKey,
    decode_record_type,
)
from pybroker.protocol.errors import ErrorCode

A, ACK, ARC = RecordState.AVAILABLE, RecordState.ACKNOWLEDGED, RecordState.ARCHIVED


class ListLog:
    """An in-memory stand-in for the internal topic: one partition, led here; a record's offset is its index."""

    def __init__(self) -> None:
        self.records: list[tuple[str, bytes, bytes | None]] = []
        self.created = True
        self.log_start = 0
        self.last_append = (-1, -1)

    def exists(self) -> bool:
        return self.created

    def ensure_topic(self) -> None:
        self.created = True

    def leads(self, key: str) -> bool:
        return True

    def partition_for(self, key: str) -> int:
        return 0

    def append(self, key: str, entries: list[tuple[bytes, bytes | None]]) -> None:
        self.records.extend((key, k, v) for k, v in entries)
        self.last_append = (0, len(self.records) - 1)

    def replay(
        self, partitions: object = None, at: Callable[[int, int], None] | None = None
    ) -> Iterator[tuple[bytes, bytes | None]]:
        for offset in range(self.log_start, len(self.records)):
            _, k, v = self.records[offset]
            if at is not None:
                at(0, offset)
            yield k, v

    def delete_records_before(self, index: int, offset: int) -> None:
        self.log_start = max(self.log_start, min(offset, len(self.records)))


def coordinator(log: ListLog, updates_per_snapshot: int = 500) -> ShareCoordinator:
    return ShareCoordinator(log, lambda _topic_id: 4, updates_per_snapshot=updates_per_snapshot, now_ms=lambda: 7)


def test_acknowledged_state_survives_a_restart() -> None:
    key = SharePartitionKey("g", uuid.uuid4(), 0)
    log = ListLog()
    coord = coordinator(log)
    assert coord.initialize_state(key, 0, 0)[0]["error_code"] == ErrorCode.NONE
    clock = FakeClock()

    def persist(p: SharePartition) -> None:
        coord.write_state(key, p.state_epoch, 0, p.start_offset, p.state_batches())

    sp = SharePartition("g", "t", 0, 0, clock, on_state_change=persist)
    sp.acquire("a", 0, 9, 10)
    sp.acknowledge("a", [AcknowledgementBatch(0, 3, (1,)), AcknowledgementBatch(5, 5, (3,))])
    sp.acknowledge("a", [AcknowledgementBatch(6, 6, (2,))])
    types = [decode_record_type(k) for _, k, _ in log.records]
    assert types == [SHARE_SNAPSHOT_RECORD_TYPE, SHARE_UPDATE_RECORD_TYPE, SHARE_UPDATE_RECORD_TYPE]

    # "restart": a new coordinator over the same log, a new SharePartition from its state
    again = coordinator(log)
    snap = again.read_state(key)
    assert snap is not None and snap.start_offset == 4
    sp2 = SharePartition.from_state("g", "t", 0, snap.start_offset, snap.state_batches, FakeClock())
    assert sp2.record_state(4) == (RecordState.AVAILABLE, 1)  # was acquired: its lock died
    assert sp2.record_state(5) == (RecordState.ARCHIVED, 1)  # rejected: never again
    assert sp2.record_state(6) == (RecordState.AVAILABLE, 1)  # released
    assert sp2.end_offset == 10


def test_a_snapshot_after_the_configured_number_of_updates() -> None:
    key = SharePartitionKey("g", uuid.uuid4(), 1)
    log = ListLog()
    coord = coordinator(log, updates_per_snapshot=2)
    coord.initialize_state(key, 0, 0)
    for i in range(4):
        assert coord.write_state(key, 0, 0, i, [StateBatch(i, i, ACK, 1)])[0]["error_code"] == ErrorCode.NONE
    types = [decode_record_type(k) for _, k, _ in log.records]
    assert types == [0, 1, 1, 0, 1]  # the third write is a snapshot of the merged state
    assert coordinator(log).read_state(key) == coord.read_state(key)
    assert coord.read_state(key).snapshot_epoch == 1  # type: ignore[union-attr]


def test_tombstone_deletes_and_unknown_record_types_are_skipped() -> None:
    log = ListLog()
    coord = coordinator(log)
    key = SharePartitionKey("g", uuid.uuid4(), 1)
    coord.initialize_state(key, 0, 5)
    log.records.append(("x", b"\x00\x05garbage", b"\x00\x00"))  # a record type no share coordinator writes
    coord.delete_state(key)
    again = coordinator(log)
    assert again.read_state(key) is None
    assert again.read_state_summary(key)["start_offset"] == -1


def test_epochs_fence_and_minus_one_skips_the_check() -> None:
    coord = coordinator(ListLog())
    key = SharePartitionKey("g", uuid.uuid4(), 0)
    coord.initialize_state(key, 2, 0)
    coord.read_state_and_maybe_update_leader_epoch(key, 5)
    assert coord.write_state(key, 2, 4, 0, [])[0]["error_code"] == ErrorCode.FENCED_LEADER_EPOCH
    assert coord.write_state(key, 1, 5, 0, [])[0]["error_code"] == ErrorCode.FENCED_STATE_EPOCH
    assert coord.initialize_state(key, 1, 0)[0]["error_code"] == ErrorCode.FENCED_STATE_EPOCH
    assert coord.write_state(key, -1, -1, 0, [])[0]["error_code"] == ErrorCode.NONE
    assert coord.read_state_and_maybe_update_leader_epoch(key, 4)[0]["error_code"] == ErrorCode.FENCED_LEADER_EPOCH
    other_topic = SharePartitionKey("g", key.topic_id, 9)  # the topic has 4 partitions
    assert coord.initialize_state(other_topic, 0, 0)[0]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_combine_prunes_below_the_start_offset_and_the_higher_count_or_state_wins() -> None:
    so_far = [StateBatch(0, 9, A, 1)]
    # cut at the start offset; 4-5 acknowledged at the same count (state 2 > 0) wins; 7 archived at count 3
    got = combine(so_far, [StateBatch(4, 5, ACK, 1), StateBatch(7, 7, ARC, 3)], 2)
    assert got == (
        StateBatch(2, 3, A, 1), StateBatch(4, 5, ACK, 1), StateBatch(6, 6, A, 1), StateBatch(7, 7, ARC, 3),
        StateBatch(8, 9, A, 1),
    )  # fmt: skip
    # an older, lower-priority batch never overwrites: the acknowledged range stays
    assert combine([StateBatch(0, 4, ACK, 2)], [StateBatch(2, 6, A, 1)], -1) == (
        StateBatch(0, 4, ACK, 2), StateBatch(5, 6, A, 1)
    )  # fmt: skip
    # adjacent equal batches join, gaps stay
    assert combine([StateBatch(0, 1, A, 1)], [StateBatch(2, 3, A, 1), StateBatch(6, 6, A, 1)], 0) == (
        StateBatch(0, 3, A, 1), StateBatch(6, 6, A, 1)
    )  # fmt: skip
    assert combine([StateBatch(0, 1, A, 1)], [], 5) == ()


def test_an_elected_coordinator_reloads_what_it_missed_as_a_follower() -> None:
    key = SharePartitionKey("g", uuid.uuid4(), 0)
    log = ListLog()
    follower = coordinator(log)
    assert follower.maybe_load()  # loaded while the state partition had nothing
    leader = coordinator(log)
    leader.initialize_state(key, 1, 42)
    assert follower.read_state(key) is None  # a follower's memory is not kept up to date
    follower.on_election(0)
    assert follower.read_state(key) == leader.read_state(key)
    follower.on_resignation(0)
    assert follower.read_state(key) is None


def test_records_before_every_live_snapshot_are_deleted_and_the_state_replays_the_same() -> None:
    a, b = SharePartitionKey("g", uuid.uuid4(), 0), SharePartitionKey("g", uuid.uuid4(), 0)
    log = ListLog()
    coord = coordinator(log, updates_per_snapshot=2)
    coord.initialize_state(a, 0, 0)  # offset 0
    coord.initialize_state(b, 0, 0)  # offset 1
    for i in range(3):  # a: updates at 2, 3, then a snapshot at 4 (b's snapshot at 1 still holds the log)
        coord.write_state(a, 0, 0, 0, [StateBatch(i, i, ACK, 1)])
    coord.prune()
    assert log.log_start == 1
    coord.write_state(b, 0, 0, 0, [StateBatch(0, 0, ARC, 2)])  # offset 5
    coord.initialize_state(b, 1, 10)  # offset 6: b's new snapshot; a's (4) is now the oldest
    assert log.log_start == 1  # only the pruning job deletes
    coord.prune()
    assert log.log_start == 4
    again = coordinator(log)
    assert (again.read_state(a), again.read_state(b)) == (coord.read_state(a), coord.read_state(b))
    coord.delete_state(a)  # offset 7: b's snapshot at 6 is the only one left
    coord.prune()
    assert log.log_start == 6
    coord.delete_state(b)  # offset 8: nothing is live: all but the tombstone goes
    coord.prune()
    assert log.log_start == 8 and coordinator(log).read_state(b) is None

