import os

import pytest
from conftest import append, make_request

from pybroker.records import iter_batch_headers, read_records
from pybroker.storage import (
    InvalidProducerEpochError,
    Log,
    LogConfig,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    RecordTooLargeError,
)
from pybroker.storage.errors import InvalidTxnStateError


def fill(log, batches=30, per_batch=3, ts=1000):
    for i in range(batches):
        append(log, make_request(per_batch, ts=ts + i * 10))


def test_append_assigns_offsets_and_reads_back_across_rolls(log_dir, small_config):
    log = Log.create(log_dir, "topic", 0, small_config, 0)
    infos = [append(log, make_request(3, ts=1000 + i), leader_epoch=7) for i in range(30)]
    assert [(i.first_offset, i.last_offset) for i in infos[:2]] == [(0, 2), (3, 5)]
    assert log.log_end_offset == 90
    assert len(log.segments) > 3
    assert sorted(os.listdir(log_dir))[:3] == [
        "00000000000000000000.index",
        "00000000000000000000.log",
        "00000000000000000000.timeindex",
    ]
    offsets = []
    position = 0
    while position < 90:
        data = log.read(position, 10_000).read()
        headers = list(iter_batch_headers(data, verify_crc=True))
        assert all(h.partition_leader_epoch == 7 for h in headers)
        offsets += [r.offset for r in read_records(data)]
        position = headers[-1].next_offset
    assert offsets == list(range(90))


def test_read_mid_batch_returns_whole_batch_and_bounds(log_dir, small_config):
    log = Log.create(log_dir, "topic", 0, small_config, 0)
    fill(log)
    (header,) = iter_batch_headers(log.read(40, 1, min_one_batch=True).read())
    assert (header.base_offset, header.last_offset) == (39, 41)
    # Without min_one_batch Kafka returns max_bytes of the batch (the client drops the partial tail).
    assert log.read(40, 1, min_one_batch=False).size == 1
    # max_offset: only batches starting below it
    data = log.read(30, 10_000, max_offset=36).read()
    assert [h.base_offset for h in iter_batch_headers(data)] == [30, 33]
    data = log.read(30, 10_000, max_offset=35).read()
    assert [h.base_offset for h in iter_batch_headers(data)] == [30, 33]
    assert log.read(36, 10_000, max_offset=36) is None
    assert log.read(90, 10_000) is None
    with pytest.raises(OffsetOutOfRangeError):
        log.read(91, 100)


def test_sparse_index_used_for_lookup(log_dir):
    config = LogConfig(index_interval_bytes=300)
    log = Log.create(log_dir, "topic", 0, config, 0)
    fill(log, batches=50)
    index = log.active_segment.offset_index
    assert 5 < len(index) < 50
    offset, position = index.lookup(100)
    assert offset <= 100 and position > 0
    assert list(iter_batch_headers(log.read(100, 1).read()))[0].base_offset == 99


def test_roll_by_time_uses_record_timestamps(log_dir):
    log = Log.create(log_dir, "topic", 0, LogConfig(segment_ms=1000), 0)
    append(log, make_request(1, ts=5000))
    append(log, make_request(1, ts=5900))
    assert len(log.segments) == 1
    append(log, make_request(1, ts=6100))
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_offset_for_timestamp_exact_record_and_max_timestamp(log_dir, small_config):
    log = Log.create(log_dir, "topic", 0, small_config, 0)
    fill(log, batches=30, per_batch=3, ts=1000)  # batch i: ts 1000+10i .. +2
    assert log.offset_for_timestamp(1101) == (31, 1101)
    assert log.offset_for_timestamp(1103) == (33, 1110)
    assert log.offset_for_timestamp(0) == (0, 1000)
    assert log.offset_for_timestamp(99999) is None
    assert log.offset_of_max_timestamp() == (89, 1292)


def test_log_append_time(log_dir):
    log = Log.create(log_dir, "topic", 0, LogConfig(message_timestamp_type="LogAppendTime"), 0)
    info = append(log, make_request(2, ts=5), now_ms=777_000)
    assert info.log_append_time_ms == 777_000
    records = read_records(log.read(0, 1000).read())
    assert [r.timestamp for r in records] == [777_000, 777_000]


