"""Kafka's streams ``StickyTaskAssignor``: the broker-side task assignment of a streams group.

Tasks are ``(subtopology id, partition)``.  Members are grouped by process (one Kafka Streams
instance runs several members, one per stream thread); load is balanced across processes first,
then across the members of a process.  Active tasks stay with their previous owner while it is under
its quota (ceil(tasks / members)), then go to a member that held them as a standby, then to the
least loaded member.  Each stateful task gets ``num_standby_replicas`` standbys on processes that do
not run it already, previous standby holders first.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

Task = tuple[str, int]


@dataclass(slots=True)
class AssignorMember:
    member_id: str
    process_id: str
    active: frozenset[Task] = frozenset()  # what the member owns now
    standby: frozenset[Task] = frozenset()


@dataclass(slots=True)
class MemberAssignment:
    active: set[Task] = field(default_factory=set)
    standby: set[Task] = field(default_factory=set)


@dataclass(slots=True)
class _Process:
    process_id: str
    members: list[str] = field(default_factory=list)
    tasks: int = 0  # active and standby tasks assigned to its members

    @property
    def load(self) -> float:
        return self.tasks / len(self.members)


def assign(
    members: Iterable[AssignorMember],
    tasks_per_subtopology: dict[str, int],
    stateful: set[str],
    num_standby_replicas: int,
) -> dict[str, MemberAssignment]:
    members = sorted(members, key=lambda m: m.member_id)
    out = {m.member_id: MemberAssignment() for m in members}
    if not members:
        return out
    processes: dict[str, _Process] = {}
    process_of: dict[str, _Process] = {}
    for m in members:
        p = processes.setdefault(m.process_id, _Process(m.process_id))
        p.members.append(m.member_id)
        process_of[m.member_id] = p
    tasks = [(s, p) for s in sorted(tasks_per_subtopology) for p in range(tasks_per_subtopology[s])]
    prev_active = {t: m.member_id for m in members for t in m.active}
    prev_standby: dict[Task, list[str]] = {}
    for m in members:
        for t in sorted(m.standby):
            prev_standby.setdefault(t, []).append(m.member_id)
    quota = math.ceil(len(tasks) / len(members))

    def count(member_id: str) -> int:
        a = out[member_id]
        return len(a.active) + len(a.standby)

    def give(member_id: str, task: Task, standby: bool) -> None:
        (out[member_id].standby if standby else out[member_id].active).add(task)
        process_of[member_id].tasks += 1

    def least_loaded(candidates: Iterable[str]) -> str | None:
        """The least loaded process's least loaded member (ties by id, for a stable answer)."""
        best = None
        for member_id in candidates:
            key = (process_of[member_id].load, count(member_id), process_of[member_id].process_id, member_id)
            if best is None or key < best[0]:
                best = (key, member_id)
        return None if best is None else best[1]

    # Active tasks: previous owners, then previous standbys, then the least loaded member.
    remaining: list[Task] = []
    for t in tasks:
        owner = prev_active.get(t)
        if owner is not None and len(out[owner].active) < quota:
            give(owner, t, standby=False)
        else:
            remaining.append(t)
    unplaced: list[Task] = []
    for t in remaining:
        holder = least_loaded(m for m in prev_standby.get(t, ()) if len(out[m].active) < quota)
        if holder is not None:
            give(holder, t, standby=False)
        else:
            unplaced.append(t)
    for t in unplaced:
        member_id = least_loaded(m.member_id for m in members)
        assert member_id is not None
        give(member_id, t, standby=False)

    # Standby tasks: on processes that do not hold the task yet.
    if num_standby_replicas > 0:
        for t in tasks:
            if t[0] not in stateful:
                continue
            for _ in range(num_standby_replicas):
                holding = {
                    process_of[m].process_id for m, a in out.items() if t in a.active or t in a.standby
                }

                def free(member_id: str, holding: set[str] = holding) -> bool:
                    return process_of[member_id].process_id not in holding

                member_id = least_loaded(m for m in prev_standby.get(t, ()) if free(m))
                if member_id is None:
                    member_id = least_loaded(m.member_id for m in members if free(m.member_id))
                if member_id is None:
                    break  # fewer processes than replicas: Kafka logs and leaves it unassigned
                give(member_id, t, standby=True)
    return out
