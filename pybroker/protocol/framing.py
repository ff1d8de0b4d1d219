"""Sans-IO framing of the Kafka wire: int32 big-endian size, then that many bytes.

The length prefix is checked against the configured maximum *before* any buffer for the frame is
allocated, so a hostile or broken peer cannot make the broker reserve gigabytes.
"""

from __future__ import annotations

import mmap
import struct
import threading

from pybroker.protocol.memory_pool import MemoryPool

_SIZE = struct.Struct(">i")
# The shared scratch buffer: what one read between frames may take.  Frames found whole in it are
# copied out; the rest of a larger one is read into its own buffer.
SCRATCH_SIZE = 64 * 1024
MIN_READ = 4096  # at least this much room is offered after bytes kept from the last read
# A frame larger than this is read into anonymous memory the kernel maps as its bytes arrive, not
# into a bytearray (which zero-fills, so resident at once): a peer announcing a large request and
# sending nothing then costs pool budget (queued.max.request.bytes) but no resident memory.
LAZY_FRAME_SIZE = 1024 * 1024
Frame = bytearray | mmap.mmap  # a request frame: writable, the caller's own
_THREAD = threading.local()


class FrameError(Exception):
    """The byte stream cannot be framed; the connection must be closed."""


class FrameTooLarge(FrameError):
    pass


class InvalidFrame(FrameError):
    pass


def thread_scratch_buffer() -> ScratchBuffer:
    """This thread's scratch buffer (an event loop runs on one thread; brokers in one process may
    each run their own loop on their own thread)."""
    scratch = getattr(_THREAD, "scratch", None)
    if scratch is None:
        scratch = _THREAD.scratch = ScratchBuffer()
    return scratch


class ScratchBuffer:
    """The buffer every connection of one event loop reads into when no frame of its own is being
    filled (``FrameReader.get_buffer``).  One is enough: a read and the ``buffer_updated`` that
    follows it run back to back on the loop's thread, and each complete frame is copied out of it
    (or its part moved to the frame's own buffer) before the next read."""

    __slots__ = ("buf", "view")

    def __init__(self, size: int = SCRATCH_SIZE) -> None:
        self.buf = bytearray(size)
        self.view = memoryview(self.buf)

    def ensure(self, size: int) -> None:
        if len(self.buf) < size:
            self.buf = bytearray(size)
            self.view = memoryview(self.buf)


