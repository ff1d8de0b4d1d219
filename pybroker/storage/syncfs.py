"""syncfs(2): make every written file of one file system durable in a single call.

At shutdown this replaces a few fsyncs per partition (each a disk round trip) with one call per
log directory. Linux only; elsewhere callers fall back to per-file fsync. Since Linux 5.8 it
reports a writeback error of any file on the file system, as the fsyncs it replaces would have.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from pathlib import Path

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True) if sys.platform == "linux" else None
_syncfs = getattr(_libc, "syncfs", None)


def syncfs_available() -> bool:
    return _syncfs is not None


def syncfs(path: Path) -> None:
    """Flush the file system holding ``path`` to disk; raises OSError on a write-back error."""
    if _syncfs is None:
        raise OSError("syncfs is not available on this platform")
    fd = os.open(path, os.O_RDONLY)
    try:
        if _syncfs(fd) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"syncfs({path}): {os.strerror(errno)}")
    finally:
        os.close(fd)
