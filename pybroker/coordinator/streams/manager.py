"""StreamsGroupHeartbeat and StreamsGroupDescribe: the KIP-1071 half of the group coordinator.

Follows Apache Kafka's ``GroupMetadataManager.streamsGroupHeartbeat``: validate the request, find or
create the group and the member, take the topology from the first member (a later one may only
repeat it), configure it against the broker's topics (topology.py) — the internal topics it lacks
go back to the caller, which creates them as Kafka's broker does, and the group stays NotReady,
with a status on every answer, until they exist — bump the group epoch when membership, member
metadata or the topics' partition counts change, compute the target assignment with the sticky
task assignor (assignor.py; after ``group.streams.initial.rebalance.delay.ms`` for a new group, at
most once per ``group.streams.assignment.interval.ms``), move the member one reconciliation step
(streams_group.py) and answer with its epoch, its tasks when they changed, the statuses and the
endpoint-to-partitions map for interactive queries.  Session timeouts evict silent members; a member
that does not revoke within its rebalance timeout is fenced.

Every change is written to ``__consumer_offsets`` as Kafka's streams-group records (records.py)
before the answer is sent, and a restarted coordinator rebuilds its streams groups from them.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from pybroker.coordinator.group import OffsetAndMetadata
from pybroker.coordinator.streams import records as sr
from pybroker.coordinator.streams.assignor import AssignorMember, assign
from pybroker.coordinator.streams.streams_group import (
    EMPTY_TASKS,
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    STREAMS_GROUP_TYPE,
    MemberState,
    StreamsGroup,
    StreamsGroupMember,
    Task,
    TasksTuple,
    next_assignment,
    task_ids,
)
from pybroker.coordinator.streams.topology import (
    ASSIGNMENT_DELAYED,
    SHUTDOWN_APPLICATION,
    STALE_TOPOLOGY,
    ConfiguredTopology,
    InternalTopic,
    InvalidTopology,
    StreamsTopology,
    configure_topics,
)
from pybroker.protocol.api import AUTHORIZED_OPERATIONS_OMITTED
from pybroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from pybroker.coordinator.coordinator import GroupCoordinator

log = logging.getLogger(__name__)

INITIAL_DELAY_DETAIL = "Assignment delayed due to the configured initial rebalance delay."
ASSIGNMENT_INTERVAL_DETAIL = "Assignment delayed due to the configured assignment interval."

PartitionCheck = Callable[[str, int], ErrorCode]
Entries = list[tuple[bytes, bytes | None]]


class StreamsGroupError(Exception):
    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message or code.name)
        self.code = code
        self.message = message


# The group configs (IncrementalAlterConfigs on a GROUP resource) that override the broker's
# group.streams.* settings for one streams group (Kafka's GroupConfig).
SESSION_TIMEOUT = "streams.session.timeout.ms"
HEARTBEAT_INTERVAL = "streams.heartbeat.interval.ms"
NUM_STANDBY_REPLICAS = "streams.num.standby.replicas"
INITIAL_REBALANCE_DELAY = "streams.initial.rebalance.delay.ms"
ASSIGNMENT_INTERVAL = "streams.assignment.interval.ms"
STREAMS_GROUP_CONFIG_KEYS = (SESSION_TIMEOUT, HEARTBEAT_INTERVAL, NUM_STANDBY_REPLICAS, INITIAL_REBALANCE_DELAY,
                             ASSIGNMENT_INTERVAL)  # fmt: skip


@dataclass(slots=True)
class StreamsGroupConfig:
    heartbeat_interval_ms: int = 5000  # group.streams.heartbeat.interval.ms
    session_timeout_ms: int = 45000  # group.streams.session.timeout.ms
    num_standby_replicas: int = 0  # group.streams.num.standby.replicas
    initial_rebalance_delay_ms: int = 3000  # group.streams.initial.rebalance.delay.ms
    assignment_interval_ms: int = 1000  # group.streams.assignment.interval.ms
    max_size: int = 2**31 - 1  # group.streams.max.size


def error_response(code: ErrorCode, message: str | None) -> dict[str, Any]:
    return {
        "throttle_time_ms": 0,
        "error_code": code,
        "error_message": message,
        "member_id": "",
        "member_epoch": 0,
        "heartbeat_interval_ms": 0,
        "acceptable_recovery_lag": 0,
        "task_offset_interval_ms": 0,
        "status": [],
        "endpoint_information_epoch": 0,
    }


def validate_request(req: dict[str, Any]) -> None:
    """Kafka's throwIfStreamsGroupHeartbeatRequestIsUsingUnsupportedFeatures, then
    throwIfStreamsGroupHeartbeatRequestIsInvalid (with throwIfInvalidTopology), in Kafka's order."""

    def invalid(message: str) -> StreamsGroupError:
        return StreamsGroupError(ErrorCode.INVALID_REQUEST, message)

    topology = req.get("topology")
    if topology is not None and any(s["source_topic_regex"] for s in topology["subtopologies"]):
        raise invalid("Regular expressions for source topics are not supported yet.")
    for name, text in (("MemberId", req["member_id"]), ("GroupId", req["group_id"])):
        if not text.strip():
            raise invalid(f"{name} can't be empty.")
    for name, text in (("InstanceId", req.get("instance_id")), ("RackId", req.get("rack_id"))):
        if text is not None and not text.strip():
            raise invalid(f"{name} can't be empty.")
    epoch = req["member_epoch"]
    kinds = (
        ("ActiveTasks", "active_tasks"),
        ("StandbyTasks", "standby_tasks"),
        ("WarmupTasks", "warmup_tasks"),
    )
    if epoch == 0:
        if req.get("rebalance_timeout_ms", -1) == -1:
            raise invalid("RebalanceTimeoutMs must be provided in first request.")
        for label, key in kinds:
            if req.get(key) is None or req[key]:  # Kafka's throwIfNotEmptyCollection refuses null too
                raise invalid(f"{label} must be empty when (re-)joining.")
        if topology is None:
            raise invalid("Topology must be non-null when (re-)joining.")
        for s in topology["subtopologies"]:
            for t in s["state_changelog_topics"]:
                if t["partitions"] != 0:
                    raise StreamsGroupError(
                        ErrorCode.STREAMS_INVALID_TOPOLOGY,
                        f"Changelog topic {t['name']} must have an undefined partition count, "
                        f"but it is set to {t['partitions']}.",
                    )
    elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        if req.get("instance_id") is None:
            raise invalid("InstanceId can't be null.")
    elif epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        raise invalid(f"MemberEpoch is {epoch}, but must be greater than or equal to -2.")
    given = [req.get(key) is not None for _, key in kinds]
    if any(given) and not all(given):
        raise invalid("If one task-type is non-null, all must be non-null.")
    if epoch != 0 and topology is not None:
        raise invalid("Topology can only be provided when (re-)joining.")


