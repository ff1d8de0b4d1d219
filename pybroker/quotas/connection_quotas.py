"""Kafka's ConnectionQuotas: ``max.connections`` (broker-wide and ``listener.name.<l>.max.connections``:
accepting waits, the connections stay in the listen backlog, until one closes) and
``max.connections.per.ip`` with ``max.connections.per.ip.overrides`` (the next connection from that
address is closed at once)."""

from __future__ import annotations

import logging
import time
from collections import Counter

from pybroker.quotas.rate import SampledRate

log = logging.getLogger(__name__)
LOG_INTERVAL_S = 10.0  # refused connections are one line per interval, not one per connection


def parse_overrides(text: str) -> dict[str, int]:
    """'host:count,host:count' (Kafka's maxConnectionsPerIpOverrides)."""
    out: dict[str, int] = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        host, _, count = item.rpartition(":")
        if not host:
            raise ValueError(f"invalid max.connections.per.ip.overrides entry {item!r}")
        out[host] = int(count)
    return out


class ConnectionSlot:
    """One accepted connection's share of the counts; released once, however it ends."""

    __slots__ = ("quotas", "ip", "listener", "released")

    def __init__(self, quotas: ConnectionQuotas, ip: str, listener: str) -> None:
        self.quotas, self.ip, self.listener, self.released = quotas, ip, listener, False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.quotas._release(self)


class ConnectionQuotas:
    def __init__(self, max_connections: int, per_ip: int, overrides: dict[str, int]) -> None:
        self.max_connections = max_connections
        self.per_ip = per_ip
        self.overrides = overrides
        self.listener_max: dict[str, int] = {}
        self.total = 0
        self.by_ip: Counter[str] = Counter()
        self.by_listener: Counter[str] = Counter()
        self.on_release: list = []  # acceptors waiting for a slot
        self._refused = 0
        self._last_log = -LOG_INTERVAL_S

    def configure_creation_rates(
        self, broker_rate: int, listener_rates: dict[str, int], samples: int, window_s: int
    ) -> None:
        """KIP-612's sensors: one broker-wide rate, one per listener that sets its own."""
        unlimited = 2**31 - 1
        self._broker_rate = (
            (SampledRate(samples, window_s * 1000), float(broker_rate)) if broker_rate < unlimited else None
        )
        self._listener_rates = {
            name: (SampledRate(samples, window_s * 1000), float(rate))
            for name, rate in listener_rates.items()
            if rate < unlimited
        }

    def creation_rates(self, listener: str) -> list[tuple[SampledRate, float]]:
        own = getattr(self, "_listener_rates", {}).get(listener)
        return [r for r in (getattr(self, "_broker_rate", None), own) if r]

    def at_max(self, listener: str) -> bool:
        limit = self.listener_max.get(listener)
        return self.total >= self.max_connections or (limit is not None and self.by_listener[listener] >= limit)

    def acquire(self, ip: str, listener: str) -> ConnectionSlot | None:
        """A slot, or None (and a rate-limited log line) when ``ip`` has its most connections."""
        limit = self.overrides.get(ip, self.per_ip)
        if self.by_ip[ip] >= limit:
            self._refused += 1
            now = time.monotonic()
            if now - self._last_log >= LOG_INTERVAL_S:
                log.warning(
                    "refused %d connection(s) over max.connections.per.ip: %s already has %d (limit %d)",
                    self._refused, ip, self.by_ip[ip], limit,
                )
                self._last_log, self._refused = now, 0
            return None
        self.total += 1
        self.by_ip[ip] += 1
        self.by_listener[listener] += 1
        return ConnectionSlot(self, ip, listener)

    def _release(self, slot: ConnectionSlot) -> None:
        self.total -= 1
        self.by_ip[slot.ip] -= 1
        if self.by_ip[slot.ip] <= 0:
            del self.by_ip[slot.ip]
        self.by_listener[slot.listener] -= 1
        for wake in self.on_release:
            wake()
