"""Log.append_async: the log directory's writer thread writes produced batches (storage/writer.py).

Offsets and producer state move at once; the log end offset, reads and the segment's indexes only
once the write is done and taken back on the event loop; a failed write fails the writes queued
after it and rolls the log back to what is on disk."""

from __future__ import annotations

import asyncio
import os
import resource
import signal

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


@pytest.fixture(params=["c-thread", "python-thread"])
def writer(request, monkeypatch):
    """Both writer threads: the C one (storage/_logwriter.c, no GIL) and the Python fallback."""
    if request.param == "python-thread":
        monkeypatch.setenv("PYBROKER_LOG_WRITER", "python")
    elif writer_module._NativeWriter is None:
        if os.environ.get("CI"):
            pytest.fail("the C log writer (pybroker.storage._logwriter) is not built: pip install -e . needs a C compiler")
        pytest.skip("the C log writer is not built here (no C compiler when pybroker was installed)")
    w = LogDirWriter("test")
    assert (w._native is not None) == (request.param == "c-thread")
    w.LARGE_WRITE = 0  # every write goes to the thread (the loop writes small ones itself otherwise)
    yield w
    w.stop()


@pytest.fixture
def file_size_limit():
    """set(n): writes past n bytes of any file fail with EFBIG (RLIMIT_FSIZE; SIGXFSZ ignored)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    yield lambda n: resource.setrlimit(resource.RLIMIT_FSIZE, (n, hard))
    resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    signal.signal(signal.SIGXFSZ, previous)


def test_bytes_become_visible_when_the_write_is_taken_back(log_dir, writer):
    async def run():
        log = Log.create(log_dir, "topic", 0, LogConfig(), 0)
        log.writer = writer
        done: list = []
        first = _append_async(log, make_request(3), done)
        second = _append_async(log, make_request(2), done)
        assert (first.first_offset, first.last_offset, first.pending) == (0, 2, True)
        assert (second.first_offset, second.last_offset) == (3, 4)  # assigned at once
        # Until the loop takes the writes back, whatever the thread has done: nothing is readable.
        assert log.log_end_offset == 0 and log.read(0, 1 << 20) is None
        assert log.active_segment.size == 0 and done == []
        while len(done) < 2:
            await asyncio.sleep(0.01)
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


def test_a_failed_write_fails_the_queued_ones_and_rolls_back_to_the_disk(log_dir, writer, file_size_limit):
    async def run():
        log = Log.create(log_dir, "topic", 0, LogConfig(), 0)
        log.writer = writer
        done: list = []

        def idem(seq: int) -> bytearray:
            return make_request(2, producer_id=7, producer_epoch=0, base_sequence=seq)

        batch_size = len(idem(0))
        # The second batch would cross the limit: EFBIG; the third must then not be written at all.
        file_size_limit(batch_size + 10)
        infos = [_append_async(log, idem(seq), done) for seq in (0, 2, 4)]
        assert [i.first_offset for i in infos] == [0, 2, 4]
        while len(done) < 3:
            await asyncio.sleep(0.01)
        file_size_limit(resource.RLIM_INFINITY)
        assert done[0] is None
        assert all(isinstance(e, KafkaStorageError) for e in done[1:]), done
        assert "earlier write" not in str(done[1]) and "earlier write" in str(done[2])  # skipped, not tried
        assert log.log_end_offset == 2
        assert log.active_segment.size == os.path.getsize(log.active_segment.log_path) == batch_size
        # The producer's retry of the failed batch is accepted at the next offset: its state was rolled back.
        retry: list = []
        again = _append_async(log, idem(2), retry)
        assert (again.first_offset, again.duplicate) == (2, False)
        log.wait_for_writes()
        assert retry == [None] and _read_offsets(log) == [0, 1, 2, 3]

    asyncio.run(run())


def test_small_writes_stay_on_the_loop_until_one_is_slow(log_dir, monkeypatch):
    """A hand-off costs more CPU than a small page-cache write: the loop writes small batches
    itself, large ones go to the thread, and after a slow inline write (the kernel throttling
    writers) every write goes to the thread for a while."""

    async def run():
        writer = LogDirWriter("test")
        try:
            log = Log.create(log_dir, "topic", 0, LogConfig(), 0)
            writer.attach(log)
            done: list = []
            small = _append_async(log, make_request(3), done)
            assert not small.pending and log.log_end_offset == 3 and done == []  # written, no call
            large = _append_async(log, make_request(2, value_size=LogDirWriter.LARGE_WRITE), done)
            assert large.pending and log.log_end_offset == 3
            behind = _append_async(log, make_request(1), done)  # small, but behind a queued write
            assert behind.pending
            log.wait_for_writes()
            assert done == [None, None] and log.log_end_offset == 6
            long_stall = LogDirWriter.STALL_SHARE * LogDirWriter.STALL_WINDOW_S
            writer.inline_write_stalled(long_stall, slept=False)  # preempted: no change
            assert not _append_async(log, make_request(1), done).pending
            writer.inline_write_stalled(long_stall, slept=True)
            slowed = _append_async(log, make_request(1), done)
            assert slowed.pending
            log.wait_for_writes()
            assert _read_offsets(log) == list(range(8))
        finally:
            writer.stop()

    asyncio.run(run())


def test_writes_are_diverted_only_for_stalls_that_add_up_and_longer_while_they_go_on(monkeypatch):
    """Isolated short stalls never divert writes (a hand-off per write costs more than they do);
    stalled time adding up to STALL_SHARE of STALL_WINDOW_S diverts them for MIN_SLOW_PERIOD_S;
    diverting again soon after a diversion ended (the kernel still throttling) doubles the next
    period up to MAX_SLOW_PERIOD_S; a diversion long after starts again from the minimum."""
    import pybroker.storage.writer as writer_module

    clock = [1000.0]
    monkeypatch.setattr(writer_module.time, "monotonic", lambda: clock[0])
    writer = LogDirWriter("test")
    small = 1024
    threshold = LogDirWriter.STALL_SHARE * LogDirWriter.STALL_WINDOW_S

    for _ in range(60):  # a 9 ms stall every second for a minute: never worth diverting
        clock[0] += 1.0
        writer.inline_write_stalled(0.009, slept=True)
        assert not writer.should_queue(small)
    for _ in range(3):  # the same stalls every 20 ms: they add up
        clock[0] += 0.02
        writer.inline_write_stalled(0.009, slept=True)
    assert not writer.should_queue(small)
    stalls = 3
    while not writer.should_queue(small):
        clock[0] += 0.02
        writer.inline_write_stalled(0.009, slept=True)
        stalls += 1
    assert 5 <= stalls <= 8  # ~50 ms of stalls within the window
    assert writer._slow_until - clock[0] == LogDirWriter.MIN_SLOW_PERIOD_S

    def divert_right_after_the_last_diversion() -> float:
        clock[0] = writer._slow_until + 0.01
        assert not writer.should_queue(small)
        writer.inline_write_stalled(threshold, slept=True)  # one stall as long as the threshold
        assert writer.should_queue(small)
        return writer._slow_until - clock[0]

    periods = [divert_right_after_the_last_diversion() for _ in range(8)]
    assert periods[:4] == [0.5, 1.0, 2.0, 4.0]
    assert periods[4:] == [LogDirWriter.MAX_SLOW_PERIOD_S] * 4
    clock[0] = writer._slow_until + 60.0  # quiet for a minute
    assert not writer.should_queue(small)
    writer.inline_write_stalled(threshold, slept=False)  # only preempted: not a stall of the disk
    assert not writer.should_queue(small)
    writer.inline_write_stalled(threshold, slept=True)
    assert writer._slow_until - clock[0] == LogDirWriter.MIN_SLOW_PERIOD_S
