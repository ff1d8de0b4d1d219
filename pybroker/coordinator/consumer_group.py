"""A KIP-848 consumer group (``group.protocol=consumer``): members, epochs, assignments.

Kafka's ``ConsumerGroup`` and ``ConsumerGroupMember``: the group epoch moves whenever membership,
a subscription or the partition count of a subscribed topic changes; the target assignment is
computed for a group epoch (the assignment epoch); each member reconciles towards it at its own
pace (member epoch, see reconciliation.py).  Partition epochs record which member epoch owns each
partition, so a partition is handed to its next owner only once its previous owner released it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from pybroker.coordinator.consumer_records import Assignment
from pybroker.coordinator.group import OffsetAndMetadata
from pybroker.coordinator.reconciliation import MemberAssignmentState, MemberState
from pybroker.coordinator.topic_regex import compile_topic_regex

CONSUMER_GROUP_TYPE = "consumer"
CONSUMER_PROTOCOL_TYPE = "consumer"
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2


class ConsumerGroupState(Enum):
    """Kafka's ConsumerGroup.ConsumerGroupState, spelled as ListGroups/ConsumerGroupDescribe spell it."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(slots=True)
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    state: MemberState = MemberState.STABLE
    member_epoch: int = 0
    previous_member_epoch: int = -1
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    # KIP-1251: (topic id, partition) -> the member epoch at which the partition was assigned to it.
    assignment_epochs: dict[tuple[uuid.UUID, int], int] = field(default_factory=dict)
    # Runtime only (never persisted).
    session_timer: Any = None
    rebalance_timer: Any = None

    def assignment_state(self) -> MemberAssignmentState:
        return MemberAssignmentState(
            self.state, self.member_epoch, self.previous_member_epoch, self.assigned, self.pending_revocation
        )

    def apply(self, s: MemberAssignmentState) -> None:
        self.state = s.state
        self.member_epoch = s.member_epoch
        self.previous_member_epoch = s.previous_member_epoch
        self.assigned = s.assigned
        self.pending_revocation = s.pending_revocation

    def metadata_value(self) -> dict[str, Any]:
        return {
            "instance_id": self.instance_id,
            "rack_id": self.rack_id,
            "client_id": self.client_id,
            "client_host": self.client_host,
            "subscribed_topic_names": list(self.subscribed_topic_names),
            "subscribed_topic_regex": self.subscribed_topic_regex,
            "rebalance_timeout_ms": self.rebalance_timeout_ms,
            "server_assignor": self.server_assignor,
        }

    def load_metadata(self, value: dict[str, Any]) -> None:
        self.instance_id = value.get("instance_id")
        self.rack_id = value.get("rack_id")
        self.client_id = value["client_id"]
        self.client_host = value["client_host"]
        self.subscribed_topic_names = tuple(value["subscribed_topic_names"])
        self.subscribed_topic_regex = value.get("subscribed_topic_regex")
        self.rebalance_timeout_ms = value.get("rebalance_timeout_ms", -1)
        self.server_assignor = value.get("server_assignor")


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    topic_id: uuid.UUID
    name: str
    partitions: int


class ConsumerGroup:
    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerMember] = {}
        self.static_members: dict[str, str] = {}  # instance id -> member id
        self.target: dict[str, Assignment] = {}  # member id -> target assignment
        # The subscribed topics' metadata the current group epoch was computed with (by name).
        self.subscription_metadata: dict[str, TopicMetadata] = {}
        self.partition_epochs: dict[tuple[uuid.UUID, int], int] = {}
        self.offsets: dict[tuple[str, int], OffsetAndMetadata] = {}
        self.dead = False

    # -- state ----------------------------------------------------------------------------------------
    @property
    def state(self) -> ConsumerGroupState:
        if self.dead:
            return ConsumerGroupState.DEAD
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        for m in self.members.values():
            if m.state is not MemberState.STABLE or m.member_epoch != self.assignment_epoch:
                return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def is_empty(self) -> bool:
        return not self.members

    # -- members --------------------------------------------------------------------------------------
    def member_by_instance(self, instance_id: str) -> ConsumerMember | None:
        member_id = self.static_members.get(instance_id)
        return None if member_id is None else self.members.get(member_id)

    def put_member(self, member: ConsumerMember) -> None:
        old = self.members.get(member.member_id)
        if old is not None:
            self._drop_partition_epochs(old)
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id
        self._add_partition_epochs(member)

    def remove_member(self, member_id: str) -> ConsumerMember | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        self._drop_partition_epochs(member)
        if member.instance_id is not None and self.static_members.get(member.instance_id) == member_id:
            del self.static_members[member.instance_id]
        return member

    def update_assignment(self, member: ConsumerMember, s: MemberAssignmentState) -> None:
        self._drop_partition_epochs(member)
        before = member.assignment_epochs
        member.apply(s)
        # A partition the member keeps keeps its assignment epoch; a new one gets the member's epoch.
        member.assignment_epochs = {
            (t, p): before.get((t, p), member.member_epoch)
            for a in (member.assigned, member.pending_revocation)
            for t, ps in a.items()
            for p in ps
        }
        self._add_partition_epochs(member)

    def _add_partition_epochs(self, member: ConsumerMember) -> None:
        for assignment in (member.assigned, member.pending_revocation):
            for topic_id, parts in assignment.items():
                for p in parts:
                    self.partition_epochs[(topic_id, p)] = member.member_epoch

    def _drop_partition_epochs(self, member: ConsumerMember) -> None:
        for assignment in (member.assigned, member.pending_revocation):
            for topic_id, parts in assignment.items():
                for p in parts:
                    if self.partition_epochs.get((topic_id, p)) == member.member_epoch:
                        del self.partition_epochs[(topic_id, p)]

    def partition_epoch(self, topic_id: uuid.UUID, partition: int) -> int:
        return self.partition_epochs.get((topic_id, partition), -1)

    # -- subscriptions --------------------------------------------------------------------------------
    def subscribed_names(self, topic_names: list[str]) -> set[str]:
        """Every topic some member subscribes to, by name or by regex (matched against ``topic_names``)."""
        out: set[str] = set()
        for m in self.members.values():
            out.update(m.subscribed_topic_names)
            if m.subscribed_topic_regex:
                out.update(matching(m.subscribed_topic_regex, topic_names))
        return out

    def preferred_assignor(self, default: str) -> str:
        """Kafka's computePreferredServerAssignor: the assignor most members name, else the default."""
        counts: dict[str, int] = {}
        for m in self.members.values():
            if m.server_assignor:
                counts[m.server_assignor] = counts.get(m.server_assignor, 0) + 1
        if not counts:
            return default
        return max(sorted(counts), key=lambda name: counts[name])


def matching(regex: str, topic_names: list[str]) -> set[str]:
    """Topics fully matched by a subscription regex (validated by topic_regex when it was accepted)."""
    pattern = compile_topic_regex(regex)
    return {t for t in topic_names if pattern.fullmatch(t)}
