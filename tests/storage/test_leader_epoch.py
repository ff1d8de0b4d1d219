"""Leader-epoch cache: Kafka's endOffsetFor semantics, the checkpoint file, and following the log."""

from __future__ import annotations

from conftest import append, make_request

from pybroker.storage import Log, LogConfig
from pybroker.storage.leader_epoch import FILE_NAME, LeaderEpochCache


def test_end_offset_for_follows_kafka(tmp_path):
    cache = LeaderEpochCache(tmp_path, [(0, 0), (2, 10), (5, 30)])
    leo = 42
    assert cache.end_offset_for(5, leo) == (5, 42)  # latest epoch: the log end
    assert cache.end_offset_for(2, leo) == (2, 30)  # ends where the next epoch starts
    assert cache.end_offset_for(3, leo) == (2, 30)  # unknown middle epoch: the largest epoch below it
    assert cache.end_offset_for(0, leo) == (0, 10)
    assert cache.end_offset_for(6, leo) == (-1, -1)  # newer than anything seen
    assert cache.end_offset_for(-1, leo) == (-1, -1)
    assert LeaderEpochCache(tmp_path).end_offset_for(0, leo) == (-1, -1)


def test_truncation_at_both_ends_and_checkpoint_round_trip(tmp_path):
    cache = LeaderEpochCache(tmp_path, [(0, 0), (2, 10), (5, 30)])
    cache.truncate_from_end(30)
    assert cache.entries == [(0, 0), (2, 10)]
    cache.truncate_from_start(12)
    assert cache.entries == [(2, 12)]
    cache.assign(7, 40)
    cache.assign(6, 50)  # older than the latest: ignored
    assert LeaderEpochCache.load(tmp_path).entries == [(2, 12), (7, 40)]
    assert (tmp_path / FILE_NAME).read_text() == "0\n2\n2 12\n7 40\n"


def test_log_records_epochs_and_survives_reopen(log_dir):
    cfg = LogConfig()
    log = Log.create(log_dir, "topic", 0, cfg, 0)
    append(log, make_request(3), leader_epoch=0)
    append(log, make_request(2), leader_epoch=3)
    append(log, make_request(4), leader_epoch=3)
    assert log.leader_epochs.entries == [(0, 0), (3, 3)]
    assert log.leader_epochs.end_offset_for(0, log.log_end_offset) == (0, 3)
    log.close()
    reopened = Log.open(log_dir, "topic", 0, cfg, 0)
    assert reopened.leader_epochs.entries == [(0, 0), (3, 3)]
    assert reopened.leader_epochs.end_offset_for(3, reopened.log_end_offset) == (3, 9)


def test_missing_checkpoint_is_rebuilt_from_batch_headers(log_dir):
    cfg = LogConfig()
    log = Log.create(log_dir, "topic", 0, cfg, 0)
    append(log, make_request(2), leader_epoch=1)
    append(log, make_request(2), leader_epoch=4)
    log.close()
    (log_dir / FILE_NAME).unlink()
    reopened = Log.open(log_dir, "topic", 0, cfg, 0)
    assert reopened.leader_epochs.entries == [(1, 0), (4, 2)]


def test_delete_records_moves_the_first_epoch_start(log_dir):
    log = Log.create(log_dir, "topic", 0, LogConfig(), 0)
    append(log, make_request(5), leader_epoch=0)
    append(log, make_request(5), leader_epoch=2)
    log.delete_records_before(7)
    assert log.leader_epochs.entries == [(2, 7)]
