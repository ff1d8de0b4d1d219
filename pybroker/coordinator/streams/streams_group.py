"""A KIP-1071 streams group (``group.protocol=streams``): members, epochs, task assignments.

Kafka's ``StreamsGroup``, ``StreamsGroupMember`` and the streams ``CurrentAssignmentBuilder``.  The
epochs work as in a KIP-848 consumer group (consumer_group.py), over tasks instead of partitions: a
task is ``(subtopology id, partition)`` in one of three roles (active, standby, warm-up).  A member
moves towards its target assignment by first revoking what it must give up (UNREVOKED_TASKS, until
a heartbeat no longer reports them); a task it should take is withheld (UNRELEASED_TASKS) while
another member still runs it actively, or while another member of the same process still runs it as
a standby or warm-up, so a task never runs twice at once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from enum import IntEnum
from typing import Any

from pybroker.coordinator.group import OffsetAndMetadata
from pybroker.coordinator.streams.topology import ConfiguredTopology, StreamsTopology

STREAMS_GROUP_TYPE = "streams"
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2
INITIAL_EPOCH = 1  # Kafka's StreamsGroup starts at group epoch 1 (the first join makes it 2)

Task = tuple[str, int]


class MemberState(IntEnum):
    """Kafka's streams MemberState, with the byte values its records carry (unlike the consumer group's,
    they start at 1)."""

    STABLE = 1
    UNREVOKED_TASKS = 2
    UNRELEASED_TASKS = 3
    UNKNOWN = 127


@dataclass(frozen=True, slots=True)
class TasksTuple:
    """Kafka's TasksTuple: the active, standby and warm-up tasks of a member."""

    active: frozenset[Task] = frozenset()
    standby: frozenset[Task] = frozenset()
    warmup: frozenset[Task] = frozenset()

    @classmethod
    def from_wire(cls, active: list[dict], standby: list[dict], warmup: list[dict]) -> TasksTuple:
        return cls(_tasks(active), _tasks(standby), _tasks(warmup))

    def is_empty(self) -> bool:
        return not (self.active or self.standby or self.warmup)

    def contains_any(self, other: TasksTuple) -> bool:
        return bool(self.active & other.active or self.standby & other.standby or self.warmup & other.warmup)

    def contains_all(self, other: TasksTuple) -> bool:
        return other.active <= self.active and other.standby <= self.standby and other.warmup <= self.warmup

    def all_tasks(self) -> frozenset[Task]:
        return self.active | self.standby | self.warmup

    def to_wire(self) -> dict[str, list[dict[str, Any]]]:
        return {
            "active_tasks": task_ids(self.active),
            "standby_tasks": task_ids(self.standby),
            "warmup_tasks": task_ids(self.warmup),
        }


EMPTY_TASKS = TasksTuple()


def _tasks(ids: Iterable[dict]) -> frozenset[Task]:
    return frozenset((t["subtopology_id"], p) for t in ids for p in t["partitions"])


def task_ids(tasks: Iterable[Task]) -> list[dict[str, Any]]:
    """Tasks as the wire's TaskIds: one entry per subtopology, partitions in order."""
    by_sub: dict[str, list[int]] = {}
    for sub, p in tasks:
        by_sub.setdefault(sub, []).append(p)
    return [{"subtopology_id": s, "partitions": sorted(ps)} for s, ps in sorted(by_sub.items())]


@dataclass(slots=True)
class StreamsGroupMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = -1
    topology_epoch: int = 0
    process_id: str = ""
    user_endpoint: tuple[str, int] | None = None
    client_tags: dict[str, str] = field(default_factory=dict)
    task_offsets: dict[Task, int] = field(default_factory=dict)
    task_end_offsets: dict[Task, int] = field(default_factory=dict)
    state: MemberState = MemberState.STABLE
    member_epoch: int = 0
    previous_member_epoch: int = 0
    assigned: TasksTuple = EMPTY_TASKS
    pending_revocation: TasksTuple = EMPTY_TASKS
    # KIP-1251: active task -> the member epoch at which it was assigned (OffsetCommit validation).
    active_epochs: dict[Task, int] = field(default_factory=dict)
    # Runtime only.
    session_timer: Any = None
    rebalance_timer: Any = None

    def metadata(self) -> tuple:
        """What Kafka's hasStreamsMemberMetadataChanged compares (a change bumps the group epoch)."""
        return (
            self.client_id,
            self.client_host,
            self.instance_id,
            self.rack_id,
            self.rebalance_timeout_ms,
            self.topology_epoch,
            self.process_id,
            self.user_endpoint,
            tuple(sorted(self.client_tags.items())),
        )


class StreamsGroupState:
    """Kafka's StreamsGroup.StreamsGroupState, spelled as ListGroups and StreamsGroupDescribe spell it."""

    EMPTY = "Empty"
    NOT_READY = "NotReady"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


