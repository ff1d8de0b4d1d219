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

After a failed write (disk full, I/O error) the thread skips the log's later writes that were
already queued (they would leave a hole) and the log rolls its in-memory state back to what is on
disk once they have all come back (``Log._write_done``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Callable
from queue import Empty, SimpleQueue
from typing import Any

logger = logging.getLogger(__name__)


class WriteSkipped(OSError):
    """A write not attempted because an earlier write of the same log failed."""


class LogWriteState:
    """Per log, shared with the writer thread: ``failed`` is set by the thread when a write of
    the log fails and cleared by the log (on the loop) once none of its writes is queued."""

    __slots__ = ("failed",)

    def __init__(self) -> None:
        self.failed = False


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
    """The writer thread of one log directory (started on first use, on the event loop)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._queue: SimpleQueue[WriteJob | None] = SimpleQueue()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._cond = threading.Condition()
        self._queued = 0  # jobs submitted and not yet delivered back (loop side)

    @property
    def busy(self) -> bool:
        return self._queued > 0

    def submit(self, job: WriteJob) -> None:
        """On the event loop."""
        if self._thread is None or not self._thread.is_alive():
            self._loop = asyncio.get_running_loop()
            self._thread = threading.Thread(target=self._run, name=f"log-writer-{self.name}", daemon=True)
            self._thread.start()
        self._queued += 1
        self._queue.put(job)

    def wait(self, job: WriteJob) -> None:
        """Block the calling thread until the writer has done ``job`` (a log that must touch its files
        itself: truncation, a roll, a follower or marker append, a flush or close)."""
        if job.finished:
            return
        with self._cond:
            while not job.finished:
                self._cond.wait()

    def stop(self) -> None:
        """Let the thread end after what is queued (the broker stops)."""
        if self._thread is not None and self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()
        self._thread = None

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
