"""Give every broker the same memory state: a page cache full of clean, cold pages, as on a server.

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
kernel caches its holes as zero pages, until free memory falls to ``target_free_bytes``.  Reading only
pages not yet cached consumes free memory and nothing else: it evicts none of the broker's data (the
kernel reclaims only below its low watermark, far under the target), and the filler's pages are
cold, the first the kernel reclaims when a broker writes.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import TracebackType

CHUNK = 8 << 20
DEFAULT_TARGET_FREE = 512 << 20


def meminfo_bytes(field: str) -> int:
    """One /proc/meminfo field ("MemFree", "Cached", …) in bytes."""
    with open("/proc/meminfo", "rb") as f:
        for line in f:
            name, _, rest = line.partition(b":")
            if name.decode() == field:
                return int(rest.split()[0]) * 1024
    raise KeyError(field)


class PageCacheFill:
    """A sparse file read into the page cache until free memory is down to a target; see the module."""

    def __init__(self, directory: Path, target_free_bytes: int = DEFAULT_TARGET_FREE) -> None:
        self.target_free_bytes = target_free_bytes
        self.path = directory / "page-cache-fill"
        # Larger than memory, so a top-up never runs out of pages it has not read since they were
        # last reclaimed; holes take no disk space.
        self.size = 2 * meminfo_bytes("MemTotal")
        with open(self.path, "wb") as f:
            f.truncate(self.size)
        self.cursor = 0
        self.buffer = bytearray(CHUNK)

    def top_up(self) -> int:
        """Read forward until MemFree is at most the target; bytes read (0 when already there)."""
        read = 0
        # Twice the deficit at most: where reading does not take free memory (a file system that
        # does not cache holes), give up rather than read the whole file.
        limit = min(self.size, 2 * (meminfo_bytes("MemFree") - self.target_free_bytes) + CHUNK)
        fd = os.open(self.path, os.O_RDONLY)
        try:
            while read < limit and meminfo_bytes("MemFree") > self.target_free_bytes:
                os.preadv(fd, [self.buffer], self.cursor)
                self.cursor = (self.cursor + CHUNK) % self.size
                read += CHUNK
        finally:
            os.close(fd)
        return read

    def close(self) -> None:
        self.path.unlink(missing_ok=True)

    def __enter__(self) -> PageCacheFill:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
