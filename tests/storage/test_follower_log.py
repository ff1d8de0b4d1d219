"""The follower's side of the log: append_as_follower (the leader's offsets and epochs kept, CRCs
checked), truncate_to and truncate_fully_and_start_at (segments, indexes, producer state, the
transaction index and the leader-epoch cache cut together, and still so after a reopen)."""

from __future__ import annotations

import pytest
from conftest import make_request

from pybroker.records import SimpleRecord, build_batch
from pybroker.records.control import build_marker_batch
from pybroker.records.errors import CorruptRecordError
from pybroker.storage import Log, LogConfig
from pybroker.storage.errors import UnexpectedAppendOffsetError
from pybroker.storage.log import follower_batches

NOW = 10_000


def leader_batch(base_offset: int, count: int, epoch: int, **kwargs) -> bytes:
    """A batch as a leader stored it: offsets and partition leader epoch assigned."""
    records = [SimpleRecord(b"k", b"v%d" % i, (), 1000 + i) for i in range(count)]
    return build_batch(records, base_offset=base_offset, partition_leader_epoch=epoch, **kwargs)


def marker(base_offset: int, producer_id: int, epoch: int, commit: bool) -> bytes:
    buf = bytearray(build_marker_batch(producer_id, 0, commit, 0, 1000))
    buf[0:8] = base_offset.to_bytes(8, "big")
    buf[12:16] = epoch.to_bytes(4, "big")  # partitionLeaderEpoch is outside the CRC
    return bytes(buf)


def reopen(log: Log) -> Log:
    log.close()
    return Log.open(log.directory, log.topic, log.partition, log.config, NOW, clean_shutdown=True)


def test_append_as_follower_keeps_offsets_and_epochs(log_dir):
    log = Log.create(log_dir, "t", 0, LogConfig(), 0)
    data = leader_batch(0, 3, 0) + leader_batch(3, 2, 0) + leader_batch(5, 4, 2)
    info = log.append_as_follower(data, now_ms=NOW)
    assert (info.first_offset, info.last_offset) == (0, 8)
    assert log.log_end_offset == 9
    assert log.leader_epochs.entries == [(0, 0), (2, 5)]
    assert log.read(0, 1 << 20).read() == data  # byte for byte
    assert log.end_offset_for_epoch(0) == (0, 5)
    assert log.end_offset_for_epoch(1) == (0, 5)
    assert log.end_offset_for_epoch(2) == (2, 9)
    assert log.end_offset_for_epoch(3) == (-1, -1)
    log = reopen(log)
    assert log.leader_epochs.entries == [(0, 0), (2, 5)] and log.log_end_offset == 9


