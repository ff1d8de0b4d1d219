import os
import sys
import uuid
from pathlib import Path

import pytest
from conftest import append, make_request

from pybroker.records import read_records
from pybroker.storage import LogConfig, LogDirLockedError, LogManager
from pybroker.storage.checkpoint import read_offset_checkpoint, read_partition_metadata
from pybroker.storage.file_slice import FileSlice

CONFIG = LogConfig(segment_bytes=600, index_interval_bytes=100)
TOPIC_ID = uuid.UUID("12345678-1234-5678-1234-567812345678")


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def started(tmp_path: Path) -> LogManager:
    manager = LogManager([tmp_path / "data"], clock=Clock(), default_config=CONFIG)
    manager.startup()
    return manager


def crash(manager: LogManager) -> None:
    """Drop the manager without a clean shutdown (files stay as the OS has them)."""
    for fd in manager._lock_fds:
        os.close(fd)
    manager._lock_fds.clear()


def populate(tmp_path: Path, batches: int = 12) -> tuple[LogManager, list[int]]:
    manager = started(tmp_path)
    log = manager.create_log("orders", 0, CONFIG, TOPIC_ID)
    sizes = []
    for i in range(batches):
        buf = make_request(3, ts=1000 + i)
        sizes.append(len(buf))
        append(log, buf)
    return manager, sizes


def active_log_file(tmp_path: Path) -> Path:
    return sorted((tmp_path / "data" / "orders-0").glob("*.log"))[-1]


def test_checkpoints_and_metadata_written_and_read_back(tmp_path):
    manager, _ = populate(tmp_path)
    log = manager.get_log("orders", 0)
    log.delete_records_before(7)
    manager.checkpoint()
    data = tmp_path / "data"
    assert read_offset_checkpoint(data / "log-start-offset-checkpoint") == {("orders", 0): 7}
    assert (data / "recovery-point-offset-checkpoint").read_text().splitlines()[:3] == [
        "0",
        "1",
        "orders 0 0",
    ]
    assert read_partition_metadata(data / "orders-0") == TOPIC_ID
    text = (data / "orders-0" / "partition.metadata").read_text()
    assert text == "version: 0\ntopic_id: EjRWeBI0VngSNFZ4EjRWeA\n"
    manager.shutdown()
    assert (data / ".kafka_cleanshutdown").exists()
    assert read_offset_checkpoint(data / "recovery-point-offset-checkpoint") == {("orders", 0): 36}
    manager = started(tmp_path)
    assert not (data / ".kafka_cleanshutdown").exists()
    log = manager.get_log("orders", 0)
    assert (log.log_start_offset, log.log_end_offset, log.recovery_point) == (7, 36, 36)
    assert manager.topic_ids[("orders", 0)] == TOPIC_ID
    assert [r.offset for r in read_records(log.read(33, 1000).read())] == [33, 34, 35]


def test_second_manager_cannot_lock_dir(tmp_path):
    manager = started(tmp_path)
    with pytest.raises(LogDirLockedError):
        LogManager([tmp_path / "data"]).startup()
    manager.shutdown()


def test_recovery_after_torn_tail(tmp_path):
    manager, sizes = populate(tmp_path)
    crash(manager)
    path = active_log_file(tmp_path)
    os.truncate(path, path.stat().st_size - 10)
    log = started(tmp_path).get_log("orders", 0)
    assert log.log_end_offset == 33
    assert [r.offset for r in read_records(log.read(30, 1000).read())] == [30, 31, 32]
    assert append(log, make_request(1)).first_offset == 33


def test_recovery_after_bit_flip_in_last_batch(tmp_path):
    manager, sizes = populate(tmp_path)
    crash(manager)
    path = active_log_file(tmp_path)
    with open(path, "r+b") as f:
        f.seek(path.stat().st_size - 5)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0x10]))
    log = started(tmp_path).get_log("orders", 0)
    assert log.log_end_offset == 33


def test_bit_flip_in_middle_past_recovery_point_truncates_from_there(tmp_path):
    manager, sizes = populate(tmp_path, batches=12)
    log = manager.get_log("orders", 0)
    log.flush(up_to=6)
    manager.checkpoint()
    crash(manager)
    first_segment = sorted((tmp_path / "data" / "orders-0").glob("*.log"))[0]
    # corrupt the 4th batch (offsets 9..11) of the first segment: later segments become unreachable
    with open(first_segment, "r+b") as f:
        f.seek(sum(sizes[:3]) + 70)
        f.write(b"\xff")
    log = started(tmp_path).get_log("orders", 0)
    assert log.log_end_offset == 9
    assert len(log.segments) == 1


