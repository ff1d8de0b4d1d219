"""Durable share state: snapshots written to a log, replayed into a fresh coordinator and SharePartition."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

from pybroker.coordinator.clock import FakeClock
from pybroker.coordinator.share.share_coordinator import ShareCoordinator
from pybroker.coordinator.share.share_partition import AcknowledgementBatch, RecordState, SharePartition
from pybroker.coordinator.share.state_records import SharePartitionKey, ShareSnapshot


class ListLog:
    """An in-memory stand-in for the internal topic: an append-only list of (key, value)."""

    def __init__(self) -> None:
        self.records: list[tuple[str, bytes, bytes | None]] = []

    def ensure_topic(self) -> None:
        pass

    def append(self, key: str, entries: list[tuple[bytes, bytes | None]]) -> None:
        self.records.extend((key, k, v) for k, v in entries)

    def replay(self) -> Iterator[tuple[bytes, bytes | None]]:
        for _, k, v in self.records:
            yield k, v


def snapshot_of(sp: SharePartition) -> ShareSnapshot:
    return ShareSnapshot(0, sp.state_epoch, 0, sp.start_offset, tuple(sp.state_batches()))


def test_acknowledged_state_survives_a_restart() -> None:
    topic_id = uuid.uuid4()
    key = SharePartitionKey("g", topic_id, 0)
    log = ListLog()
    coord = ShareCoordinator(log)
    coord.load()
    clock = FakeClock()
    sp = SharePartition("g", "t", 0, 0, clock, on_state_change=lambda p: coord.write_state(key, snapshot_of(p)))
    sp.acquire("a", 0, 9, 10)
    sp.acknowledge("a", [AcknowledgementBatch(0, 3, (1,)), AcknowledgementBatch(5, 5, (3,))])
    sp.acknowledge("a", [AcknowledgementBatch(6, 6, (2,))])
    assert len(log.records) == 2
    assert coord.read_state(key).snapshot_epoch == 1  # type: ignore[union-attr]

    # "restart": a new coordinator over the same log, a new SharePartition from its state
    again = ShareCoordinator(log)
    assert again.load() == 1
    snap = again.read_state(key)
    assert snap is not None and snap.start_offset == 4
    sp2 = SharePartition.from_state("g", "t", 0, snap.start_offset, snap.state_batches, FakeClock())
    assert sp2.record_state(4) == (RecordState.AVAILABLE, 1)  # was acquired: its lock died
    assert sp2.record_state(5) == (RecordState.ARCHIVED, 1)  # rejected: never again
    assert sp2.record_state(6) == (RecordState.AVAILABLE, 1)  # released
    assert sp2.end_offset == 10


def test_tombstone_deletes_and_other_record_types_are_skipped() -> None:
    log = ListLog()
    coord = ShareCoordinator(log)
    key = SharePartitionKey("g", uuid.uuid4(), 1)
    coord.write_state(key, ShareSnapshot(0, 0, 0, 5, ()))
    log.records.append(("x", b"\x00\x01garbage", b"\x00\x00"))  # a ShareUpdate (type 1): skipped
    coord.delete_state(key)
    again = ShareCoordinator(log)
    assert again.load() == 0
    assert again.read_state(key) is None
