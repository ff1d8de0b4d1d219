"""Sans-IO framing of the Kafka wire: int32 big-endian size, then that many bytes.

The length prefix is checked against the configured maximum *before* any buffer for the frame is
allocated, so a hostile or broken peer cannot make the broker reserve gigabytes.
"""

from __future__ import annotations

import struct

_SIZE = struct.Struct(">i")


class FrameError(Exception):
    """The byte stream cannot be framed; the connection must be closed."""


class FrameTooLarge(FrameError):
    pass


class InvalidFrame(FrameError):
    pass


class FrameReader:
    """Cuts a byte stream into request frames.

    ``feed`` returns the complete frames found so far, as memoryviews of the bytes that carried
    them (zero-copy when a frame arrives within one chunk, which is the common case).
    """

    __slots__ = ("max_size", "_pending", "_pending_len", "_need")

    def __init__(self, max_size: int) -> None:
        self.max_size = max_size
        self._pending: list[bytes] = []
        self._pending_len = 0
        self._need = -1  # size of the frame being assembled; -1 while the prefix is incomplete

    @property
    def has_partial_frame(self) -> bool:
        return self._pending_len > 0

    def feed(self, data: bytes) -> list[memoryview]:
        if self._pending:
            self._pending.append(data)
            self._pending_len += len(data)
            if self._need < 0 and self._pending_len >= 4:
                joined = b"".join(self._pending)
                self._pending = [joined]
                self._need = self._check_size(_SIZE.unpack_from(joined, 0)[0])
            if self._need < 0 or self._pending_len < 4 + self._need:
                return []
            data = b"".join(self._pending)
            self._pending = []
            self._pending_len = 0
            self._need = -1
        return self._cut(data)

    def _cut(self, data: bytes) -> list[memoryview]:
        frames: list[memoryview] = []
        view = memoryview(data)
        pos = 0
        end = len(data)
        while end - pos >= 4:
            size = self._check_size(_SIZE.unpack_from(data, pos)[0])
            if end - pos - 4 < size:
                break
            frames.append(view[pos + 4 : pos + 4 + size])
            pos += 4 + size
        if pos < end:
            rest = bytes(view[pos:])
            self._pending = [rest]
            self._pending_len = len(rest)
            self._need = self._check_size(_SIZE.unpack_from(rest, 0)[0]) if len(rest) >= 4 else -1
        return frames

    def _check_size(self, size: int) -> int:
        if size < 0:
            raise InvalidFrame(f"negative frame size {size}")
        if size > self.max_size:
            raise FrameTooLarge(f"frame size {size} exceeds socket.request.max.bytes={self.max_size}")
        return size


def frame(payload_parts: list[bytes]) -> bytes:
    """Prefix a response (given as parts) with its int32 size."""
    body = b"".join(payload_parts)
    return _SIZE.pack(len(body)) + body
