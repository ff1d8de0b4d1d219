"""The two brokers a benchmark compares, started the same way with the same settings.

Both get the settings in ``MATCHED_SETTINGS`` on top of their defaults; neither fsyncs per message
(log.flush.* stays at its default, i.e. the OS page cache decides, on both).  Apache Kafka runs with
its launcher's JVM options (compat_tests/reference/apache_kafka.py: -Xms128m -Xmx512m, G1), so its
RSS includes up to 512 MiB of Java heap.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from compat_tests.brokers import PyBroker

SYSTEMS = ("pybroker", "kafka")

MATCHED_SETTINGS: dict[str, str] = {
    "log.segment.bytes": str(1024 * 1024 * 1024),  # Kafka's default, stated on both
    "num.partitions": "1",
    "auto.create.topics.enable": "true",
    "group.initial.rebalance.delay.ms": "0",
}


class Broker(Protocol):
    @property
    def pid(self) -> int | None: ...

    def start(self, timeout_s: float = ...) -> str: ...

    def stop(self, timeout_s: float = ...) -> object: ...


def make_broker(system: str, workdir: Path, overrides: dict[str, str] | None = None) -> Broker:
    settings = {**MATCHED_SETTINGS, **(overrides or {})}
    if system == "kafka":
        from compat_tests.reference.apache_kafka import ApacheKafka

        return ApacheKafka(workdir, overrides=settings)
    if system == "pybroker":
        return PyBroker(workdir, overrides=settings)
    raise ValueError(f"unknown system {system!r}; expected one of {', '.join(SYSTEMS)}")


def broker_pid(broker: Broker) -> int:
    pid = broker.pid
    if pid is None:
        raise RuntimeError("broker is not running")
    return pid