def test_clean_shutdown_skips_recovery(tmp_path, monkeypatch):
    manager, _ = populate(tmp_path)
    manager.shutdown()
    from pybroker.storage.segment import LogSegment

    def fail(self):
        raise AssertionError("recover() called after a clean shutdown")

    monkeypatch.setattr(LogSegment, "recover", fail)
    log = started(tmp_path).get_log("orders", 0)
    assert log.log_end_offset == 36


def test_unflushed_index_rebuilt_after_crash(tmp_path):
    manager, _ = populate(tmp_path, batches=30)
    crash(manager)
    for index in (tmp_path / "data" / "orders-0").glob("*.index"):
        index.write_bytes(b"\x00" * 7)  # garbage
    log = started(tmp_path).get_log("orders", 0)
    assert log.log_end_offset == 90
    assert [r.offset for r in read_records(log.read(45, 1).read())] == [45, 46, 47]


def test_retention_pass_and_delete_log(tmp_path):
    manager, _ = populate(tmp_path, batches=30)
    log = manager.get_log("orders", 0)
    held = log.read(0, 100)
    log.update_config(LogConfig(segment_bytes=600, retention_ms=1000))
    assert manager.retention_pass(now_ms=10**9) > 0
    assert len(log.segments) == 1 and log.log_start_offset == log.segments[0].base_offset
    assert isinstance(held, FileSlice) and read_records(held.read())  # still readable after deletion
    manager.delete_log("orders", 0)
    assert manager.get_log("orders", 0) is None
    leftovers = [p.name for p in (tmp_path / "data").iterdir() if p.is_dir()]
    assert len(leftovers) == 1 and leftovers[0].startswith("orders-0.") and leftovers[0].endswith("-delete")
    manager.shutdown()
    assert not any(p.is_dir() for p in (tmp_path / "data").iterdir())


@pytest.mark.parametrize("whole_fs_sync", [True, False], ids=["syncfs", "fsync-per-file"])
def test_shutdown_makes_everything_durable_before_the_recovery_point_moves(
    tmp_path, monkeypatch, whole_fs_sync
):
    """With syncfs, shutdown writes every log without fsync, syncs each log dir's file system
    once, and only then advances the recovery points it checkpoints; without it, each file is
    fsynced. Either way the next start finds the same, clean, log."""
    import pybroker.storage.manager as manager_module

    synced: list[Path] = []
    real_syncfs = manager_module.syncfs

    def recording_syncfs(path: Path) -> None:
        # The recovery point checkpoint must not be written before the data is durable.
        assert read_offset_checkpoint(path / "recovery-point-offset-checkpoint").get(("orders", 0), 0) < 36
        synced.append(path)
        real_syncfs(path)

    monkeypatch.setattr(manager_module, "syncfs", recording_syncfs)
    monkeypatch.setattr(manager_module, "syncfs_available", lambda: whole_fs_sync)
    manager, _ = populate(tmp_path)
    manager.shutdown()
    data = tmp_path / "data"
    assert synced == ([data] if whole_fs_sync else [])
    assert read_offset_checkpoint(data / "recovery-point-offset-checkpoint") == {("orders", 0): 36}
    assert (data / ".kafka_cleanshutdown").exists()
    assert list((data / "orders-0").glob("*.snapshot")), "no producer snapshot at the log end"
    log = started(tmp_path).get_log("orders", 0)
    assert (log.log_end_offset, log.recovery_point) == (36, 36)
    assert [r.offset for r in read_records(log.read(33, 1000).read())] == [33, 34, 35]


WIDE_CONFIG = LogConfig(segment_bytes=1 << 20, index_interval_bytes=4096)
WIDE_PARTITIONS = 40


def populate_wide(tmp_path: Path) -> LogManager:
    """Many partitions of six 1 KiB batches each: some index entries, and a last batch whose
    timestamp the time index has not taken yet (the closing entry is still to be written)."""
    manager = LogManager([tmp_path / "data"], clock=Clock(), default_config=WIDE_CONFIG)
    manager.startup()
    for p in range(WIDE_PARTITIONS):
        log = manager.create_log("wide", p, WIDE_CONFIG, TOPIC_ID)
        for i in range(6):
            append(log, make_request(1, ts=1000 + i, value_size=1024))
    return manager


