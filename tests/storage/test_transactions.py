"""Transactional storage: producer state tracks ongoing transactions, markers end them, the last
stable offset follows the earliest open one, aborted transactions land in the segment's .txnindex
(Kafka's 34-byte entries), and recovery rebuilds all of it from the log."""

import os
import struct

import pytest
from conftest import append, make_request

from pybroker.records import iter_batch_headers, read_records
from pybroker.records.control import ABORT, COMMIT, control_type
from pybroker.storage import InvalidProducerEpochError, Log, LogConfig
from pybroker.storage.errors import InvalidTxnStateError, TransactionCoordinatorFencedError
from pybroker.storage.txn_index import ENTRY_SIZE, AbortedTxn, TransactionIndex


def txn(pid, seq, epoch=0, count=2):
    return make_request(
        count, producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True
    )


def marker(log, pid, commit, epoch=0, transaction_version=0):
    return log.append_marker(
        pid, epoch, commit, 0, leader_epoch=0, now_ms=10_000, transaction_version=transaction_version
    )


def test_index_entry_is_kafkas_34_byte_layout(tmp_path):
    index = TransactionIndex(tmp_path / "00000000000000000000.txnindex")
    index.append(AbortedTxn(7, 10, 20, 21))
    data = (tmp_path / "00000000000000000000.txnindex").read_bytes()
    assert ENTRY_SIZE == 34
    assert data == struct.pack(">hqqqq", 0, 7, 10, 20, 21)
    index.append(AbortedTxn(8, 15, 30, 31))
    # a torn tail (crash mid-write) is dropped on load, whole entries are kept
    with open(index.path, "ab") as f:
        f.write(b"\x00\x00\x00")
    loaded = TransactionIndex.load(index.path)
    assert loaded.entries == [AbortedTxn(7, 10, 20, 21), AbortedTxn(8, 15, 30, 31)]
    assert os.path.getsize(index.path) == 68
    loaded.truncate_to(30)
    assert TransactionIndex.load(index.path).entries == [AbortedTxn(7, 10, 20, 21)]


def test_lso_marker_and_aborted_index(log_dir):
    log = Log.create(log_dir, "topic", 0, LogConfig(), 0)
    append(log, make_request(2))  # 0-1 plain
    assert log.first_unstable_offset() is None
    append(log, txn(1, 0))  # 2-3 pid 1 opens at 2
    append(log, txn(2, 0))  # 4-5 pid 2 opens at 4
    assert log.first_unstable_offset() == 2
    info = marker(log, 1, commit=False)  # 6: abort pid 1
    assert info.first_offset == 6
    assert log.first_unstable_offset() == 4
    marker(log, 2, commit=True)  # 7: commit pid 2
    assert log.first_unstable_offset() is None
    assert log.active_segment.txn_index.entries == [AbortedTxn(1, 2, 6, 4)]
    assert log.collect_aborted_transactions(0, 8) == [AbortedTxn(1, 2, 6, 4)]
    assert log.collect_aborted_transactions(7, 8) == []
    data = log.read(6, 10_000).read()
    kinds = [control_type(data[h.position : h.end_position]) for h in iter_batch_headers(data)]
    assert kinds == [ABORT, COMMIT]
    assert all(h.is_control and h.is_transactional for h in iter_batch_headers(data))
    # the marker batch carries one control record and its offset
    assert [r.offset for r in read_records(data)] == [6, 7]


def test_marker_of_an_older_epoch_is_refused_and_plain_write_in_txn_is_invalid(log_dir):
    log = Log.create(log_dir, "topic", 0, LogConfig(), 0)
    append(log, txn(1, 0, epoch=3))
    with pytest.raises(InvalidProducerEpochError):
        marker(log, 1, commit=True, epoch=2)
    with pytest.raises(InvalidTxnStateError):
        append(log, make_request(1, producer_id=1, producer_epoch=3, base_sequence=2))
    marker(log, 1, commit=False, epoch=4)  # a fencing coordinator's bumped epoch
    assert log.first_unstable_offset() is None


