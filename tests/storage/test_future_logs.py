"""Future logs (a replica moving to another log dir): the swap keeps every batch, epoch and the
partition's id; a stop between the swap's two renames leaves the future copy, which start-up makes the
log; a stop during the copy drops the copy and records the move to start again."""

import os
import uuid
from pathlib import Path

from conftest import append, make_request

from pybroker.records import read_records
from pybroker.storage import LogConfig, LogManager
from pybroker.storage.checkpoint import read_partition_metadata

CONFIG = LogConfig(segment_bytes=600, index_interval_bytes=100)
TOPIC_ID = uuid.UUID("12345678-1234-5678-1234-567812345678")


def manager(tmp_path: Path) -> LogManager:
    m = LogManager([tmp_path / "a", tmp_path / "b"], default_config=CONFIG)
    m.startup()
    return m


def stop_abruptly(m: LogManager) -> None:
    for fd in m._lock_fds:  # noqa: SLF001 - a crash: nothing closed, only the locks released
        os.close(fd)
    m._lock_fds.clear()  # noqa: SLF001


def values(m: LogManager) -> list[tuple[int, int, bytes | None]]:
    """(offset, timestamp, key) of every record of the partition's log."""
    log = m.get_log("orders", 0)
    assert log is not None
    out: list[tuple[int, int, bytes | None]] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        chunk = log.read(offset, 1 << 20)
        assert chunk is not None
        records = read_records(chunk.read())
        out += [(r.offset, r.timestamp, r.key) for r in records]
        offset = records[-1].offset + 1
    return out


def copy_all(current, future) -> None:  # noqa: ANN001
    while future.log_end_offset < current.log_end_offset:
        future.append_as_follower(current.read(future.log_end_offset, 1 << 20).read(), now_ms=10_000)


def populated(tmp_path: Path) -> tuple[LogManager, Path, Path]:
    m = manager(tmp_path)
    log = m.create_log("orders", 0, CONFIG, TOPIC_ID)
    for i in range(10):
        append(log, make_request(3, ts=1000 + i, value_size=20), leader_epoch=i // 4)
    source = m.log_dir_of("orders", 0)
    assert source is not None
    [destination] = [d for d in m.log_dirs if d != source]
    return m, source, destination


def test_replace_current_with_future_log(tmp_path: Path) -> None:
    m, source, destination = populated(tmp_path)
    before = values(m)
    current = m.get_log("orders", 0)
    future = m.create_future_log("orders", 0, destination, CONFIG)
    copy_all(current, future)
    log = m.replace_current_with_future_log("orders", 0)
    assert m.log_dir_of("orders", 0) == destination and log.directory == destination / "orders-0"
    assert values(m) == before and len(before) == 30
    assert log.leader_epochs.entries == current.leader_epochs.entries
    assert read_partition_metadata(log.directory) == TOPIC_ID
    assert not (source / "orders-0").exists()
    m.shutdown()
    again = manager(tmp_path)
    assert again.log_dir_of("orders", 0) == destination and values(again) == before
    again.shutdown()


def test_a_stop_between_the_two_renames_keeps_the_future_copy(tmp_path: Path) -> None:
    m, source, destination = populated(tmp_path)
    before = values(m)
    future = m.create_future_log("orders", 0, destination, CONFIG)
    copy_all(m.get_log("orders", 0), future)
    future.close()
    os.replace(source / "orders-0", source / f"orders-0.{uuid.uuid4().hex}-delete")  # the first rename, then a stop
    stop_abruptly(m)
    again = manager(tmp_path)
    assert again.log_dir_of("orders", 0) == destination and values(again) == before
    assert read_partition_metadata(destination / "orders-0") == TOPIC_ID
    assert not list(destination.glob("*-future")) and not again.interrupted_moves
    again.shutdown()


def test_a_stop_during_the_copy_starts_the_move_again(tmp_path: Path) -> None:
    m, source, destination = populated(tmp_path)
    before = values(m)
    current = m.get_log("orders", 0)
    future = m.create_future_log("orders", 0, destination, CONFIG)
    future.append_as_follower(current.read(0, 100).read(), now_ms=10_000)  # some of it
    m.shutdown()
    again = manager(tmp_path)
    assert again.log_dir_of("orders", 0) == source and values(again) == before
    assert again.interrupted_moves == {("orders", 0): destination}
    assert not list(destination.glob("*-future"))
    again.shutdown()