class StreamsGroup:
    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = INITIAL_EPOCH
        self.assignment_epoch = INITIAL_EPOCH
        self.assignment_timestamp_ms: int | None = None
        self.members: dict[str, StreamsGroupMember] = {}
        self.static_members: dict[str, str] = {}  # instance id -> member id
        self.target: dict[str, TasksTuple] = {}
        self.topology: StreamsTopology | None = None
        self.configured: ConfiguredTopology | None = None
        # The topology epoch last found ready (every topic there, as configured): Kafka keeps it in the
        # group's metadata record, so a reloaded group has its state before it is configured again.
        self.validated_topology_epoch = -1
        self.loaded = False  # rebuilt from __consumer_offsets (not configured since)
        self.configs: dict[str, str] = {}  # group configs (streams.*), as of the last heartbeat
        self.last_standby_replicas: int | None = None  # the num.standby.replicas of the last assignment
        # The partition counts of the topology's topics the group epoch was computed with (Kafka keeps
        # a hash of them): a change re-configures the topology and bumps the group epoch.
        self.metadata_signature: dict[str, int | None] = {}
        self.offsets: dict[tuple[str, int], OffsetAndMetadata] = {}
        self.shutdown_requested_by: str | None = None
        self.endpoint_information_epoch = 0
        self.initial_delay_timer: Any = None
        self.dead = False

    @property
    def state(self) -> str:
        if self.dead:
            return StreamsGroupState.DEAD
        if not self.members:
            return StreamsGroupState.EMPTY
        if self.topology is None or self.validated_topology_epoch != self.topology.epoch:
            return StreamsGroupState.NOT_READY
        if self.group_epoch > self.assignment_epoch:
            return StreamsGroupState.ASSIGNING
        for m in self.members.values():
            if m.state is not MemberState.STABLE or m.member_epoch != self.assignment_epoch:
                return StreamsGroupState.RECONCILING
        return StreamsGroupState.STABLE

    def is_empty(self) -> bool:
        return not self.members

    def member_by_instance(self, instance_id: str) -> StreamsGroupMember | None:
        member_id = self.static_members.get(instance_id)
        return None if member_id is None else self.members.get(member_id)

    def put_member(self, member: StreamsGroupMember) -> None:
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id

    def remove_member(self, member_id: str) -> StreamsGroupMember | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        if member.instance_id is not None and self.static_members.get(member.instance_id) == member_id:
            del self.static_members[member.instance_id]
        self.target.pop(member_id, None)
        if not self.members:
            self.shutdown_requested_by = None
        return member

    # -- which process runs a task now (Kafka's currentActiveTaskProcessId and friends) --------------
    def task_owners(self, exclude: str) -> tuple[dict[Task, str], dict[Task, set[str]]]:
        """(active task -> process, standby or warm-up task -> processes) over the other members'
        assigned tasks and tasks pending revocation."""
        active: dict[Task, str] = {}
        passive: dict[Task, set[str]] = {}
        for m in self.members.values():
            if m.member_id == exclude:
                continue
            for tasks in (m.assigned, m.pending_revocation):
                for t in tasks.active:
                    active[t] = m.process_id
                for t in tasks.standby | tasks.warmup:
                    passive.setdefault(t, set()).add(m.process_id)
        return active, passive

    def subscribed_names(self, _topic_names: list[str] | None = None) -> set[str]:
        """Kafka's StreamsGroup.isSubscribedToTopic: the topics the configured topology reads."""
        if self.configured is None:
            return set()
        return {t for s in self.configured.subtopologies.values() for t in s.input_topics()}


def next_assignment(
    group: StreamsGroup, member: StreamsGroupMember, target: TasksTuple, owned: TasksTuple | None
) -> StreamsGroupMember:
    """One step of Kafka's streams CurrentAssignmentBuilder.build; ``owned`` is what the heartbeat
    says the member runs (None: not sent)."""
    if member.state is MemberState.STABLE:
        if member.member_epoch == group.assignment_epoch:
            return member
        return _compute(group, member, member.member_epoch, target, owned)
    if member.state is MemberState.UNREVOKED_TASKS:
        if owned is None or owned.contains_any(member.pending_revocation):
            return member  # still waiting for the member to confirm the revocation
        return _compute(group, member, member.member_epoch + 1, target, owned)
    return _compute(group, member, member.member_epoch, target, owned)


def _compute(
    group: StreamsGroup,
    member: StreamsGroupMember,
    epoch_if_revoking: int,
    target: TasksTuple,
    owned: TasksTuple | None,
) -> StreamsGroupMember:
    active_owner, passive_owners = group.task_owners(member.member_id)
    process = member.process_id

    def in_process(t: Task) -> bool:
        return process in passive_owners.get(t, ())

    def active_unreleased(t: Task) -> bool:
        return t in active_owner or in_process(t)

    def passive_unreleased(t: Task) -> bool:
        return active_owner.get(t) == process or in_process(t)

    held_back = False

    def difference(current: frozenset[Task], wanted: frozenset[Task], unreleased: Any) -> tuple:
        nonlocal held_back
        keep = current & wanted
        revoke = current - wanted
        take = set()
        for t in wanted - current:
            if unreleased(t):
                held_back = True
            else:
                take.add(t)
        return keep, revoke, frozenset(take)

    a_keep, a_revoke, a_take = difference(member.assigned.active, target.active, active_unreleased)
    s_keep, s_revoke, s_take = difference(member.assigned.standby, target.standby, passive_unreleased)
    w_keep, w_revoke, w_take = difference(member.assigned.warmup, target.warmup, passive_unreleased)
    revoke = TasksTuple(a_revoke, s_revoke, w_revoke)
    if not revoke.is_empty() and (owned is None or owned.contains_any(revoke)):
        return replace(
            member,
            state=MemberState.UNREVOKED_TASKS,
            member_epoch=epoch_if_revoking,
            previous_member_epoch=member.member_epoch,
            assigned=TasksTuple(a_keep, s_keep, w_keep),
            pending_revocation=revoke,
            active_epochs={t: e for t, e in member.active_epochs.items() if t in a_keep},
        )
    epoch = group.assignment_epoch
    active = a_keep | a_take
    return replace(
        member,
        state=MemberState.UNRELEASED_TASKS if held_back else MemberState.STABLE,
        member_epoch=epoch,
        previous_member_epoch=member.member_epoch,
        assigned=TasksTuple(active, s_keep | s_take, w_keep | w_take),
        pending_revocation=EMPTY_TASKS,
        active_epochs={t: member.active_epochs.get(t, epoch) for t in active},
    )