def test_tv2_marker_must_carry_a_bumped_epoch(log_dir):
    """KIP-890 part 2 (Kafka's checkProducerEpoch with transaction version 2): the coordinator bumps
    the epoch at every transaction end, so a TV2 marker of the producer's current epoch is refused
    while a transaction of that epoch is open (a late retry of the previous transaction's marker
    must not end the next one), and written again when none is (an idempotent retry)."""
    log = Log.create(log_dir, "topic", 0, LogConfig(), 0)
    append(log, txn(1, 0, epoch=3))  # 0-1: transaction of epoch 3
    with pytest.raises(InvalidProducerEpochError):
        marker(log, 1, commit=True, epoch=3, transaction_version=2)
    with pytest.raises(InvalidProducerEpochError):
        marker(log, 1, commit=True, epoch=2, transaction_version=2)
    assert log.first_unstable_offset() == 0  # still open
    assert marker(log, 1, commit=True, epoch=4, transaction_version=2).first_offset == 2
    assert log.first_unstable_offset() is None
    # The same marker again (its answer was lost): nothing open, so it is written again.
    assert marker(log, 1, commit=True, epoch=4, transaction_version=2).first_offset == 3
    # The next transaction runs with epoch 4; a late copy of the epoch-4 marker must not end it.
    append(log, txn(1, 0, epoch=4))  # 4-5
    with pytest.raises(InvalidProducerEpochError):
        marker(log, 1, commit=False, epoch=4, transaction_version=2)
    assert log.first_unstable_offset() == 4
    # Transaction version 0/1: the marker of the producer's own epoch ends it.
    marker(log, 1, commit=False, epoch=4, transaction_version=0)
    assert log.first_unstable_offset() is None
    # At the last epoch no bump is possible: a marker of that epoch is accepted while open.
    append(log, txn(2, 0, epoch=32767))
    marker(log, 2, commit=True, epoch=32767, transaction_version=2)
    assert log.first_unstable_offset() is None


def test_a_marker_from_an_older_coordinator_epoch_is_fenced(log_dir):
    """Kafka's checkCoordinatorEpoch: a marker whose coordinator epoch is older than the one of the
    producer's last marker comes from a zombie coordinator (TRANSACTION_COORDINATOR_FENCED); replayed
    from the log it is applied (Kafka's REPLICATION origin only logs it)."""
    log = Log.create(log_dir, "topic", 0, LogConfig(), 0)
    append(log, txn(1, 0))  # 0-1
    log.append_marker(1, 0, True, 5, leader_epoch=0, now_ms=10_000)  # 2
    append(log, txn(1, 2))  # 3-4
    with pytest.raises(TransactionCoordinatorFencedError):
        log.append_marker(1, 0, False, 4, leader_epoch=0, now_ms=10_000)
    assert log.first_unstable_offset() == 3
    log.append_marker(1, 0, False, 5, leader_epoch=0, now_ms=10_000)  # 5: the same epoch is fine
    assert log.first_unstable_offset() is None
    plan = log.producer_state.prepare_marker(1, 0, 6, ABORT, 4, replication=True)
    assert plan.entry.coordinator_epoch == 4


def test_a_marker_with_no_open_transaction_indexes_nothing(log_dir):
    """Kafka's appendEndTxnMarker completes a transaction only when one is open: an ABORT marker of a
    producer with nothing open (an empty transaction, a retried marker) adds no aborted transaction."""
    log = Log.create(log_dir, "topic", 0, LogConfig(), 0)
    marker(log, 5, commit=False)  # 0: nothing of pid 5 in this partition
    append(log, txn(6, 0))  # 1-2
    marker(log, 6, commit=False)  # 3
    marker(log, 6, commit=False)  # 4: the same marker again
    assert log.active_segment.txn_index.entries == [AbortedTxn(6, 1, 3, 4)]
    assert log.collect_aborted_transactions(0, 5) == [AbortedTxn(6, 1, 3, 4)]


@pytest.mark.parametrize("clean", [True, False])
def test_recovery_rebuilds_ongoing_transactions_and_txn_index(log_dir, clean):
    cfg = LogConfig(segment_bytes=400)
    log = Log.create(log_dir, "topic", 0, cfg, 0)
    append(log, txn(1, 0))  # 0-1
    marker(log, 1, commit=False)  # 2
    for i in range(6):
        append(log, make_request(3, ts=2000 + i))
    append(log, txn(2, 0))  # open at the end
    open_at = log.log_end_offset - 2
    assert len(log.segments) > 1
    if clean:
        log.close()
    else:
        log.flush()
        # a crash with no usable snapshot and the index entries lost: all rebuilt from the log
        for seg in log.segments:
            seg.txn_index.delete()
        log.producer_state.delete_snapshots(above=-1)
    reopened = Log.open(log_dir, "topic", 0, cfg, 0, clean_shutdown=clean)
    assert reopened.first_unstable_offset() == open_at
    assert reopened.producer_state.producers[1].coordinator_epoch == 0  # from the marker's value
    assert reopened.collect_aborted_transactions(0, reopened.log_end_offset) == [AbortedTxn(1, 0, 2, 3)]
    marker(reopened, 2, commit=True)
    assert reopened.first_unstable_offset() is None


