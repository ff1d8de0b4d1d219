"""The broker-wide budget of request bytes in flight: Kafka's ``queued.max.request.bytes`` and its
``SimpleMemoryPool`` (non-strict), scaled down to bookkeeping — the bytes themselves are ordinary
Python objects; the pool decides when a connection may take more of them.

Kafka allocates a request's buffer from the pool as soon as its size prefix is read and releases it
when the request has been handled; a connection whose next request cannot be allocated is muted
(not read from) until memory is released.  Non-strict: an allocation succeeds whenever *any*
memory is left, so one request larger than what is left (even larger than the whole pool) still
goes through, and at most ``size + socket.request.max.bytes`` is ever allocated.

pybroker charges every request frame here, but only a frame that still has to be *assembled*
across reads (or be queued behind a request in flight) waits for memory: a frame that arrived whole
in one read is already in memory, and handling it at once is what frees it, so muting its
connection would save nothing — and small requests of other clients keep being served while large
partial ones wait.
"""

from __future__ import annotations

from collections.abc import Callable


class MemoryPool:
    __slots__ = ("size", "available", "_on_available")

    def __init__(self, size: int, on_available: Callable[[], None] | None = None) -> None:
        """``size`` <= 0 is Kafka's -1: unbounded (every allocation succeeds)."""
        self.size = size
        self.available = size if size > 0 else 1 << 62
        self._on_available = on_available

    @property
    def is_out_of_memory(self) -> bool:
        return self.available <= 0

    def try_allocate(self, n: int) -> bool:
        """Take ``n`` bytes if any memory is left (Kafka's non-strict pool); False if none is."""
        if self.available <= 0:
            return False
        self.available -= n
        return True

    def allocate(self, n: int) -> None:
        """Take ``n`` bytes that are already in memory (a frame that arrived whole)."""
        self.available -= n

    def release(self, n: int) -> None:
        was_out = self.available <= 0
        self.available += n
        if was_out and self.available > 0 and self._on_available is not None:
            self._on_available()

    def set_listener(self, on_available: Callable[[], None] | None) -> None:
        """Called when released memory ends an out-of-memory spell (to unmute connections)."""
        self._on_available = on_available
