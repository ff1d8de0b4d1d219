"""Share-group membership and assignment (KIP-932): the share-group half of Kafka's GroupCoordinatorShard.

A share group has members (each identified by the member id the client generates), a group epoch
bumped on every membership or subscription change, and a target assignment computed by the
``simple`` assignor at that epoch. Unlike a consumer group there is nothing to revoke: a partition may
be assigned to several members at once and the records themselves are handed out under acquisition
locks, so a member moves straight to the target assignment and the group epoch on its next heartbeat.

States: EMPTY (no members), STABLE (members) and DEAD (deleted), as Kafka's ShareGroup.ShareGroupState.
Heartbeats are answered as Kafka answers ShareGroupHeartbeat: epoch 0 joins, -1 leaves, any other
epoch must equal the member's current epoch (FENCED_MEMBER_EPOCH otherwise) and an unknown member id
with a non-zero epoch is UNKNOWN_MEMBER_ID. A member silent for ``group.share.session.timeout.ms``
is removed.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum

from pybroker.coordinator.clock import Clock, TimerHandle
from pybroker.coordinator.consumer_records import Assignment
from pybroker.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

DEFAULT_HEARTBEAT_INTERVAL_MS = 5_000  # group.share.heartbeat.interval.ms
DEFAULT_SESSION_TIMEOUT_MS = 45_000  # group.share.session.timeout.ms
LEAVE_GROUP_MEMBER_EPOCH = -1


class ShareGroupState(Enum):
    EMPTY = "Empty"
    STABLE = "Stable"
    DEAD = "Dead"


def simple_assign(members: Mapping[str, frozenset[uuid.UUID]], partitions: Mapping[uuid.UUID, int]) -> dict[str, Assignment]:
    """Kafka's share-group ``SimpleAssignor`` for each topic: with fewer members than partitions the
    partitions are dealt round robin over the subscribed members (each partition to one member); with
    at least as many members as partitions every member gets one partition and each partition is
    shared by several members, so no member sits idle."""
    out: dict[str, dict[uuid.UUID, list[int]]] = {m: {} for m in members}
    for topic_id in sorted(partitions, key=str):
        subscribers = sorted(m for m, topics in members.items() if topic_id in topics)
        count = partitions[topic_id]
        if not subscribers or count <= 0:
            continue
        if len(subscribers) >= count:
            for i, member in enumerate(subscribers):
                out[member].setdefault(topic_id, []).append(i % count)
        else:
            for p in range(count):
                out[subscribers[p % len(subscribers)]].setdefault(topic_id, []).append(p)
    return {m: {t: tuple(sorted(ps)) for t, ps in a.items()} for m, a in out.items()}


@dataclass
class ShareMember:
    member_id: str
    member_epoch: int = 0
    client_id: str = ""
    client_host: str = ""
    rack_id: str | None = None
    subscribed_topic_names: frozenset[str] = frozenset()
    assignment: Assignment = field(default_factory=dict)
    session_timer: TimerHandle | None = None


@dataclass(frozen=True)
class HeartbeatResult:
    error: ErrorCode
    member_id: str = ""
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    # None when the member already has it (the response's Assignment is nullable: "unchanged").
    assignment: Assignment | None = None
    error_message: str | None = None


class ShareGroup:
    def __init__(
        self,
        group_id: str,
        clock: Clock,
        *,
        heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS,
        session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
        on_member_removed: Callable[[ShareGroup, ShareMember], None] | None = None,
    ) -> None:
        self.group_id = group_id
        self.clock = clock
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.session_timeout_ms = session_timeout_ms
        self.on_member_removed = on_member_removed
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ShareMember] = {}
        self.target_assignment: dict[str, Assignment] = {}
        # Kafka's ShareGroupStatePartitionMetadata initializedTopics: topic id -> the partitions of the
        # group's subscribed topics made share partitions of the group when an assignment covered their
        # topic (Kafka initializes their state then, at start offset -1); what DescribeShareGroupOffsets
        # of every topic lists, fetched or not.
        self.initialized_topics: dict[uuid.UUID, set[int]] = {}
        self.dead = False

    @property
    def state(self) -> ShareGroupState:
        if self.dead:
            return ShareGroupState.DEAD
        return ShareGroupState.STABLE if self.members else ShareGroupState.EMPTY

    def subscribed_topic_names(self) -> set[str]:
        names: set[str] = set()
        for m in self.members.values():
            names |= m.subscribed_topic_names
        return names

    def heartbeat(
        self,
        member_id: str,
        member_epoch: int,
        subscribed_topic_names: Sequence[str] | None,
        topics: Mapping[str, tuple[uuid.UUID, int]],
        *,
        client_id: str = "",
        client_host: str = "",
        rack_id: str | None = None,
    ) -> HeartbeatResult:
        """One ShareGroupHeartbeat. ``topics`` maps every existing topic name to (topic id, partitions)."""
        if not member_id:
            return HeartbeatResult(ErrorCode.INVALID_REQUEST, error_message="MemberId can't be empty.")
        if member_epoch == LEAVE_GROUP_MEMBER_EPOCH:
            member = self.members.get(member_id)
            if member is None:
                return HeartbeatResult(ErrorCode.UNKNOWN_MEMBER_ID)
            self.remove_member(member_id)
            return HeartbeatResult(ErrorCode.NONE, member_id, LEAVE_GROUP_MEMBER_EPOCH, 0)
        member = self.members.get(member_id)
        bump = False  # one group-epoch bump per heartbeat, however many things changed
        if member is None:
            if member_epoch != 0:
                return HeartbeatResult(ErrorCode.UNKNOWN_MEMBER_ID)
            if subscribed_topic_names is None:
                return HeartbeatResult(
                    ErrorCode.INVALID_REQUEST, error_message="SubscribedTopicNames must be set in first request."
                )
            member = ShareMember(member_id, client_id=client_id, client_host=client_host, rack_id=rack_id)
            self.members[member_id] = member
            bump = True
            log.info("share group %s: member %s joined", self.group_id, member_id)
        elif member_epoch != member.member_epoch and member_epoch != 0:
            return HeartbeatResult(ErrorCode.FENCED_MEMBER_EPOCH)
        if subscribed_topic_names is not None:
            names = frozenset(subscribed_topic_names)
            if names != member.subscribed_topic_names:
                member.subscribed_topic_names = names
                bump = True
        if bump:
            self.group_epoch += 1
        self._schedule_session_timeout(member)
        self._maybe_compute_assignment(topics)

        changed = member.member_epoch != self.assignment_epoch or member_epoch == 0
        target = self.target_assignment.get(member_id, {})
        if target != member.assignment:
            changed = True
        member.member_epoch = self.assignment_epoch
        member.assignment = target
        return HeartbeatResult(
            ErrorCode.NONE,
            member_id,
            member.member_epoch,
            self.heartbeat_interval_ms,
            assignment=target if changed else None,
        )

    def topics_changed(self) -> None:
        """A subscribed topic was created, deleted or grew partitions: recompute on the next heartbeat."""
        self.group_epoch += 1

    def _maybe_compute_assignment(self, topics: Mapping[str, tuple[uuid.UUID, int]]) -> None:
        if self.assignment_epoch == self.group_epoch:
            return
        members = {
            m.member_id: frozenset(topics[n][0] for n in m.subscribed_topic_names if n in topics)
            for m in self.members.values()
        }
        partitions = {tid: count for tid, count in topics.values()}
        self.target_assignment = simple_assign(members, partitions)
        self.assignment_epoch = self.group_epoch
        for tids in members.values():
            for tid in tids:
                self.initialized_topics.setdefault(tid, set()).update(range(partitions[tid]))

    def _schedule_session_timeout(self, member: ShareMember) -> None:
        if member.session_timer is not None:
            member.session_timer.cancel()
        member_id = member.member_id
        member.session_timer = self.clock.call_later(self.session_timeout_ms, lambda: self._session_expired(member_id))

    def _session_expired(self, member_id: str) -> None:
        if member_id in self.members:
            log.info("share group %s: member %s session timed out", self.group_id, member_id)
            self.remove_member(member_id)

    def remove_member(self, member_id: str) -> ShareMember | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        if member.session_timer is not None:
            member.session_timer.cancel()
        self.target_assignment.pop(member_id, None)
        self.group_epoch += 1
        if self.on_member_removed is not None:
            self.on_member_removed(self, member)
        return member

    def assigned_partitions(self) -> set[tuple[uuid.UUID, int]]:
        return {(t, p) for a in self.target_assignment.values() for t, ps in a.items() for p in ps}
