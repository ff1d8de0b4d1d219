"""Sparse offset and time indexes in Kafka's on-disk format, held in memory as compact arrays.

Entries are kept in `array`s and searched with `bisect`; new entries reach the file at flush/roll/close.
Files hold exactly the written entries (Kafka trims its preallocated index files on close the same way).
"""

from __future__ import annotations

import logging
import os
import struct
from array import array
from bisect import bisect_right
from pathlib import Path

from pybroker.storage.checkpoint import read_if_exists
from pybroker.storage.errors import StorageError

logger = logging.getLogger(__name__)

_TIME_ENTRY = struct.Struct(">qi")


class CorruptIndexError(StorageError):
    """An index file that cannot be trusted; the segment rebuilds it."""


def _write_file(path: Path, data: bytes, offset: int, truncate_to: int, fsync: bool) -> None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if data:
            os.pwrite(fd, data, offset)
        os.ftruncate(fd, truncate_to)
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


class OffsetIndex:
    """8-byte entries: offset relative to the segment base (int32), file position (int32)."""

    ENTRY_SIZE = 8

    def __init__(self, path: Path, base_offset: int, max_entries: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max_entries
        self._relative_offsets = array("i")
        self._positions = array("i")
        self._persisted = 0  # entries known to be on disk in this order
        self._rewrite = True  # the file may hold entries we no longer have

    @classmethod
    def load(cls, path: Path, base_offset: int, max_entries: int) -> OffsetIndex:
        index = cls(path, base_offset, max_entries)
        data = read_if_exists(path) or b""
        if len(data) % cls.ENTRY_SIZE:
            raise CorruptIndexError(f"{path}: size {len(data)} is not a multiple of 8")
        words = array("i", data)
        if words and struct.pack("=i", 1) != struct.pack(">i", 1):
            words.byteswap()
        index._relative_offsets = words[0::2]
        index._positions = words[1::2]
        relative = index._relative_offsets
        if any(relative[i] >= relative[i + 1] for i in range(len(relative) - 1)) or (
            relative and relative[0] < 0
        ):
            raise CorruptIndexError(f"{path}: offsets are not strictly increasing")
        index._persisted = len(relative)
        index._rewrite = False
        return index

    def __len__(self) -> int:
        return len(self._relative_offsets)

    @property
    def is_full(self) -> bool:
        return len(self._relative_offsets) >= self.max_entries

    @property
    def last_entry(self) -> tuple[int, int]:
        if not self._relative_offsets:
            return self.base_offset, 0
        return self.base_offset + self._relative_offsets[-1], self._positions[-1]

    def append(self, offset: int, position: int) -> None:
        relative = offset - self.base_offset
        if self._relative_offsets and relative <= self._relative_offsets[-1]:
            return
        self._relative_offsets.append(relative)
        self._positions.append(position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """Largest entry with offset <= `offset`, or (base offset, 0)."""
        slot = bisect_right(self._relative_offsets, offset - self.base_offset) - 1
        if slot < 0:
            return self.base_offset, 0
        return self.base_offset + self._relative_offsets[slot], self._positions[slot]

    def truncate_to(self, offset: int) -> None:
        """Drop entries with offset >= `offset`."""
        keep = bisect_right(self._relative_offsets, offset - self.base_offset - 1)
        self.truncate_entries(keep)

    def truncate_entries(self, keep: int) -> None:
        if keep < len(self._relative_offsets):
            del self._relative_offsets[keep:]
            del self._positions[keep:]
            if keep < self._persisted:
                self._persisted = keep
                self._rewrite = True

    def reset(self) -> None:
        self.truncate_entries(0)
        self._rewrite = True

    def flush(self, fsync: bool = True) -> None:
        count = len(self._relative_offsets)
        if count == self._persisted and not self._rewrite:
            return
        start = self._persisted
        words = array("i", bytes(8 * (count - start)))
        words[0::2] = self._relative_offsets[start:]
        words[1::2] = self._positions[start:]
        if struct.pack("=i", 1) != struct.pack(">i", 1):
            words.byteswap()
        _write_file(self.path, words.tobytes(), start * 8, count * 8, fsync)
        self._persisted = count
        self._rewrite = False


class TimeIndex:
    """12-byte entries: max timestamp so far (int64), relative offset of that timestamp's batch (int32)."""

    ENTRY_SIZE = 12

    def __init__(self, path: Path, base_offset: int, max_entries: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max_entries
        self._timestamps = array("q")
        self._relative_offsets = array("i")
        self._persisted = 0
        self._rewrite = True

    @classmethod
    def load(cls, path: Path, base_offset: int, max_entries: int) -> TimeIndex:
        index = cls(path, base_offset, max_entries)
        data = read_if_exists(path) or b""
        if len(data) % cls.ENTRY_SIZE:
            raise CorruptIndexError(f"{path}: size {len(data)} is not a multiple of 12")
        for timestamp, relative in _TIME_ENTRY.iter_unpack(data):
            if index._timestamps and (
                timestamp <= index._timestamps[-1] or relative < index._relative_offsets[-1]
            ):
                raise CorruptIndexError(f"{path}: entries are not increasing")
            index._timestamps.append(timestamp)
            index._relative_offsets.append(relative)
        index._persisted = len(index._timestamps)
        index._rewrite = False
        return index

    def __len__(self) -> int:
        return len(self._timestamps)

    @property
    def is_full(self) -> bool:
        return len(self._timestamps) >= self.max_entries

    @property
    def last_entry(self) -> tuple[int, int]:
        """(timestamp, offset) of the last entry, or (-1, base offset)."""
        if not self._timestamps:
            return -1, self.base_offset
        return self._timestamps[-1], self.base_offset + self._relative_offsets[-1]

    def maybe_append(self, timestamp: int, offset: int) -> None:
        if self._timestamps and timestamp <= self._timestamps[-1]:
            return
        if self.is_full:
            return
        self._timestamps.append(timestamp)
        self._relative_offsets.append(offset - self.base_offset)

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """Entry with the largest timestamp <= `timestamp`, or (-1, base offset)."""
        slot = bisect_right(self._timestamps, timestamp) - 1
        if slot < 0:
            return -1, self.base_offset
        return self._timestamps[slot], self.base_offset + self._relative_offsets[slot]

    def truncate_to(self, offset: int) -> None:
        """Drop entries whose offset is >= `offset`."""
        keep = len(self._relative_offsets)
        relative = offset - self.base_offset
        while keep and self._relative_offsets[keep - 1] >= relative:
            keep -= 1
        self.truncate_entries(keep)

    def truncate_entries(self, keep: int) -> None:
        if keep < len(self._timestamps):
            del self._timestamps[keep:]
            del self._relative_offsets[keep:]
            if keep < self._persisted:
                self._persisted = keep
                self._rewrite = True

    def reset(self) -> None:
        self.truncate_entries(0)
        self._rewrite = True

    def flush(self, fsync: bool = True) -> None:
        count = len(self._timestamps)
        if count == self._persisted and not self._rewrite:
            return
        start = self._persisted
        pack = _TIME_ENTRY.pack
        data = b"".join(pack(self._timestamps[i], self._relative_offsets[i]) for i in range(start, count))
        _write_file(self.path, data, start * 12, count * 12, fsync)
        self._persisted = count
        self._rewrite = False