@pytest.mark.parametrize("whole_fs_sync", [True, False], ids=["syncfs", "fsync-per-file"])
def test_shutdown_creates_one_file_and_writes_each_index_once_per_partition(
    tmp_path, monkeypatch, whole_fs_sync
):
    """Shutdown's per-partition file work, counted rather than timed: with 10,000 partitions
    every file created (a journal transaction each) or written twice is thousands of disk
    operations. A partition's index files exist from its creation; at close its only new file is
    the producer snapshot, and each index file is opened once (the time index used to be written
    by the flush and again, with the closing entry, by the segment's close)."""
    import pybroker.storage.manager as manager_module

    monkeypatch.setattr(manager_module, "syncfs_available", lambda: whole_fs_sync)
    manager = populate_wide(tmp_path)
    created: list[Path] = []
    index_opens: dict[Path, int] = {}
    recording = [False]

    # The interpreter's "open" audit event (os.open, open, io.open), not a patched builtins.open: the
    # storage modules may be Cython-compiled, and compiled code holds its own reference to open.
    def audit(event: str, args: tuple) -> None:
        if event != "open" or not recording[0] or not isinstance(args[0], (str, Path)):
            return
        path, flags = Path(args[0]), args[2]
        if not flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            return  # opened for reading
        if flags & os.O_CREAT and not path.exists():
            created.append(path)
        if path.suffix in (".index", ".timeindex"):
            index_opens[path] = index_opens.get(path, 0) + 1

    sys.addaudithook(audit)  # an audit hook cannot be removed: `recording` switches it off
    recording[0] = True
    try:
        manager.shutdown()
    finally:
        recording[0] = False

    data = tmp_path / "data"
    per_partition = [p for p in created if p.parent != data]
    assert sorted(p.parent.name for p in per_partition) == sorted(f"wide-{p}" for p in range(WIDE_PARTITIONS))
    assert all(p.name.endswith(".snapshot.tmp") for p in per_partition), per_partition
    assert len(index_opens) == 2 * WIDE_PARTITIONS and set(index_opens.values()) == {1}, index_opens
    # Nothing was left out: the closing time-index entry is on disk, and the restart trusts it all.
    log = started_wide(tmp_path).get_log("wide", 7)
    segment = log.active_segment
    assert segment.time_index.last_entry == (1005, 5)
    assert not segment.needs_recovery


def started_wide(tmp_path: Path) -> LogManager:
    manager = LogManager([tmp_path / "data"], clock=Clock(), default_config=WIDE_CONFIG)
    manager.startup()
    return manager


def test_clean_shutdown_of_many_partitions_restarts_without_recovery(tmp_path, monkeypatch):
    """After a clean shutdown every one of many partitions opens as it was left: no segment
    recovered, no index rebuilt, producer state read from the snapshot at the log end rather than
    replayed from the log, recovery points at the log ends."""
    from pybroker.storage.producer_state import ProducerStateManager
    from pybroker.storage.segment import LogSegment

    manager = populate_wide(tmp_path)
    manager.shutdown()
    assert (tmp_path / "data" / ".kafka_cleanshutdown").exists()

    def fail(*args, **kwargs):
        raise AssertionError("recovery work after a clean shutdown")

    real_replay = ProducerStateManager.replay
    replayed: list[int] = []

    def counting_replay(self, headers, *args, **kwargs):
        headers = list(headers)
        replayed.extend(h.base_offset for h in headers)
        return real_replay(self, iter(headers), *args, **kwargs)

    monkeypatch.setattr(LogSegment, "recover", fail)
    monkeypatch.setattr(ProducerStateManager, "replay", counting_replay)
    restarted = started_wide(tmp_path)
    logs = restarted.all_logs()
    assert len(logs) == WIDE_PARTITIONS
    for log in logs:
        assert (log.log_end_offset, log.recovery_point) == (6, 6)
        assert not any(segment.needs_recovery for segment in log.segments)
        assert len(log.active_segment.offset_index) >= 1
    assert replayed == [], "producer state replayed from the log, not read from its snapshot"
    assert not (tmp_path / "data" / ".kafka_cleanshutdown").exists()
    restarted.shutdown()
