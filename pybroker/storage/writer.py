"""Appends written off the event loop: one writer thread per log directory.

``Log.append_async`` assigns offsets, checks producer state and stamps the batch on the event loop,
then hands the bytes to its directory's ``LogDirWriter``; the thread ``pwrite``s them (and
``fsync``s when the log's flush policy asks), both of which release the GIL, and the completions go
back to the loop in order, where the log makes the bytes visible (segment size, indexes, log end
offset) and the produce request is answered.  A connection therefore never waits on another
connection's disk write, and an acknowledgement never precedes its write.

One FIFO thread per directory keeps every partition's writes in order.  Memory stays bounded
without a queue limit of its own: a job holds the request's frame, which stays charged to the
broker's request memory pool (``queued.max.request.bytes``) until the request is answered, and each
connection has at most one produce request in flight.

The thread is C (``_logwriter.c``: no GIL) when it is built, else Python.  After a failed write
(disk full, I/O error) the thread skips the log's later writes that were
already queued (they would leave a hole) and the log rolls its in-memory state back to what is on
disk once they have all come back (``Log._write_done``).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import os
import resource
import threading
import time
from collections.abc import Callable
from queue import Empty, SimpleQueue
from typing import Any

try:  # the thread in C, which never takes the GIL (setup.py builds it; optional)
    from pybroker.storage._logwriter import SKIPPED as _SKIPPED
    from pybroker.storage._logwriter import Writer
    from pybroker.storage._logwriter import voluntary_switches as native_switches
except ImportError:  # pragma: no cover - no C compiler where pybroker was installed
    _NativeWriter = None
    _native_switches = None
    _SKIPPED = -1
else:  # (assigned here, not imported as the name: the checker then types it "Writer or None")
    _NativeWriter = Writer
    _native_switches = native_switches

# An extension built before kick() existed (a checkout whose build_ext was not re-run) wakes its
# thread on every submit: used so, rather than failing.
_BATCHED_WAKE = _NativeWriter is not None and hasattr(_NativeWriter, "kick")

logger = logging.getLogger(__name__)
_GROUPS = itertools.count(1)


def _voluntary_switches() -> int:
    """Voluntary context switches of the calling thread so far (it slept: I/O, a lock)."""
    return resource.getrusage(resource.RUSAGE_THREAD).ru_nvcsw


# The same count from C where it is built (read around every write the loop makes: ~0.4 us less).
voluntary_switches = _native_switches if _native_switches is not None else _voluntary_switches


class WriteSkipped(OSError):
    """A write not attempted because an earlier write of the same log failed."""


class LogWriteState:
    """Per log, shared with the writer thread: ``failed`` is set by the (Python) thread when a
    write of the log fails and cleared by the log (on the loop) once none of its writes is queued;
    the C thread keeps the same per ``group``."""

    __slots__ = ("failed", "group", "slot")

    def __init__(self) -> None:
        self.failed = False
        self.group = next(_GROUPS)
        self.slot = 0  # which of the directory's C threads writes this log


class WriteJob:
    """One append's bytes: ``data`` at ``position`` of the segment file, then maybe an fsync."""

    __slots__ = (
        "log",
        "state",
        "file",
        "data",
        "position",
        "fsync",
        "segment",
        "infos",
        "end_offset",
        "end_position",
        "callbacks",
        "error",
        "finished",
        "delivered",
    )

    def __init__(
        self,
        log: Any,
        state: LogWriteState,
        file: Any,
        data: Any,
        position: int,
        fsync: bool,
        segment: Any,
        infos: list,
        end_offset: int,
    ) -> None:
        self.log = log
        self.state = state
        self.file = file  # the SegmentFile itself: its descriptor stays open until the write is done
        self.data = data
        self.position = position
        self.fsync = fsync
        self.segment = segment
        self.infos = infos
        self.end_offset = end_offset  # the log end offset once this write is visible
        self.end_position = position + len(data)  # the segment's size then
        self.callbacks: list[Callable[[BaseException | None], None]] = []
        self.error: OSError | None = None
        self.finished = False  # set by the writer thread
        self.delivered = False  # set on the loop once the log has taken the result

    def run(self) -> None:
        """On the writer thread."""
        if self.state.failed:
            self.error = WriteSkipped("an earlier write to this log failed")
            return
        fd = self.file.fileno()
        view = memoryview(self.data)
        position = self.position
        try:
            while view:
                written = os.pwrite(fd, view, position)
                position += written
                view = view[written:]
            if self.fsync:
                os.fsync(fd)
        except OSError as e:
            self.error = e
            self.state.failed = True
            # A partial write (disk full mid-batch) must not stay behind the valid end.
            try:
                os.ftruncate(fd, self.position)
            except OSError:
                pass  # recovery truncates a torn tail anyway
        finally:
            self.data = None  # the request's frame may go as soon as the loop lets it


