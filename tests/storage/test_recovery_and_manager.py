import os
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
