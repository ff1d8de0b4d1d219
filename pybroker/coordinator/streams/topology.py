"""A streams group's topology (KIP-1071) and its configuration against the broker's topics.

Kafka's ``StreamsTopology`` is the topology the first member of a group sends (subtopologies with
their source, repartition and changelog topics); ``InternalTopicManager.configureTopics`` turns it
into a ``ConfiguredTopology``: every source topic must exist (else ``MISSING_SOURCE_TOPICS``), a
repartition topic without a partition count gets the largest count of the topics the subtopology
writing it reads (``RepartitionTopics``), a changelog topic gets the task count of its subtopology
(``ChangelogTopics``), an internal topic that exists with another count is
``INCORRECTLY_PARTITIONED_TOPICS``, and internal topics that do not exist are returned for the broker
to create (``MISSING_INTERNAL_TOPICS`` until they exist).  A topology whose repartition topics
cannot be sized is invalid (``STREAMS_INVALID_TOPOLOGY``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# StreamsGroupHeartbeatResponse.Status codes (Kafka's StreamsGroupHeartbeatResponse.Status).
STALE_TOPOLOGY = 0
MISSING_SOURCE_TOPICS = 1
INCORRECTLY_PARTITIONED_TOPICS = 2
MISSING_INTERNAL_TOPICS = 3
SHUTDOWN_APPLICATION = 4
ASSIGNMENT_DELAYED = 5

# The partition count of a topic by name, None when it does not exist.
PartitionCount = Callable[[str], "int | None"]


class InvalidTopology(Exception):
    """Kafka's StreamsInvalidTopologyException: answered STREAMS_INVALID_TOPOLOGY."""


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """An internal topic as the topology declares it (partitions/replication 0: the broker decides)."""

    name: str
    partitions: int = 0
    replication_factor: int = 0
    configs: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_wire(cls, t: dict[str, Any]) -> TopicInfo:
        return cls(
            t["name"],
            t["partitions"],
            t["replication_factor"],
            tuple(sorted((kv["key"], kv["value"]) for kv in t["topic_configs"])),
        )

    def to_wire(self, partitions: int | None = None) -> dict[str, Any]:
        return {
            "name": self.name,
            "partitions": self.partitions if partitions is None else partitions,
            "replication_factor": self.replication_factor,
            "topic_configs": [{"key": k, "value": v} for k, v in self.configs],
        }


@dataclass(frozen=True, slots=True)
class Subtopology:
    subtopology_id: str
    source_topics: tuple[str, ...] = ()
    repartition_sink_topics: tuple[str, ...] = ()
    state_changelog_topics: tuple[TopicInfo, ...] = ()
    repartition_source_topics: tuple[TopicInfo, ...] = ()
    copartition_groups: tuple[tuple[tuple[int, ...], tuple[int, ...]], ...] = ()

    @classmethod
    def from_wire(cls, s: dict[str, Any]) -> Subtopology:
        return cls(
            s["subtopology_id"],
            tuple(s["source_topics"]),
            tuple(s["repartition_sink_topics"]),
            tuple(TopicInfo.from_wire(t) for t in s["state_changelog_topics"]),
            tuple(TopicInfo.from_wire(t) for t in s["repartition_source_topics"]),
            tuple(
                (tuple(g["source_topics"]), tuple(g["repartition_source_topics"]))
                for g in s.get("copartition_groups") or ()
            ),
        )

    def input_topics(self) -> list[str]:
        """The topics its tasks read: the source topics and the repartition source topics."""
        return [*self.source_topics, *(t.name for t in self.repartition_source_topics)]


@dataclass(frozen=True, slots=True)
class StreamsTopology:
    """Kafka's StreamsTopology: the epoch and the subtopologies by id."""

    epoch: int
    subtopologies: dict[str, Subtopology]

    @classmethod
    def from_wire(cls, topology: dict[str, Any]) -> StreamsTopology:
        subs = (Subtopology.from_wire(s) for s in topology["subtopologies"])
        return cls(topology["epoch"], {s.subtopology_id: s for s in subs})

    def to_record(self) -> dict[str, Any]:
        """The StreamsGroupTopologyValue record (the topology as sent, in the subtopologies' order)."""
        return {
            "epoch": self.epoch,
            "subtopologies": [
                {
                    "subtopology_id": s.subtopology_id,
                    "source_topics": list(s.source_topics),
                    "source_topic_regex": [],
                    "state_changelog_topics": [t.to_wire() for t in s.state_changelog_topics],
                    "repartition_sink_topics": list(s.repartition_sink_topics),
                    "repartition_source_topics": [t.to_wire() for t in s.repartition_source_topics],
                    "copartition_groups": [
                        {
                            "source_topics": list(src),
                            "source_topic_regex": [],
                            "repartition_source_topics": list(rep),
                        }
                        for src, rep in s.copartition_groups
                    ],
                }
                for s in self.subtopologies.values()
            ],
        }

    def required_topics(self) -> set[str]:
        """Every topic the topology reads or writes by name (a change in one re-configures it)."""
        out: set[str] = set()
        for s in self.subtopologies.values():
            out.update(s.source_topics)
            out.update(s.repartition_sink_topics)
            out.update(t.name for t in s.state_changelog_topics)
            out.update(t.name for t in s.repartition_source_topics)
        return out

    def described(self) -> dict[str, Any]:
        """Kafka's StreamsTopology.asStreamsGroupDescribeTopology (the topology as sent)."""
        return {
            "epoch": self.epoch,
            "subtopologies": [
                {
                    "subtopology_id": s.subtopology_id,
                    "source_topics": sorted(s.source_topics),
                    "repartition_sink_topics": sorted(s.repartition_sink_topics),
                    "state_changelog_topics": [
                        t.to_wire() for t in sorted(s.state_changelog_topics, key=_name)
                    ],
                    "repartition_source_topics": [
                        t.to_wire() for t in sorted(s.repartition_source_topics, key=_name)
                    ],
                }
                for s in sorted(self.subtopologies.values(), key=lambda s: s.subtopology_id)
            ],
        }