class LogDirWriter:
    """The writer threads of one log directory (started on first use, on the event loop).

    C threads (``_logwriter``) when they are built: they write without the GIL and wake the loop
    through an eventfd.  ``threads`` of them, each log bound to one (its writes stay in order), so
    that one partition's slow writes (a large batch, an fsync) do not hold up the others'.  Without
    the extension, one Python thread, which must take the GIL around each write (measured: that
    doubles the CPU a small produce request costs); ``PYBROKER_LOG_WRITER=python`` forces it.

    ``should_queue`` decides per append (Log.append_async), because a hand-off is not free: waking
    a thread and being woken back costs the loop ~10-20 us of CPU, more than a 16 KiB pwrite into
    the page cache (~9 us).  A write goes to a thread when it is large (``LARGE_WRITE``: copying it
    into the page cache takes long enough to be worth it), needs an fsync, follows writes of its
    log still queued, or when this directory's writes have lately been slow (an inline write that
    slept in the kernel for ``SLOW_WRITE_S`` or more sends every write to the threads for a while):
    the kernel throttling writers to the disk's pace is what stalls a write, and then no connection
    waits on it.  Otherwise the loop writes it itself.

    When, and for how long, adapts to what stalls.  Under sustained throttling inline writes keep
    sleeping, so the writes must go to the threads; but isolated stalls (page reclaim, a journal
    commit: a few ms every second or few in a long produce run) are not worth it, because while
    writes are diverted each costs the loop a hand-off, and on a broker with one CPU the thread
    cannot copy beside the loop either.  Measured with one Java producer and the broker on one CPU
    (``bench.compare --sustained``, 8 GiB, 2026-11-28): eight stalls of 3-9 ms in 52 s kept a fixed
    5 s diversion on for most of the run, at 5.2-5.5 CPU-s/GB and 150-158 MB/s, against 4.1 and 191
    with no diversion.  So stalled time is summed, decaying over ``STALL_WINDOW_S``, and writes are
    diverted only once it reaches ``STALL_SHARE`` of that window (one stall of 50 ms does it, 3-9 ms
    stalls a second apart never do), for ``MIN_SLOW_PERIOD_S`` at first; diverting again within one
    period after a diversion ended (the throttling went on) doubles the period, up to
    ``MAX_SLOW_PERIOD_S``; a later diversion starts again from the minimum."""

    LARGE_WRITE = 128 * 1024
    SLOW_WRITE_S = 0.002
    STALL_WINDOW_S = 1.0
    STALL_SHARE = 0.05
    MIN_SLOW_PERIOD_S = 0.25
    MAX_SLOW_PERIOD_S = 5.0
    STALL_LOG_INTERVAL_S = 60.0  # at most one log line per directory per interval

    def __init__(self, name: str, threads: int = 1) -> None:
        self.name = name
        native = _NativeWriter if os.environ.get("PYBROKER_LOG_WRITER") != "python" else None
        self._natives = [native() for _ in range(max(1, threads))] if native is not None else []
        self._native = self._natives[0] if self._natives else None  # the Python fallback's switch
        self._slots = itertools.count()
        self._queue: SimpleQueue[WriteJob | None] = SimpleQueue()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._cond = threading.Condition()
        self._queued = 0  # jobs submitted and not yet delivered back (loop side)
        self._slow_until = 0.0  # time.monotonic() until which every write goes to a thread
        self._slow_period = 0.0  # how long the last diversion was (0: none yet)
        self._stalled = 0.0  # seconds inline writes slept lately, decaying over STALL_WINDOW_S
        self._stalled_at = 0.0  # time.monotonic() of the last stall counted in it
        self._diversions = 0  # since the last log line
        self._stall_logged = float("-inf")  # when that line was written
        self._kick_scheduled = False  # _kick is to run: C jobs were submitted without waking their thread

    @property
    def busy(self) -> bool:
        return self._queued > 0

    def attach(self, log: Any) -> None:
        """``log`` writes through this directory's threads, bound to one of them."""
        log.writer = self
        if self._natives:
            log._write_state.slot = next(self._slots) % len(self._natives)

    def should_queue(self, nbytes: int) -> bool:
        return nbytes >= self.LARGE_WRITE or (self._slow_until > 0.0 and time.monotonic() < self._slow_until)

    def inline_write_stalled(self, seconds: float, slept: bool) -> None:
        """An append the loop wrote itself took ``seconds`` (>= SLOW_WRITE_S).  If the thread slept
        in the kernel meanwhile (a voluntary context switch: throttled to the disk's pace, waiting
        on the journal), the stall counts towards diverting writes to the threads; if it was only
        preempted by another process, a thread would not have helped."""
        if not slept:
            return
        now = time.monotonic()
        self._stalled = self._stalled * math.exp((self._stalled_at - now) / self.STALL_WINDOW_S) + seconds
        self._stalled_at = now
        if self._stalled < self.STALL_SHARE * self.STALL_WINDOW_S:
            return  # the loop lost too little to this to pay for hand-offs
        stalled, self._stalled = self._stalled, 0.0
        if self._slow_period and now - self._slow_until < self._slow_period:
            period = min(self._slow_period * 2, self.MAX_SLOW_PERIOD_S)  # still throttled: divert longer
        else:
            period = self.MIN_SLOW_PERIOD_S
        self._slow_period = period
        self._slow_until = now + period
        self._diversions += 1
        if now - self._stall_logged >= self.STALL_LOG_INTERVAL_S:
            logger.info(
                "log dir %s: writes stalled the event loop for %.0f ms lately (decaying over %.0f s);"
                " writes go to the writer threads for the next %.2f s (%d diversion(s) since the last"
                " such line)",
                self.name,
                stalled * 1000,
                self.STALL_WINDOW_S,
                period,
                self._diversions,
            )
            self._diversions = 0
            self._stall_logged = now

    def submit(self, job: WriteJob) -> None:
        """On the event loop."""
        if self._natives:
            native = self._natives[job.state.slot]
            if self._loop is None:
                self._loop = asyncio.get_running_loop()
                for n in self._natives:
                    self._loop.add_reader(n.fileno(), self._take_native, n)
            self._queued += 1
            # The thread is woken once for what this loop iteration submits (a produce request's
            # partitions, the requests of one read), by _kick, run right after the current callback:
            # a futex wake per job cost the loop more than the write it handed off.
            if not _BATCHED_WAKE:
                native.submit(job, job.file.fileno(), job.data, job.position, job.fsync, job.state.group)
                return
            native.submit(job, job.file.fileno(), job.data, job.position, job.fsync, job.state.group, False)
            if not self._kick_scheduled:
                self._kick_scheduled = True
                self._loop.call_soon(self._kick)
            return
        if self._thread is None or not self._thread.is_alive():
            self._loop = asyncio.get_running_loop()
            self._thread = threading.Thread(target=self._run, name=f"log-writer-{self.name}", daemon=True)
            self._thread.start()
        self._queued += 1
        self._queue.put(job)

    def wait(self, job: WriteJob) -> None:
        """Block until the writer has done ``job`` and hand it back to its log (which must touch
        its files itself: truncation, a roll, a follower or marker append, a flush or close)."""
        if job.delivered:
            return
        if self._natives:
            native = self._natives[job.state.slot]
            native.wait_all()
            self._take_native(native)
            return
        if not job.finished:
            with self._cond:
                while not job.finished:
                    self._cond.wait()
        if not job.delivered:
            job.log._write_done(job)

    def clear_failed(self, state: LogWriteState) -> None:
        """On the loop, once none of the log's writes is queued: write its next ones again."""
        state.failed = False
        if self._natives:
            self._natives[state.slot].clear_failed(state.group)

    def stop(self) -> None:
        """Let the threads end after what is queued (the broker stops)."""
        if self._natives:
            for native in self._natives:
                native.wait_all()
                if self._loop is not None:
                    self._take_native(native)
                    if not self._loop.is_closed():
                        self._loop.remove_reader(native.fileno())
                native.stop()
            self._loop = None
            return
        if self._thread is not None and self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()
        self._thread = None

    def _kick(self) -> None:
        """On the loop, after the callback that submitted jobs: wake the C threads for them."""
        self._kick_scheduled = False
        for native in self._natives:
            native.kick()

    def _take_native(self, native: Any) -> None:
        """On the loop, when a C thread's eventfd is readable: its finished jobs, in order."""
        for job, err in native.take():
            job.finished = True
            job.data = None
            if err:
                job.error = (
                    WriteSkipped("an earlier write to this log failed")
                    if err == _SKIPPED
                    else OSError(err, os.strerror(err))
                )
            self._queued -= 1
            if not job.delivered:
                job.log._write_done(job)

    def _run(self) -> None:
        get = self._queue.get
        stopping = False
        while not stopping:
            job = get()
            if job is None:
                break
            batch = [job]
            while True:  # everything queued meanwhile goes in the same round trip to the loop
                try:
                    more = self._queue.get_nowait()
                except Empty:
                    break
                if more is None:
                    stopping = True
                    break
                batch.append(more)
            for job in batch:
                job.run()
                job.finished = True
            with self._cond:
                self._cond.notify_all()
            loop = self._loop
            try:
                if loop is not None:
                    loop.call_soon_threadsafe(self._deliver, batch)
            except RuntimeError:  # the loop is closed: nobody waits for these any more
                logger.debug("log writer %s: loop closed, %d completions dropped", self.name, len(batch))

    def _deliver(self, batch: list[WriteJob]) -> None:
        """On the loop: each log takes its results in order."""
        for job in batch:
            self._queued -= 1
            if not job.delivered:
                job.log._write_done(job)
