"""Time for the coordinator: a real clock on the event loop, and a fake one tests drive by hand.

Every timeout of the group protocol (session, rebalance, initial delay, pending sync, offsets
retention) is a ``call_later`` on one of these, so the state machine is testable without sleeping.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from typing import Protocol


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    def now_ms(self) -> int: ...

    def call_later(self, delay_ms: int, fn: Callable[[], None]) -> TimerHandle: ...


class LoopClock:
    """Wall-clock milliseconds (they are written into __consumer_offsets) and loop timers."""

    def now_ms(self) -> int:
        return int(time.time() * 1000)

    def call_later(self, delay_ms: int, fn: Callable[[], None]) -> TimerHandle:
        return asyncio.get_running_loop().call_later(max(delay_ms, 0) / 1000, fn)


class _FakeTimer:
    __slots__ = ("due", "fn", "cancelled")

    def __init__(self, due: int, fn: Callable[[], None]) -> None:
        self.due = due
        self.fn = fn
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeClock:
    """A clock that moves only when ``advance`` is called; due timers run in order, synchronously."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now = start_ms
        self._heap: list[tuple[int, int, _FakeTimer]] = []
        self._seq = itertools.count()

    def now_ms(self) -> int:
        return self._now

    def call_later(self, delay_ms: int, fn: Callable[[], None]) -> TimerHandle:
        timer = _FakeTimer(self._now + max(delay_ms, 0), fn)
        heapq.heappush(self._heap, (timer.due, next(self._seq), timer))
        return timer

    def advance(self, ms: int) -> None:
        target = self._now + ms
        while self._heap and self._heap[0][0] <= target:
            due, _, timer = heapq.heappop(self._heap)
            self._now = max(self._now, due)
            if not timer.cancelled:
                timer.fn()
        self._now = target