def owned_tasks(req: dict[str, Any]) -> TasksTuple | None:
    if req.get("active_tasks") is None:
        return None
    return TasksTuple.from_wire(req["active_tasks"], req["standby_tasks"], req["warmup_tasks"])


def _offsets(entries: list[dict] | None) -> dict[Task, int] | None:
    if entries is None:
        return None
    return {(e["subtopology_id"], e["partition"]): e["offset"] for e in entries}


class StreamsGroupManager:
    def __init__(self, coordinator: GroupCoordinator, config: StreamsGroupConfig, topics: Any) -> None:
        self.coordinator = coordinator
        self.config = config
        self.topics = topics  # TopicView (consumer_coordinator.TopicView)
        self.groups: dict[str, StreamsGroup] = {}
        # The records of the operation under way (every operation runs to its end on the event loop).
        self._pending: Entries = []
        self._configs: dict[str, str] = {}  # the group configs of the heartbeat under way

    @property
    def clock(self):  # noqa: ANN201 - the coordinator's Clock
        return self.coordinator.clock

    def partitions_of(self, topic: str) -> int | None:
        meta = self.topics.topic(topic)
        return None if meta is None else meta.partitions

    # -- records -------------------------------------------------------------------------------------
    def _flush(self, group_id: str) -> Awaitable[None] | None:
        entries, self._pending = self._pending, []
        return self.coordinator.store.append(group_id, entries) if entries else None

    def _record(
        self,
        record_type: int,
        group: StreamsGroup,
        value: dict[str, Any] | None,
        member_id: str | None = None,
    ) -> None:
        key = sr.encode_key(record_type, group.group_id, member_id)
        self._pending.append((key, None if value is None else sr.encode_value(record_type, value)))

    def _write_metadata(self, group: StreamsGroup) -> None:
        validated = group.validated_topology_epoch
        configs = [{"key": "num.standby.replicas", "value": str(self._standbys(group))}]
        value = {"epoch": group.group_epoch, "metadata_hash": 0, "validated_topology_epoch": validated,
                 "last_assignment_configs": configs}  # fmt: skip
        self._record(sr.METADATA, group, value)

    def _write_member_metadata(self, group: StreamsGroup, m: StreamsGroupMember) -> None:
        endpoint = (
            None if m.user_endpoint is None else {"host": m.user_endpoint[0], "port": m.user_endpoint[1]}
        )
        value = {
            "instance_id": m.instance_id,
            "rack_id": m.rack_id,
            "client_id": m.client_id,
            "client_host": m.client_host,
            "rebalance_timeout_ms": m.rebalance_timeout_ms,
            "topology_epoch": m.topology_epoch,
            "process_id": m.process_id,
            "user_endpoint": endpoint,
            "client_tags": [{"key": k, "value": v} for k, v in sorted(m.client_tags.items())],
        }
        self._record(sr.MEMBER_METADATA, group, value, m.member_id)

    def _write_current_assignment(self, group: StreamsGroup, m: StreamsGroupMember) -> None:
        def with_epochs(active: Iterable[Task]) -> list[dict[str, Any]]:
            out = task_ids(active)
            for t in out:
                sub = t["subtopology_id"]
                t["assignment_epochs"] = [
                    m.active_epochs.get((sub, p), m.member_epoch) for p in t["partitions"]
                ]
            return out

        def plain(tasks: Iterable[Task]) -> list[dict[str, Any]]:
            return [dict(t, assignment_epochs=[]) for t in task_ids(tasks)]

        value = {
            "member_epoch": m.member_epoch,
            "previous_member_epoch": m.previous_member_epoch,
            "state": int(m.state),
            "active_tasks": with_epochs(m.assigned.active),
            "standby_tasks": plain(m.assigned.standby),
            "warmup_tasks": plain(m.assigned.warmup),
            "active_tasks_pending_revocation": with_epochs(m.pending_revocation.active),
            "standby_tasks_pending_revocation": plain(m.pending_revocation.standby),
            "warmup_tasks_pending_revocation": plain(m.pending_revocation.warmup),
        }
        self._record(sr.CURRENT_MEMBER_ASSIGNMENT, group, value, m.member_id)

    def _write_target_member(self, group: StreamsGroup, member_id: str, target: TasksTuple) -> None:
        self._record(sr.TARGET_ASSIGNMENT_MEMBER, group, target.to_wire(), member_id)

    def _write_member_tombstones(self, group: StreamsGroup, member_id: str) -> None:
        for record_type in (sr.CURRENT_MEMBER_ASSIGNMENT, sr.TARGET_ASSIGNMENT_MEMBER, sr.MEMBER_METADATA):
            self._record(record_type, group, None, member_id)

    def tombstones(self, group: StreamsGroup) -> Entries:
        """Every record of the group, tombstoned in Kafka's order (createGroupTombstoneRecords)."""
        gid = group.group_id
        members = sorted(set(group.members) | set(group.target))
        out: Entries = [(sr.encode_key(sr.CURRENT_MEMBER_ASSIGNMENT, gid, m), None) for m in members]
        out += [(sr.encode_key(sr.TARGET_ASSIGNMENT_MEMBER, gid, m), None) for m in members]
        out.append((sr.encode_key(sr.TARGET_ASSIGNMENT_METADATA, gid), None))
        out += [(sr.encode_key(sr.MEMBER_METADATA, gid, m), None) for m in members]
        out.append((sr.encode_key(sr.METADATA, gid), None))
        out.append((sr.encode_key(sr.TOPOLOGY, gid), None))
        return out

    # -- StreamsGroupHeartbeat ---------------------------------------------------------------------
    def heartbeat(
        self, req: dict[str, Any], client_id: str, client_host: str, configs: dict[str, str] | None = None
    ) -> tuple[dict[str, Any], list[InternalTopic], Awaitable[None] | None]:
        """The answer, the internal topics the broker must create for the group, and the append of the
        records the heartbeat wrote (to await before answering).  ``configs``: the group's configs."""
        self._pending = []
        self._configs = configs or {}
        to_create: list[InternalTopic] = []
        try:
            validate_request(req)
            if req["member_epoch"] in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                response = self._leave(req)
            else:
                response, to_create = self._join_or_heartbeat(req, client_id, client_host)
        except StreamsGroupError as exc:
            self._pending = []
            # As Kafka's coordinator rolls a failed operation back: a group this request created goes.
            created = self.groups.get(req["group_id"])
            if (
                created is not None
                and not created.members
                and created.topology is None
                and not created.offsets
            ):
                self.drop(created)
            return error_response(exc.code, exc.message), [], None
        return response, to_create, self._flush(req["group_id"])

    def _group(self, group_id: str, create: bool) -> StreamsGroup:
        group = self.groups.get(group_id)
        if group is not None:
            return group
        if group_id in self.coordinator.consumer.groups:
            raise StreamsGroupError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a streams group.")
        classic = self.coordinator.groups.get(group_id)
        if classic is not None and (not create or classic.members or classic.pending_members):
            raise StreamsGroupError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a streams group.")
        if not create:
            raise StreamsGroupError(ErrorCode.GROUP_ID_NOT_FOUND, f"Streams group {group_id} not found.")
        group = StreamsGroup(group_id)
        if classic is not None:
            # An empty classic group becomes a streams group; its committed offsets stay.
            group.offsets = self.coordinator.take_empty_classic_group(classic)
        self.groups[group_id] = group
        return group

    def _join_or_heartbeat(
        self, req: dict[str, Any], client_id: str, client_host: str
    ) -> tuple[dict[str, Any], list[InternalTopic]]:
        joining = req["member_epoch"] == 0
        existed = req["group_id"] in self.groups
        group = self._group(req["group_id"], create=joining)
        group.configs = dict(self._configs)
        member_id = req["member_id"]
        owned = owned_tasks(req)
        instance_id = req.get("instance_id")
        if instance_id is not None:
            self._check_static_member(group, req, instance_id)
        member = group.members.get(member_id)
        if member is None and not joining:
            raise StreamsGroupError(
                ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group.group_id}."
            )
        if member is not None:
            self._check_epoch(member, req["member_epoch"], owned)
        requested = None if req.get("topology") is None else StreamsTopology.from_wire(req["topology"])
        configured = self._check_topology(group, requested, owned)
        is_new = member is None
        if is_new and len(group.members) >= self.config.max_size:
            raise StreamsGroupError(
                ErrorCode.GROUP_MAX_SIZE_REACHED,
                f"The streams group has reached its maximum capacity of {self.config.max_size} members.",
            )
        if instance_id is not None and joining:
            previous = group.member_by_instance(instance_id)
            if previous is not None and previous.member_id != member_id:
                member = self._replace_static_member(group, previous, member_id)
                is_new = False
        before_tasks = EMPTY_TASKS if member is None else member.assigned
        was_empty = not group.members
        if member is None:
            member = StreamsGroupMember(member_id)
        old_metadata = None if is_new else member.metadata()
        self._update_member(member, req, client_id, client_host)
        if group.topology is None and requested is not None:
            group.topology = requested
            self._record(sr.TOPOLOGY, group, requested.to_record())
        dirty = is_new or member.metadata() != old_metadata
        group.put_member(member)
        if dirty:
            self._write_member_metadata(group, member)
        if is_new:
            log.info(
                "streams group %s: member %s joins (process %s)", group.group_id, member_id, member.process_id
            )
        # A change in the partition counts of the topology's topics (an internal topic created, a
        # source topic grown) re-configures the topology and bumps the group epoch.
        signature = self._signature(group)
        changed_topics = signature != group.metadata_signature
        if changed_topics:
            dirty = True
            group.metadata_signature = signature
        fresh = configured if configured is not None else self._configure(group)
        if changed_topics or not group.loaded:
            # Kafka configures the topology when its topics change: a group reloaded from its records
            # describes the topology as sent until then.
            group.configured = fresh
        # A change of the assignment configs (streams.num.standby.replicas) calls for a new assignment.
        if self._standbys(group) != group.last_standby_replicas:
            dirty = group.last_standby_replicas is not None or dirty
            group.last_standby_replicas = self._standbys(group)
        validated = fresh.epoch if fresh is not None and fresh.ready else -1
        if validated != group.validated_topology_epoch:
            group.validated_topology_epoch = validated
            dirty_metadata = True
        else:
            dirty_metadata = False
        if dirty:
            group.group_epoch += 1
            log.info("streams group %s: group epoch %d", group.group_id, group.group_epoch)
        if dirty or dirty_metadata:
            self._write_metadata(group)
        if was_empty and is_new:
            self._schedule_initial_delay(group)
        delayed = self._maybe_update_target(group)
        target = (
            EMPTY_TASKS
            if group.initial_delay_timer is not None
            else group.target.get(member.member_id, EMPTY_TASKS)
        )
        self._reconcile(group, member.member_id, target, EMPTY_TASKS if joining else owned)
        if req.get("shutdown_application") and group.shutdown_requested_by is None:
            group.shutdown_requested_by = member_id
        member = group.members[member_id]
        self._schedule_session_timeout(group, member_id)
        response = self._response(group, member, req, before_tasks, existed, delayed)
        to_create = [] if fresh is None else list(fresh.internal_topics_to_create.values())
        return response, to_create

    def _check_static_member(self, group: StreamsGroup, req: dict[str, Any], instance_id: str) -> None:
        existing = group.member_by_instance(instance_id)
        member_id = req["member_id"]
        if req["member_epoch"] == 0:
            if (
                existing is not None
                and existing.member_id != member_id
                and existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH
            ):
                raise StreamsGroupError(
                    ErrorCode.UNRELEASED_INSTANCE_ID,
                    f"Static member {member_id} with instance id {instance_id} cannot join the group because "
                    f"the instance id is owned by {existing.member_id} member.",
                )
            return
        if existing is None:
            raise StreamsGroupError(ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
        if existing.member_id != member_id:
            raise StreamsGroupError(
                ErrorCode.FENCED_INSTANCE_ID,
                f"Static member {member_id} with instance id {instance_id} was fenced by member "
                f"{existing.member_id}.",
            )

    def _replace_static_member(
        self, group: StreamsGroup, previous: StreamsGroupMember, member_id: str
    ) -> StreamsGroupMember:
        """A static member back under a new member id takes over the old one's tasks and target."""
        self._cancel_timers(previous)
        target = group.target.get(previous.member_id)
        group.remove_member(previous.member_id)
        self._write_member_tombstones(group, previous.member_id)
        member = replace(
            previous,
            member_id=member_id,
            member_epoch=0,
            previous_member_epoch=0,
            session_timer=None,
            rebalance_timer=None,
        )
        group.put_member(member)
        if target is not None:
            group.target[member_id] = target
            self._write_target_member(group, member_id, target)
        self._write_member_metadata(group, member)
        self._write_current_assignment(group, member)
        return member

    @staticmethod
    def _check_epoch(member: StreamsGroupMember, received: int, owned: TasksTuple | None) -> None:
        """Kafka's throwIfStreamsGroupMemberEpochIsInvalid."""
        if received == 0 or received == member.member_epoch:
            return
        # A lost answer: the member may come back with its previous epoch and a subset of its tasks.
        if (
            received == member.previous_member_epoch
            and owned is not None
            and member.assigned.contains_all(owned)
        ):
            return
        relation = "greater" if received > member.member_epoch else "smaller"
        raise StreamsGroupError(
            ErrorCode.FENCED_MEMBER_EPOCH,
            f"The streams group member has a {relation} member epoch ({received}) than the one known by the "
            f"group coordinator ({member.member_epoch}). The member must abandon all its partitions and rejoin.",
        )

    def _check_topology(
        self, group: StreamsGroup, requested: StreamsTopology | None, owned: TasksTuple | None
    ) -> ConfiguredTopology | None:
        """The refusals of Kafka's topology update, configureTopics and throwIfRequestContainsInvalidTasks;
        returns the topology configured now."""
        # Kafka's maybeUpdateTopology: a member with an older topology epoch runs the group's (and is told
        # STALE_TOPOLOGY); any other topology than the group's is refused.
        if group.topology is not None and requested is not None:
            if requested.epoch >= group.topology.epoch and requested != group.topology:
                raise StreamsGroupError(ErrorCode.INVALID_REQUEST, "Topology updates are not supported yet.")
        topology = group.topology or requested
        if topology is None:
            return None
        try:
            configured = configure_topics(topology, self.partitions_of)
        except InvalidTopology as exc:
            raise StreamsGroupError(ErrorCode.STREAMS_INVALID_TOPOLOGY, str(exc)) from None
        if configured.ready and owned is not None:
            for sub, p in sorted(owned.all_tasks()):
                s = configured.subtopologies.get(sub)
                if s is None:
                    raise StreamsGroupError(
                        ErrorCode.INVALID_REQUEST, f"Subtopology {sub} does not exist in the topology."
                    )
                if not 0 <= p < s.number_of_tasks:
                    raise StreamsGroupError(
                        ErrorCode.INVALID_REQUEST,
                        f"Task {p} for subtopology {sub} is invalid. "
                        f"Number of tasks for this subtopology: {s.number_of_tasks}",
                    )
        return configured

    def _configure(self, group: StreamsGroup) -> ConfiguredTopology | None:
        if group.topology is None:
            return None
        try:
            return configure_topics(group.topology, self.partitions_of)
        except InvalidTopology:
            return None

    def _standbys(self, group: StreamsGroup) -> int:
        return int(group.configs.get(NUM_STANDBY_REPLICAS, self.config.num_standby_replicas))

    def _signature(self, group: StreamsGroup) -> dict[str, int | None]:
        if group.topology is None:
            return {}
        return {t: self.partitions_of(t) for t in sorted(group.topology.required_topics())}

    @staticmethod
    def _update_member(
        member: StreamsGroupMember, req: dict[str, Any], client_id: str, client_host: str
    ) -> None:
        """Kafka's StreamsGroupMember.Builder.maybeUpdate*: a null field means unchanged."""
        member.client_id = client_id
        member.client_host = client_host
        if req.get("instance_id") is not None:
            member.instance_id = req["instance_id"]
        if req.get("rack_id") is not None:
            member.rack_id = req["rack_id"]
        if req.get("rebalance_timeout_ms", -1) != -1:
            member.rebalance_timeout_ms = req["rebalance_timeout_ms"]
        if req.get("topology") is not None:
            member.topology_epoch = req["topology"]["epoch"]
        if req.get("process_id") is not None:
            member.process_id = req["process_id"]
        endpoint = req.get("user_endpoint")
        if endpoint is not None:
            member.user_endpoint = (endpoint["host"], endpoint["port"])
        elif req["member_epoch"] == 0:
            member.user_endpoint = None
        if req.get("client_tags") is not None:
            member.client_tags = {kv["key"]: kv["value"] for kv in req["client_tags"]}
        offsets = _offsets(req.get("task_offsets"))
        if offsets is not None:
            member.task_offsets = offsets
        end_offsets = _offsets(req.get("task_end_offsets"))
        if end_offsets is not None:
            member.task_end_offsets = end_offsets

    # -- target assignment ---------------------------------------------------------------------------
    def _schedule_initial_delay(self, group: StreamsGroup) -> None:
        """Kafka: a member joining an empty group starts the initial rebalance delay; until it ends the
        members reconcile towards an empty target."""
        delay = int(group.configs.get(INITIAL_REBALANCE_DELAY, self.config.initial_rebalance_delay_ms))
        if delay <= 0 or group.initial_delay_timer is not None:
            return

        def fire() -> None:
            group.initial_delay_timer = None
            if self.groups.get(group.group_id) is not group or not group.members:
                return
            if group.topology is not None and group.assignment_epoch < group.group_epoch:
                self._pending = []
                self._compute_target(group)
                self._flush(group.group_id)

        group.initial_delay_timer = self.clock.call_later(delay, fire)

    def _maybe_update_target(self, group: StreamsGroup) -> str | None:
        """Kafka's maybeUpdateStreamsTargetAssignment; the ASSIGNMENT_DELAYED detail when held back."""
        if group.initial_delay_timer is not None:
            return INITIAL_DELAY_DETAIL
        if group.assignment_epoch >= group.group_epoch:
            return None
        now = self.clock.now_ms()
        last = group.assignment_timestamp_ms
        interval = int(group.configs.get(ASSIGNMENT_INTERVAL, self.config.assignment_interval_ms))
        if last is not None and now - last < interval:
            return ASSIGNMENT_INTERVAL_DETAIL
        self._compute_target(group)
        return None

    def _compute_target(self, group: StreamsGroup) -> None:
        configured = group.configured or self._configure(group)
        before = group.target
        if configured is None or not configured.ready:
            group.target = {}  # members advance their epoch with no tasks
        else:
            result = assign(
                (
                    AssignorMember(m.member_id, m.process_id, m.assigned.active, m.assigned.standby)
                    for m in group.members.values()
                ),
                {sid: s.number_of_tasks for sid, s in configured.subtopologies.items()},
                {sid for sid, s in configured.subtopologies.items() if s.stateful},
                self._standbys(group),
            )
            group.target = {
                member_id: TasksTuple(frozenset(a.active), frozenset(a.standby))
                for member_id, a in result.items()
            }
        group.assignment_epoch = group.group_epoch
        group.assignment_timestamp_ms = self.clock.now_ms()
        for member_id in sorted(set(before) | set(group.target)):
            if before.get(member_id) != group.target.get(member_id):
                self._write_target_member(group, member_id, group.target.get(member_id, EMPTY_TASKS))
        value = {
            "assignment_epoch": group.assignment_epoch,
            "assignment_timestamp": group.assignment_timestamp_ms,
        }
        self._record(sr.TARGET_ASSIGNMENT_METADATA, group, value)
        log.info("streams group %s: target assignment for epoch %d", group.group_id, group.assignment_epoch)

    def _reconcile(
        self, group: StreamsGroup, member_id: str, target: TasksTuple, owned: TasksTuple | None
    ) -> None:
        before = group.members[member_id]
        after = next_assignment(group, before, target, owned)
        if after is before:
            return
        group.members[member_id] = after
        self._write_current_assignment(group, after)
        if after.state is not before.state or after.member_epoch != before.member_epoch:
            log.info(
                "streams group %s: member %s is %s at epoch %d",
                group.group_id,
                member_id,
                after.state.name.lower(),
                after.member_epoch,
            )
        if after.state is MemberState.UNREVOKED_TASKS:
            if before.state is not MemberState.UNREVOKED_TASKS or after.rebalance_timer is None:
                self._schedule_rebalance_timeout(group, member_id)
        elif after.rebalance_timer is not None:
            after.rebalance_timer.cancel()
            after.rebalance_timer = None

    # -- the answer ------------------------------------------------------------------------------------
    def _response(
        self,
        group: StreamsGroup,
        member: StreamsGroupMember,
        req: dict[str, Any],
        before_tasks: TasksTuple,
        existed: bool,
        delayed: str | None,
    ) -> dict[str, Any]:
        tasks_changed = before_tasks != member.assigned
        joining = req["member_epoch"] == 0
        endpoint_epoch = group.endpoint_information_epoch
        if (joining or tasks_changed) and member.user_endpoint is not None:
            endpoint_epoch += 1
        partitions_by_endpoint = None
        if endpoint_epoch != req["endpoint_information_epoch"]:
            partitions_by_endpoint = self._endpoint_to_partitions(group, member.member_id)
        if existed:
            group.endpoint_information_epoch = endpoint_epoch
        status = []
        if group.topology is not None and member.topology_epoch < group.topology.epoch:
            status.append(
                (
                    STALE_TOPOLOGY,
                    f"The member's topology epoch {member.topology_epoch} is behind the group's topology "
                    f"epoch {group.topology.epoch}.",
                )
            )
        if delayed is not None:
            status.append((ASSIGNMENT_DELAYED, delayed))
        if group.configured is not None and group.configured.status is not None:
            status.append(group.configured.status)
        if group.shutdown_requested_by is not None:
            status.append(
                (
                    SHUTDOWN_APPLICATION,
                    f"Streams group member {group.shutdown_requested_by} encountered a fatal error and requested "
                    "a shutdown for the entire application.",
                )
            )
        response: dict[str, Any] = {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.NONE,
            "error_message": None,
            "member_id": member.member_id,
            "member_epoch": member.member_epoch,
            "heartbeat_interval_ms": int(
                group.configs.get(HEARTBEAT_INTERVAL, self.config.heartbeat_interval_ms)
            ),
            "acceptable_recovery_lag": 0,
            "task_offset_interval_ms": 0,
            "status": [{"status_code": c, "status_detail": d} for c, d in status],
            "endpoint_information_epoch": group.endpoint_information_epoch,
            "partitions_by_user_endpoint": partitions_by_endpoint,
        }
        if joining or tasks_changed:
            response.update(member.assigned.to_wire())
        return response

    def _endpoint_to_partitions(self, group: StreamsGroup, member_id: str) -> list[dict[str, Any]]:
        """Kafka's StreamsGroup.buildEndpointToPartitions: each member with a user endpoint (the asking
        member last), with the source partitions of its active and of its standby and warm-up tasks."""
        order = [m for m in group.members.values() if m.member_id != member_id]
        if member_id in group.members:
            order.append(group.members[member_id])
        out = []
        for m in order:
            if m.user_endpoint is None:
                continue
            host, port = m.user_endpoint
            out.append(
                {
                    "user_endpoint": {"host": host, "port": port},
                    "active_partitions": self._topic_partitions(group, m.assigned.active),
                    "standby_partitions": self._topic_partitions(
                        group, m.assigned.standby | m.assigned.warmup
                    ),
                }
            )
        return out

    def _topic_partitions(self, group: StreamsGroup, tasks: Iterable[Task]) -> list[dict[str, Any]]:
        configured = group.configured or self._configure(group)
        if configured is None:
            return []
        by_topic: dict[str, set[int]] = {}
        for sub, p in tasks:
            s = configured.subtopologies.get(sub)
            if s is None:
                continue
            for topic in s.input_topics():
                count = self.partitions_of(topic)
                if count is not None and p < count:
                    by_topic.setdefault(topic, set()).add(p)
        return [{"topic": t, "partitions": sorted(ps)} for t, ps in sorted(by_topic.items())]

    # -- leaving and fencing ---------------------------------------------------------------------------
    def _leave(self, req: dict[str, Any]) -> dict[str, Any]:
        group_id = req["group_id"]
        group = self._group(group_id, create=False)
        member_id = req["member_id"]
        if req.get("shutdown_application") and group.shutdown_requested_by is None and group.members:
            group.shutdown_requested_by = member_id
        instance_id = req.get("instance_id")
        if instance_id is not None:
            self._check_static_member(group, req, instance_id)
        member = group.members.get(member_id)
        if member is None:
            raise StreamsGroupError(
                ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group_id}."
            )
        if req["member_epoch"] == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            # A static member leaving for a while keeps its tasks until its session expires.
            if member.rebalance_timer is not None:
                member.rebalance_timer.cancel()
                member.rebalance_timer = None
            group.members[member_id] = replace(
                member,
                previous_member_epoch=member.member_epoch,
                member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH,
                pending_revocation=EMPTY_TASKS,
            )
            self._write_current_assignment(group, group.members[member_id])
            log.info("streams group %s: static member %s leaves temporarily", group_id, member_id)
        else:
            log.info("streams group %s: member %s leaves", group_id, member_id)
            self.fence(group, member_id, None)
        response = error_response(ErrorCode.NONE, None)
        response.update(member_id=member_id, member_epoch=req["member_epoch"])
        return response

    def fence(self, group: StreamsGroup, member_id: str, reason: str | None) -> None:
        """Kafka's streamsGroupFenceMember: remove the member and bump the group epoch."""
        member = group.members.get(member_id)
        if member is None:
            return
        if reason is not None:
            log.info("streams group %s: fencing member %s: %s", group.group_id, member_id, reason)
        self._cancel_timers(member)
        group.remove_member(member_id)
        group.group_epoch += 1
        self._write_member_tombstones(group, member_id)
        self._write_metadata(group)

    @staticmethod
    def _cancel_timers(member: StreamsGroupMember) -> None:
        for timer in (member.session_timer, member.rebalance_timer):
            if timer is not None:
                timer.cancel()
        member.session_timer = member.rebalance_timer = None

    def _schedule_session_timeout(self, group: StreamsGroup, member_id: str) -> None:
        member = group.members[member_id]
        if member.session_timer is not None:
            member.session_timer.cancel()
        timeout = int(group.configs.get(SESSION_TIMEOUT, self.config.session_timeout_ms))

        def expired() -> None:
            current = group.members.get(member_id)
            if current is not None and current.session_timer is timer:
                self._pending = []
                self.fence(group, member_id, f"no heartbeat within the session timeout of {timeout} ms")
                self._flush(group.group_id)

        timer = self.clock.call_later(timeout, expired)
        member.session_timer = timer

    def _schedule_rebalance_timeout(self, group: StreamsGroup, member_id: str) -> None:
        member = group.members[member_id]
        if member.rebalance_timer is not None:
            member.rebalance_timer.cancel()
        timeout = (
            member.rebalance_timeout_ms if member.rebalance_timeout_ms > 0 else self.config.session_timeout_ms
        )
        epoch = member.member_epoch

        def expired() -> None:
            current = group.members.get(member_id)
            if current is None or current.rebalance_timer is not timer:
                return
            current.rebalance_timer = None
            if current.state is MemberState.UNREVOKED_TASKS and current.member_epoch == epoch:
                self._pending = []
                self.fence(
                    group, member_id, f"tasks not revoked within the rebalance timeout of {timeout} ms"
                )
                self._flush(group.group_id)

        timer = self.clock.call_later(timeout, expired)
        member.rebalance_timer = timer

    def drop(self, group: StreamsGroup) -> None:
        """Forget the group (deleted, or unloaded)."""
        for m in list(group.members.values()):
            self._cancel_timers(m)
        if group.initial_delay_timer is not None:
            group.initial_delay_timer.cancel()
            group.initial_delay_timer = None
        group.dead = True
        self.groups.pop(group.group_id, None)

    # -- replay ---------------------------------------------------------------------------------------
    def load(
        self,
        entries: Iterable[tuple[sr.StreamsRecordKey, bytes | None]],
        offsets: dict[str, dict[tuple[str, int], OffsetAndMetadata]],
    ) -> set[str]:
        """Rebuild streams groups from their records (log order); the ids of the groups built."""
        docs: dict[str, dict[str | int, Any]] = {}
        for key, value in entries:
            doc = docs.setdefault(key.group_id, {"members": {}, "targets": {}, "current": {}})
            decoded = None if value is None else sr.decode_value(key.record_type, value)
            table = {sr.MEMBER_METADATA: "members", sr.TARGET_ASSIGNMENT_MEMBER: "targets",
                     sr.CURRENT_MEMBER_ASSIGNMENT: "current"}.get(key.record_type)  # fmt: skip
            if table is None:
                doc[key.record_type] = decoded
            elif decoded is None:
                doc[table].pop(key.member_id, None)
            else:
                doc[table][key.member_id] = decoded
        built: set[str] = set()
        for group_id, doc in docs.items():
            metadata = doc.get(sr.METADATA)
            if metadata is None:
                continue  # deleted (tombstoned metadata)
            group = StreamsGroup(group_id)
            group.group_epoch = metadata["epoch"]
            group.offsets = offsets.get(group_id, {})
            topology = doc.get(sr.TOPOLOGY)
            if topology is not None:
                group.topology = StreamsTopology.from_wire(topology)
            target_metadata = doc.get(sr.TARGET_ASSIGNMENT_METADATA)
            if target_metadata is not None:
                group.assignment_epoch = target_metadata["assignment_epoch"]
                group.assignment_timestamp_ms = target_metadata["assignment_timestamp"]
            for member_id, v in doc["targets"].items():
                group.target[member_id] = TasksTuple.from_wire(
                    v["active_tasks"], v["standby_tasks"], v["warmup_tasks"]
                )
            for member_id, meta in doc["members"].items():
                member = _member_from_records(member_id, meta, doc["current"].get(member_id))
                group.put_member(member)
                self._schedule_session_timeout(group, member_id)
                if member.state is MemberState.UNREVOKED_TASKS:
                    self._schedule_rebalance_timeout(group, member_id)
            # The topology is configured again against the topics as they are now (Kafka keeps a hash
            # of their metadata; a change there bumps the epoch on the next heartbeat either way).
            group.validated_topology_epoch = metadata.get("validated_topology_epoch", -1)
            last = {kv["key"]: kv["value"] for kv in metadata.get("last_assignment_configs") or ()}
            if "num.standby.replicas" in last:
                group.last_standby_replicas = int(last["num.standby.replicas"])
            group.metadata_signature = self._signature(group)
            group.configured = None  # configured again when its topics change, as Kafka does
            group.loaded = True
            self.groups[group_id] = group
            built.add(group_id)
        return built

    # -- StreamsGroupDescribe --------------------------------------------------------------------------
    def describe(self, group_id: str, include_ops: bool, ops: int) -> dict[str, Any]:
        group = self.groups.get(group_id)
        if group is None:
            other = group_id in self.coordinator.consumer.groups or group_id in self.coordinator.groups
            return described_error(
                group_id,
                ErrorCode.GROUP_ID_NOT_FOUND,
                f"Group {group_id} is not a streams group." if other else f"Group {group_id} not found.",
            )
        if group.configured is not None and group.configured.ready:
            topology = group.configured.described()
        elif group.topology is not None:
            topology = group.topology.described()
        else:
            topology = None

        def offsets(d: dict[Task, int]) -> list[dict[str, Any]]:
            return [{"subtopology_id": s, "partition": p, "offset": o} for (s, p), o in sorted(d.items())]

        members = [
            {
                "member_id": m.member_id,
                "member_epoch": m.member_epoch,
                "instance_id": m.instance_id,
                "rack_id": m.rack_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "topology_epoch": m.topology_epoch,
                "process_id": m.process_id,
                "user_endpoint": None
                if m.user_endpoint is None
                else {"host": m.user_endpoint[0], "port": m.user_endpoint[1]},
                "client_tags": [{"key": k, "value": v} for k, v in sorted(m.client_tags.items())],
                "task_offsets": offsets(m.task_offsets),
                "task_end_offsets": offsets(m.task_end_offsets),
                "assignment": m.assigned.to_wire(),
                "target_assignment": group.target.get(m.member_id, EMPTY_TASKS).to_wire(),
                "is_classic": False,
            }
            for m in group.members.values()
        ]
        return {
            "error_code": ErrorCode.NONE,
            "error_message": None,
            "group_id": group_id,
            "group_state": group.state,
            "group_epoch": group.group_epoch,
            "assignment_epoch": group.assignment_epoch,
            "topology": topology,
            "members": members,
            "authorized_operations": ops if include_ops else AUTHORIZED_OPERATIONS_OMITTED,
        }

    # -- offsets ---------------------------------------------------------------------------------------
    def validate_offset_commit(
        self, group: StreamsGroup, member_id: str, member_epoch: int, api_version: int | None
    ) -> tuple[ErrorCode, PartitionCheck | None]:
        """Kafka's StreamsGroup.validateOffsetCommit (with KIP-1251's assignment epochs)."""
        if member_epoch < 0 and not group.members:
            return ErrorCode.NONE, None
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID, None
        if api_version is not None and api_version < 9:
            return ErrorCode.UNSUPPORTED_VERSION, None
        if member_epoch == member.member_epoch:
            return ErrorCode.NONE, None
        if member_epoch > member.member_epoch:
            return ErrorCode.STALE_MEMBER_EPOCH, None
        configured = group.configured or self._configure(group)
        readers = {} if configured is None else configured.subtopologies

        def check(topic: str, partition: int) -> ErrorCode:
            for sid, s in readers.items():
                if topic in s.input_topics():
                    assigned_at = member.active_epochs.get((sid, partition))
                    if assigned_at is not None and assigned_at <= member_epoch:
                        return ErrorCode.NONE
            return ErrorCode.STALE_MEMBER_EPOCH

        return ErrorCode.NONE, check

    def validate_offset_fetch(
        self, group: StreamsGroup, member_id: str | None, member_epoch: int
    ) -> ErrorCode:
        if member_id is None and member_epoch < 0:
            return ErrorCode.NONE
        member = group.members.get(member_id or "")
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if member_epoch != member.member_epoch:
            return ErrorCode.STALE_MEMBER_EPOCH
        return ErrorCode.NONE

    def list_entry(self, group: StreamsGroup) -> dict[str, Any]:
        return {
            "group_id": group.group_id,
            "protocol_type": STREAMS_GROUP_TYPE,
            "group_state": group.state,
            "group_type": STREAMS_GROUP_TYPE,
        }