def test_record_too_large(log_dir):
    log = Log.create(log_dir, "topic", 0, LogConfig(max_message_bytes=200), 0)
    with pytest.raises(RecordTooLargeError):
        append(log, make_request(5, value_size=100))
    assert log.log_end_offset == 0


def test_retention_by_time_and_size_keeps_active(log_dir, small_config):
    log = Log.create(log_dir, "topic", 0, small_config, 0)
    fill(log)
    segments = len(log.segments)
    assert log.apply_retention(now_ms=10_000) == 0
    cfg = LogConfig(segment_bytes=600, index_interval_bytes=100, retention_bytes=2500)
    log.update_config(cfg)
    deleted = log.apply_retention(now_ms=10_000)
    assert deleted > 0 and log.size_bytes <= 2500 + 600
    assert log.log_start_offset == log.segments[0].base_offset > 0
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100)
    log.update_config(LogConfig(segment_bytes=600, retention_ms=1000))
    log.apply_retention(now_ms=10**9)
    assert len(log.segments) == 1 and log.log_end_offset == 90
    assert segments > 1


def test_delete_records_before(log_dir, small_config):
    log = Log.create(log_dir, "topic", 0, small_config, 0)
    fill(log)
    log.delete_records_before(50)
    assert log.log_start_offset == 50
    assert log.segments[0].base_offset <= 50 < log.segments[0].next_offset
    assert list(iter_batch_headers(log.read(50, 1).read()))[0].base_offset == 48
    with pytest.raises(OffsetOutOfRangeError):
        log.read(49, 10)
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records_before(91)