def _name(t: TopicInfo) -> str:
    return t.name


@dataclass(frozen=True, slots=True)
class InternalTopic:
    """Kafka's ConfiguredInternalTopic: an internal topic with its decided partition count."""

    name: str
    partitions: int
    replication_factor: int  # -1: the broker's default.replication.factor
    configs: tuple[tuple[str, str], ...]

    def described(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "partitions": self.partitions,
            "replication_factor": max(self.replication_factor, 0),
            "topic_configs": [{"key": k, "value": v} for k, v in self.configs],
        }


@dataclass(frozen=True, slots=True)
class ConfiguredSubtopology:
    number_of_tasks: int
    source_topics: frozenset[str]
    repartition_source_topics: dict[str, InternalTopic]
    repartition_sink_topics: frozenset[str]
    state_changelog_topics: dict[str, InternalTopic]

    @property
    def stateful(self) -> bool:
        return bool(self.state_changelog_topics)

    def input_topics(self) -> set[str]:
        return set(self.source_topics) | set(self.repartition_source_topics)


@dataclass(slots=True)
class ConfiguredTopology:
    """Kafka's ConfiguredTopology: ready when there is no status (every topic exists as configured)."""

    epoch: int
    subtopologies: dict[str, ConfiguredSubtopology] = field(default_factory=dict)
    internal_topics_to_create: dict[str, InternalTopic] = field(default_factory=dict)
    status: tuple[int, str] | None = None

    @property
    def ready(self) -> bool:
        return self.status is None

    def described(self) -> dict[str, Any]:
        """Kafka's ConfiguredTopology.asStreamsGroupDescribeTopology: internal topics as decided."""
        return {
            "epoch": self.epoch,
            "subtopologies": [
                {
                    "subtopology_id": sid,
                    "source_topics": sorted(s.source_topics),
                    "repartition_sink_topics": sorted(s.repartition_sink_topics),
                    "state_changelog_topics": [
                        t.described() for _, t in sorted(s.state_changelog_topics.items())
                    ],
                    "repartition_source_topics": [
                        t.described() for _, t in sorted(s.repartition_source_topics.items())
                    ],
                }
                for sid, s in sorted(self.subtopologies.items())
            ],
        }


def summarize_topics(topics: set[str] | list[str]) -> str:
    """Kafka's InternalTopicManager.summarizeTopics (at most three names, then a count)."""
    names = sorted(topics)
    if not names:
        return "<none>"
    shown = ", ".join(names[:3])
    return shown if len(names) <= 3 else f"{shown} and {len(names) - 3} additional topics"


