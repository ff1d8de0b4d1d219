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
# An offset spec for ListOffsets: a named one, or an int timestamp (first offset with timestamp >= it).
OffsetSpec = int | Literal["earliest", "latest", "max-timestamp"]


class NotSupportedByClient(Exception):
    """The client library has no way to express this operation."""


class ClientError(Exception):
    """A request the client reported as failed, with the Kafka error name the client gave it.

    ``error`` is the Kafka protocol error name (``MESSAGE_TOO_LARGE``, ``UNKNOWN_TOPIC_OR_PARTITION``,
    ...) the library's own exception maps to; ``native`` names that exception type so a scenario can
    report exactly what the client raised.
    """

    def __init__(self, error: str, native: str, detail: str = "") -> None:
        super().__init__(f"{error} ({native}): {detail}")
        self.error = error
        self.native = native
        self.detail = detail


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
    # None when the client library does not report the type (sarama's ConsumerMessage has none).
    timestamp_type: Literal["CreateTime", "LogAppendTime"] | None
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
        """assign() + seek to ``start``, return the first ``count`` records (fewer only on timeout).

        Consumers never ask the broker to auto-create topics (allow.auto.create.topics=false).
        """

    def offset_for_time(self, bootstrap: str, topic: str, partition: int, timestamp_ms: int) -> int | None:
        """The first offset whose timestamp is >= timestamp_ms, or None when there is none."""


@dataclass(frozen=True)
class ListedOffset:
    offset: int  # -1 when no record matches (a timestamp past the last one)
    timestamp_ms: int


@dataclass(frozen=True)
class TopicDescription:
    name: str
    partitions: int


class Admin(Protocol):
    """Admin operations; an adapter whose library has no admin API raises NotSupportedByClient."""

    def create_topic(
        self, bootstrap: str, topic: str, *, partitions: int = 1, configs: dict[str, str] | None = None
    ) -> None: ...

    def delete_topic(self, bootstrap: str, topic: str) -> None: ...

    def describe_configs(self, bootstrap: str, topic: str) -> dict[str, str]:
        """Every config of the topic the broker reports, name -> value (sensitive/None values as '')."""

    def alter_configs(self, bootstrap: str, topic: str, configs: dict[str, str]) -> None:
        """Set these topic configs (incrementally where the client can, leaving the others alone)."""

    def create_partitions(self, bootstrap: str, topic: str, total: int) -> None: ...

    def list_offsets(self, bootstrap: str, topic: str, partition: int, spec: OffsetSpec) -> ListedOffset: ...

    def delete_records(self, bootstrap: str, topic: str, partition: int, before_offset: int) -> int:
        """Delete records below ``before_offset``; returns the new low watermark."""

    def describe_topic(self, bootstrap: str, topic: str) -> TopicDescription:
        """Raises ClientError('UNKNOWN_TOPIC_OR_PARTITION', ...) when the topic does not exist."""