class FrameReader:
    """Cuts a byte stream into request frames, for an ``asyncio.BufferedProtocol``: the transport
    reads into the buffer ``get_buffer()`` offers and ``buffer_updated(n)`` returns the frames
    completed.  (``feed(data)`` does both for bytes in hand.)

    A frame whose size prefix has been read but not all of its bytes gets its own ``bytearray`` of
    exactly that size (above ``LAZY_FRAME_SIZE`` anonymous memory, resident only as it fills), and the
    rest of it is read straight into that buffer by the kernel: a large produce request is never
    copied in user space.  Between frames reads go to a ``ScratchBuffer``
    shared by the loop's connections; a frame found whole there is copied out once.  Every frame
    returned is a writable ``Frame`` the caller owns (writable: the produce path stamps offsets into it).

    With a ``MemoryPool`` every frame returned is charged to it (the caller releases ``len(frame)``
    once the request is handled).  A frame that must be assembled across reads is allocated when its
    size prefix is read, as Kafka's NetworkReceive does; if the pool has no memory left the reader
    stops there and sets ``blocked`` — the caller stops reading the connection and calls ``retry()``
    once memory is released.  Sizes are checked against ``max_size`` before anything is allocated.
    """

    __slots__ = ("max_size", "pool", "blocked", "_scratch", "_rest", "_frame", "_frame_view", "_filled")

    def __init__(self, max_size: int, pool: MemoryPool | None = None, scratch: ScratchBuffer | None = None) -> None:
        self.max_size = max_size
        self.pool = pool
        self.blocked = False  # the frame being assembled waits for memory from the pool
        self._scratch = scratch if scratch is not None else ScratchBuffer(MIN_READ)
        self._rest = b""  # bytes read but not yet framed: a partial size prefix, or a frame waiting for memory
        self._frame: Frame | None = None  # the allocated frame being filled
        self._frame_view: memoryview | None = None
        self._filled = 0  # bytes of it received

    @property
    def has_partial_frame(self) -> bool:
        return bool(self._rest) or self._frame is not None

    @property
    def allocated_partial_bytes(self) -> int:
        """Pool memory held by the frame being assembled (to release when the connection closes)."""
        return len(self._frame) if self._frame is not None else 0

    def unread_head(self, n: int) -> bytes:
        """The first bytes not yet framed (after a FrameError: what stood where a size prefix should)."""
        return bytes(self._rest[:n])

    def get_buffer(self) -> memoryview:
        """Where the next read goes: the rest of the frame being filled, else the scratch buffer after
        the bytes kept from the last read."""
        if self._frame_view is not None:
            return self._frame_view[self._filled :]
        rest = self._rest
        scratch = self._scratch
        if rest:
            scratch.ensure(len(rest) + MIN_READ)
            scratch.buf[: len(rest)] = rest
            return scratch.view[len(rest) :]
        return scratch.view

    def buffer_updated(self, n: int) -> list[Frame]:
        """``n`` bytes were read into the buffer ``get_buffer`` returned: the frames now complete."""
        if self._frame is not None:
            self._filled += n
            if self._filled < len(self._frame):
                return []
            frame = self._frame
            self._frame = self._frame_view = None
            self._filled = 0
            return [frame]
        return self._cut(len(self._rest) + n)

    def retry(self) -> list[Frame]:
        """After the pool released memory: allocate the frame that waited (``blocked``), if it can."""
        if not self._rest:
            return []
        self.get_buffer()  # puts the kept bytes back at the start of the scratch buffer
        return self._cut(len(self._rest))

    def feed(self, data: bytes | bytearray | memoryview) -> list[Frame]:
        """Frame bytes already in hand (tests, and callers that are not buffered protocols)."""
        frames: list[Frame] = []
        view = memoryview(data)
        if not view:
            return self.retry()
        while view:
            buf = self.get_buffer()
            n = min(len(buf), len(view))
            buf[:n] = view[:n]
            view = view[n:]
            frames += self.buffer_updated(n)
        return frames

    def _cut(self, end: int) -> list[Frame]:
        """Frames in the first ``end`` bytes of the scratch buffer; what follows them is kept."""
        scratch = self._scratch
        buf, view = scratch.buf, scratch.view
        frames: list[Frame] = []
        pos = 0
        charged = 0
        try:
            while end - pos >= 4:
                size = self._check_size(_SIZE.unpack_from(buf, pos)[0])
                if end - pos - 4 < size:
                    break
                frames.append(bytearray(view[pos + 4 : pos + 4 + size]))
                charged += size
                pos += 4 + size
        except FrameError:
            self._rest = bytes(view[pos:end])  # what stood where a size prefix should (unread_head)
            raise
        pool = self.pool
        if pool is not None and charged:
            pool.available -= charged  # whole frames are in memory: charged, never refused
        self.blocked = False
        if pos == end:
            self._rest = b""
            return frames
        if end - pos < 4:
            self._rest = bytes(view[pos:end])
            return frames
        size = _SIZE.unpack_from(buf, pos)[0]
        if pool is not None and not pool.try_allocate(size):
            self._rest = bytes(view[pos:end])
            self.blocked = True
            return frames
        have = end - pos - 4
        frame = bytearray(size) if size <= LAZY_FRAME_SIZE else mmap.mmap(-1, size)
        frame[:have] = view[pos + 4 : end]
        self._frame = frame
        self._frame_view = memoryview(frame)
        self._filled = have
        self._rest = b""
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
