"""The one interface every client adapter implements, so a scenario is written once.

Each adapter (kafka_python.py, confluent.py, aiokafka_client.py, kcat.py, java.py, ...) exposes a
class with ``name`` and the methods below; a scenario calls them with plain records and compares
what comes back, byte for byte.  An adapter that cannot express an operation raises
``NotSupportedByClient`` so the scenario can record that (never a silent pass).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol

Compression = Literal["none", "gzip", "snappy", "lz4", "zstd"]
Acks = Literal["all", "1", "0"]
Start = int | Literal["beginning", "end"]


class NotSupportedByClient(Exception):
    """The client library has no way to express this operation."""


@dataclass(frozen=True)
class Record:
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    timestamp_ms: int | None = None
    partition: int | None = None


@dataclass(frozen=True)
class Delivery:
    partition: int
    offset: int
    timestamp_ms: int


@dataclass(frozen=True)
class ConsumedRecord:
    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    timestamp_type: Literal["CreateTime", "LogAppendTime"]
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = field(default=())


class Client(Protocol):
    name: str

    def produce(
        self,
        bootstrap: str,
        topic: str,
        records: list[Record],
        *,
        compression: Compression = "none",
        idempotent: bool = False,
        acks: Acks = "all",
    ) -> list[Delivery]:
        """Send every record (in order), wait for every acknowledgement, return them in input order."""

    def consume(
        self, bootstrap: str, topic: str, partition: int, *, start: Start, count: int, timeout_s: float = 30.0
    ) -> list[ConsumedRecord]:
        """assign() + seek to ``start``, return the first ``count`` records (fewer only on timeout)."""

    def offset_for_time(self, bootstrap: str, topic: str, partition: int, timestamp_ms: int) -> int | None:
        """The first offset whose timestamp is >= timestamp_ms, or None when there is none."""
