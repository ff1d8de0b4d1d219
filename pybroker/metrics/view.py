"""A read-mostly view of the broker for the metrics endpoint and the web console.

``ClusterView`` is the narrow interface both depend on: snapshots of partitions, topics, groups and
committed offsets as plain values, and the few operations the console offers.  ``BrokerView`` is
its one implementation over a running ``Broker``: the only place in the observability code that
touches broker internals, so a change there is a change here and nowhere else.  Every call runs on
the event loop that owns the broker's state, so a snapshot is consistent without locks.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from pybroker import config as broker_config
from pybroker.protocol import codec
from pybroker.protocol.api import CONSUMER_PROTOCOL_ASSIGNMENT
from pybroker.records.batch import BATCH_HEADER_SIZE, parse_batch_header
from pybroker.records.reader import Record, decode_batch_records

log = logging.getLogger(__name__)

# The largest slice of a log the console reads at once, and in all, to show a page of messages
# (reads run on the event loop, from the page cache).
MAX_BROWSE_BYTES = 4 * 1024 * 1024
MAX_BROWSE_TOTAL_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class PartitionState:
    topic: str
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    size_bytes: int
    segments: int

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas)

    @property
    def offline(self) -> bool:
        return self.leader < 0


@dataclass(frozen=True, slots=True)
class TopicState:
    name: str
    topic_id: uuid.UUID
    partitions: int
    internal: bool
    configs: dict[str, str]  # the topic's own overrides


@dataclass(frozen=True, slots=True)
class ConfigRow:
    name: str
    value: str | None
    source: str  # DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG, ...
    sensitive: bool


@dataclass(frozen=True, slots=True)
class MemberState:
    member_id: str
    client_id: str
    client_host: str
    instance_id: str | None
    assignment: tuple[tuple[str, int], ...]  # (topic, partition), sorted


@dataclass(frozen=True, slots=True)
class GroupState:
    group_id: str
    group_type: str  # classic | consumer | streams
    state: str  # Kafka's spelling: Empty, Stable, PreparingRebalance, ...
    protocol_type: str
    protocol: str
    members: tuple[MemberState, ...]


@dataclass(frozen=True, slots=True)
class Endpoint:
    node_id: int
    host: str
    port: int
    listener: str


class ClusterView(Protocol):
    """What the metrics endpoint and the console may ask of the broker."""

    @property
    def cluster_id(self) -> str: ...
    @property
    def node_id(self) -> int: ...
    @property
    def listener(self) -> str: ...

    def brokers(self) -> list[Endpoint]: ...

    def controller_id(self) -> int: ...

    def connection_counts(self) -> tuple[int, int, int]:
        """(open connections, requests queued behind an in-flight one, connections with one in flight)."""
        ...

    def topics(self) -> list[TopicState]: ...

    def client_telemetry(self) -> tuple[int, list[Any]]: ...

    def topic(self, name: str) -> TopicState | None: ...

    def topic_configs(self, name: str) -> list[ConfigRow]: ...

    def partitions(self, topic: str | None = None) -> list[PartitionState]: ...

    def high_watermark(self, topic: str, partition: int) -> int | None: ...

    def groups(self) -> list[GroupState]: ...

    def group(self, group_id: str) -> GroupState | None: ...

    def committed_offsets(self, group_id: str) -> dict[tuple[str, int], int]: ...

    def read_records(self, topic: str, partition: int, offset: int, limit: int) -> list[Record]: ...

    def offset_for_timestamp(self, topic: str, partition: int, timestamp_ms: int) -> int | None: ...

    async def create_topic(self, name: str, partitions: int, configs: dict[str, str]) -> None: ...

    def delete_topic(self, name: str) -> None: ...


class BrokerView:
    """``ClusterView`` over a running ``Broker`` (typed loosely: this package must not import it)."""

    def __init__(self, broker: Any) -> None:
        self._broker = broker

    @property
    def cluster_id(self) -> str:
        return self._broker.cluster_id

    @property
    def node_id(self) -> int:
        return self._broker.node_id

    @property
    def listener(self) -> str:
        return self._broker.config.listener_endpoints[0].listener_name

    def brokers(self) -> list[Endpoint]:
        b = self._broker
        return [Endpoint(b.node_id, b.advertised_host, b.advertised_port, self.listener)]

    def controller_id(self) -> int:
        return self._broker.node_id  # a single combined broker and controller

    def connection_counts(self) -> tuple[int, int, int]:
        conns = list(self._broker.connections)
        return (
            len(conns),
            sum(c.queued_requests for c in conns),
            sum(1 for c in conns if c.request_in_flight),
        )

    def client_telemetry(self) -> tuple[int, list[Any]]:
        """(pushes accepted, each client instance's latest push) of KIP-714 client telemetry."""
        manager = self._broker.client_metrics
        latest = {p.client_instance_id: p for p in manager.pushes}
        return manager.pushes_accepted, list(latest.values())

    # -- topics and partitions ---------------------------------------------------------------------
    def topics(self) -> list[TopicState]:
        return [_topic_state(rec) for rec in sorted(self._broker.metadata.topics.values(), key=_by_name)]

    def topic(self, name: str) -> TopicState | None:
        rec = self._broker.metadata.topics.get(name)
        return None if rec is None else _topic_state(rec)

    def topic_configs(self, name: str) -> list[ConfigRow]:
        rec = self._broker.metadata.topics.get(name)
        if rec is None:
            return []
        entries = broker_config.describe_topic_config(self._broker.config, rec.configs)
        return [
            ConfigRow(
                e.name,
                None if e.sensitive else e.value,
                broker_config.ConfigSource(e.source).name,
                e.sensitive,
            )
            for e in entries
        ]

    def partitions(self, topic: str | None = None) -> list[PartitionState]:
        parts = self._broker.partitions
        if topic is None:
            chosen: Iterable[Any] = parts.values()
        else:
            rec = self._broker.metadata.topics.get(topic)
            n = rec.partitions if rec is not None else 0
            chosen = (p for p in (parts.get((topic, i)) for i in range(n)) if p is not None)
        return [_partition_state(p) for p in chosen]

    def high_watermark(self, topic: str, partition: int) -> int | None:
        p = self._broker.partitions.get((topic, partition))
        return None if p is None else p.high_watermark

    # -- groups -----------------------------------------------------------------------------------
    def groups(self) -> list[GroupState]:
        gc = self._broker.group_coordinator
        if gc is None:
            return []
        out = [_classic_state(g) for g in gc.groups.values() if g.state.value != "Dead"]
        out += [self._consumer_state(g) for g in gc.consumer.groups.values() if not g.dead]
        out += [_streams_state(g) for g in gc.streams.groups.values() if not g.dead]
        return sorted(out, key=lambda g: g.group_id)

    def group(self, group_id: str) -> GroupState | None:
        gc = self._broker.group_coordinator
        if gc is None:
            return None
        cgroup = gc.consumer.groups.get(group_id)
        if cgroup is not None and not cgroup.dead:
            return self._consumer_state(cgroup)
        sgroup = gc.streams.groups.get(group_id)
        if sgroup is not None and not sgroup.dead:
            return _streams_state(sgroup)
        group = gc.groups.get(group_id)
        if group is not None and group.state.value != "Dead":
            return _classic_state(group)
        return None

    def _consumer_state(self, g: Any) -> GroupState:
        names = {meta.topic_id: name for name, meta in g.subscription_metadata.items()}
        by_id = {rec.topic_id: rec.name for rec in self._broker.metadata.topics.values()}

        def assigned(a: dict[uuid.UUID, Iterable[int]]) -> tuple[tuple[str, int], ...]:
            return tuple(
                sorted(
                    (names.get(tid) or by_id.get(tid) or str(tid), p)
                    for tid, parts in a.items()
                    for p in parts
                )
            )

        members = tuple(
            MemberState(m.member_id, m.client_id, m.client_host, m.instance_id, assigned(m.assigned))
            for m in g.members.values()
        )
        return GroupState(g.group_id, "consumer", g.state.value, "consumer", "", members)

    def committed_offsets(self, group_id: str) -> dict[tuple[str, int], int]:
        gc = self._broker.group_coordinator
        if gc is None:
            return {}
        _, cgroup = gc.epoch_group(group_id)
        if cgroup is not None:
            offsets = cgroup.offsets
        else:
            group = gc.groups.get(group_id)
            offsets = {} if group is None else group.offsets
        return {tp: om.offset for tp, om in offsets.items()}

    # -- records ----------------------------------------------------------------------------------
    def read_records(self, topic: str, partition: int, offset: int, limit: int) -> list[Record]:
        """Up to ``limit`` records from ``offset`` below the high watermark (what a consumer may
        see); control batches are skipped.  Raises KeyError for an unknown partition."""
        p = self._broker.partitions.get((topic, partition))
        if p is None:
            raise KeyError(f"{topic}-{partition}")
        offset = max(offset, p.log_start_offset)
        out: list[Record] = []
        total = 0
        while len(out) < limit and offset < p.high_watermark and total < MAX_BROWSE_TOTAL_BYTES:
            sl = p.log.read(offset, MAX_BROWSE_BYTES, p.high_watermark, True)
            if sl is None or sl.size == 0:
                break
            buf = memoryview(sl.read())
            total += len(buf)
            next_offset = offset
            position = 0
            while position + BATCH_HEADER_SIZE <= len(buf):
                header = parse_batch_header(buf, position)
                if header.end_position > len(buf):
                    break  # a batch cut by the byte limit: the next read starts at it
                position = header.end_position
                next_offset = header.next_offset
                if header.is_control:  # a transaction marker, not a message
                    continue
                for r in decode_batch_records(buf[header.position : header.end_position], header):
                    if r.offset >= offset and len(out) < limit:
                        out.append(r)
            if next_offset <= offset:
                break
            offset = next_offset
        return out

    def offset_for_timestamp(self, topic: str, partition: int, timestamp_ms: int) -> int | None:
        p = self._broker.partitions.get((topic, partition))
        if p is None:
            raise KeyError(f"{topic}-{partition}")
        found = p.log.offset_for_timestamp(timestamp_ms)
        return None if found is None else found[0]

    # -- admin ------------------------------------------------------------------------------------
    async def create_topic(self, name: str, partitions: int, configs: dict[str, str]) -> None:
        await self._broker.create_topic_async(name, partitions, dict(configs))

    def delete_topic(self, name: str) -> None:
        self._broker.delete_topic(name)


def _by_name(rec: Any) -> str:
    return rec.name


def _topic_state(rec: Any) -> TopicState:
    return TopicState(rec.name, rec.topic_id, rec.partitions, rec.internal, dict(rec.configs))


def _partition_state(p: Any) -> PartitionState:
    lg = p.log
    return PartitionState(
        p.topic,
        p.index,
        p.leader_id,
        tuple(p.replicas),
        tuple(p.isr),
        lg.log_start_offset,
        lg.log_end_offset,
        p.high_watermark,
        lg.size_bytes,
        len(lg.segments),
    )


def _classic_state(g: Any) -> GroupState:
    members = tuple(
        MemberState(
            m.member_id, m.client_id, m.client_host, m.group_instance_id, _decode_assignment(m.assignment)
        )
        for m in g.members.values()
    )
    return GroupState(
        g.group_id, "classic", g.state.value, g.protocol_type or "", g.protocol_name or "", members
    )


def _decode_assignment(data: bytes) -> tuple[tuple[str, int], ...]:
    """A classic consumer's assignment (the consumer protocol's bytes); empty if it is not one."""
    if len(data) < 2:
        return ()
    try:
        version = int.from_bytes(data[:2], "big", signed=True)
        msg, _ = codec.decode(CONSUMER_PROTOCOL_ASSIGNMENT, min(max(version, 0), 3), memoryview(data), 2)
    except Exception:  # noqa: BLE001 - another protocol type's opaque bytes
        return ()
    return tuple(sorted((t["topic"], p) for t in msg["assigned_partitions"] for p in t["partitions"]))


def _streams_state(g: Any) -> GroupState:
    """A streams group (KIP-1071): each member's assignment is the partitions its active tasks read
    (a task (subtopology, p) reads partition p of each of its subtopology's input topics)."""
    subtopologies = g.configured.subtopologies if g.configured is not None else {}
    inputs = {sid: sorted(s.input_topics()) for sid, s in subtopologies.items()}
    members = tuple(
        MemberState(
            m.member_id,
            m.client_id,
            m.client_host,
            m.instance_id,
            tuple(sorted({(t, p) for sid, p in m.assigned.active for t in inputs.get(sid, ())})),
        )
        for m in g.members.values()
    )
    return GroupState(g.group_id, "streams", g.state, "streams", "", members)
