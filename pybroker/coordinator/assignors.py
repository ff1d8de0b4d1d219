"""Server-side assignors of KIP-848 consumer groups: ``uniform`` (the default) and ``range``.

They follow Apache Kafka's ``UniformAssignor`` and ``RangeAssignor`` (group-coordinator
.../assignor): input is every member's subscribed topic ids and its current target assignment,
plus the partition count of each subscribed topic; output is the new target assignment.

- uniform: balanced (member partition counts differ by at most one among members that can take a
  partition) and sticky (a member keeps what it had as long as balance allows).
- range: per topic, the subscribed members sorted by member id take contiguous ranges, the first
  ``partitions % members`` one more; members with the same subscriptions therefore get the same
  partition numbers of co-partitioned topics.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from pybroker.coordinator.consumer_records import Assignment

TopicPartition = tuple[uuid.UUID, int]


@dataclass(frozen=True, slots=True)
class MemberSpec:
    subscribed: frozenset[uuid.UUID]
    current: Assignment = field(default_factory=dict)


Assignor = Callable[[Mapping[str, MemberSpec], Mapping[uuid.UUID, int]], dict[str, Assignment]]


def _to_assignment(owned: set[TopicPartition]) -> Assignment:
    out: dict[uuid.UUID, list[int]] = {}
    for topic_id, partition in owned:
        out.setdefault(topic_id, []).append(partition)
    return {t: tuple(sorted(ps)) for t, ps in out.items()}


def uniform(members: Mapping[str, MemberSpec], topics: Mapping[uuid.UUID, int]) -> dict[str, Assignment]:
    if not members:
        return {}
    ids = sorted(members)
    eligible: dict[TopicPartition, list[str]] = {}
    for topic_id in sorted(topics, key=str):
        subscribers = [m for m in ids if topic_id in members[m].subscribed]
        if subscribers:
            for p in range(topics[topic_id]):
                eligible[(topic_id, p)] = subscribers
    owned: dict[str, set[TopicPartition]] = {m: set() for m in ids}
    taken: set[TopicPartition] = set()
    # 1. Stickiness: keep every current partition that is still valid and not claimed twice.
    for m in ids:
        for topic_id, parts in members[m].current.items():
            for p in parts:
                tp = (topic_id, p)
                if tp in eligible and m in eligible[tp] and tp not in taken:
                    owned[m].add(tp)
                    taken.add(tp)
    # 2. With identical subscriptions the quota is known: give back what exceeds it.
    homogeneous = len({members[m].subscribed for m in ids}) == 1
    if homogeneous:
        total = len(eligible)
        base, extra = divmod(total, len(ids))
        # The members holding most keep the extra partition, so the least moves.
        for rank, m in enumerate(sorted(ids, key=lambda i: (-len(owned[i]), i))):
            quota = base + (1 if rank < extra else 0)
            while len(owned[m]) > quota:
                tp = max(owned[m], key=lambda t: (str(t[0]), t[1]))
                owned[m].discard(tp)
                taken.discard(tp)
    # 3. Every free partition to the least loaded member that subscribes to its topic.
    for tp in eligible:
        if tp not in taken:
            m = min(eligible[tp], key=lambda i: (len(owned[i]), i))
            owned[m].add(tp)
            taken.add(tp)
    # 4. Heterogeneous subscriptions: move partitions while that narrows an imbalance of two or more.
    if not homogeneous:
        moved = True
        while moved:
            moved = False
            for m in sorted(ids, key=lambda i: (-len(owned[i]), i)):
                for tp in sorted(owned[m], key=lambda t: (str(t[0]), t[1])):
                    target = min(eligible[tp], key=lambda i: (len(owned[i]), i))
                    if len(owned[target]) + 1 < len(owned[m]):
                        owned[m].discard(tp)
                        owned[target].add(tp)
                        moved = True
                        break
                if moved:
                    break
    return {m: _to_assignment(owned[m]) for m in ids}


def range_(members: Mapping[str, MemberSpec], topics: Mapping[uuid.UUID, int]) -> dict[str, Assignment]:
    ids = sorted(members)
    owned: dict[str, set[TopicPartition]] = {m: set() for m in ids}
    for topic_id, count in topics.items():
        subscribers = [m for m in ids if topic_id in members[m].subscribed]
        if not subscribers:
            continue
        base, extra = divmod(count, len(subscribers))
        start = 0
        for rank, m in enumerate(subscribers):
            size = base + (1 if rank < extra else 0)
            owned[m].update((topic_id, p) for p in range(start, start + size))
            start += size
    return {m: _to_assignment(owned[m]) for m in ids}


ASSIGNORS: dict[str, Assignor] = {"uniform": uniform, "range": range_}
DEFAULT_ASSIGNOR = "uniform"  # the first of group.consumer.assignors
