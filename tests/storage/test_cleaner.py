"""Log compaction: latest value per key survives, offsets are kept, tombstones expire, crash-safe swap."""

from pathlib import Path

import pytest
from conftest import append

from pybroker.records import SimpleRecord, build_batch, iter_batch_headers, read_records
from pybroker.records.compression import CompressionType
from pybroker.storage import Log, LogConfig
from pybroker.storage.cleaner import apply_cleaning, clean_log, compute_cleaning, snapshot_segments

HOUR = 3_600_000
NOW = 100 * HOUR


def put(
    log: Log, pairs: list[tuple[bytes, bytes | None]], ts: int, compression: int = CompressionType.NONE
) -> None:
    records = [SimpleRecord(k, v, timestamp_ms=ts) for k, v in pairs]
    append(log, bytearray(build_batch(records, compression=compression)), now_ms=ts)


def all_records(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        sl = log.read(offset, 1 << 20)
        if sl is None:
            break
        data = sl.read()
        out += [(r.offset, r.key, r.value) for r in read_records(data)]
        offset = list(iter_batch_headers(data))[-1].next_offset
    return out


@pytest.mark.parametrize("compression", [CompressionType.NONE, CompressionType.GZIP])
def test_latest_value_per_key_survives_with_its_offset(tmp_path: Path, compression: int) -> None:
    config = LogConfig(cleanup_policy="compact", segment_bytes=1 << 20, index_interval_bytes=1)
    log = Log.create(tmp_path / "t-0", "t", 0, config, 0)
    put(log, [(b"k%d" % i, b"v1-%d" % i) for i in range(5)], NOW - 3 * HOUR, compression)  # 0-4
    put(log, [(b"k0", b"v2-0"), (b"k1", b"v2-1"), (b"k2", b"v2-2")], NOW - 3 * HOUR, compression)  # 5-7
    put(log, [(b"k3", None)], NOW - 2 * HOUR)  # 8: an old tombstone
    put(log, [(b"k4", None)], NOW - 1000)  # 9: a young tombstone
    log.roll(NOW)
    put(log, [(b"k1", b"v3-1")], NOW)  # 10, in the active segment
    size_before = log.segments[0].size

    stats = clean_log(log, NOW, delete_retention_ms=HOUR)

    # As Kafka: the active segment is not part of the round, so k1@10 does not supersede k1@6 yet;
    # both tombstones are kept by the first clean, which stamps their delete horizon (NOW + 1 h),
    # however old their own timestamps.
    assert all_records(log) == [
        (5, b"k0", b"v2-0"),
        (6, b"k1", b"v2-1"),
        (7, b"k2", b"v2-2"),
        (8, b"k3", None),
        (9, b"k4", None),
        (10, b"k1", b"v3-1"),
    ]
    assert stats.records_removed == 5
    assert log.segments[0].size < size_before
    # Before the horizon nothing changes; at it the tombstones go.
    assert clean_log(log, NOW + HOUR - 1, delete_retention_ms=HOUR).records_removed == 0
    assert clean_log(log, NOW + HOUR, delete_retention_ms=HOUR).records_removed == 2
    expected = [(5, b"k0", b"v2-0"), (6, b"k1", b"v2-1"), (7, b"k2", b"v2-2"), (10, b"k1", b"v3-1")]
    assert all_records(log) == expected
    assert log.log_end_offset == 11
    # Offsets inside the compacted range still find the next surviving record.
    assert read_records(log.read(1, 1 << 20).read())[0].offset >= 1
    # A further pass has nothing left to do; appends continue at the same offsets.
    assert clean_log(log, NOW + HOUR, delete_retention_ms=HOUR).records_removed == 0
    put(log, [(b"k9", b"x")], NOW)
    assert all_records(log)[-1] == (11, b"k9", b"x")
    # The cleaned segment and its rebuilt indexes survive a restart.
    log.close()
    reopened = Log.open(tmp_path / "t-0", "t", 0, config, NOW, clean_shutdown=True)
    assert all_records(reopened) == [*expected, (11, b"k9", b"x")]
    # The round's last batch (the tombstone at 9) is kept, emptied: no record of it is found by time.
    assert [h.records_count for h in iter_batch_headers(reopened.read(9, 1 << 20).read())][0] == 0
    assert reopened.offset_for_timestamp(NOW - 1500) == (10, NOW)


def test_tombstones_expire_at_the_delete_horizon_stamped_by_the_first_clean(tmp_path: Path) -> None:
    """KIP-534: a tombstone's age is not its timestamp's but the time since the first clean kept
    it; that clean stamps ``now + delete.retention.ms`` into the batch (base timestamp and the
    deleteHorizonMs attribute bit), a clean at or past it removes the tombstone."""
    config = LogConfig(cleanup_policy="compact")
    log = Log.create(tmp_path / "t-0", "t", 0, config, 0)
    put(log, [(b"a", b"1"), (b"b", b"1")], NOW - 10 * HOUR)
    put(log, [(b"a", None)], NOW - 10 * HOUR)
    put(log, [(b"z", b"1")], NOW - 10 * HOUR)
    log.roll(NOW)
    put(log, [(b"c", b"1")], NOW)
    clean_log(log, NOW, delete_retention_ms=HOUR)
    assert all_records(log) == [(1, b"b", b"1"), (2, b"a", None), (3, b"z", b"1"), (4, b"c", b"1")]
    stamped = [h for h in iter_batch_headers(log.read(2, 1 << 20).read()) if h.base_offset == 2][0]
    assert stamped.attributes & 0x40 and stamped.base_timestamp == NOW + HOUR
    assert read_records(log.read(2, 1 << 20).read())[0].timestamp == NOW - 10 * HOUR  # kept
    # The horizon stays what the first clean stamped, whatever the retention later.
    clean_log(log, NOW + HOUR // 2, delete_retention_ms=0)
    assert (2, b"a", None) in all_records(log)
    clean_log(log, NOW + HOUR, delete_retention_ms=24 * HOUR)
    assert all_records(log) == [(1, b"b", b"1"), (3, b"z", b"1"), (4, b"c", b"1")]


def test_emptied_middle_segment_is_deleted_first_is_kept(tmp_path: Path) -> None:
    config = LogConfig(cleanup_policy="compact")
    log = Log.create(tmp_path / "t-0", "t", 0, config, 0)
    put(log, [(b"a", b"1")], NOW)
    log.roll(NOW)
    put(log, [(b"a", b"2")], NOW)
    log.roll(NOW)
    put(log, [(b"a", b"3")], NOW)
    log.roll(NOW)
    put(log, [(b"b", b"1")], NOW)
    assert [s.base_offset for s in log.segments] == [0, 1, 2, 3]
    clean_log(log, NOW, delete_retention_ms=HOUR)
    assert [s.base_offset for s in log.segments] == [0, 2, 3]
    assert log.segments[0].size == 0
    assert log.log_start_offset == 0
    assert all_records(log) == [(2, b"a", b"3"), (3, b"b", b"1")]
    assert not list((tmp_path / "t-0").glob("*.cleaned"))


def test_leftover_cleaned_file_is_ignored_on_open(tmp_path: Path) -> None:
    """A crash after writing ``.cleaned`` but before the rename: the old segment is still whole."""
    config = LogConfig(cleanup_policy="compact")
    log = Log.create(tmp_path / "t-0", "t", 0, config, 0)
    put(log, [(b"a", b"1"), (b"a", b"2")], NOW)
    log.close()
    (tmp_path / "t-0" / "00000000000000000000.log.cleaned").write_bytes(b"garbage")
    reopened = Log.open(tmp_path / "t-0", "t", 0, config, NOW)
    assert all_records(reopened) == [(0, b"a", b"1"), (1, b"a", b"2")]
    assert not list((tmp_path / "t-0").glob("*.cleaned"))


def test_threaded_pass_keeps_appends_made_while_it_ran(tmp_path: Path) -> None:
    """The broker computes a pass in a worker thread from a snapshot while the loop keeps appending:
    records appended meanwhile (also to a segment rolled meanwhile) are all still there after the swap."""
    config = LogConfig(cleanup_policy="compact")
    log = Log.create(tmp_path / "t-0", "t", 0, config, 0)
    put(log, [(b"a", b"1"), (b"b", b"1")], NOW)
    put(log, [(b"a", b"2")], NOW)
    log.roll(NOW)
    snapshots = snapshot_segments(log)
    results, stats = compute_cleaning(snapshots, NOW, HOUR)  # what the worker thread does
    # Meanwhile on the loop: more appends, a roll, more appends.
    put(log, [(b"b", b"2")], NOW)
    log.roll(NOW)
    put(log, [(b"c", b"1")], NOW)
    assert stats.records_removed == 1 and len(results) == 1
    assert apply_cleaning(log, results) == (1, 0)
    assert all_records(log) == [(1, b"b", b"1"), (2, b"a", b"2"), (3, b"b", b"2"), (4, b"c", b"1")]
    assert not list((tmp_path / "t-0").glob("*.cleaned"))


def test_threaded_pass_result_is_dropped_when_its_segment_went_away(tmp_path: Path) -> None:
    config = LogConfig(cleanup_policy="compact,delete")
    log = Log.create(tmp_path / "t-0", "t", 0, config, 0)
    put(log, [(b"a", b"1"), (b"a", b"2")], NOW)
    log.roll(NOW)
    put(log, [(b"b", b"1")], NOW)
    results, _ = compute_cleaning(snapshot_segments(log), NOW, HOUR)
    assert len(results) == 1
    log.delete_records_before(2)  # the cleaned segment is deleted before the result is applied
    assert [s.base_offset for s in log.segments] == [2]
    assert apply_cleaning(log, results) == (0, 0)
    assert all_records(log) == [(2, b"b", b"1")]
    assert not list((tmp_path / "t-0").glob("*.cleaned"))


def test_batch_expanding_beyond_the_limit_is_kept_as_it_is(tmp_path: Path) -> None:
    # max.message.bytes 4 KiB: the cleaner decompresses at most 64 x 4 KiB of one batch.  A zstd batch
    # of 1 MiB of zeros (stored: it is small) is then kept untouched, its keys not mapped; the other
    # batches are still compacted.
    config = LogConfig(cleanup_policy="compact", segment_bytes=1 << 20, max_message_bytes=4096)
    log = Log.create(tmp_path / "t-0", "t", 0, config, 0)
    put(log, [(b"a", b"old"), (b"b", b"old")], NOW - HOUR)  # 0-1
    put(log, [(b"a", bytes(1 << 20))], NOW - HOUR, CompressionType.ZSTD)  # 2: expands 256 x the limit
    put(log, [(b"b", b"new")], NOW - HOUR)  # 3
    log.roll(NOW)
    put(log, [(b"c", b"x")], NOW)  # 4, active

    stats = clean_log(log, NOW, delete_retention_ms=HOUR)

    offsets = [offset for offset, _key, _value in all_records(log)]
    # b@1 is superseded by b@3 and removed; a@0 survives (the big batch's key "a" was not read), and
    # the big batch itself is kept whole.
    assert offsets == [0, 2, 3, 4]
    assert stats.records_removed == 1
