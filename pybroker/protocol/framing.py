"""Sans-IO framing of the Kafka wire: int32 big-endian size, then that many bytes.

The length prefix is checked against the configured maximum *before* any buffer for the frame is
allocated, so a hostile or broken peer cannot make the broker reserve gigabytes.
"""

from __future__ import annotations

import struct

from pybroker.protocol.memory_pool import MemoryPool

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

    With a ``MemoryPool`` every frame returned is charged to it (the caller releases ``len(frame)``
    once the request is handled).  A frame that must be assembled across reads is allocated when its
    size prefix is read, as Kafka's NetworkReceive does, and assembled in one growing buffer (no
    chunk list joined at the end: one copy of the frame, not two at once); if the pool has no memory left
    the reader stops there and sets ``blocked`` — the caller stops reading the connection and calls
    ``feed(b"")`` again once memory is released.
    """

    __slots__ = ("max_size", "pool", "blocked", "_pending", "_pending_len", "_need", "_buf", "_filled")

    def __init__(self, max_size: int, pool: MemoryPool | None = None) -> None:
        self.max_size = max_size
        self.pool = pool
        self.blocked = False  # the frame being assembled waits for memory from the pool
        self._pending: list[bytes] = []
        self._pending_len = 0
        self._need = -1  # size of the frame being assembled; -1 while the prefix is incomplete
        self._buf: bytearray | None = None  # the allocated frame being filled
        self._filled = 0  # its declared size (what the pool was charged)

    @property
    def has_partial_frame(self) -> bool:
        return self._pending_len > 0 or self._buf is not None

    @property
    def allocated_partial_bytes(self) -> int:
        """Pool memory held by the frame being assembled (to release when the connection closes)."""
        return self._filled if self._buf is not None else 0

    def feed(self, data: bytes) -> list[memoryview]:
        if self._buf is not None:
            buf = self._buf
            take = min(self._filled - len(buf), len(data))
            buf += memoryview(data)[:take]
            if len(buf) < self._filled:
                return []
            self._buf = None
            self._filled = 0
            frames = [memoryview(buf)]
            if take < len(data):
                frames.extend(self._cut(memoryview(data)[take:]))
            return frames
        if self._pending:
            if data:
                self._pending.append(data)
                self._pending_len += len(data)
            if self._need < 0 and self._pending_len >= 4:
                joined = b"".join(self._pending)
                self._pending = [joined]
                self._need = self._check_size(_SIZE.unpack_from(joined, 0)[0])
            if self._need < 0:
                return []
            data = b"".join(self._pending)
            self._pending = []
            self._pending_len = 0
            self._need = -1
            self.blocked = False
        return self._cut(data)

    def _cut(self, data: bytes | memoryview) -> list[memoryview]:
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
        pool = self.pool
        if pool is not None and frames:
            pool.available -= pos - 4 * len(frames)  # whole frames are in memory: charged, never refused
        if pos == end:
            return frames
        if end - pos < 4:
            self._keep(bytes(view[pos:]), -1)
            return frames
        size = _SIZE.unpack_from(data, pos)[0]
        if pool is not None and not pool.try_allocate(size):
            self._keep(bytes(view[pos:]), size)
            self.blocked = True
            return frames
        # Grown as bytes arrive (realloc of a large block is an mremap, not a copy): memory follows
        # what was received, while the pool was charged the declared size.
        self._buf = bytearray(view[pos + 4 :])
        self._filled = size
        return frames

    def _keep(self, rest: bytes, need: int) -> None:
        self._pending = [rest]
        self._pending_len = len(rest)
        self._need = need

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
