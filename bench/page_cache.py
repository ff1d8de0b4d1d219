"""Give every broker the same memory state: a page cache full of clean, cold pages, as on a server.

``PageCacheFill.settle()`` before each measured workload: nothing dirty left by earlier workloads,
then the page cache topped up.

Why: on this machine (a Firecracker guest whose kernel hands free memory back to the host, "free page
reporting"), a page the guest takes from memory it left free for a few seconds costs a fault into
the host and a zeroing there; a page it takes back from its own page cache (reclaim) costs nothing
of the kind.  Measured with a plain writer (8 files, 15,554-byte ``pwrite``s, one CPU), after the
machine sat idle: 0.54-0.68 CPU-s/GB for the first 7 GiB, then 2.4-3.1 CPU-s/GB, the kernel's
copy into the page cache faulting page by page.  Which phase a broker's run falls into depends on
what ran before it (a deleted data directory, an exited JVM), so one broker measured in the first
phase and the other in the second compared memory states, not brokers.  With the page cache filled
first, the same 14 GiB cost 0.54-0.71 throughout.  On a long-running server the page cache is full;
that is the state both brokers get here.

How: a sparse file (no disk space) is read forward from where the last top-up stopped, so that the
kernel caches its holes as zero pages, until free memory falls to ``target_free_bytes`` or stops
falling (the kernel's reclaim then keeps what it keeps free; on this machine ~2.9 GB).  Reading pages
not yet cached consumes free memory; only the last few hundred MiB, read once the cache is full, make
the kernel reclaim, and it reclaims the coldest pages first: the filler's own from earlier top-ups.
The filler's pages are cold, the first the kernel reclaims when a broker writes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from bench.sysstat import meminfo_bytes

CHUNK = 8 << 20
STALL_WINDOW = 256 << 20  # reading this much lowered free memory by less than a quarter of it: full
DEFAULT_TARGET_FREE = 512 << 20


class PageCacheFill:
    """A sparse file read into the page cache until free memory is down to a target; see the module."""

    def __init__(
        self,
        directory: Path,
        target_free_bytes: int = DEFAULT_TARGET_FREE,
        free_memory: Callable[[], int] = lambda: meminfo_bytes("MemFree"),
    ) -> None:
        self.target_free_bytes = target_free_bytes
        self.free_memory = free_memory
        self.path = directory / "page-cache-fill"
        # Larger than memory, so a top-up never runs out of pages it has not read since they were
        # last reclaimed; holes take no disk space.
        self.size = 2 * meminfo_bytes("MemTotal")
        with open(self.path, "wb") as f:
            f.truncate(self.size)
        self.cursor = 0
        self.buffer = bytearray(CHUNK)

    def top_up(self) -> int:
        """Read forward until MemFree is at most the target or stops falling; bytes read."""
        read = 0
        free = self.free_memory()
        window_start = free  # MemFree when the last STALL_WINDOW of reading began
        stalled = 0  # windows in a row that did not lower it
        fd = os.open(self.path, os.O_RDONLY)
        try:
            while free > self.target_free_bytes and read < self.size:
                os.preadv(fd, [self.buffer], self.cursor)
                self.cursor = (self.cursor + CHUNK) % self.size
                read += CHUNK
                free = self.free_memory()
                if read % STALL_WINDOW == 0:
                    # The kernel's reclaim keeps some memory free (kswapd: ~2.9 GB of this 24 GiB
                    # machine's); once reading no longer lowers it, the cache is full.  Two windows
                    # in a row: free page reporting holds pages off the free lists for a moment,
                    # which moves MemFree by itself.
                    stalled = stalled + 1 if window_start - free < STALL_WINDOW // 4 else 0
                    if stalled == 2:
                        break
                    window_start = free
        finally:
            os.close(fd)
        return read

    def settle(self) -> tuple[float, int]:
        """What to call before each measured workload: write back what earlier workloads left dirty
        (``sync``; else the kernel's writeback of the last 6 GiB run throttles the next one's
        writes, and the next one's latencies measure the disk and the order of the workloads), then
        ``top_up``.  Seconds the sync took, bytes the top-up read."""
        started = time.perf_counter()
        os.sync()
        return time.perf_counter() - started, self.top_up()

    def close(self) -> None:
        self.path.unlink(missing_ok=True)

    def __enter__(self) -> PageCacheFill:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