def test_snapshot_carries_the_ongoing_transaction(log_dir):
    cfg = LogConfig()
    log = Log.create(log_dir, "topic", 0, cfg, 0)
    append(log, make_request(2))
    append(log, txn(5, 0))
    log.close()
    # the data before the snapshot is no longer replayed: only the snapshot knows the open txn
    reopened = Log.open(log_dir, "topic", 0, cfg, 0, clean_shutdown=True)
    assert reopened.producer_state.producers[5].current_txn_first_offset == 2
    assert reopened.first_unstable_offset() == 2


def test_producer_with_open_transaction_does_not_expire(log_dir):
    log = Log.create(log_dir, "topic", 0, LogConfig(), 0)
    append(log, txn(9, 0))
    append(log, make_request(1, producer_id=10, producer_epoch=0, base_sequence=0))
    assert log.remove_expired_producers(10**13, 1) == 1
    assert 9 in log.producer_state.producers


def test_compaction_never_lets_an_aborted_or_open_transaction_supersede_a_committed_record(log_dir):
    from pybroker.records import SimpleRecord, build_batch
    from pybroker.storage.cleaner import build_offset_map, snapshot_segments

    log = Log.create(log_dir, "topic", 0, LogConfig(), 0)

    def keyed(value, **kw):
        return bytearray(build_batch([SimpleRecord(b"key", value)], **kw))

    append(log, keyed(b"plain"))  # 0
    append(
        log, keyed(b"aborted", producer_id=1, producer_epoch=0, base_sequence=0, is_transactional=True)
    )  # 1
    marker(log, 1, commit=False)  # 2
    assert build_offset_map(snapshot_segments(log)) == {b"key": 0}
    append(log, keyed(b"open", producer_id=2, producer_epoch=0, base_sequence=0, is_transactional=True))  # 3
    assert build_offset_map(snapshot_segments(log)) == {b"key": 0}
    marker(log, 2, commit=True)  # 4
    assert build_offset_map(snapshot_segments(log)) == {b"key": 3}


def test_compaction_removes_aborted_batches_compacts_committed_keeps_open_and_markers(log_dir):
    from pybroker.records import SimpleRecord, build_batch
    from pybroker.storage.cleaner import clean_log

    log = Log.create(log_dir, "topic", 0, LogConfig(segment_bytes=1024, cleanup_policy="compact"), 0)

    def txn_batch(pid, key, value):
        return bytearray(
            build_batch(
                [SimpleRecord(key, value)],
                producer_id=pid,
                producer_epoch=0,
                base_sequence=seq[pid],
                is_transactional=True,
            )
        )

    seq = {1: 0, 2: 0, 3: 0}

    def send(pid, key, value):
        append(log, txn_batch(pid, key, value))
        seq[pid] += 1

    send(1, b"a", b"a-committed-old")  # 0
    send(1, b"b", b"b-committed")  # 1
    marker(log, 1, commit=True)  # 2
    send(2, b"c", b"c-aborted")  # 3
    marker(log, 2, commit=False)  # 4
    send(1, b"a", b"a-committed-new")  # 5
    marker(log, 1, commit=True)  # 6
    send(3, b"d", b"d-open")  # 7 (never ended)
    for i in range(12):  # push everything above into inactive segments
        append(log, make_request(2, ts=5000 + i, value_size=60))
    assert len(log.segments) > 2
    stats = clean_log(log, 10**13, 0)
    assert stats.records_removed >= 2  # the aborted record and the superseded committed one
    headers, values = [], []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        chunk = log.read(offset, 1 << 20).read()
        batch_headers = list(iter_batch_headers(chunk))
        headers += batch_headers
        values += [r.value for r in read_records(chunk)]
        offset = batch_headers[-1].next_offset
    assert b"c-aborted" not in values and b"a-committed-old" not in values
    assert {b"b-committed", b"a-committed-new", b"d-open"} <= set(values)
    assert [h.base_offset for h in headers if h.is_control] == [2, 4, 6]  # the markers stay