def described_error(group_id: str, code: ErrorCode, message: str | None) -> dict[str, Any]:
    return {
        "error_code": code,
        "error_message": message,
        "group_id": group_id,
        "group_state": "",
        "group_epoch": 0,
        "assignment_epoch": 0,
        "topology": None,
        "members": [],
        "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }


def _member_from_records(
    member_id: str, meta: dict[str, Any], current: dict[str, Any] | None
) -> StreamsGroupMember:
    endpoint = meta.get("user_endpoint")
    member = StreamsGroupMember(
        member_id,
        instance_id=meta.get("instance_id"),
        rack_id=meta.get("rack_id"),
        client_id=meta["client_id"],
        client_host=meta["client_host"],
        rebalance_timeout_ms=meta["rebalance_timeout_ms"],
        topology_epoch=meta["topology_epoch"],
        process_id=meta["process_id"],
        user_endpoint=None if endpoint is None else (endpoint["host"], endpoint["port"]),
        client_tags={kv["key"]: kv["value"] for kv in meta["client_tags"]},
    )
    if current is None:
        return member
    member.member_epoch = current["member_epoch"]
    member.previous_member_epoch = current["previous_member_epoch"]
    member.state = MemberState(current["state"]) if current["state"] in (1, 2, 3) else MemberState.UNKNOWN
    member.assigned = TasksTuple.from_wire(
        current["active_tasks"], current["standby_tasks"], current["warmup_tasks"]
    )
    member.pending_revocation = TasksTuple.from_wire(
        current["active_tasks_pending_revocation"],
        current["standby_tasks_pending_revocation"],
        current["warmup_tasks_pending_revocation"],
    )
    for t in [*current["active_tasks"], *current["active_tasks_pending_revocation"]]:
        epochs = t.get("assignment_epochs") or []
        for i, p in enumerate(t["partitions"]):
            member.active_epochs[(t["subtopology_id"], p)] = (
                epochs[i] if i < len(epochs) else member.member_epoch
            )
    return member
