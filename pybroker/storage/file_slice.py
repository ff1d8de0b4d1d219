"""Byte ranges of segment files, served by sendfile or pread."""

from __future__ import annotations

import logging
import os

logger = logging.getLogger(__name__)


class SegmentFile:
    """An open segment file descriptor that lives as long as anything references it.

    Deleting a segment unlinks its path but leaves the descriptor open, so FileSlices handed to
    the network layer stay readable until they are dropped (what Kafka achieves with file.delete.delay.ms).
    """

    def __init__(self, path: str | os.PathLike[str], flags: int = os.O_RDWR | os.O_CREAT) -> None:
        self.path = os.fspath(path)
        self._fd = os.open(self.path, flags, 0o644)

    def fileno(self) -> int:
        if self._fd < 0:
            raise ValueError(f"segment file {self.path} is closed")
        return self._fd

    def __del__(self) -> None:
        fd, self._fd = getattr(self, "_fd", -1), -1
        if fd >= 0:
            os.close(fd)


class FileSlice:
    """`size` bytes at `position` of an open file; keeps the file open while referenced."""

    __slots__ = ("_file", "position", "size")

    def __init__(self, file: SegmentFile | int, position: int, size: int) -> None:
        self._file = file
        self.position = position
        self.size = size

    def fileno(self) -> int:
        return self._file if isinstance(self._file, int) else self._file.fileno()

    def head(self, size: int) -> FileSlice:
        """The first ``size`` bytes of this slice (the same file, kept open as long)."""
        return FileSlice(self._file, self.position, min(size, self.size))

    def read(self) -> bytes:
        fd = self.fileno()
        data = os.pread(fd, self.size, self.position)
        if len(data) == self.size:
            return data
        chunks = [data]
        done = len(data)
        while done < self.size:
            chunk = os.pread(fd, self.size - done, self.position + done)
            if not chunk:
                raise EOFError(f"file ended {self.size - done} bytes before the end of the slice")
            chunks.append(chunk)
            done += len(chunk)
        return b"".join(chunks)

    def __len__(self) -> int:
        return self.size

    def __repr__(self) -> str:
        return f"FileSlice(fd={self.fileno()}, position={self.position}, size={self.size})"