def test_append_as_follower_refuses_bad_crc_and_offsets_and_waits_for_a_whole_batch(log_dir):
    log = Log.create(log_dir, "t", 0, LogConfig(), 0)
    good = leader_batch(0, 3, 0)
    corrupt = bytearray(good)
    corrupt[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        log.append_as_follower(bytes(corrupt), now_ms=NOW)
    assert log.log_end_offset == 0
    # A fetch cut inside its last batch: the whole batches are appended, the partial one waits.
    second = leader_batch(3, 2, 0)
    info = log.append_as_follower(good + second[:30], now_ms=NOW)
    assert info.last_offset == 2 and log.log_end_offset == 3
    assert log.append_as_follower(second[:30], now_ms=NOW) is None
    with pytest.raises(UnexpectedAppendOffsetError) as e:
        log.append_as_follower(leader_batch(1, 2, 0), now_ms=NOW)  # overlaps what is there
    assert (e.value.first_offset, e.value.last_offset) == (1, 2)
    assert log.log_end_offset == 3
    assert follower_batches(second)[0].base_offset == 3


def test_follower_producer_state_and_transactions(log_dir):
    log = Log.create(log_dir, "t", 0, LogConfig(), 0)
    data = (
        leader_batch(0, 2, 0, producer_id=7, producer_epoch=0, base_sequence=0)
        + leader_batch(2, 2, 0, producer_id=9, producer_epoch=0, base_sequence=0, is_transactional=True)
        + marker(4, 9, 0, commit=False)
    )
    log.append_as_follower(data, now_ms=NOW)
    assert log.producer_state.producers[7].last_sequence == 1
    assert log.first_unstable_offset() is None
    aborted = log.collect_aborted_transactions(0, 5)
    assert [(a.producer_id, a.first_offset) for a in aborted] == [(9, 2)]
    # Were this replica to lead, producer 7's retry of its batch would be found a duplicate.
    retry = follower_batches(leader_batch(0, 2, 0, producer_id=7, producer_epoch=0, base_sequence=0))
    plan = log.producer_state.prepare_append(retry, 5)
    assert plan.duplicate is not None and plan.duplicate.first_offset == 0


def test_truncate_to_cuts_everything_consistently_and_survives_reopen(log_dir):
    config = LogConfig(segment_bytes=300)
    log = Log.create(log_dir, "t", 0, config, 0)
    for base, epoch in ((0, 0), (3, 0), (6, 1), (9, 1), (12, 3)):
        log.append_as_follower(
            leader_batch(base, 3, epoch, producer_id=5, producer_epoch=0, base_sequence=base), now_ms=NOW
        )
    log.append_as_follower(
        leader_batch(15, 2, 3, producer_id=6, producer_epoch=0, base_sequence=0, is_transactional=True),
        now_ms=NOW,
    )
    log.append_as_follower(marker(17, 6, 3, commit=False), now_ms=NOW)
    assert len(log.segments) > 2
    assert log.leader_epochs.entries == [(0, 0), (1, 6), (3, 12)]
    assert log.collect_aborted_transactions(0, 18)
    assert log.truncate_to(8, NOW)  # inside the batch 6-8: the whole batch goes
    assert log.log_end_offset == 6
    assert log.leader_epochs.entries == [(0, 0)]
    assert log.producer_state.producers[5].last_sequence == 5
    assert 6 not in log.producer_state.producers
    assert log.collect_aborted_transactions(0, 18) == []
    assert not log.truncate_to(6, NOW)  # nothing past the end
    log.append_as_follower(
        leader_batch(6, 1, 4, producer_id=5, producer_epoch=0, base_sequence=6), now_ms=NOW
    )
    log = reopen(log)
    assert log.log_end_offset == 7
    assert log.leader_epochs.entries == [(0, 0), (4, 6)]
    assert log.producer_state.producers[5].last_sequence == 6
    assert [h.base_offset for h in log.iter_headers(0)] == [0, 3, 6]


def test_truncate_below_the_log_start_and_truncate_fully(log_dir):
    log = Log.create(log_dir, "t", 0, LogConfig(segment_bytes=300), 0)
    for base in range(0, 15, 3):
        log.append_as_follower(leader_batch(base, 3, 0), now_ms=NOW)
    log.delete_records_before(9)
    log.apply_retention(NOW)
    log.truncate_to(4, NOW)  # below the first segment kept: the log restarts there
    assert (log.log_start_offset, log.log_end_offset) == (4, 4)
    assert log.leader_epochs.entries == []
    log.truncate_fully_and_start_at(20, NOW)
    assert (log.log_start_offset, log.log_end_offset, len(log.segments)) == (20, 20, 1)
    log.append_as_follower(leader_batch(20, 2, 5), now_ms=NOW)
    log = reopen(log)
    assert (log.log_start_offset, log.log_end_offset) == (20, 22)
    assert log.leader_epochs.entries == [(5, 20)]


def test_a_crash_between_the_segment_cut_and_the_epoch_checkpoint_is_repaired_on_open(log_dir):
    """truncate_to cuts the segments before it rewrites the epoch checkpoint: a crash in between
    leaves epochs past the log end, which opening the log removes."""
    log = Log.create(log_dir, "t", 0, LogConfig(), 0)
    log.append_as_follower(leader_batch(0, 3, 0) + leader_batch(3, 3, 2), now_ms=NOW)
    checkpoint = (log.directory / "leader-epoch-checkpoint").read_bytes()
    log.truncate_to(3, NOW)
    (log.directory / "leader-epoch-checkpoint").write_bytes(checkpoint)  # as if the rewrite was lost
    log = Log.open(log.directory, "t", 0, log.config, NOW)
    assert log.log_end_offset == 3
    assert log.leader_epochs.entries == [(0, 0)]


def test_leader_and_follower_logs_agree_on_an_appended_request(log_dir, tmp_path):
    """What a leader's append stores, a follower stores unchanged."""
    from pybroker.records import validate_produce_batches

    leader = Log.create(tmp_path / "leader-0", "t", 0, LogConfig(), 0)
    buf = make_request(4)
    leader.append(buf, validate_produce_batches(buf), leader_epoch=7, now_ms=NOW)
    data = leader.read(0, 1 << 20).read()
    follower = Log.create(log_dir, "t", 0, LogConfig(), 0)
    follower.append_as_follower(data, now_ms=NOW)
    assert follower.read(0, 1 << 20).read() == data
    assert follower.leader_epochs.entries == leader.leader_epochs.entries == [(7, 0)]
