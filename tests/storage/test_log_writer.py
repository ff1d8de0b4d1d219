"""Log.append_async: the log directory's writer thread writes produced batches (storage/writer.py).

Offsets and producer state move at once; the log end offset, reads and the segment's indexes only
once the write is done and taken back on the event loop; a failed write fails the writes queued
after it and rolls the log back to what is on disk."""

from __future__ import annotations

import asyncio
import errno
import os
import threading

import pytest
from conftest import make_request

from pybroker.records import iter_batch_headers, read_records, validate_produce_batches
from pybroker.storage import Log, LogConfig
from pybroker.storage import writer as writer_module
from pybroker.storage.errors import KafkaStorageError
from pybroker.storage.writer import LogDirWriter


def _append_async(log: Log, buf: bytearray, done: list, leader_epoch: int = 0):
    return log.append_async(
        buf, validate_produce_batches(buf), leader_epoch=leader_epoch, now_ms=10_000, on_written=done.append
    )


def _read_offsets(log: Log) -> list[int]:
    offsets: list[int] = []
    position = log.log_start_offset
    while position < log.log_end_offset:
        data = log.read(position, 1 << 20).read()
        offsets += [r.offset for r in read_records(data)]
        position = list(iter_batch_headers(data))[-1].next_offset
    return offsets


@pytest.fixture
def writer():
    w = LogDirWriter("test")
    yield w
    w.stop()


def test_bytes_become_visible_when_the_write_is_taken_back(log_dir, writer):
    async def run():
        log = Log.create(log_dir, "topic", 0, LogConfig(), 0)
        log.writer = writer
        release = threading.Event()
        real_pwrite = os.pwrite

        def slow_pwrite(fd, data, position):
            release.wait(10)
            return real_pwrite(fd, data, position)

        writer_module.os.pwrite = slow_pwrite
        try:
            done: list = []
            first = _append_async(log, make_request(3), done)
            second = _append_async(log, make_request(2), done)
            assert (first.first_offset, first.last_offset, first.pending) == (0, 2, True)
            assert (second.first_offset, second.last_offset) == (3, 4)  # assigned at once
            assert log.log_end_offset == 0 and log.read(0, 1 << 20) is None  # nothing readable yet
            assert log.active_segment.size == 0
            release.set()
            while len(done) < 2:
                await asyncio.sleep(0.01)
        finally:
            writer_module.os.pwrite = real_pwrite
        assert done == [None, None]
        assert log.log_end_offset == 5 and _read_offsets(log) == [0, 1, 2, 3, 4]
        # A synchronous append after queued ones waits for them and lands after them.
        _append_async(log, make_request(1), done)
        info = log.append(make_request(1), validate_produce_batches(make_request(1)), leader_epoch=0, now_ms=1)
        assert info.first_offset == 6 and log.pending_writes == 0 and done[-1] is None
        assert _read_offsets(log) == list(range(7))

    asyncio.run(run())


def test_writes_queued_across_a_roll_keep_their_order(log_dir, writer):
    async def run():
        log = Log.create(log_dir, "topic", 0, LogConfig(segment_bytes=600, index_interval_bytes=100), 0)
        log.writer = writer
        done: list = []
        for _ in range(40):
            _append_async(log, make_request(3), done)
        log.wait_for_writes()
        assert done == [None] * 40 and len(log.segments) > 3
        assert _read_offsets(log) == list(range(120))
        log.close()
        reopened = Log.open(log_dir, "topic", 0, LogConfig(segment_bytes=600), 0, clean_shutdown=False)
        assert reopened.log_end_offset == 120  # recovery finds every batch whole

    asyncio.run(run())


def test_a_failed_write_fails_the_queued_ones_and_rolls_back_to_the_disk(log_dir, writer):
    async def run():
        log = Log.create(log_dir, "topic", 0, LogConfig(), 0)
        log.writer = writer
        gate = threading.Event()
        calls = []
        real_pwrite = os.pwrite

        def failing_pwrite(fd, data, position):
            gate.wait(10)
            calls.append(position)
            if len(calls) == 2:
                raise OSError(errno.ENOSPC, "No space left on device")
            return real_pwrite(fd, data, position)

        writer_module.os.pwrite = failing_pwrite
        try:
            done: list = []

            def idem(seq: int) -> bytearray:
                return make_request(2, producer_id=7, producer_epoch=0, base_sequence=seq)

            infos = [_append_async(log, idem(seq), done) for seq in (0, 2, 4)]
            assert [i.first_offset for i in infos] == [0, 2, 4]
            gate.set()
            while len(done) < 3:
                await asyncio.sleep(0.01)
        finally:
            writer_module.os.pwrite = real_pwrite
        assert done[0] is None
        assert all(isinstance(e, KafkaStorageError) for e in done[1:])
        assert len(calls) == 2  # the third was never attempted: it would have left a hole
        assert log.log_end_offset == 2 and log.active_segment.size == os.path.getsize(log.active_segment.log_path)
        # The producer's retry of the failed batch is accepted at the next offset: its state was rolled back.
        retry: list = []
        again = _append_async(log, idem(2), retry)
        assert (again.first_offset, again.duplicate) == (2, False)
        log.wait_for_writes()
        assert retry == [None] and _read_offsets(log) == [0, 1, 2, 3]

    asyncio.run(run())
