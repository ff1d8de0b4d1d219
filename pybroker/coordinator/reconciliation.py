"""The per-member reconciliation state machine of KIP-848 (Kafka's ``CurrentAssignmentBuilder``).

A member moves from its current assignment towards the group's target assignment in steps the
client acknowledges: partitions it must give up are revoked first (the member stays in its epoch,
UNREVOKED_PARTITIONS, until a heartbeat shows it no longer owns them); only then does it move to the
target epoch, taking the new partitions that are free.  A partition still owned by another member
(its partition epoch is set) is withheld (UNRELEASED_PARTITIONS) until that owner releases it, so a
partition is never owned by two members at once.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum

from pybroker.coordinator.consumer_records import Assignment


class MemberState(IntEnum):
    """Kafka's MemberState, with its record byte values."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127

    @property
    def label(self) -> str:
        return self.name.lower()


@dataclass(frozen=True, slots=True)
class MemberAssignmentState:
    """What the reconciliation reads and produces for one member."""

    state: MemberState
    member_epoch: int
    previous_member_epoch: int
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)


# (topic id, partition) -> the epoch of the member owning it, or -1 when free.
PartitionEpoch = Callable[[uuid.UUID, int], int]


def _owns_any(owned: Assignment | None, partitions: Assignment) -> bool:
    """Whether the client still reports owning any of ``partitions`` (unknown: assume it does)."""
    if owned is None:
        return True
    return any(set(owned.get(t, ())) & set(ps) for t, ps in partitions.items())


def next_state(
    member: MemberAssignmentState,
    target_epoch: int,
    target: Assignment,
    partition_epoch: PartitionEpoch,
    owned: Assignment | None,
) -> MemberAssignmentState:
    """One reconciliation step: ``owned`` is what the heartbeat says the client owns (None: not sent)."""
    if member.state is MemberState.UNREVOKED_PARTITIONS:
        if _owns_any(owned, member.pending_revocation):
            return member  # still waiting for the client to acknowledge the revocation
        return _compute(member, member.member_epoch, target_epoch, target, partition_epoch)
    if member.state is MemberState.UNRELEASED_PARTITIONS or member.member_epoch != target_epoch:
        return _compute(member, member.member_epoch, target_epoch, target, partition_epoch)
    return member


def _compute(
    member: MemberAssignmentState,
    member_epoch: int,
    target_epoch: int,
    target: Assignment,
    partition_epoch: PartitionEpoch,
) -> MemberAssignmentState:
    assigned: dict[uuid.UUID, set[int]] = {}
    revoking: dict[uuid.UUID, set[int]] = {}
    pending: dict[uuid.UUID, set[int]] = {}
    unreleased = False
    for topic_id in set(target) | set(member.assigned):
        wanted = set(target.get(topic_id, ()))
        current = set(member.assigned.get(topic_id, ()))
        keep = current & wanted
        if keep:
            assigned[topic_id] = keep
        if current - keep:
            revoking[topic_id] = current - keep
        free = set()
        revoked_by_self = set(member.pending_revocation.get(topic_id, ()))
        for p in wanted - keep:
            # A partition this member is still revoking is its own, not another owner's.
            if p in revoked_by_self or partition_epoch(topic_id, p) == -1:
                free.add(p)
            else:
                unreleased = True
        if free:
            pending[topic_id] = free

    def frozen(d: dict[uuid.UUID, set[int]]) -> Assignment:
        return {t: tuple(sorted(ps)) for t, ps in d.items() if ps}

    if revoking:
        # Revoke first; the member stays in its epoch until the client confirms.
        return MemberAssignmentState(
            MemberState.UNREVOKED_PARTITIONS,
            member_epoch,
            member_epoch,  # Kafka's updateMemberEpoch: the previous epoch is the one it had
            frozen(assigned),
            frozen(revoking),
        )
    for topic_id, ps in pending.items():
        assigned.setdefault(topic_id, set()).update(ps)
    return MemberAssignmentState(
        MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE,
        target_epoch,
        member_epoch,
        frozen(assigned),
        {},
    )
