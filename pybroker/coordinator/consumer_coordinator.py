"""ConsumerGroupHeartbeat and ConsumerGroupDescribe: the KIP-848 half of the group coordinator.

Follows Apache Kafka's ``GroupMetadataManager.consumerGroupHeartbeat``: validate the request, find
or create the group and the member (dynamic, or static by instance id), bump the group epoch when
membership, subscriptions or the partition counts of subscribed topics change, recompute the target
assignment for a new group epoch with the server-side assignor, move the member one reconciliation
step (reconciliation.py), and answer with its epoch and, when it changed, its assignment.  Every
change is written to ``__consumer_offsets`` as Kafka's records (consumer_records.py) before the
answer is sent.  Session timeouts evict silent members; a member that does not revoke partitions
within its rebalance timeout is fenced.  Timers run on the coordinator's injectable clock.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from pybroker.config import random_kafka_uuid
from pybroker.coordinator import consumer_records as cr
from pybroker.coordinator import records
from pybroker.coordinator.assignors import ASSIGNORS, DEFAULT_ASSIGNOR, MemberSpec
from pybroker.coordinator.consumer_group import (
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    ConsumerGroup,
    ConsumerGroupState,
    ConsumerMember,
    TopicMetadata,
    matching,
)
from pybroker.coordinator.group import OffsetAndMetadata
from pybroker.coordinator.reconciliation import MemberState, next_state
from pybroker.coordinator.topic_regex import InvalidTopicRegex, compile_topic_regex
from pybroker.protocol.api import AUTHORIZED_OPERATIONS_OMITTED
from pybroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from pybroker.coordinator.coordinator import GroupCoordinator
    from pybroker.protocol.typed.groups import (
        ConsumerGroupDescribeResponseAssignment,
        ConsumerGroupDescribeResponseDescribedGroup,
        ConsumerGroupDescribeResponseMember,
        ConsumerGroupDescribeResponseTopicPartitions,
        ConsumerGroupHeartbeatResponse,
    )

log = logging.getLogger(__name__)

CONSUMER_MEMBER_TYPE = 1  # ConsumerGroupDescribe v1 MemberType: -1 unknown, 0 classic, 1 consumer

Entries = list[tuple[bytes, bytes | None]]
# First version in which the client generates its member id (KIP-1082).
CLIENT_GENERATED_MEMBER_ID_VERSION = 1


PartitionCheck = Callable[[str, int], ErrorCode]


class GroupError(Exception):
    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message or code.name)
        self.code = code
        self.message = message


class TopicView(Protocol):
    """The topics the coordinator assigns from (the broker's metadata, or a dict in tests)."""

    def topic(self, name: str) -> TopicMetadata | None: ...

    def names(self) -> list[str]: ...


@dataclass(slots=True)
class ConsumerGroupConfig:
    heartbeat_interval_ms: int = 5000  # group.consumer.heartbeat.interval.ms
    session_timeout_ms: int = 45000  # group.consumer.session.timeout.ms
    assignors: tuple[str, ...] = (DEFAULT_ASSIGNOR, "range")  # group.consumer.assignors
    max_size: int = 2**31 - 1  # group.consumer.max.size


@dataclass(slots=True)
class HeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: Sequence[str] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: cr.Assignment | None = None  # TopicPartitions; None when not sent
    client_id: str = ""
    client_host: str = ""
    version: int = 0


def new_member_id() -> str:
    """Kafka's Uuid.randomUuid().toString(): 22 characters of URL-safe base64."""
    return random_kafka_uuid()


class ConsumerGroupManager:
    def __init__(self, coordinator: GroupCoordinator, config: ConsumerGroupConfig, topics: TopicView) -> None:
        self.coordinator = coordinator
        self.config = config
        self.topics = topics
        self.groups: dict[str, ConsumerGroup] = {}

    @property
    def clock(self):  # noqa: ANN201 - the coordinator's Clock
        return self.coordinator.clock

    def _append(self, group_id: str, entries: Entries) -> Awaitable[None] | None:
        return self.coordinator.store.append(group_id, entries) if entries else None

    # -- ConsumerGroupHeartbeat ------------------------------------------------------------------------
    def heartbeat(self, req: HeartbeatRequest) -> tuple[ConsumerGroupHeartbeatResponse, Awaitable[None] | None]:
        try:
            self._validate(req)
            if req.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                return self._leave(req)
            return self._join_or_heartbeat(req)
        except GroupError as exc:
            return self._error(exc.code, exc.message), None

    def _error(self, code: ErrorCode, message: str | None) -> ConsumerGroupHeartbeatResponse:
        return {
            "throttle_time_ms": 0,
            "error_code": code,
            "error_message": message,
            "member_id": None,
            "member_epoch": 0,
            "heartbeat_interval_ms": 0,
            "assignment": None,
        }

    def _validate(self, req: HeartbeatRequest) -> None:
        def invalid(message: str) -> GroupError:
            return GroupError(ErrorCode.INVALID_REQUEST, message)

        if (
            req.version >= CLIENT_GENERATED_MEMBER_ID_VERSION
            or req.member_epoch > 0
            or req.member_epoch == LEAVE_GROUP_MEMBER_EPOCH
        ) and not req.member_id.strip():
            raise invalid("MemberId can't be empty.")
        if not req.group_id.strip():
            raise invalid("GroupId can't be empty.")
        if req.instance_id is not None and not req.instance_id.strip():
            raise invalid("InstanceId can't be empty.")
        if req.rack_id is not None and not req.rack_id.strip():
            raise invalid("RackId can't be empty.")
        if req.member_epoch == 0:
            if req.rebalance_timeout_ms == -1:
                raise invalid("RebalanceTimeoutMs must be provided in first request.")
            if req.owned is None or req.owned:
                raise invalid("TopicPartitions must be empty when (re-)joining.")
            if req.subscribed_topic_names is None and not req.subscribed_topic_regex:
                raise invalid("SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
        elif req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if req.instance_id is None:
                raise invalid("InstanceId can't be null.")
        elif req.member_epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise invalid(f"MemberEpoch {req.member_epoch} is invalid.")
        if req.subscribed_topic_regex is not None:
            try:
                compile_topic_regex(req.subscribed_topic_regex)
            except InvalidTopicRegex as exc:
                raise GroupError(
                    ErrorCode.INVALID_REGULAR_EXPRESSION,
                    f"SubscribedTopicRegex `{req.subscribed_topic_regex}` is not a valid regular expression: {exc}.",
                ) from exc
        if req.server_assignor is not None and req.server_assignor not in self.config.assignors:
            raise GroupError(
                ErrorCode.UNSUPPORTED_ASSIGNOR,
                f"ServerAssignor {req.server_assignor} is not supported. "
                f"Supported assignors: {', '.join(self.config.assignors)}.",
            )

    def _group(self, group_id: str, create: bool) -> ConsumerGroup:
        group = self.groups.get(group_id)
        if group is not None:
            return group
        if group_id in self.coordinator.streams.groups:
            raise GroupError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
        classic = self.coordinator.groups.get(group_id)
        if classic is not None:
            if not create or classic.members or classic.pending_members:
                # Online migration of a classic group with members is not implemented.
                raise GroupError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
            # An empty classic group becomes a consumer group; its committed offsets stay.
            group = ConsumerGroup(group_id)
            group.offsets = self.coordinator.take_empty_classic_group(classic)
            self.groups[group_id] = group
            return group
        if not create:
            raise GroupError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
        group = ConsumerGroup(group_id)
        self.groups[group_id] = group
        return group

    def _join_or_heartbeat(self, req: HeartbeatRequest) -> tuple[ConsumerGroupHeartbeatResponse, Awaitable[None] | None]:
        group = self._group(req.group_id, create=req.member_epoch == 0)
        entries: Entries = []
        if req.instance_id is not None:
            member, is_new = self._static_member(group, req, entries)
        else:
            member, is_new = self._dynamic_member(group, req)
        if is_new and len(group.members) >= self.config.max_size:
            raise GroupError(
                ErrorCode.GROUP_MAX_SIZE_REACHED,
                f"The consumer group has reached its maximum capacity of {self.config.max_size} members.",
            )
        before_assigned = dict(member.assigned)
        # Apply what the request carries (a null field means "unchanged").
        subscription_changed = is_new
        if (
            req.subscribed_topic_names is not None
            and tuple(req.subscribed_topic_names) != member.subscribed_topic_names
        ):
            member.subscribed_topic_names = tuple(req.subscribed_topic_names)
            subscription_changed = True
        if (
            req.subscribed_topic_regex is not None
            and req.subscribed_topic_regex != member.subscribed_topic_regex
        ):
            member.subscribed_topic_regex = req.subscribed_topic_regex or None
            subscription_changed = True
        if req.server_assignor is not None and req.server_assignor != member.server_assignor:
            member.server_assignor = req.server_assignor
            subscription_changed = True
        metadata_changed = subscription_changed
        for attr, value in (
            ("rack_id", req.rack_id),
            ("client_id", req.client_id),
            ("client_host", req.client_host),
        ):
            if value is not None and getattr(member, attr) != value:
                setattr(member, attr, value)
                metadata_changed = True
        if req.rebalance_timeout_ms != -1 and req.rebalance_timeout_ms != member.rebalance_timeout_ms:
            member.rebalance_timeout_ms = req.rebalance_timeout_ms
            metadata_changed = True
        if is_new:
            group.put_member(member)
            log.info(
                "consumer group %s: member %s joins (instance %s)",
                group.group_id,
                member.member_id,
                member.instance_id,
            )
        if metadata_changed:
            entries.append(self._member_metadata_record(group, member))
        self._maybe_bump_epoch(group, subscription_changed, entries)
        if group.group_epoch > group.assignment_epoch:
            self._compute_target(group, entries)
        self._reconcile(group, member, req.owned, entries)
        self._schedule_session_timeout(group, member)
        response: ConsumerGroupHeartbeatResponse = {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.NONE,
            "error_message": None,
            "member_id": member.member_id,
            "member_epoch": member.member_epoch,
            "heartbeat_interval_ms": self.config.heartbeat_interval_ms,
            "assignment": None,
        }
        full_request = req.member_epoch == 0 or (
            req.rebalance_timeout_ms != -1
            and (req.subscribed_topic_names is not None or req.subscribed_topic_regex is not None)
            and req.owned is not None
        )
        if full_request or member.assigned != before_assigned:
            response["assignment"] = {"topic_partitions": cr.assignment_to_wire(member.assigned)}
        return response, self._append(group.group_id, entries)

    def _dynamic_member(self, group: ConsumerGroup, req: HeartbeatRequest) -> tuple[ConsumerMember, bool]:
        member = group.members.get(req.member_id) if req.member_id else None
        if req.member_epoch == 0:
            if member is not None:
                return member, False  # rejoining with its own id
            member_id = req.member_id or new_member_id()
            return ConsumerMember(member_id), True
        if member is None:
            raise GroupError(
                ErrorCode.UNKNOWN_MEMBER_ID,
                f"Member {req.member_id} is not a member of group {group.group_id}.",
            )
        self._check_epoch(member, req)
        return member, False

    def _static_member(
        self, group: ConsumerGroup, req: HeartbeatRequest, entries: Entries
    ) -> tuple[ConsumerMember, bool]:
        assert req.instance_id is not None
        existing = group.member_by_instance(req.instance_id)
        if req.member_epoch == 0:
            if existing is None:
                return ConsumerMember(req.member_id or new_member_id(), instance_id=req.instance_id), True
            if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                raise GroupError(
                    ErrorCode.UNRELEASED_INSTANCE_ID,
                    f"Static member {req.member_id} with instance id {req.instance_id} cannot join the group "
                    f"because the instance id is owned by {existing.member_id} member.",
                )
            # The static member comes back: the new member id takes over the old one's assignment and
            # epoch, so nothing is rebalanced.
            new_id = req.member_id or new_member_id()
            replacement = ConsumerMember(
                new_id,
                instance_id=existing.instance_id,
                rack_id=existing.rack_id,
                client_id=existing.client_id,
                client_host=existing.client_host,
                subscribed_topic_names=existing.subscribed_topic_names,
                subscribed_topic_regex=existing.subscribed_topic_regex,
                rebalance_timeout_ms=existing.rebalance_timeout_ms,
                server_assignor=existing.server_assignor,
                state=existing.state,
                member_epoch=existing.previous_member_epoch if existing.previous_member_epoch >= 0 else 0,
                previous_member_epoch=existing.previous_member_epoch,
                assigned=existing.assigned,
                pending_revocation=existing.pending_revocation,
                assignment_epochs=dict(existing.assignment_epochs),
            )
            target = group.target.pop(existing.member_id, {})
            self._remove_member(group, existing, entries, bump=False)
            group.put_member(replacement)
            group.target[new_id] = target
            entries.append(self._member_metadata_record(group, replacement))
            entries.append(self._target_member_record(group, new_id, target))
            entries.append(self._current_assignment_record(group, replacement))
            log.info(
                "consumer group %s: static member %s rejoined as %s", group.group_id, req.instance_id, new_id
            )
            self._schedule_session_timeout(group, replacement)
            return replacement, False
        if existing is None:
            raise GroupError(
                ErrorCode.UNKNOWN_MEMBER_ID,
                f"Instance id {req.instance_id} is unknown in group {group.group_id}.",
            )
        if existing.member_id != req.member_id:
            raise GroupError(
                ErrorCode.FENCED_INSTANCE_ID,
                f"Static member {req.member_id} with instance id {req.instance_id} is fenced by existing "
                f"member {existing.member_id}.",
            )
        self._check_epoch(existing, req)
        return existing, False

    @staticmethod
    def _check_epoch(member: ConsumerMember, req: HeartbeatRequest) -> None:
        """Kafka's throwIfMemberEpochIsInvalid."""
        received = req.member_epoch
        if received > member.member_epoch:
            raise GroupError(
                ErrorCode.FENCED_MEMBER_EPOCH,
                f"The consumer group member has a greater member epoch ({received}) than the one known by "
                f"the group coordinator ({member.member_epoch}). The member must abandon all its partitions "
                "and rejoin.",
            )
        if received < member.member_epoch:
            # A lost answer: the member may come back with the previous epoch and a subset of its partitions.
            if received != member.previous_member_epoch or not _is_subset(req.owned, member.assigned):
                raise GroupError(
                    ErrorCode.FENCED_MEMBER_EPOCH,
                    f"The consumer group member has a smaller member epoch ({received}) than the one known by "
                    f"the group coordinator ({member.member_epoch}). The member must abandon all its "
                    "partitions and rejoin.",
                )

    # -- epochs and assignments ------------------------------------------------------------------------
    def subscription_metadata(self, group: ConsumerGroup) -> dict[str, TopicMetadata]:
        names = self.topics.names() if any(m.subscribed_topic_regex for m in group.members.values()) else []
        out: dict[str, TopicMetadata] = {}
        for name in sorted(group.subscribed_names(names)):
            meta = self.topics.topic(name)
            if meta is not None:
                out[name] = meta
        return out

    def _maybe_bump_epoch(self, group: ConsumerGroup, subscription_changed: bool, entries: Entries) -> None:
        metadata = self.subscription_metadata(group)
        if not subscription_changed and metadata == group.subscription_metadata:
            return
        group.group_epoch += 1
        if metadata != group.subscription_metadata:
            group.subscription_metadata = metadata
            entries.append(self._partition_metadata_record(group))
        entries.append(self._group_metadata_record(group))
        log.info("consumer group %s: group epoch %d", group.group_id, group.group_epoch)

    def _compute_target(self, group: ConsumerGroup, entries: Entries) -> None:
        topic_ids = {name: meta.topic_id for name, meta in group.subscription_metadata.items()}
        topic_names = list(topic_ids)
        specs = {}
        for member_id, m in group.members.items():
            names = set(m.subscribed_topic_names)
            if m.subscribed_topic_regex:
                names |= matching(m.subscribed_topic_regex, topic_names)
            specs[member_id] = MemberSpec(
                frozenset(topic_ids[n] for n in names if n in topic_ids), group.target.get(member_id, {})
            )
        assignor = ASSIGNORS[group.preferred_assignor(self.config.assignors[0])]
        partitions = {meta.topic_id: meta.partitions for meta in group.subscription_metadata.values()}
        new_target = assignor(specs, partitions)
        for member_id, assignment in new_target.items():
            if group.target.get(member_id) != assignment:
                entries.append(self._target_member_record(group, member_id, assignment))
        group.target = new_target
        group.assignment_epoch = group.group_epoch
        entries.append(
            (
                cr.encode_key(cr.TARGET_ASSIGNMENT_METADATA, group.group_id),
                cr.encode_value(cr.TARGET_ASSIGNMENT_METADATA, {"assignment_epoch": group.assignment_epoch}),
            )
        )

    def _reconcile(
        self, group: ConsumerGroup, member: ConsumerMember, owned: cr.Assignment | None, entries: Entries
    ) -> None:
        before = member.assignment_state()
        after = next_state(
            before,
            group.assignment_epoch,
            group.target.get(member.member_id, {}),
            group.partition_epoch,
            owned,
        )
        if after != before:
            group.update_assignment(member, after)
            entries.append(self._current_assignment_record(group, member))
            if after.state is not before.state or after.member_epoch != before.member_epoch:
                log.info(
                    "consumer group %s: member %s is %s at epoch %d",
                    group.group_id,
                    member.member_id,
                    after.state.label,
                    after.member_epoch,
                )
        if member.state is MemberState.UNREVOKED_PARTITIONS:
            if before.state is not MemberState.UNREVOKED_PARTITIONS or member.rebalance_timer is None:
                self._schedule_rebalance_timeout(group, member)
        elif member.rebalance_timer is not None:
            member.rebalance_timer.cancel()
            member.rebalance_timer = None

    # -- leaving and fencing ---------------------------------------------------------------------------
    def _leave(self, req: HeartbeatRequest) -> tuple[ConsumerGroupHeartbeatResponse, Awaitable[None] | None]:
        group = self.groups.get(req.group_id)
        if group is None:
            raise GroupError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {req.group_id} not found.")
        entries: Entries = []
        if req.instance_id is None:
            member = group.members.get(req.member_id)
            if member is None:
                raise GroupError(
                    ErrorCode.UNKNOWN_MEMBER_ID,
                    f"Member {req.member_id} is not a member of group {group.group_id}.",
                )
        else:
            member = group.member_by_instance(req.instance_id)
            if member is None:
                raise GroupError(
                    ErrorCode.UNKNOWN_MEMBER_ID,
                    f"Instance id {req.instance_id} is unknown in group {group.group_id}.",
                )
            if member.member_id != req.member_id:
                raise GroupError(
                    ErrorCode.FENCED_INSTANCE_ID,
                    f"Static member {req.member_id} with instance id {req.instance_id} is fenced by existing "
                    f"member {member.member_id}.",
                )
        if req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            # A static member leaving for a while keeps its partitions until its session expires.
            log.info(
                "consumer group %s: static member %s leaves temporarily", group.group_id, member.member_id
            )
            group.update_assignment(
                member,
                member.assignment_state().__class__(
                    member.state,
                    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
                    member.member_epoch,
                    member.assigned,
                    member.pending_revocation,
                ),
            )
            entries.append(self._current_assignment_record(group, member))
        else:
            log.info("consumer group %s: member %s leaves", group.group_id, member.member_id)
            self._remove_member(group, member, entries, bump=True)
        response: ConsumerGroupHeartbeatResponse = {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.NONE,
            "error_message": None,
            "member_id": req.member_id,
            "member_epoch": req.member_epoch,
            "heartbeat_interval_ms": 0,
            "assignment": None,
        }
        return response, self._append(group.group_id, entries)

    def _remove_member(
        self, group: ConsumerGroup, member: ConsumerMember, entries: Entries, *, bump: bool
    ) -> None:
        for timer in (member.session_timer, member.rebalance_timer):
            if timer is not None:
                timer.cancel()
        member.session_timer = member.rebalance_timer = None
        group.remove_member(member.member_id)
        entries.append((cr.encode_key(cr.CURRENT_MEMBER_ASSIGNMENT, group.group_id, member.member_id), None))
        group.target.pop(member.member_id, None)
        entries.append((cr.encode_key(cr.TARGET_ASSIGNMENT_MEMBER, group.group_id, member.member_id), None))
        entries.append((cr.encode_key(cr.MEMBER_METADATA, group.group_id, member.member_id), None))
        if bump:
            self._maybe_bump_epoch(group, True, entries)

    def classic_leave(
        self, group: ConsumerGroup, leaving: list[tuple[str, str | None]]
    ) -> tuple[list[tuple[str, str | None, ErrorCode]], Awaitable[None] | None]:
        """LeaveGroup (the classic API) on a consumer group: Kafka's classicGroupLeaveToConsumerGroup.

        Only the administrative removal of static members by instance id applies (no member of a
        pybroker consumer group uses the classic protocol): any other identity is an unknown member.
        """
        results: list[tuple[str, str | None, ErrorCode]] = []
        entries: Entries = []
        for member_id, instance_id in leaving:
            member = group.member_by_instance(instance_id) if instance_id is not None else None
            if member is None:
                results.append((member_id, instance_id, ErrorCode.UNKNOWN_MEMBER_ID))
                continue
            if member_id:
                error = (
                    ErrorCode.FENCED_INSTANCE_ID
                    if member.member_id != member_id
                    else ErrorCode.UNKNOWN_MEMBER_ID
                )
                results.append((member_id, instance_id, error))
                continue
            log.info("consumer group %s: static member %s removed by LeaveGroup", group.group_id, instance_id)
            self._remove_member(group, member, entries, bump=True)
            results.append((member.member_id, instance_id, ErrorCode.NONE))
        return results, self._append(group.group_id, entries)

    def fence(self, group: ConsumerGroup, member: ConsumerMember, reason: str) -> Awaitable[None] | None:
        if group.members.get(member.member_id) is not member:
            return None
        log.info("consumer group %s: fencing member %s: %s", group.group_id, member.member_id, reason)
        entries: Entries = []
        self._remove_member(group, member, entries, bump=True)
        return self._append(group.group_id, entries)

    def _schedule_session_timeout(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        if member.session_timer is not None:
            member.session_timer.cancel()
        timeout = self.config.session_timeout_ms
        member.session_timer = self.clock.call_later(
            timeout,
            lambda: self.fence(group, member, f"no heartbeat within the session timeout of {timeout} ms"),
        )

    def _schedule_rebalance_timeout(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        if member.rebalance_timer is not None:
            member.rebalance_timer.cancel()
        timeout = (
            member.rebalance_timeout_ms if member.rebalance_timeout_ms > 0 else self.config.session_timeout_ms
        )
        epoch = member.member_epoch

        def expired() -> None:
            member.rebalance_timer = None
            if member.state is MemberState.UNREVOKED_PARTITIONS and member.member_epoch == epoch:
                self.fence(
                    group, member, f"partitions not revoked within the rebalance timeout of {timeout} ms"
                )

        member.rebalance_timer = self.clock.call_later(timeout, expired)

    # -- records ---------------------------------------------------------------------------------------
    @staticmethod
    def _member_metadata_record(group: ConsumerGroup, member: ConsumerMember) -> tuple[bytes, bytes]:
        return (
            cr.encode_key(cr.MEMBER_METADATA, group.group_id, member.member_id),
            cr.encode_value(cr.MEMBER_METADATA, member.metadata_value()),
        )

    @staticmethod
    def _current_assignment_record(group: ConsumerGroup, member: ConsumerMember) -> tuple[bytes, bytes]:
        return (
            cr.encode_key(cr.CURRENT_MEMBER_ASSIGNMENT, group.group_id, member.member_id),
            cr.encode_value(
                cr.CURRENT_MEMBER_ASSIGNMENT,
                {
                    "member_epoch": member.member_epoch,
                    "previous_member_epoch": member.previous_member_epoch,
                    "state": int(member.state),
                    "assigned_partitions": cr.assignment_with_epochs_to_wire(
                        member.assigned, member.assignment_epochs, member.member_epoch
                    ),
                    "partitions_pending_revocation": cr.assignment_with_epochs_to_wire(
                        member.pending_revocation, member.assignment_epochs, member.member_epoch
                    ),
                },
            ),
        )

    @staticmethod
    def _target_member_record(
        group: ConsumerGroup, member_id: str, assignment: cr.Assignment
    ) -> tuple[bytes, bytes]:
        return (
            cr.encode_key(cr.TARGET_ASSIGNMENT_MEMBER, group.group_id, member_id),
            cr.encode_value(
                cr.TARGET_ASSIGNMENT_MEMBER, {"topic_partitions": cr.assignment_to_wire(assignment)}
            ),
        )

    @staticmethod
    def _group_metadata_record(group: ConsumerGroup) -> tuple[bytes, bytes]:
        return (
            cr.encode_key(cr.METADATA, group.group_id),
            cr.encode_value(cr.METADATA, {"epoch": group.group_epoch}),
        )

    @staticmethod
    def _partition_metadata_record(group: ConsumerGroup) -> tuple[bytes, bytes]:
        topics = [
            {
                "topic_id": m.topic_id,
                "topic_name": m.name,
                "num_partitions": m.partitions,
                "partition_racks": [],
            }
            for m in group.subscription_metadata.values()
        ]
        return (
            cr.encode_key(cr.PARTITION_METADATA, group.group_id),
            cr.encode_value(cr.PARTITION_METADATA, {"topics": topics}),
        )

    def group_tombstones(self, group: ConsumerGroup) -> Entries:
        """Every record of the group, tombstoned in Kafka's order (offsets are the caller's)."""
        gid = group.group_id
        member_ids = sorted(set(group.members) | set(group.target))
        out: Entries = [(cr.encode_key(cr.CURRENT_MEMBER_ASSIGNMENT, gid, m), None) for m in member_ids]
        out += [(cr.encode_key(cr.TARGET_ASSIGNMENT_MEMBER, gid, m), None) for m in member_ids]
        out.append((cr.encode_key(cr.TARGET_ASSIGNMENT_METADATA, gid), None))
        out += [(cr.encode_key(cr.MEMBER_METADATA, gid, m), None) for m in member_ids]
        out.append((cr.encode_key(cr.PARTITION_METADATA, gid), None))
        out.append((cr.encode_key(cr.METADATA, gid), None))
        return out

    def drop(self, group: ConsumerGroup) -> Entries:
        """Forget the group (it is empty): its tombstones, for the caller to append with the offsets'."""
        for m in list(group.members.values()):
            for timer in (m.session_timer, m.rebalance_timer):
                if timer is not None:
                    timer.cancel()
        group.dead = True
        self.groups.pop(group.group_id, None)
        return self.group_tombstones(group)

    # -- replay ---------------------------------------------------------------------------------------
    def load(
        self,
        consumer_records: Iterable[tuple[cr.ConsumerRecordKey, bytes | None]],
        offsets: dict[str, dict[tuple[str, int], OffsetAndMetadata]],
    ) -> set[str]:
        """Rebuild consumer groups from their records (log order); returns the ids of the groups built."""
        state: dict[str, dict[str, Any]] = {}
        for key, value in consumer_records:
            doc = state.setdefault(
                key.group_id,
                {
                    "epoch": None,
                    "partitions": None,
                    "assignment_epoch": 0,
                    "members": {},
                    "targets": {},
                    "current": {},
                },
            )
            decoded = None if value is None else cr.decode_value(key.record_type, value)
            if key.record_type == cr.METADATA:
                doc["epoch"] = None if decoded is None else decoded["epoch"]
            elif key.record_type == cr.PARTITION_METADATA:
                doc["partitions"] = decoded
            elif key.record_type == cr.TARGET_ASSIGNMENT_METADATA:
                doc["assignment_epoch"] = 0 if decoded is None else decoded["assignment_epoch"]
            else:
                table = {
                    cr.MEMBER_METADATA: "members",
                    cr.TARGET_ASSIGNMENT_MEMBER: "targets",
                    cr.CURRENT_MEMBER_ASSIGNMENT: "current",
                }[key.record_type]
                if decoded is None:
                    doc[table].pop(key.member_id, None)
                else:
                    doc[table][key.member_id] = decoded
        built: set[str] = set()
        for group_id, doc in state.items():
            if doc["epoch"] is None:
                continue  # deleted (tombstoned metadata)
            group = ConsumerGroup(group_id)
            group.group_epoch = doc["epoch"]
            group.assignment_epoch = doc["assignment_epoch"]
            group.offsets = offsets.get(group_id, {})
            for t in (doc["partitions"] or {}).get("topics", []):
                group.subscription_metadata[t["topic_name"]] = TopicMetadata(
                    t["topic_id"], t["topic_name"], t["num_partitions"]
                )
            group.target = {
                m: cr.assignment_from_wire(v["topic_partitions"]) for m, v in doc["targets"].items()
            }
            for member_id, meta in doc["members"].items():
                member = ConsumerMember(member_id)
                member.load_metadata(meta)
                current = doc["current"].get(member_id)
                if current is not None:
                    member.member_epoch = current["member_epoch"]
                    member.previous_member_epoch = current["previous_member_epoch"]
                    member.state = (
                        MemberState(current["state"])
                        if current["state"] in (0, 1, 2)
                        else MemberState.UNKNOWN
                    )
                    member.assigned = cr.assignment_from_wire(current["assigned_partitions"])
                    member.pending_revocation = cr.assignment_from_wire(
                        current["partitions_pending_revocation"]
                    )
                    member.assignment_epochs = {
                        **cr.epochs_from_wire(current["assigned_partitions"], member.member_epoch),
                        **cr.epochs_from_wire(current["partitions_pending_revocation"], member.member_epoch),
                    }
                group.put_member(member)
                self._schedule_session_timeout(group, member)
            if doc["partitions"] is None:
                # Kafka 4.1+ keeps only a hash of the subscribed topics' metadata (KIP-1101), not record
                # type 4: take the topics as they are now, as that hash would have matched them.
                group.subscription_metadata = self.subscription_metadata(group)
            self.groups[group_id] = group
            built.add(group_id)
        return built

    # -- views ----------------------------------------------------------------------------------------
    def describe(self, group_id: str, include_ops: bool, ops: int) -> ConsumerGroupDescribeResponseDescribedGroup:
        """ConsumerGroupDescribe's entry for one group (v0 and v1: v1 adds each member's type)."""
        group = self.groups.get(group_id)
        if group is None:
            message = (
                f"Group {group_id} is not a consumer group."
                if group_id in self.coordinator.groups or group_id in self.coordinator.streams.groups
                else f"Group {group_id} not found."
            )
            return {
                "error_code": ErrorCode.GROUP_ID_NOT_FOUND,
                "error_message": message,
                "group_id": group_id,
                "group_state": "",
                "group_epoch": 0,
                "assignment_epoch": 0,
                "assignor_name": "",
                "members": [],
                "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
            }
        names = {meta.topic_id: name for name, meta in group.subscription_metadata.items()}

        def described(a: cr.Assignment) -> ConsumerGroupDescribeResponseAssignment:
            tps: list[ConsumerGroupDescribeResponseTopicPartitions] = []
            for topic_id, parts in sorted(a.items(), key=lambda kv: str(kv[0])):
                name = names.get(topic_id)
                if name is None:
                    known = self.topics_by_id(topic_id)
                    name = known or ""
                tps.append({"topic_id": topic_id, "topic_name": name, "partitions": list(parts)})
            return {"topic_partitions": tps}

        members: list[ConsumerGroupDescribeResponseMember] = [
            {
                "member_id": m.member_id,
                "instance_id": m.instance_id,
                "rack_id": m.rack_id,
                "member_epoch": m.member_epoch,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "subscribed_topic_names": list(m.subscribed_topic_names),
                "subscribed_topic_regex": m.subscribed_topic_regex,
                "assignment": described(m.assigned),
                "target_assignment": described(group.target.get(m.member_id, {})),
                # ConsumerGroupDescribe v1 (KIP-1099): 0 classic member, 1 consumer member.  Every
                # member of a pybroker consumer group speaks ConsumerGroupHeartbeat (no online
                # migration of classic members).
                "member_type": CONSUMER_MEMBER_TYPE,
            }
            for m in group.members.values()
        ]
        return {
            "error_code": ErrorCode.NONE,
            "error_message": None,
            "group_id": group_id,
            "group_state": group.state.value,
            "group_epoch": group.group_epoch,
            "assignment_epoch": group.assignment_epoch,
            "assignor_name": group.preferred_assignor(self.config.assignors[0]),
            "members": members,
            "authorized_operations": ops if include_ops else AUTHORIZED_OPERATIONS_OMITTED,
        }

    def topics_by_id(self, topic_id: uuid.UUID) -> str | None:
        for name in self.topics.names():
            meta = self.topics.topic(name)
            if meta is not None and meta.topic_id == topic_id:
                return name
        return None

    # -- offsets --------------------------------------------------------------------------------------
    def validate_offset_commit(
        self, group: ConsumerGroup, member_id: str, member_epoch: int, api_version: int | None
    ) -> tuple[ErrorCode, PartitionCheck | None]:
        """Kafka's ConsumerGroup.validateOffsetCommit (non-transactional): a group-wide error, or a
        per-partition check (None: every partition is fine)."""
        if member_epoch < 0 and not group.members:
            return ErrorCode.NONE, None  # an admin or a consumer outside group management
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID, None
        if api_version is not None and api_version < 9:
            return ErrorCode.UNSUPPORTED_VERSION, None
        if member_epoch == member.member_epoch:
            return ErrorCode.NONE, None
        if member_epoch > member.member_epoch:
            return ErrorCode.STALE_MEMBER_EPOCH, None
        # KIP-1251: an older epoch still commits the partitions it was already assigned at that epoch
        # (the member has not yet heard of its new epoch).
        ids = {name: meta.topic_id for name, meta in group.subscription_metadata.items()}

        def check(topic: str, partition: int) -> ErrorCode:
            topic_id = ids.get(topic)
            assigned_at = None if topic_id is None else member.assignment_epochs.get((topic_id, partition))
            if assigned_at is None or assigned_at > member_epoch:
                return ErrorCode.STALE_MEMBER_EPOCH
            return ErrorCode.NONE

        return ErrorCode.NONE, check

    def validate_offset_fetch(
        self, group: ConsumerGroup, member_id: str | None, member_epoch: int
    ) -> ErrorCode:
        """Kafka's ConsumerGroup.validateOffsetFetch."""
        if member_id is None and member_epoch < 0:
            return ErrorCode.NONE
        member = group.members.get(member_id or "")
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if member_epoch != member.member_epoch:
            return ErrorCode.STALE_MEMBER_EPOCH
        return ErrorCode.NONE

    def list_entry(self, group: ConsumerGroup) -> dict[str, Any]:
        return {
            "group_id": group.group_id,
            "protocol_type": "consumer",
            "group_state": group.state.value,
            "group_type": "consumer",
        }

    def states(self) -> Iterable[ConsumerGroupState]:
        return (g.state for g in self.groups.values())


def _is_subset(owned: cr.Assignment | None, assigned: cr.Assignment) -> bool:
    if owned is None:
        return False
    return all(set(parts) <= set(assigned.get(t, ())) for t, parts in owned.items())


def offsets_tombstones(group_id: str, offsets: Iterable[tuple[str, int]]) -> Entries:
    return [(records.offset_key(group_id, t, p), None) for t, p in offsets]
