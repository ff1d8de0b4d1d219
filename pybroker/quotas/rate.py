"""Kafka's ``Rate`` over a ``SampledStat`` (org.apache.kafka.common.metrics.stats), the measure every
client quota is checked against: ``quota.window.num`` samples of ``quota.window.size.seconds`` each;
the rate is the sum of the live samples over the elapsed window, where the window is never taken as
shorter than ``samples - 1`` full windows (so a first burst is not divided by a few milliseconds)."""

from __future__ import annotations


class SampledRate:
    __slots__ = ("samples", "window_ms", "_starts", "_values", "_current")

    def __init__(self, samples: int, window_ms: int) -> None:
        self.samples = samples
        self.window_ms = window_ms
        self._starts: list[float] = []
        self._values: list[float] = []
        self._current = 0

    def record(self, value: float, now_ms: float) -> None:
        if not self._starts:
            self._starts.append(now_ms)
            self._values.append(0.0)
            self._current = 0
        elif now_ms - self._starts[self._current] >= self.window_ms:
            # SampledStat.record: the new sample starts on the previous one's grid, not at now.
            previous_end = self._starts[self._current] + self.window_ms
            start = now_ms - ((now_ms - previous_end) % self.window_ms)
            self._current = (self._current + 1) % self.samples
            if self._current >= len(self._starts):
                self._starts.append(start)
                self._values.append(0.0)
            else:
                self._starts[self._current] = start
                self._values[self._current] = 0.0
        self._values[self._current] += value

    def _purge(self, now_ms: float) -> None:
        expire = self.samples * self.window_ms
        for i, start in enumerate(self._starts):
            if now_ms - start >= expire:
                self._starts[i] = now_ms
                self._values[i] = 0.0

    def window_size_ms(self, now_ms: float) -> float:
        """Rate.windowSize: the elapsed span of the samples, at least ``samples - 1`` full windows."""
        self._purge(now_ms)
        oldest = min(self._starts) if self._starts else now_ms
        elapsed = now_ms - oldest
        full = int(elapsed // self.window_ms)
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_ms
        return elapsed

    def measure(self, now_ms: float) -> float:
        """Units per second."""
        window = self.window_size_ms(now_ms)
        return sum(self._values) / (window / 1000.0) if window > 0 else 0.0

    def unrecord(self, value: float, now_ms: float) -> None:
        if self._starts:
            self._values[self._current] -= value


def throttle_time_ms(rate: SampledRate, bound: float, now_ms: float, max_ms: float) -> int:
    """QuotaUtils.throttleTime: how long the client must wait for its rate to fall to the bound,
    ``(value - bound) / bound * windowSize``; 0 within the quota."""
    value = rate.measure(now_ms)
    if value <= bound:
        return 0
    return int(min((value - bound) / bound * rate.window_size_ms(now_ms), max_ms))
