"""Kafka's ``Rate`` over a ``SampledStat`` (org.apache.kafka.common.metrics.stats, as in kafka-clients
4.3.1), the measure every client quota is checked against.

``quota.window.num`` samples of ``quota.window.size.seconds`` each, kept in a ring of ``samples + 1``
slots: a sample is recycled when its window is over; a sample is purged (reset to now) only when its
*last event* is older than ``samples`` windows, so a sample overlapping the monitored window is kept
even if it started before it.  The rate is the sum of the samples over the time since the oldest
sample started, never taken as shorter than ``samples - 1`` full windows (so a first burst is not
divided by a few milliseconds).

This is Kafka 4.3.1's algorithm (its "overlapping sample"); the older one pybroker first copied, which
purged by a sample's start and recycled among ``samples`` slots, let a consumer that was throttled for
whole windows in a row come back to a rate computed over empty samples and burst, then be throttled for
seconds: a 2 MiB/s consumer quota measured 1.4 MiB/s of records instead of Kafka's 2.0-2.2.
Times are whole milliseconds, as Kafka's ``long timeMs``.
"""

from __future__ import annotations


class _Sample:
    __slots__ = ("start_ms", "last_event_ms", "value", "event_count")

    def __init__(self, now_ms: int) -> None:
        self.reset(now_ms)

    def reset(self, now_ms: int) -> None:
        self.start_ms = now_ms
        self.last_event_ms = now_ms
        self.value = 0.0
        self.event_count = 0


class SampledRate:
    __slots__ = ("samples", "window_ms", "_samples", "_current")

    def __init__(self, samples: int, window_ms: int) -> None:
        self.samples = samples
        self.window_ms = int(window_ms)
        self._samples: list[_Sample] = []
        self._current = 0

    def _current_sample(self, now_ms: int) -> _Sample:
        if not self._samples:
            self._samples.append(_Sample(now_ms))
        return self._samples[self._current]

    def record(self, value: float, now_ms: float) -> None:
        """SampledStat.record: a sample whose window is over is recycled (the ring holds one slot more
        than ``samples``, for the sample overlapping the monitored window)."""
        now = int(now_ms)
        sample = self._current_sample(now)
        if now - sample.start_ms >= self.window_ms:
            self._current = (self._current + 1) % (self.samples + 1)
            if self._current >= len(self._samples):
                sample = _Sample(now)
                self._samples.append(sample)
            else:
                sample = self._samples[self._current]
                sample.reset(now)
        sample.value += value
        sample.event_count += 1
        sample.last_event_ms = now

    def unrecord(self, value: float, now_ms: float) -> None:
        """ClientQuotaManager.unrecordQuotaSensor: record the negative value (an event like any other)."""
        self.record(-value, now_ms)

    def _purge(self, now: int) -> None:
        expire = self.samples * self.window_ms
        for sample in self._samples:
            if now - sample.last_event_ms >= expire:
                sample.reset(now)

    def window_size_ms(self, now_ms: float) -> int:
        """Rate.windowSize: time since the oldest sample started, at least ``samples - 1`` full windows."""
        now = int(now_ms)
        self._purge(now)
        if not self._samples:
            self._samples.append(_Sample(now))
        elapsed = now - min(s.start_ms for s in self._samples)
        full = elapsed // self.window_ms
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_ms
        return max(elapsed, 1)

    def measure(self, now_ms: float) -> float:
        """Units per second."""
        now = int(now_ms)
        self._purge(now)
        total = sum(s.value for s in self._samples)
        return total / (self.window_size_ms(now) / 1000.0)


def throttle_time_ms(rate: SampledRate, bound: float, now_ms: float, max_ms: float) -> int:
    """QuotaUtils.throttleTime: how long the client must wait for its rate to fall to the bound,
    ``round((value - bound) / bound * windowSize)``; 0 within the quota."""
    value = rate.measure(now_ms)
    if value <= bound:
        return 0
    return int(min(round((value - bound) / bound * rate.window_size_ms(now_ms)), max_ms))
