"""The counters the request path updates: plain ints and dicts, nothing else.

The server and the produce/fetch handlers hold a ``BrokerMetrics`` (handed to them through the
request context, never imported as a global) and bump its fields in place.  Everything that can
be read from broker state instead (log end offsets, sizes, group lag, live connections) is not
counted here at all: the Prometheus collector computes it when it is scraped.  Measured cost on
the produce path: see docs/OPERATIONS.md.
"""

from __future__ import annotations

import asyncio
import logging
from bisect import bisect_left

log = logging.getLogger(__name__)

# Upper bounds (seconds) of the request-latency histogram buckets; the last bucket is +Inf.
# Spans a sub-millisecond produce to a long-poll fetch that waits max.wait.ms (500 ms by default).
LATENCY_BUCKETS_S: tuple[float, ...] = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
# Event-loop lag: how late a timer fires.  A healthy loop is well under a millisecond.
LOOP_LAG_BUCKETS_S: tuple[float, ...] = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
LOOP_LAG_INTERVAL_S = 0.5


class Histogram:
    """Bucket counts (not cumulative: the collector sums them), a count and a sum."""

    __slots__ = ("bounds", "buckets", "count", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.buckets = [0] * (len(bounds) + 1)
        self.count = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.buckets[bisect_left(self.bounds, value)] += 1
        self.count += 1
        self.sum += value


class TopicStats:
    """Kafka's BrokerTopicMetrics of one topic, as running totals."""

    __slots__ = ("bytes_in", "messages_in", "bytes_out", "produce_requests", "failed_produce_requests")

    def __init__(self) -> None:
        self.bytes_in = 0
        self.messages_in = 0
        self.bytes_out = 0
        self.produce_requests = 0
        self.failed_produce_requests = 0


class BrokerMetrics:
    """Running totals of this broker process.  Owned by the event loop; read by the collector."""

    def __init__(self, timed: bool = False) -> None:
        # Whether the server times requests for the latency histograms (only when they are served).
        self.timed = timed
        self.topics: dict[str, TopicStats] = {}
        self.requests: dict[tuple[int, int], Histogram] = {}  # (api key, version) -> latency
        self.connections_created = 0
        self.connections_closed = 0
        self.loop_lag = Histogram(LOOP_LAG_BUCKETS_S)
        self.loop_lag_last = 0.0

    # -- the request path --------------------------------------------------------------------------
    def request_done(self, api_key: int, version: int, seconds: float) -> None:
        h = self.requests.get((api_key, version))
        if h is None:
            h = self.requests[(api_key, version)] = Histogram(LATENCY_BUCKETS_S)
        h.buckets[bisect_left(LATENCY_BUCKETS_S, seconds)] += 1
        h.count += 1
        h.sum += seconds

    def topic(self, name: str) -> TopicStats:
        st = self.topics.get(name)
        if st is None:
            st = self.topics[name] = TopicStats()
        return st

    def produced(self, topic: str, nbytes: int, messages: int) -> None:
        st = self.topics.get(topic) or self.topic(topic)
        st.bytes_in += nbytes
        st.messages_in += messages
        st.produce_requests += 1

    def produce_failed(self, topic: str) -> None:
        st = self.topics.get(topic) or self.topic(topic)
        st.produce_requests += 1
        st.failed_produce_requests += 1

    def fetched(self, topic: str, nbytes: int) -> None:
        st = self.topics.get(topic) or self.topic(topic)
        st.bytes_out += nbytes

    def connection_opened(self) -> None:
        self.connections_created += 1

    def connection_closed(self) -> None:
        self.connections_closed += 1

    # -- housekeeping --------------------------------------------------------------------------------
    def forget_topic(self, name: str) -> None:
        self.topics.pop(name, None)

    def forget_topics_except(self, live: set[str]) -> None:
        """Drop the totals of deleted topics (Kafka removes a deleted topic's metrics too)."""
        for name in [n for n in self.topics if n not in live]:
            del self.topics[name]

    async def watch_event_loop(self, interval_s: float = LOOP_LAG_INTERVAL_S) -> None:
        """Sample how late the loop runs a timer, every ``interval_s``; run as a task on the loop."""
        loop = asyncio.get_running_loop()
        while True:
            start = loop.time()
            await asyncio.sleep(interval_s)
            lag = max(loop.time() - start - interval_s, 0.0)
            self.loop_lag_last = lag
            self.loop_lag.observe(lag)
