"""__share_group_state written by an earlier pybroker (its own ShareSnapshotValue layout: a uint16 snapshot
epoch, no create/write timestamps, no DeliveryCompleteCount) is read after an upgrade, not skipped."""

from __future__ import annotations

import uuid

import pytest

from pybroker.coordinator.share.share_partition import RecordState, StateBatch
from pybroker.coordinator.share.state_records import (
    SHARE_SNAPSHOT_RECORD_TYPE,
    SharePartitionKey,
    ShareSnapshot,
    decode_key,
    decode_record_type,
    decode_snapshot_value,
    decode_value,
    snapshot_key,
    snapshot_value,
)
from pybroker.protocol.errors import ErrorCode
from tests.coordinator.share.test_share_coordinator import ListLog, coordinator

# What the earlier encoder (state_records.py at f1c67ea: snapshot_key / snapshot_value) wrote for the share
# partition ("legacy-group", 6f1c3e1a-2b4d-4c8e-9a10-112233445566, 2) with snapshot epoch 3, state epoch 1,
# leader epoch 4, start offset 10 and the batches 10-11 ACKNOWLEDGED (1 delivery), 12 AVAILABLE (2),
# 13-14 ARCHIVED (3).
LEGACY_KEY = bytes.fromhex("0000000c6c65676163792d67726f75706f1c3e1a2b4d4c8e9a1011223344556600000002")
LEGACY_VALUE = bytes.fromhex(
    "0000"  # value version 0
    "0003"  # snapshot epoch, uint16
    "00000001" "00000004" "000000000000000a"  # state epoch, leader epoch, start offset
    "04"  # compact array: 3 batches
    # each batch: first offset, last offset, delivery state, delivery count, its tagged fields
    "000000000000000a" "000000000000000b" "02" "0001" "00"
    "000000000000000c" "000000000000000c" "00" "0002" "00"
    "000000000000000d" "000000000000000e" "04" "0003" "00"
    "00"  # value tagged fields
)  # fmt: skip
KEY = SharePartitionKey("legacy-group", uuid.UUID("6f1c3e1a-2b4d-4c8e-9a10-112233445566"), 2)
BATCHES = (
    StateBatch(10, 11, RecordState.ACKNOWLEDGED, 1),
    StateBatch(12, 12, RecordState.AVAILABLE, 2),
    StateBatch(13, 14, RecordState.ARCHIVED, 3),
)


def test_the_legacy_value_decodes_as_a_fallback() -> None:
    assert decode_record_type(LEGACY_KEY) == SHARE_SNAPSHOT_RECORD_TYPE
    assert decode_key(LEGACY_KEY) == KEY
    with pytest.raises(ValueError):
        decode_value(LEGACY_VALUE)  # not Kafka 4.3.1's layout
    snap, legacy = decode_snapshot_value(LEGACY_VALUE)
    assert legacy
    assert (snap.snapshot_epoch, snap.state_epoch, snap.leader_epoch, snap.start_offset) == (3, 1, 4, 10)
    assert snap.state_batches == BATCHES
    assert (snap.delivery_complete_count, snap.create_timestamp, snap.write_timestamp) == (-1, 0, 0)


def test_todays_layout_is_not_read_as_the_legacy_one() -> None:
    snap = ShareSnapshot(70000, 1, 4, 10, BATCHES, delivery_complete_count=2, create_timestamp=5, write_timestamp=6)
    assert decode_snapshot_value(snapshot_value(snap)) == (snap, False)
    with pytest.raises(ValueError):
        decode_snapshot_value(LEGACY_VALUE[:-3])


def test_an_upgraded_coordinator_keeps_the_legacy_state_and_next_writes_a_whole_snapshot() -> None:
    log = ListLog()
    log.records.append((KEY.coordinator_key, LEGACY_KEY, LEGACY_VALUE))
    coord = coordinator(log)
    snap = coord.read_state(KEY)
    assert snap is not None and (snap.start_offset, snap.state_batches) == (10, BATCHES)
    read, _ = coord.read_state_and_maybe_update_leader_epoch(KEY, 4)
    assert (read["error_code"], read["state_epoch"], read["start_offset"]) == (ErrorCode.NONE, 1, 10)
    # offset 12 acknowledged: the leader's start offset moves past it
    assert coord.write_state(KEY, 1, 4, 13, [StateBatch(13, 14, RecordState.ARCHIVED, 3)])[0]["error_code"] == 0
    # the write after the upgrade is a whole ShareSnapshot in today's layout, so the old record is not needed
    _, k, v = log.records[-1]
    assert decode_record_type(k) == SHARE_SNAPSHOT_RECORD_TYPE and v is not None
    written = decode_value(v)
    assert (written.start_offset, written.state_batches) == (13, (StateBatch(13, 14, RecordState.ARCHIVED, 3),))
    # a restart replays both: the newer record wins, whichever order the partitions are replayed in
    assert coordinator(log).read_state(KEY) == written
    log.records.reverse()
    assert coordinator(log).read_state(KEY) == written


def test_a_legacy_record_does_not_bring_back_a_deleted_state() -> None:
    log = ListLog()
    log.records.append((KEY.coordinator_key, snapshot_key(KEY), None))  # DeleteShareGroupState, today
    log.records.append((KEY.coordinator_key, LEGACY_KEY, LEGACY_VALUE))  # replayed later (another partition)
    assert coordinator(log).read_state(KEY) is None