def java_string_hash(text: str) -> int:
    """Java's String.hashCode (over UTF-16 code units, as a signed 32-bit int)."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def java_hash_map_order(names: list[str]) -> list[str]:
    """The iteration order of a java.util.HashMap whose keys were put in this order: by bucket
    (the spread hash masked by the table size, which doubles past 3/4 full), then insertion order.
    Kafka summarizes the missing internal topics in this order."""
    table = 16
    while len(names) > table * 3 // 4:
        table *= 2

    def bucket(name: str) -> int:
        h = java_string_hash(name) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (table - 1)

    order = {name: i for i, name in enumerate(names)}
    return sorted(names, key=lambda n: (bucket(n), order[n]))


def configure_topics(topology: StreamsTopology, partitions_of: PartitionCount) -> ConfiguredTopology:
    """Kafka's InternalTopicManager.configureTopics; raises InvalidTopology for a topology that cannot
    be sized."""
    missing = sorted(
        {t for s in topology.subtopologies.values() for t in s.source_topics if partitions_of(t) is None}
    )
    if missing:
        return ConfiguredTopology(
            topology.epoch,
            status=(MISSING_SOURCE_TOPICS, f"Source topics {summarize_topics(missing)} are missing."),
        )
    decided = _repartition_partition_counts(topology, partitions_of)
    try:
        _enforce_copartitioning(topology, partitions_of, decided)
    except _IncorrectlyPartitioned as exc:
        return ConfiguredTopology(topology.epoch, status=(INCORRECTLY_PARTITIONED_TOPICS, str(exc)))

    def count(topic: str) -> int | None:
        found = partitions_of(topic)
        return found if found is not None else decided.get(topic)

    subtopologies: dict[str, ConfiguredSubtopology] = {}
    for sid, s in sorted(topology.subtopologies.items()):
        counts = [c for c in (count(t) for t in s.input_topics()) if c is not None]
        if not counts:
            raise InvalidTopology(f"Subtopology {sid} does not contain any source topics")
        tasks = max(counts)

        def internal(t: TopicInfo, partitions: int) -> InternalTopic:
            return InternalTopic(t.name, partitions, t.replication_factor or -1, t.configs)

        subtopologies[sid] = ConfiguredSubtopology(
            tasks,
            frozenset(s.source_topics),
            {
                t.name: internal(t, decided.get(t.name, t.partitions or tasks))
                for t in s.repartition_source_topics
            },
            frozenset(s.repartition_sink_topics),
            {t.name: internal(t, t.partitions or tasks) for t in s.state_changelog_topics},
        )
    to_create: dict[str, InternalTopic] = {}
    for c in subtopologies.values():
        for t in [*c.repartition_source_topics.values(), *c.state_changelog_topics.values()]:
            found = partitions_of(t.name)
            if found is None:
                to_create[t.name] = t
            elif found != t.partitions:
                return ConfiguredTopology(
                    topology.epoch,
                    status=(
                        INCORRECTLY_PARTITIONED_TOPICS,
                        f"Existing topic {t.name} has different number of partitions: "
                        f"expected {t.partitions}, found {found}",
                    ),
                )
    status = None
    if to_create:
        names = java_hash_map_order(list(to_create))
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} additional topics" if len(names) > 3 else "")
        status = (MISSING_INTERNAL_TOPICS, f"Internal topics are missing: {shown}")
    return ConfiguredTopology(topology.epoch, subtopologies, to_create, status)


def _repartition_partition_counts(topology: StreamsTopology, partitions_of: PartitionCount) -> dict[str, int]:
    """Kafka's RepartitionTopics.setup: an explicit count is kept; otherwise a repartition topic gets
    the largest partition count of the topics read by the subtopologies that write it, repeated until
    every one is sized."""
    counts = {
        t.name: t.partitions
        for s in topology.subtopologies.values()
        for t in s.repartition_source_topics
        if t.partitions > 0
    }
    while True:
        unsized = progress = False
        for s in topology.subtopologies.values():
            for sink in s.repartition_sink_topics:
                if sink in counts:
                    continue
                candidates = [c for c in (partitions_of(t) for t in s.source_topics) if c is not None]
                candidates += [counts[t.name] for t in s.repartition_source_topics if t.name in counts]
                if candidates:
                    counts[sink] = max(candidates)
                    progress = True
                else:
                    unsized = True
        if not unsized:
            break
        if not progress:
            raise InvalidTopology(
                "Failed to compute number of partitions for all repartition topics. "
                "There may be loops in the topology that cannot be resolved."
            )
    for s in topology.subtopologies.values():
        for t in s.repartition_source_topics:
            if t.name not in counts:
                raise InvalidTopology(
                    "Failed to compute number of partitions for all repartition topics, because a "
                    "repartition source topic is never used as a sink topic."
                )
    return counts


class _IncorrectlyPartitioned(Exception):
    pass


def _enforce_copartitioning(
    topology: StreamsTopology, partitions_of: PartitionCount, decided: dict[str, int]
) -> None:
    """Kafka's CopartitionedTopicsEnforcer: the source topics of a copartition group must agree on
    their partition count; repartition topics of the group without a fixed count take it."""
    fixed = {
        t.name for s in topology.subtopologies.values() for t in s.repartition_source_topics if t.partitions
    }
    for s in topology.subtopologies.values():
        for source_idx, repartition_idx in s.copartition_groups:
            sources = [s.source_topics[i] for i in source_idx]
            repartitions = [s.repartition_source_topics[i].name for i in repartition_idx]
            counts = {t: partitions_of(t) for t in sources}
            if len({c for c in counts.values() if c is not None}) > 1:
                listed = ", ".join(f"{t}={c}" for t, c in sorted(counts.items()))
                raise _IncorrectlyPartitioned(
                    f"Following topics do not have the same number of partitions: [{listed}]"
                )
            known = [c for c in counts.values() if c is not None]
            if known:
                target = known[0]
            else:
                fixed_counts = [decided[t] for t in repartitions if t in fixed and t in decided]
                target = (
                    fixed_counts[0]
                    if fixed_counts
                    else max((decided.get(t, 0) for t in repartitions), default=0)
                )
            for t in repartitions:
                if t in fixed:
                    if decided.get(t) != target:
                        raise _IncorrectlyPartitioned(
                            f"Number of partitions [{decided.get(t)}] of repartition topic [{t}] doesn't match "
                            f"number of partitions [{target}] of the source topic."
                        )
                elif target:
                    decided[t] = target