def idem(seq, epoch=0, pid=42, count=2):
    return make_request(count, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def test_idempotent_dedupe_out_of_order_and_fencing(log_dir):
    log = Log.create(log_dir, "topic", 0, LogConfig(), 0)
    first = append(log, idem(0))
    append(log, idem(2))
    dup = append(log, idem(0))
    assert dup.duplicate and (dup.first_offset, dup.last_offset) == (first.first_offset, first.last_offset)
    assert log.log_end_offset == 4
    with pytest.raises(OutOfOrderSequenceError):
        append(log, idem(7))
    with pytest.raises(OutOfOrderSequenceError):
        append(log, idem(3, epoch=1))
    append(log, idem(0, epoch=1))
    with pytest.raises(InvalidProducerEpochError):
        append(log, idem(2, epoch=0))
    append(log, idem(12345, pid=99))  # unknown producer: any sequence
    assert log.log_end_offset == 8


def test_a_long_in_order_run_keeps_the_last_five_batches_for_retries(log_dir):
    """Each batch of a run is its producer's next one (added to the producer's entry without a
    copy): the last five are still answered as duplicates with their own offsets, an older retry
    is out of order, and the state survives a restart."""
    log = Log.create(log_dir, "topic", 0, LogConfig(), 0)
    infos = [append(log, idem(2 * i)) for i in range(12)]
    assert [i.first_offset for i in infos] == list(range(0, 24, 2))
    for i in range(7, 12):
        dup = append(log, idem(2 * i))
        assert dup.duplicate and dup.first_offset == infos[i].first_offset
    with pytest.raises(OutOfOrderSequenceError):
        append(log, idem(2 * 6))
    assert log.log_end_offset == 24
    log.close()
    log = Log.open(log_dir, "topic", 0, LogConfig(), 0, recovery_point=0, clean_shutdown=True)
    assert append(log, idem(22)).duplicate
    assert append(log, idem(24)).first_offset == 24


def test_in_order_batches_keep_the_transaction_rules(log_dir):
    """The transaction a producer's batches are in is checked for its next batch in order too: a
    non-transactional batch inside its ongoing transaction is refused; transactional ones go on."""
    log = Log.create(log_dir, "topic", 0, LogConfig(), 0)
    append(log, idem(0, count=2))
    append(log, make_request(2, producer_id=42, producer_epoch=0, base_sequence=2, is_transactional=True))
    append(log, make_request(2, producer_id=42, producer_epoch=0, base_sequence=4, is_transactional=True))
    assert log.first_unstable_offset() == 2
    with pytest.raises(InvalidTxnStateError):
        append(log, idem(6))
    assert log.log_end_offset == 6


def test_producer_state_survives_close_and_crash(log_dir):
    log = Log.create(log_dir, "topic", 0, LogConfig(), 0)
    append(log, idem(0))
    append(log, idem(2))
    log.close()
    log = Log.open(log_dir, "topic", 0, LogConfig(), 0, recovery_point=0, clean_shutdown=True)
    assert append(log, idem(2)).duplicate
    with pytest.raises(OutOfOrderSequenceError):
        append(log, idem(9))
    append(log, idem(4))
    # crash: no snapshot at the end, state rebuilt from the last snapshot plus replay
    log = Log.open(log_dir, "topic", 0, LogConfig(), 0, recovery_point=0, clean_shutdown=False)
    assert log.log_end_offset == 6
    assert append(log, idem(4)).duplicate
    assert append(log, idem(6)).first_offset == 6


def test_idle_producers_expire_and_a_fresh_one_is_kept(log_dir):
    log = Log.create(log_dir, "topic", 0, LogConfig(), 0)
    append(log, make_request(2, ts=1_000, producer_id=1, producer_epoch=0, base_sequence=0))
    append(log, make_request(2, ts=50_000, producer_id=2, producer_epoch=0, base_sequence=0))
    # Batch max timestamps are 1_001 and 50_001; at 61_001 only producer 1 is 60 s idle.
    assert log.remove_expired_producers(now_ms=61_001, expiration_ms=60_000) == 1
    assert set(log.producer_state.producers) == {2}
    # The kept producer still dedupes; the forgotten one is a new producer (any sequence, no dedupe).
    assert append(log, idem(0, pid=2)).duplicate
    assert not append(log, idem(0, pid=1)).duplicate
    # What expired stays expired after a restart (the close snapshot no longer holds it).
    log.remove_expired_producers(now_ms=10**12, expiration_ms=60_000)
    log.close()
    log = Log.open(log_dir, "topic", 0, LogConfig(), 0, recovery_point=0, clean_shutdown=True)
    assert log.producer_state.producers == {}


def test_close_writes_a_producer_snapshot_only_when_the_log_moved(log_dir):
    """Shutdown with 10,000 partitions must not pay an fsynced snapshot per unchanged log (Kafka's
    rule: snapshot only past the last one), yet a log that grew still gets its snapshot."""
    log = Log.create(log_dir, "topic", 0, LogConfig(), 0)
    log.close()
    assert log.producer_state.snapshot_offsets() == []  # empty log: nothing to keep
    log = Log.open(log_dir, "topic", 0, LogConfig(), 0, recovery_point=0, clean_shutdown=True)
    append(log, idem(0))
    log.close()
    assert log.producer_state.snapshot_offsets() == [2]
    snapshot = log.producer_state.snapshot_path(2)
    written = snapshot.stat().st_mtime_ns
    log = Log.open(log_dir, "topic", 0, LogConfig(), 0, recovery_point=2, clean_shutdown=True)
    log.close()
    assert snapshot.stat().st_mtime_ns == written  # unchanged log: the snapshot is not rewritten
    log = Log.open(log_dir, "topic", 0, LogConfig(), 0, recovery_point=2, clean_shutdown=True)
    assert append(log, idem(0)).duplicate  # and the state still comes back from it


def test_whole_batch_headers_stop_at_the_wanted_offset_and_at_a_torn_end(log_dir, small_config):
    from pybroker.storage.segment import whole_batch_headers

    log = Log.create(log_dir, "topic", 0, small_config, 0)
    fill(log, batches=5)  # batches of 3: 0-2, 3-5, ...
    whole = log.read(0, 10_000)
    assert [(h.base_offset, h.last_offset) for h in whole_batch_headers(whole, 4)] == [(0, 2), (3, 5)]
    assert [h.base_offset for h in whole_batch_headers(whole, 100)] == [0, 3, 6, 9, 12]
    headers = whole_batch_headers(whole, 100)
    # a read cut inside the third batch: the torn batch is left out
    torn = whole.head(headers[2].position + 10)
    assert [h.base_offset for h in whole_batch_headers(torn, 100)] == [0, 3]
    # the head of a slice is the same bytes
    assert whole.head(headers[1].end_position).read() == whole.read()[: headers[1].end_position]
