"""The classic group coordinator: Apache Kafka's rebalance protocol, offsets, and their persistence.

Semantics follow Kafka's ``GroupCoordinator`` (core/.../coordinator/group, and its successor
``GroupMetadataManager`` for classic groups): JoinGroup answers are held until every known member
has rejoined or the rebalance timeout expires (``group.initial.rebalance.delay.ms`` first for a new
group), followers' SyncGroup answers until the leader's assignment arrives, silent members are
evicted after their session timeout, and the error codes are returned where Kafka returns them.

Everything here runs on the event loop.  JoinGroup and SyncGroup return futures (the connection
holds its later requests meanwhile); every other operation answers at once.  Group metadata and
offsets are appended to ``__consumer_offsets`` through a ``GroupStore`` before they are answered.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from pybroker.coordinator import consumer_records, records
from pybroker.coordinator.clock import Clock, LoopClock
from pybroker.coordinator.consumer_coordinator import (
    ConsumerGroupConfig,
    ConsumerGroupManager,
    TopicView,
    offsets_tombstones,
)
from pybroker.coordinator.consumer_group import ConsumerGroup, TopicMetadata
from pybroker.coordinator.group import (
    CONSUMER_PROTOCOL_TYPE,
    ClassicGroup,
    GroupState,
    Member,
    OffsetAndMetadata,
)
from pybroker.coordinator.streams import records as streams_records
from pybroker.coordinator.streams.manager import StreamsGroupConfig, StreamsGroupManager
from pybroker.coordinator.streams.streams_group import StreamsGroup
from pybroker.coordinator.txn_offsets import TransactionalOffsets
from pybroker.protocol.errors import ErrorCode
from pybroker.storage.errors import KafkaStorageError

if TYPE_CHECKING:
    from pybroker.coordinator.services import CoordinatorServices

log = logging.getLogger(__name__)

# Kafka's GroupCoordinator constants.
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000
OFFSET_METADATA_MAX_BYTES = 4096  # offset.metadata.max.bytes
UNKNOWN_MEMBER_ID = ""


class GroupStore(Protocol):
    """Where group records go: ``append`` returns None when durable, or an awaitable until it is."""

    def append(
        self,
        group_id: str,
        entries: list[tuple[bytes, bytes | None]],
        *,
        producer_id: int = -1,
        producer_epoch: int = -1,
    ) -> Awaitable[None] | None: ...


class MemoryStore:
    """Keeps the records in a list (unit tests, and a broker without a log)."""

    def __init__(self) -> None:
        self.entries: list[tuple[bytes, bytes | None]] = []

    def append(
        self,
        group_id: str,
        entries: list[tuple[bytes, bytes | None]],
        *,
        producer_id: int = -1,
        producer_epoch: int = -1,
    ) -> None:
        self.entries.extend(entries)


@dataclass(slots=True)
class CoordinatorConfig:
    initial_rebalance_delay_ms: int = 3000
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    offsets_retention_check_interval_ms: int = 600_000
    consumer: ConsumerGroupConfig | None = None
    streams: StreamsGroupConfig | None = None


class BrokerTopics:
    """The broker's topics as the consumer-group coordinator sees them.

    Internal topics included: Kafka resolves subscriptions (names and KIP-848 regexes alike) against
    every topic of the metadata image (TopicRegexResolver iterates ``image.topicNames()``), so a
    member subscribing to ``__consumer_offsets`` is assigned its partitions."""

    def __init__(self, services: CoordinatorServices) -> None:
        self.services = services

    def topic(self, name: str) -> TopicMetadata | None:
        rec = self.services.topic(name)
        if rec is None:
            return None
        return TopicMetadata(rec.topic_id, rec.name, rec.partitions)

    def names(self) -> list[str]:
        return list(self.services.topic_names())


class NoTopics:
    def topic(self, name: str) -> TopicMetadata | None:
        return None

    def names(self) -> list[str]:
        return []


def join_error(error: ErrorCode, member_id: str = UNKNOWN_MEMBER_ID) -> dict[str, Any]:
    return {
        "error_code": error,
        "generation_id": -1,
        "protocol_type": None,
        "protocol_name": None,
        "leader": "",
        "skip_assignment": False,
        "member_id": member_id,
        "members": [],
    }


def sync_result(
    error: ErrorCode, assignment: bytes = b"", group: ClassicGroup | None = None
) -> dict[str, Any]:
    named = group if error == ErrorCode.NONE else None  # the group's protocol, on success only
    return {
        "error_code": error,
        "protocol_type": named.protocol_type if named is not None else None,
        "protocol_name": named.protocol_name if named is not None else None,
        "assignment": assignment,
    }


def _done(fut: asyncio.Future | None, result: dict[str, Any]) -> None:
    if fut is not None and not fut.done():
        fut.set_result(result)


class GroupCoordinator:
    def __init__(
        self,
        services: CoordinatorServices | None = None,
        *,
        clock: Clock | None = None,
        store: GroupStore | None = None,
        config: CoordinatorConfig | None = None,
        topics: TopicView | None = None,
    ) -> None:
        self.services = services
        self.clock: Clock = clock or LoopClock()
        self.config = config or (self._config_from(services) if services is not None else CoordinatorConfig())
        self.store: GroupStore = store or MemoryStore()
        self.groups: dict[str, ClassicGroup] = {}
        self._expiry_timer: Any = None
        self._offsets_topic: Any = None
        self.started = False
        # Cluster mode (set before start()): groups are loaded and unloaded with the leadership of their
        # __consumer_offsets partition (on_election / on_resignation), and __consumer_offsets is created
        # through ZooKeeper by ``request_offsets_topic``.
        self.leadership_driven = False
        self.owned_partitions: set[int] = set()
        self.request_offsets_topic: Callable[[], None] | None = None
        if topics is None:
            topics = BrokerTopics(services) if services is not None else NoTopics()
        self.consumer = ConsumerGroupManager(self, self.config.consumer or ConsumerGroupConfig(), topics)
        self.streams = StreamsGroupManager(self, self.config.streams or StreamsGroupConfig(), topics)
        self.txn_offsets = TransactionalOffsets(self)

    @staticmethod
    def _config_from(services: CoordinatorServices) -> CoordinatorConfig:
        c = services.config
        return CoordinatorConfig(
            initial_rebalance_delay_ms=c.group_initial_rebalance_delay_ms,
            min_session_timeout_ms=c.group_min_session_timeout_ms,
            max_session_timeout_ms=c.group_max_session_timeout_ms,
            offsets_retention_ms=c.offsets_retention_minutes * 60_000,
            offsets_retention_check_interval_ms=c.get("offsets.retention.check.interval.ms"),
            consumer=ConsumerGroupConfig(
                heartbeat_interval_ms=c.get("group.consumer.heartbeat.interval.ms"),
                session_timeout_ms=c.get("group.consumer.session.timeout.ms"),
                assignors=tuple(c.get("group.consumer.assignors")),
                max_size=c.get("group.consumer.max.size"),
            ),
            streams=StreamsGroupConfig(
                heartbeat_interval_ms=c.get("group.streams.heartbeat.interval.ms"),
                session_timeout_ms=c.get("group.streams.session.timeout.ms"),
                num_standby_replicas=c.get("group.streams.num.standby.replicas"),
                initial_rebalance_delay_ms=c.get("group.streams.initial.rebalance.delay.ms"),
                assignment_interval_ms=c.get("group.streams.assignment.interval.ms"),
                max_size=c.get("group.streams.max.size"),
            ),
        )

    # -- lifecycle ------------------------------------------------------------------------------------
    async def start(self) -> None:
        """With a broker: create or load ``__consumer_offsets`` and replay it; then start expiry."""
        if self.services is not None:
            from pybroker.coordinator.offsets_topic import OffsetsTopic

            self._offsets_topic = OffsetsTopic(self.services)
            self.store = self._offsets_topic
            if self.leadership_driven:
                self._offsets_topic.local_creation = False  # created through ZooKeeper, loaded on election
            else:
                self._offsets_topic.ensure_topic()
                self.load(self._offsets_topic.replay())
                self._sweep_offsets_of_missing_topics()
                self.txn_offsets.load_open(self._offsets_topic.open_transactions)
            self._offsets_topic.start_cleaner()
        self._schedule_expiry()
        self.started = True

    async def stop(self) -> None:
        if self._expiry_timer is not None:
            self._expiry_timer.cancel()
        if self._offsets_topic is not None:
            self._offsets_topic.stop_cleaner()
        for group in self.groups.values():
            self._cancel_group_timers(group)
        for cgroup in self.consumer.groups.values():
            for m in cgroup.members.values():
                for t in (m.session_timer, m.rebalance_timer):
                    if t is not None:
                        t.cancel()
        for sgroup in list(self.streams.groups.values()):
            self.streams.drop(sgroup)
        self.started = False

    def _schedule_expiry(self) -> None:
        def run() -> None:
            try:
                self.expire_offsets()
            except Exception:
                log.exception("offsets expiration failed")
            self._schedule_expiry()

        self._expiry_timer = self.clock.call_later(self.config.offsets_retention_check_interval_ms, run)

    def _cancel_group_timers(self, group: ClassicGroup) -> None:
        for t in (group.join_timer, group.sync_timer):
            if t is not None:
                t.cancel()
        for m in group.members.values():
            if m.heartbeat_timer is not None:
                m.heartbeat_timer.cancel()

    def partition_for(self, group_id: str) -> int:
        if self._offsets_topic is not None:
            return self._offsets_topic.partition_for(group_id)
        return 0

    # -- persistence ----------------------------------------------------------------------------------
    def _group_record(self, group: ClassicGroup) -> tuple[bytes, bytes]:
        protocol = group.protocol_name
        members = []
        for m in group.members.values():
            members.append(
                {
                    "member_id": m.member_id,
                    "group_instance_id": m.group_instance_id,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "rebalance_timeout": m.rebalance_timeout_ms,
                    "session_timeout": m.session_timeout_ms,
                    "subscription": m.metadata_for(protocol) if protocol is not None else b"",
                    "assignment": m.assignment,
                }
            )
        value = records.group_value(
            {
                "protocol_type": group.protocol_type or "",
                "generation": group.generation_id,
                "protocol": protocol,
                "leader": group.leader_id,
                "current_state_timestamp": group.state_timestamp_ms,
                "members": members,
            }
        )
        return records.group_key(group.group_id), value

    def _store_group(self, group: ClassicGroup) -> Awaitable[None] | None:
        return self.store.append(group.group_id, [self._group_record(group)])

    def load(self, entries: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Rebuild groups from __consumer_offsets records (in log order; later records win)."""
        offsets: dict[str, dict[tuple[str, int], OffsetAndMetadata]] = {}
        metadata: dict[str, dict[str, Any] | None] = {}
        consumer_entries: list[tuple[consumer_records.ConsumerRecordKey, bytes | None]] = []
        streams_entries: list[tuple[streams_records.StreamsRecordKey, bytes | None]] = []
        for key_bytes, value in entries:
            key = records.decode_key(key_bytes)
            if key is None:
                streams_key = streams_records.decode_key(key_bytes)
                if streams_key is not None:
                    streams_entries.append((streams_key, value))
                    if streams_key.record_type == streams_records.METADATA and value is not None:
                        metadata.pop(streams_key.group_id, None)  # a classic group became a streams group
                    continue
                consumer_key = consumer_records.decode_key(key_bytes)
                if consumer_key is not None:
                    consumer_entries.append((consumer_key, value))
                    if consumer_key.record_type == consumer_records.METADATA and value is not None:
                        metadata.pop(consumer_key.group_id, None)  # a classic group became a consumer group
                continue
            if isinstance(key, records.OffsetKey):
                per_group = offsets.setdefault(key.group, {})
                if value is None:
                    per_group.pop((key.topic, key.partition), None)
                else:
                    v = records.decode_offset_value(value)
                    per_group[(key.topic, key.partition)] = OffsetAndMetadata(
                        v["offset"],
                        v.get("leader_epoch", -1),
                        v["metadata"],
                        v["commit_timestamp"],
                        v.get("expire_timestamp", -1),
                    )
            elif isinstance(key, records.GroupKey):
                metadata[key.group] = None if value is None else records.decode_group_value(value)
        consumer_groups = self.consumer.load(consumer_entries, offsets)
        consumer_groups |= self.streams.load(streams_entries, offsets)
        now = self.clock.now_ms()
        for group_id in set(offsets) | set(metadata):
            if group_id in consumer_groups:
                continue
            doc = metadata.get(group_id)
            group_offsets = offsets.get(group_id, {})
            if doc is None and not group_offsets:
                continue
            group = ClassicGroup(group_id, state_timestamp_ms=now)
            group.offsets = group_offsets
            if doc is not None:
                group.generation_id = doc["generation"]
                group.protocol_type = doc["protocol_type"] or None
                group.protocol_name = doc["protocol"]
                group.state_timestamp_ms = doc.get("current_state_timestamp", -1)
                if group.state_timestamp_ms < 0:
                    group.state_timestamp_ms = now
                for md in doc["members"]:
                    member = Member(
                        md["member_id"],
                        md.get("group_instance_id"),
                        md["client_id"],
                        md["client_host"],
                        md.get("rebalance_timeout", md["session_timeout"]),
                        md["session_timeout"],
                        group.protocol_type or "",
                        [(group.protocol_name or "", md["subscription"])],
                        assignment=md["assignment"],
                    )
                    group.add(member)
                group.leader_id = doc["leader"] if doc["leader"] in group.members else group.leader_id
                if group.members:
                    group.state = GroupState.STABLE
                    for member in group.members.values():
                        self._schedule_heartbeat_expiry(group, member)
            self.groups[group_id] = group
        log.info(
            "loaded %d classic groups (%d with members) and %d consumer groups from __consumer_offsets",
            len(self.groups),
            sum(1 for g in self.groups.values() if g.members),
            len(consumer_groups),
        )

    # -- deleted topics -------------------------------------------------------------------------------
    def on_topics_deleted(self, topics: Iterable[str]) -> Awaitable[None] | None:
        """Kafka's OffsetMetadataManager.onTopicsDeleted: a deleted topic's committed offsets go from
        every group, with tombstones in ``__consumer_offsets`` so a restart does not bring them back
        (a group resuming on a topic recreated under the same name must not skip its records).

        KIP-848 groups need nothing more here: their subscription metadata is compared with the
        broker's topics on every heartbeat, so the next one bumps the group epoch and reassigns.
        Deleting ``__consumer_offsets`` itself unloads every group, as Kafka's coordinator does when
        it loses its partitions; the topic is created again when a client next looks a coordinator up
        or a group next writes (``ensure_offsets_topic``), as Kafka's FindCoordinator creates it."""
        from pybroker.coordinator.offsets_topic import TOPIC

        deleted = set(topics)
        if TOPIC in deleted:
            self._unload_all_groups()
            deleted.discard(TOPIC)
        if not deleted:
            return None
        waits = []
        all_offsets = [(g.group_id, g.offsets) for g in self.groups.values()]
        all_offsets += [(c.group_id, c.offsets) for c in self.consumer.groups.values()]
        all_offsets += [(g.group_id, g.offsets) for g in self.streams.groups.values()]
        for group_id, committed in all_offsets:
            gone = [tp for tp in committed if tp[0] in deleted]
            if not gone:
                continue
            for tp in gone:
                del committed[tp]
            log.info("group %s: removed %d offsets of deleted topics", group_id, len(gone))
            try:
                wait = self.store.append(group_id, offsets_tombstones(group_id, gone))
            except Exception:
                # The topic is gone already; the start-up sweep (start) retries the tombstones.
                log.exception("group %s: writing tombstones for offsets of deleted topics failed", group_id)
                continue
            if wait is not None:
                waits.append(wait)
        return _gather(waits)

    def _sweep_offsets_of_missing_topics(self) -> None:
        """At start-up: offsets of a topic that no longer exists (the broker stopped between deleting
        the topic and writing the tombstones) are removed as the deletion would have removed them."""
        if self.services is None:
            return
        committed = [g.offsets for g in self.groups.values()] + [
            c.offsets for c in self.consumer.groups.values()
        ]
        missing = {t for offsets in committed for t, _ in offsets if self.services.topic(t) is None}
        if missing:
            log.info("removing committed offsets of %d deleted topics", len(missing))
            self.on_topics_deleted(missing)

    def ensure_offsets_topic(self) -> None:
        """Create ``__consumer_offsets`` (again, if it was deleted): FindCoordinator calls this."""
        if self.leadership_driven:
            if self.request_offsets_topic is not None:
                self.request_offsets_topic()
        elif self._offsets_topic is not None:
            self._offsets_topic.ensure_topic()

    def _unload_all_groups(self) -> None:
        """Forget every group (their records went with the deleted partitions)."""
        log.warning(
            "__consumer_offsets was deleted: unloaded %d classic and %d consumer groups",
            len(self.groups),
            len(self.consumer.groups),
        )
        self._unload_groups(list(self.groups), list(self.consumer.groups))
        for sgroup in list(self.streams.groups.values()):
            self.streams.drop(sgroup)

    def _unload_groups(self, classic: list[str], consumer: list[str]) -> None:
        """Forget these groups; held JoinGroup and SyncGroup answers learn that this broker no longer
        coordinates them, so the clients look the coordinator up again."""
        now = self.clock.now_ms()
        for group_id in classic:
            group = self.groups.pop(group_id)
            self._cancel_group_timers(group)
            if not group.is_(GroupState.DEAD):  # timers still pending (pending-member expiry) see Dead
                group.transition_to(GroupState.DEAD, now)
            for m in group.members.values():
                _done(m.join_future, join_error(ErrorCode.NOT_COORDINATOR, m.member_id))
                m.join_future = None
                _done(m.sync_future, sync_result(ErrorCode.NOT_COORDINATOR))
                m.sync_future = None
        for group_id in consumer:
            cgroup = self.consumer.groups.pop(group_id)
            for cm in cgroup.members.values():
                for t in (cm.session_timer, cm.rebalance_timer):
                    if t is not None:
                        t.cancel()

    # -- cluster mode: groups follow the leadership of their __consumer_offsets partition ---------------
    def is_coordinator_for(self, group_id: str) -> bool:
        """On one broker every group is here; in a cluster, the groups of the partitions this broker leads."""
        return not self.leadership_driven or self.partition_for(group_id) in self.owned_partitions

    def on_election(self, index: int) -> None:
        """Kafka's GroupCoordinator.onElection: this broker now leads __consumer_offsets partition ``index``:
        load its groups from the partition (which, as the new leader, holds every committed record)."""
        if not self.leadership_driven or index in self.owned_partitions or self._offsets_topic is None:
            return
        rec = self.services.topic(self._offsets_topic.name) if self.services is not None else None
        if rec is not None:
            self._offsets_topic.num_partitions = rec.partitions  # fixed by the topic, not the setting
        before = (len(self.groups), len(self.consumer.groups))
        self.load(self._offsets_topic.replay([index]))
        self.txn_offsets.load_open(self._offsets_topic.open_transactions)
        self.owned_partitions.add(index)
        log.info(
            "leader of %s-%d: loaded %d classic and %d consumer groups",
            self._offsets_topic.name, index, len(self.groups) - before[0], len(self.consumer.groups) - before[1],
        )  # fmt: skip

    def on_resignation(self, index: int) -> None:
        """Kafka's GroupCoordinator.onResignation: another broker leads partition ``index`` now; its groups
        are unloaded here (their members rejoin through the new coordinator)."""
        if not self.leadership_driven or index not in self.owned_partitions:
            return
        self.owned_partitions.discard(index)
        classic = [g for g in self.groups if self.partition_for(g) == index]
        consumer = [g for g in self.consumer.groups if self.partition_for(g) == index]
        self._unload_groups(classic, consumer)
        for sgroup in [g for gid, g in self.streams.groups.items() if self.partition_for(gid) == index]:
            self.streams.drop(sgroup)
        log.info("no longer leader of __consumer_offsets-%d: unloaded %d groups", index, len(classic) + len(consumer))

    # -- group type conversions (Kafka converts an *empty* group to the protocol a member asks for) -----
    def take_empty_classic_group(self, group: ClassicGroup) -> dict[tuple[str, int], OffsetAndMetadata]:
        """Remove an empty classic group that becomes a consumer group; its offsets go with it."""
        self._cancel_group_timers(group)
        group.transition_to(GroupState.DEAD, self.clock.now_ms())
        self.groups.pop(group.group_id, None)
        self.store.append(group.group_id, [(records.group_key(group.group_id), None)])
        log.info("group %s: empty classic group converted to a consumer group", group.group_id)
        return group.offsets

    def _classic_from_empty_consumer_group(self, cgroup: ConsumerGroup) -> ClassicGroup:
        tombstones = self.consumer.drop(cgroup)
        self.store.append(cgroup.group_id, tombstones)
        group = ClassicGroup(cgroup.group_id, state_timestamp_ms=self.clock.now_ms())
        group.offsets = cgroup.offsets
        self.groups[cgroup.group_id] = group
        log.info("group %s: empty consumer group converted to a classic group", cgroup.group_id)
        return group

    # -- timers ---------------------------------------------------------------------------------------
    def _classic_from_empty_streams_group(self, sgroup: StreamsGroup) -> ClassicGroup:
        self.store.append(sgroup.group_id, self.streams.tombstones(sgroup))
        self.streams.drop(sgroup)
        group = ClassicGroup(sgroup.group_id, state_timestamp_ms=self.clock.now_ms())
        group.offsets = sgroup.offsets
        self.groups[sgroup.group_id] = group
        log.info("group %s: empty streams group converted to a classic group", sgroup.group_id)
        return group

    def _schedule_heartbeat_expiry(
        self, group: ClassicGroup, member: Member, timeout_ms: int | None = None
    ) -> None:
        """Kafka's completeAndScheduleNextHeartbeatExpiration: the member is alive now."""
        member.last_heartbeat_ms = self.clock.now_ms()
        if member.heartbeat_timer is not None:
            member.heartbeat_timer.cancel()
        delay = member.session_timeout_ms if timeout_ms is None else timeout_ms
        member.heartbeat_timer = self.clock.call_later(
            delay, lambda: self._on_heartbeat_expired(group, member, delay)
        )

    def _should_keep_alive(self, member: Member, timeout_ms: int) -> bool:
        now = self.clock.now_ms()
        if member.awaiting_join:
            return not member.is_new or member.last_heartbeat_ms + NEW_MEMBER_JOIN_TIMEOUT_MS > now
        if member.awaiting_sync:
            return True
        return member.last_heartbeat_ms + timeout_ms > now

    def _on_heartbeat_expired(self, group: ClassicGroup, member: Member, timeout_ms: int) -> None:
        member.heartbeat_timer = None
        if group.members.get(member.member_id) is not member:
            return  # replaced (static member) or already removed
        if self._should_keep_alive(member, timeout_ms):
            self._schedule_heartbeat_expiry_at(group, member, timeout_ms)
            return
        log.info(
            "group %s: member %s failed to heartbeat within %d ms, removing it",
            group.group_id,
            member.member_id,
            timeout_ms,
        )
        self._remove_member_and_update_group(group, member, "session timeout expired")

    def _schedule_heartbeat_expiry_at(self, group: ClassicGroup, member: Member, timeout_ms: int) -> None:
        # Re-arm from the last heartbeat (a member awaiting join/sync is checked again a timeout later).
        remaining = max(member.last_heartbeat_ms + timeout_ms - self.clock.now_ms(), 0) or timeout_ms
        member.heartbeat_timer = self.clock.call_later(
            remaining, lambda: self._on_heartbeat_expired(group, member, timeout_ms)
        )

    def _schedule_pending_member_expiry(
        self, group: ClassicGroup, member_id: str, session_timeout_ms: int
    ) -> None:
        def expire() -> None:
            if member_id in group.pending_members:
                log.info("group %s: pending member %s did not rejoin, removing it", group.group_id, member_id)
                group.pending_members.discard(member_id)
                if group.is_(GroupState.PREPARING_REBALANCE):
                    self._try_complete_join(group)

        self.clock.call_later(session_timeout_ms, expire)

    # -- JoinGroup ------------------------------------------------------------------------------------
    def join_group(
        self,
        *,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        require_known_member_id: bool,
        reason: str | None = None,
    ) -> asyncio.Future:
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        if not group_id:
            _done(fut, join_error(ErrorCode.INVALID_GROUP_ID, member_id))
            return fut
        if not (
            self.config.min_session_timeout_ms <= session_timeout_ms <= self.config.max_session_timeout_ms
        ):
            _done(fut, join_error(ErrorCode.INVALID_SESSION_TIMEOUT, member_id))
            return fut
        is_unknown = member_id == UNKNOWN_MEMBER_ID
        sgroup = self.streams.groups.get(group_id)
        if sgroup is not None:
            if not sgroup.is_empty():
                _done(fut, join_error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id))
                return fut
            self._classic_from_empty_streams_group(sgroup)
        cgroup = self.consumer.groups.get(group_id)
        if cgroup is not None:
            if not cgroup.is_empty():
                # Kafka would let a classic member join (online migration); pybroker does not.
                _done(fut, join_error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id))
                return fut
            self._classic_from_empty_consumer_group(cgroup)
        group = self.groups.get(group_id)
        if group is None:
            if not is_unknown:
                _done(fut, join_error(ErrorCode.UNKNOWN_MEMBER_ID, member_id))
                return fut
            group = ClassicGroup(group_id, state_timestamp_ms=self.clock.now_ms())
            self.groups[group_id] = group
        if group.is_(GroupState.DEAD):
            # The group is being removed (DeleteGroups/expiry): the member retries, finding it anew.
            _done(fut, join_error(ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id))
            return fut
        if not group.supports_protocols(protocol_type, [name for name, _ in protocols]):
            _done(fut, join_error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id))
            return fut
        args = (client_id, client_host, session_timeout_ms, rebalance_timeout_ms, protocol_type, protocols)
        if is_unknown:
            self._new_member_join(group, group_instance_id, require_known_member_id, fut, reason, *args)
        else:
            self._current_member_join(group, member_id, group_instance_id, fut, reason, *args)
        if group.is_(GroupState.PREPARING_REBALANCE):
            self._try_complete_join(group)
        return fut

    def _new_member_join(
        self,
        group: ClassicGroup,
        instance_id: str | None,
        require_known_member_id: bool,
        fut: asyncio.Future,
        reason: str | None,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
    ) -> None:
        new_id = f"{client_id}-{uuid.uuid4()}"
        if instance_id is not None:
            old_id = group.static_member_id(instance_id)
            if old_id is not None:
                self._update_static_member_and_rebalance(
                    group,
                    old_id,
                    new_id,
                    instance_id,
                    fut,
                    rebalance_timeout_ms,
                    session_timeout_ms,
                    protocols,
                )
                return
            self._add_member_and_rebalance(
                group, new_id, instance_id, fut, reason, client_id, client_host, session_timeout_ms,
                rebalance_timeout_ms, protocol_type, protocols,
            )  # fmt: skip
            return
        if require_known_member_id:
            # KIP-394: hand out the id first, so a client that times out does not leave a ghost member.
            group.pending_members.add(new_id)
            self._schedule_pending_member_expiry(group, new_id, session_timeout_ms)
            _done(fut, join_error(ErrorCode.MEMBER_ID_REQUIRED, new_id))
            return
        self._add_member_and_rebalance(
            group, new_id, None, fut, reason, client_id, client_host, session_timeout_ms,
            rebalance_timeout_ms, protocol_type, protocols,
        )  # fmt: skip

    def _current_member_join(
        self,
        group: ClassicGroup,
        member_id: str,
        instance_id: str | None,
        fut: asyncio.Future,
        reason: str | None,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
    ) -> None:
        if member_id in group.pending_members:
            self._add_member_and_rebalance(
                group, member_id, instance_id, fut, reason, client_id, client_host, session_timeout_ms,
                rebalance_timeout_ms, protocol_type, protocols,
            )  # fmt: skip
            return
        if group.is_static_member_fenced(instance_id, member_id):
            _done(fut, join_error(ErrorCode.FENCED_INSTANCE_ID, member_id))
            return
        member = group.members.get(member_id)
        if member is None:
            _done(fut, join_error(ErrorCode.UNKNOWN_MEMBER_ID, member_id))
            return
        state = group.state
        if state is GroupState.PREPARING_REBALANCE:
            self._update_member_and_rebalance(
                group, member, protocols, rebalance_timeout_ms, session_timeout_ms, fut, reason
            )
        elif state is GroupState.COMPLETING_REBALANCE:
            if member.matches(protocols):
                # The JoinGroup answer was lost: give the same one again.
                _done(fut, self._join_result(group, member))
            else:
                self._update_member_and_rebalance(
                    group, member, protocols, rebalance_timeout_ms, session_timeout_ms, fut, reason
                )
        elif state is GroupState.STABLE:
            if group.is_leader(member_id) or not member.matches(protocols):
                # The leader rejoining means it wants a new assignment (e.g. its metadata changed).
                self._update_member_and_rebalance(
                    group, member, protocols, rebalance_timeout_ms, session_timeout_ms, fut, reason
                )
            else:
                _done(fut, self._join_result(group, member, with_members=False))
        else:  # Empty or Dead cannot have members
            _done(fut, join_error(ErrorCode.UNKNOWN_MEMBER_ID, member_id))

    def _join_result(self, group: ClassicGroup, member: Member, with_members: bool = True) -> dict[str, Any]:
        leader = group.is_leader(member.member_id)
        return {
            "error_code": ErrorCode.NONE,
            "generation_id": group.generation_id,
            "protocol_type": group.protocol_type,
            "protocol_name": group.protocol_name,
            "leader": group.leader_id or "",
            "skip_assignment": False,
            "member_id": member.member_id,
            "members": group.current_member_metadata() if leader and with_members else [],
        }

    def _add_member_and_rebalance(
        self,
        group: ClassicGroup,
        member_id: str,
        instance_id: str | None,
        fut: asyncio.Future,
        reason: str | None,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
    ) -> None:
        member = Member(
            member_id,
            instance_id,
            client_id,
            client_host,
            rebalance_timeout_ms,
            session_timeout_ms,
            protocol_type,
            list(protocols),
        )
        member.is_new = True
        member.join_future = fut
        group.add(member)
        # A new group waits group.initial.rebalance.delay.ms for more members (InitialDelayedJoin).
        if group.is_(GroupState.PREPARING_REBALANCE) and group.generation_id == 0:
            group.new_member_added = True
        self._schedule_heartbeat_expiry(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
        self._maybe_prepare_rebalance(
            group,
            f"adding new member {member_id} with group instance id {instance_id}; client reason: {reason}",
        )

    def _update_member_and_rebalance(
        self,
        group: ClassicGroup,
        member: Member,
        protocols: list[tuple[str, bytes]],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        fut: asyncio.Future,
        reason: str | None,
    ) -> None:
        member.protocols = list(protocols)
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        if member.join_future is not None and member.join_future is not fut:
            _done(member.join_future, join_error(ErrorCode.UNKNOWN_MEMBER_ID, member.member_id))
        member.join_future = fut
        self._maybe_prepare_rebalance(
            group, f"updating metadata for member {member.member_id}; client reason: {reason}"
        )

    def _update_static_member_and_rebalance(
        self,
        group: ClassicGroup,
        old_id: str,
        new_id: str,
        instance_id: str,
        fut: asyncio.Future,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocols: list[tuple[str, bytes]],
    ) -> None:
        current_leader = group.leader_id
        old_member = group.members[old_id]
        # Whoever still holds the old id is fenced from now on.
        _done(old_member.join_future, join_error(ErrorCode.FENCED_INSTANCE_ID, old_id))
        old_member.join_future = None
        _done(old_member.sync_future, sync_result(ErrorCode.FENCED_INSTANCE_ID))
        old_member.sync_future = None
        member = group.replace_static_member(instance_id, old_id, new_id)
        old_protocols = member.protocols
        member.protocols = list(protocols)
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        self._schedule_heartbeat_expiry(group, member)
        if group.is_(GroupState.STABLE):
            if group.protocol_name == group.select_protocol():
                # KIP-345: a static member coming back changes nothing, so no rebalance.  The old
                # leader id is returned so the member does not think it must (re)assign.
                log.info(
                    "group %s: static member %s rejoined as %s without a rebalance",
                    group.group_id,
                    instance_id,
                    new_id,
                )
                wait = self._store_group(group)
                result = self._join_result(group, member, with_members=False)
                result["leader"] = current_leader or ""
                self._answer_after(wait, fut, result)
            else:
                member.join_future = fut
                self._maybe_prepare_rebalance(
                    group, f"static member {instance_id} changed the selected protocol"
                )
        elif group.is_(GroupState.COMPLETING_REBALANCE):
            member.protocols = old_protocols if member.matches(old_protocols) else member.protocols
            member.join_future = fut
            self._maybe_prepare_rebalance(
                group, f"static member {instance_id} rejoined during CompletingRebalance"
            )
        else:  # PreparingRebalance: it simply joins this round
            member.join_future = fut

    def _answer_after(
        self, wait: Awaitable[None] | None, fut: asyncio.Future, result: dict[str, Any]
    ) -> None:
        if wait is None:
            _done(fut, result)
            return

        async def later() -> None:
            await wait
            _done(fut, result)

        asyncio.ensure_future(later())

    def _maybe_prepare_rebalance(self, group: ClassicGroup, reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: ClassicGroup, reason: str) -> None:
        # Members waiting for an assignment of the generation that is now abandoned must rejoin.
        if group.is_(GroupState.COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_error(group, ErrorCode.REBALANCE_IN_PROGRESS)
        if group.sync_timer is not None:
            group.sync_timer.cancel()
            group.sync_timer = None
        group.pending_sync_members.clear()
        now = self.clock.now_ms()
        if group.is_(GroupState.EMPTY):
            delay = self.config.initial_rebalance_delay_ms
            group.join_deadline_ms = now + max(group.max_rebalance_timeout_ms(), delay)
            group.new_member_added = False
            self._arm_join_timer(group, delay, initial=True)
        else:
            group.join_deadline_ms = now + group.max_rebalance_timeout_ms()
            self._arm_join_timer(group, group.max_rebalance_timeout_ms(), initial=False)
        group.transition_to(GroupState.PREPARING_REBALANCE, now)
        log.info(
            "group %s: preparing to rebalance in generation %d (%s)",
            group.group_id,
            group.generation_id,
            reason,
        )

    def _arm_join_timer(self, group: ClassicGroup, delay_ms: int, *, initial: bool) -> None:
        if group.join_timer is not None:
            group.join_timer.cancel()
        group.join_is_initial = initial
        group.join_timer = self.clock.call_later(delay_ms, lambda: self._on_join_timer(group, initial))

    def _on_join_timer(self, group: ClassicGroup, initial: bool) -> None:
        group.join_timer = None
        if not group.is_(GroupState.PREPARING_REBALANCE):
            return
        if initial:
            remaining = group.join_deadline_ms - self.clock.now_ms()
            if group.new_member_added and remaining > 0:
                # InitialDelayedJoin: members are still arriving, wait another delay (bounded).
                group.new_member_added = False
                self._arm_join_timer(
                    group, min(self.config.initial_rebalance_delay_ms, remaining), initial=True
                )
                return
        self._complete_join(group)

    def _try_complete_join(self, group: ClassicGroup) -> None:
        # Kafka's InitialDelayedJoin never completes early: only its timer ends the initial delay.
        if group.join_timer is not None and group.join_is_initial:
            return
        if group.all_members_joined():
            if group.join_timer is not None:
                group.join_timer.cancel()
                group.join_timer = None
            self._complete_join(group)

    def _complete_join(self, group: ClassicGroup) -> None:
        """Kafka's onCompleteJoin: drop members that did not rejoin, start the next generation."""
        if not group.is_(GroupState.PREPARING_REBALANCE):
            return
        for member in group.not_yet_rejoined():
            if member.is_static:
                continue  # a static member keeps its place until its session times out
            log.info(
                "group %s: member %s did not rejoin in time, removing it", group.group_id, member.member_id
            )
            if member.heartbeat_timer is not None:
                member.heartbeat_timer.cancel()
            group.remove(member.member_id)
        group.pending_members.clear()
        if group.is_(GroupState.DEAD):
            return
        # The leader must be a member that rejoined (a static leader may not have).
        if group.leader_id is not None and not group.members[group.leader_id].awaiting_join:
            joined = [m.member_id for m in group.members.values() if m.awaiting_join]
            if joined:
                group.leader_id = joined[0]
        now = self.clock.now_ms()
        group.generation_id += 1
        if group.members:
            group.protocol_name = group.select_protocol()
            group.transition_to(GroupState.COMPLETING_REBALANCE, now)
        else:
            group.protocol_name = None
            group.transition_to(GroupState.EMPTY, now)
        log.info(
            "group %s: generation %d (%s) with %d members",
            group.group_id,
            group.generation_id,
            group.protocol_name,
            len(group.members),
        )
        if group.is_(GroupState.EMPTY):
            self._store_group(group)
            return
        for member in group.members.values():
            if member.join_future is not None:
                fut, member.join_future = member.join_future, None
                _done(fut, self._join_result(group, member))
            member.is_new = False
            group.pending_sync_members.add(member.member_id)
            self._schedule_heartbeat_expiry(group, member)
        self._schedule_pending_sync(group)

    def _schedule_pending_sync(self, group: ClassicGroup) -> None:
        generation = group.generation_id

        def expire() -> None:
            group.sync_timer = None
            if group.generation_id != generation or not group.pending_sync_members:
                return
            if group.state not in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
                return
            missing = list(group.pending_sync_members)
            log.info("group %s: members %s did not sync in time, removing them", group.group_id, missing)
            for member_id in missing:
                member = group.members.get(member_id)
                if member is not None:
                    if member.heartbeat_timer is not None:
                        member.heartbeat_timer.cancel()
                    group.remove(member_id)
            group.pending_sync_members.clear()
            if group.is_(GroupState.COMPLETING_REBALANCE) or group.is_(GroupState.STABLE):
                self._prepare_rebalance(group, f"members {missing} failed to sync")

        if group.sync_timer is not None:
            group.sync_timer.cancel()
        group.sync_timer = self.clock.call_later(group.max_rebalance_timeout_ms(), expire)

    # -- SyncGroup ------------------------------------------------------------------------------------
    def sync_group(
        self,
        *,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
    ) -> asyncio.Future:
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        group = self.groups.get(group_id)
        if group is None:
            _done(fut, sync_result(ErrorCode.UNKNOWN_MEMBER_ID))
            return fut
        if group.is_(GroupState.DEAD):
            _done(fut, sync_result(ErrorCode.COORDINATOR_NOT_AVAILABLE))
            return fut
        if group.is_static_member_fenced(group_instance_id, member_id):
            _done(fut, sync_result(ErrorCode.FENCED_INSTANCE_ID))
            return fut
        member = group.members.get(member_id)
        if member is None:
            _done(fut, sync_result(ErrorCode.UNKNOWN_MEMBER_ID))
            return fut
        if generation_id != group.generation_id:
            _done(fut, sync_result(ErrorCode.ILLEGAL_GENERATION))
            return fut
        if (protocol_type is not None and protocol_type != group.protocol_type) or (
            protocol_name is not None and protocol_name != group.protocol_name
        ):
            _done(fut, sync_result(ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
            return fut
        state = group.state
        if state is GroupState.EMPTY:
            _done(fut, sync_result(ErrorCode.UNKNOWN_MEMBER_ID))
        elif state is GroupState.PREPARING_REBALANCE:
            _done(fut, sync_result(ErrorCode.REBALANCE_IN_PROGRESS))
        elif state is GroupState.COMPLETING_REBALANCE:
            group.pending_sync_members.discard(member_id)
            self._schedule_heartbeat_expiry(group, member)
            if member.sync_future is not None and member.sync_future is not fut:
                _done(member.sync_future, sync_result(ErrorCode.REBALANCE_IN_PROGRESS))
            member.sync_future = fut
            if group.is_leader(member_id):
                log.debug("group %s: assignment received from leader %s", group.group_id, member_id)
                for m in group.members.values():
                    # Members the leader left out get an empty assignment (pitfall 21).
                    m.assignment = bytes(assignments.get(m.member_id, b""))
                wait = self._store_group(group)
                if wait is None:
                    self._propagate_assignment(group, generation_id)
                else:
                    asyncio.ensure_future(self._propagate_after(wait, group, generation_id))
        else:  # Stable: the assignment is already known
            group.pending_sync_members.discard(member_id)
            self._schedule_heartbeat_expiry(group, member)
            _done(fut, sync_result(ErrorCode.NONE, member.assignment, group))
        return fut

    async def _propagate_after(self, wait: Awaitable[None], group: ClassicGroup, generation_id: int) -> None:
        try:
            await wait
        except Exception:
            log.exception("group %s: storing the assignment failed", group.group_id)
            if group.is_(GroupState.COMPLETING_REBALANCE) and group.generation_id == generation_id:
                self._reset_and_propagate_assignment_error(group, ErrorCode.COORDINATOR_NOT_AVAILABLE)
                self._maybe_prepare_rebalance(group, "storing the assignment failed")
            return
        self._propagate_assignment(group, generation_id)

    def _propagate_assignment(self, group: ClassicGroup, generation_id: int) -> None:
        # Another rebalance may have started while the record was written.
        if not (group.is_(GroupState.COMPLETING_REBALANCE) and group.generation_id == generation_id):
            return
        now = self.clock.now_ms()
        group.transition_to(GroupState.STABLE, now)
        for m in group.members.values():
            if m.sync_future is not None:
                fut, m.sync_future = m.sync_future, None
                _done(fut, sync_result(ErrorCode.NONE, m.assignment, group))
                self._schedule_heartbeat_expiry(group, m)
        log.info("group %s: generation %d is stable", group.group_id, group.generation_id)

    def _reset_and_propagate_assignment_error(self, group: ClassicGroup, error: ErrorCode) -> None:
        for m in group.members.values():
            m.assignment = b""
            if m.sync_future is not None:
                fut, m.sync_future = m.sync_future, None
                _done(fut, sync_result(error))

    # -- Heartbeat ------------------------------------------------------------------------------------
    def heartbeat(
        self, *, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> ErrorCode:
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.is_(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if group.is_static_member_fenced(group_instance_id, member_id):
            return ErrorCode.FENCED_INSTANCE_ID
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        state = group.state
        if state is GroupState.EMPTY:
            return ErrorCode.UNKNOWN_MEMBER_ID
        self._schedule_heartbeat_expiry(group, member)
        if state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE  # CompletingRebalance or Stable

    # -- LeaveGroup -----------------------------------------------------------------------------------
    def leave_group(
        self, group_id: str, leaving: list[tuple[str, str | None]]
    ) -> tuple[ErrorCode, list[tuple[str, str | None, ErrorCode]]]:
        """(top-level error, [(member id, instance id, error)]) as LeaveGroup v3+ answers them."""
        cgroup = self.consumer.groups.get(group_id)
        if cgroup is not None:
            results, _ = self.consumer.classic_leave(cgroup, leaving)
            return ErrorCode.NONE, results
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.NONE, [(m, i, ErrorCode.UNKNOWN_MEMBER_ID) for m, i in leaving]
        if group.is_(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, []
        results = []
        for member_id, instance_id in leaving:
            results.append((member_id, instance_id, self._leave_one(group, member_id, instance_id)))
        return ErrorCode.NONE, results

    def _leave_one(self, group: ClassicGroup, member_id: str, instance_id: str | None) -> ErrorCode:
        if member_id == UNKNOWN_MEMBER_ID and instance_id is not None:
            # KIP-345 admin removal by group.instance.id alone.
            found = group.static_member_id(instance_id)
            if found is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            member_id = found
        elif group.is_static_member_fenced(instance_id, member_id):
            return ErrorCode.FENCED_INSTANCE_ID
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            if group.is_(GroupState.PREPARING_REBALANCE):
                self._try_complete_join(group)
            return ErrorCode.NONE
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        log.info("group %s: member %s is leaving", group.group_id, member_id)
        self._remove_member_and_update_group(group, member, "the consumer is leaving the group")
        return ErrorCode.NONE

    def _remove_member_and_update_group(self, group: ClassicGroup, member: Member, reason: str) -> None:
        # A member removed while its JoinGroup/SyncGroup is held learns it is no longer known.
        _done(member.join_future, join_error(ErrorCode.UNKNOWN_MEMBER_ID, member.member_id))
        member.join_future = None
        _done(member.sync_future, sync_result(ErrorCode.UNKNOWN_MEMBER_ID))
        member.sync_future = None
        if member.heartbeat_timer is not None:
            member.heartbeat_timer.cancel()
            member.heartbeat_timer = None
        group.remove(member.member_id)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, f"removing member {member.member_id}: {reason}")
        elif group.is_(GroupState.PREPARING_REBALANCE):
            self._try_complete_join(group)

    # -- admin views ----------------------------------------------------------------------------------
    def describe_group(self, group_id: str) -> dict[str, Any]:
        group = self.groups.get(group_id)
        if group is None:
            return {
                "error_code": ErrorCode.NONE,
                "group_id": group_id,
                "group_state": GroupState.DEAD.value,
                "protocol_type": "",
                "protocol_data": "",
                "members": [],
            }
        stable = group.is_(GroupState.STABLE)
        members = []
        for m in group.members.values():
            members.append(
                {
                    "member_id": m.member_id,
                    "group_instance_id": m.group_instance_id,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "member_metadata": m.metadata_for(group.protocol_name)
                    if stable and group.protocol_name is not None
                    else b"",
                    "member_assignment": m.assignment if stable else b"",
                }
            )
        return {
            "error_code": ErrorCode.NONE,
            "group_id": group_id,
            "group_state": group.state.value,
            "protocol_type": group.protocol_type or "",
            "protocol_data": (group.protocol_name or "") if stable else "",
            "members": members,
        }

    def list_groups(
        self, states: list[str] | None = None, types: list[str] | None = None
    ) -> list[dict[str, Any]]:
        wanted_states = {s.lower() for s in states} if states else None
        wanted_types = {t.lower() for t in types} if types else None
        out = []
        for group in self.groups.values():
            if group.is_(GroupState.DEAD):
                continue
            if wanted_states is not None and group.state.value.lower() not in wanted_states:
                continue
            if wanted_types is not None and "classic" not in wanted_types:
                continue
            out.append(
                {
                    "group_id": group.group_id,
                    "protocol_type": group.protocol_type or "",
                    "group_state": group.state.value,
                    "group_type": "classic",
                }
            )
        if wanted_types is None or "consumer" in wanted_types:
            for cgroup in self.consumer.groups.values():
                entry = self.consumer.list_entry(cgroup)
                if wanted_states is None or entry["group_state"].lower() in wanted_states:
                    out.append(entry)
        if wanted_types is None or "streams" in wanted_types:
            for sgroup in self.streams.groups.values():
                entry = self.streams.list_entry(sgroup)
                if wanted_states is None or entry["group_state"].lower() in wanted_states:
                    out.append(entry)
        return out

    def delete_groups(
        self, group_ids: list[str]
    ) -> tuple[list[tuple[str, ErrorCode]], Awaitable[None] | None]:
        results = []
        waits = []
        for group_id in group_ids:
            sgroup = self.streams.groups.get(group_id)
            if sgroup is not None:
                if not sgroup.is_empty():
                    results.append((group_id, ErrorCode.NON_EMPTY_GROUP))
                    continue
                wait = self._remove_streams_group(sgroup)
                if wait is not None:
                    waits.append(wait)
                results.append((group_id, ErrorCode.NONE))
                continue
            cgroup = self.consumer.groups.get(group_id)
            if cgroup is not None:
                if not cgroup.is_empty():
                    results.append((group_id, ErrorCode.NON_EMPTY_GROUP))
                    continue
                wait = self._remove_consumer_group(cgroup)
                if wait is not None:
                    waits.append(wait)
                results.append((group_id, ErrorCode.NONE))
                continue
            group = self.groups.get(group_id)
            if group is None or group.is_(GroupState.DEAD):
                results.append((group_id, ErrorCode.GROUP_ID_NOT_FOUND))
                continue
            if not group.is_(GroupState.EMPTY):
                results.append((group_id, ErrorCode.NON_EMPTY_GROUP))
                continue
            wait = self._remove_group(group)
            if wait is not None:
                waits.append(wait)
            results.append((group_id, ErrorCode.NONE))
        return results, _gather(waits)

    def _remove_group(self, group: ClassicGroup) -> Awaitable[None] | None:
        """Dead, gone from memory, and tombstones for its metadata and every offset."""
        group.transition_to(GroupState.DEAD, self.clock.now_ms())
        self._cancel_group_timers(group)
        self.groups.pop(group.group_id, None)
        tombstones: list[tuple[bytes, bytes | None]] = [
            (records.offset_key(group.group_id, t, p), None) for t, p in group.offsets
        ]
        tombstones.append((records.group_key(group.group_id), None))
        group.offsets.clear()
        log.info("group %s deleted", group.group_id)
        return self.store.append(group.group_id, tombstones)

    def _remove_consumer_group(self, cgroup: ConsumerGroup) -> Awaitable[None] | None:
        tombstones = offsets_tombstones(cgroup.group_id, cgroup.offsets)
        tombstones += self.consumer.drop(cgroup)
        cgroup.offsets = {}
        log.info("consumer group %s deleted", cgroup.group_id)
        return self.store.append(cgroup.group_id, tombstones)

    def _remove_streams_group(self, sgroup: StreamsGroup) -> Awaitable[None] | None:
        tombstones = offsets_tombstones(sgroup.group_id, sgroup.offsets)
        tombstones += self.streams.tombstones(sgroup)
        self.streams.drop(sgroup)
        sgroup.offsets = {}
        log.info("streams group %s deleted", sgroup.group_id)
        return self.store.append(sgroup.group_id, tombstones)

    def epoch_group(self, group_id: str) -> tuple[Any, Any]:
        """The (manager, group) of a KIP-848 consumer group or a KIP-1071 streams group, whose offset
        commits and fetches are checked against member epochs; (None, None) for any other group."""
        cgroup = self.consumer.groups.get(group_id)
        if cgroup is not None:
            return self.consumer, cgroup
        sgroup = self.streams.groups.get(group_id)
        if sgroup is not None:
            return self.streams, sgroup
        return None, None

    # -- offsets --------------------------------------------------------------------------------------
    def commit_offsets(
        self,
        *,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        retention_time_ms: int,
        offsets: list[tuple[str, int, int, int, str | None]],
        topic_exists: Any = None,
        api_version: int | None = None,
    ) -> tuple[dict[tuple[str, int], ErrorCode], Awaitable[None] | None]:
        """``offsets``: (topic, partition, offset, leader epoch, metadata). Returns per-partition errors.

        ``generation_id`` is the member epoch for a consumer group (OffsetCommit v9+ names it so)."""

        def all_(error: ErrorCode) -> tuple[dict[tuple[str, int], ErrorCode], None]:
            return {(t, p): error for t, p, *_ in offsets}, None

        if not group_id:
            return all_(ErrorCode.INVALID_GROUP_ID)
        manager, cgroup = self.epoch_group(group_id)
        if cgroup is not None:
            error, check = manager.validate_offset_commit(cgroup, member_id, generation_id, api_version)
            if error != ErrorCode.NONE:
                return all_(error)
            return self._write_offsets(
                group_id, cgroup.offsets, retention_time_ms, offsets, topic_exists, check
            )
        group = self.groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                # Not a group we manage, or a request of an older generation: reject.
                return all_(ErrorCode.ILLEGAL_GENERATION)
            group = ClassicGroup(group_id, state_timestamp_ms=self.clock.now_ms())
            self.groups[group_id] = group
        if group.is_(GroupState.DEAD):
            return all_(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if group.is_static_member_fenced(group_instance_id, member_id):
            return all_(ErrorCode.FENCED_INSTANCE_ID)
        if not (generation_id < 0 and group.is_(GroupState.EMPTY)):
            # Not a standalone (assign-mode) commit: the member and generation must be current.
            member = group.members.get(member_id)
            if member is None:
                return all_(ErrorCode.UNKNOWN_MEMBER_ID)
            if generation_id != group.generation_id:
                return all_(ErrorCode.ILLEGAL_GENERATION)
            if group.is_(GroupState.COMPLETING_REBALANCE):
                return all_(ErrorCode.REBALANCE_IN_PROGRESS)
            # Stable or PreparingRebalance: commits are allowed; the heartbeat answer reports a rebalance.
            self._schedule_heartbeat_expiry(group, member)
        return self._write_offsets(group_id, group.offsets, retention_time_ms, offsets, topic_exists)

    def _write_offsets(
        self,
        group_id: str,
        committed: dict[tuple[str, int], OffsetAndMetadata],
        retention_time_ms: int,
        offsets: list[tuple[str, int, int, int, str | None]],
        topic_exists: Any,
        check: Any = None,
    ) -> tuple[dict[tuple[str, int], ErrorCode], Awaitable[None] | None]:
        """Write what passes; ``check(topic, partition)`` may refuse single partitions (KIP-1251)."""
        now = self.clock.now_ms()
        errors: dict[tuple[str, int], ErrorCode] = {}
        entries: list[tuple[bytes, bytes | None]] = []
        accepted: list[tuple[tuple[str, int], OffsetAndMetadata]] = []
        for topic, partition, offset, leader_epoch, metadata in offsets:
            tp = (topic, partition)
            text = metadata or ""
            if len(text.encode()) > OFFSET_METADATA_MAX_BYTES:
                errors[tp] = ErrorCode.OFFSET_METADATA_TOO_LARGE
                continue
            if topic_exists is not None and not topic_exists(topic, partition):
                errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            refused = check(topic, partition) if check is not None else ErrorCode.NONE
            if refused != ErrorCode.NONE:
                errors[tp] = refused
                continue
            expire = now + retention_time_ms if retention_time_ms > 0 else -1
            om = OffsetAndMetadata(offset, leader_epoch, text, now, expire)
            entries.append(
                (
                    records.offset_key(group_id, topic, partition),
                    records.offset_value(offset, leader_epoch, text, now),
                )
            )
            accepted.append((tp, om))
            errors[tp] = ErrorCode.NONE
        if not entries:
            return errors, None
        try:
            wait = self.store.append(group_id, entries)
        except KafkaStorageError:
            # __consumer_offsets cannot be written (disk full): Kafka's coordinator answers
            # NOT_COORDINATOR for a KAFKA_STORAGE_ERROR append; the client retries.
            for tp, _ in accepted:
                errors[tp] = ErrorCode.NOT_COORDINATOR
            return errors, None
        for tp, om in accepted:
            committed[tp] = om
        return errors, wait

    def fetch_offsets(
        self,
        group_id: str,
        topics: list[tuple[str, list[int]]] | None,
        member_id: str | None = None,
        member_epoch: int = -1,
    ) -> tuple[ErrorCode, list[tuple[str, list[tuple[int, OffsetAndMetadata | None]]]]]:
        """``topics`` None means every committed offset of the group.  ``member_id``/``member_epoch``
        (OffsetFetch v9) are checked for consumer groups, as Kafka checks them."""
        manager, cgroup = self.epoch_group(group_id)
        if cgroup is not None:
            error = manager.validate_offset_fetch(cgroup, member_id, member_epoch)
            if error != ErrorCode.NONE:
                return error, []
            offsets = cgroup.offsets
        else:
            group = self.groups.get(group_id)
            offsets = {} if group is None or group.is_(GroupState.DEAD) else group.offsets
        if topics is None:
            by_topic: dict[str, list[tuple[int, OffsetAndMetadata | None]]] = {}
            for (t, p), om in sorted(offsets.items()):
                by_topic.setdefault(t, []).append((p, om))
            return ErrorCode.NONE, list(by_topic.items())
        return ErrorCode.NONE, [(t, [(p, offsets.get((t, p))) for p in parts]) for t, parts in topics]

    def delete_offsets(
        self, group_id: str, partitions: list[tuple[str, int]]
    ) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode], Awaitable[None] | None]:
        _, cgroup = self.epoch_group(group_id)
        if cgroup is not None:
            return self._delete_offsets_of(
                group_id, cgroup.offsets, cgroup.subscribed_names(self.consumer.topics.names()), partitions
            )
        group = self.groups.get(group_id)
        if group is None or group.is_(GroupState.DEAD):
            return ErrorCode.GROUP_ID_NOT_FOUND, {}, None
        subscribed: set[str] = set()
        if not group.is_(GroupState.EMPTY):
            topics = group.subscribed_topics()
            if topics is None:
                # Not a consumer-protocol group (or unreadable subscriptions): only when empty.
                return ErrorCode.NON_EMPTY_GROUP, {}, None
            subscribed = topics
        return self._delete_offsets_of(group_id, group.offsets, subscribed, partitions)

    def _delete_offsets_of(
        self,
        group_id: str,
        committed: dict[tuple[str, int], OffsetAndMetadata],
        subscribed: set[str],
        partitions: list[tuple[str, int]],
    ) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode], Awaitable[None] | None]:
        errors: dict[tuple[str, int], ErrorCode] = {}
        tombstones: list[tuple[bytes, bytes | None]] = []
        for topic, partition in partitions:
            if topic in subscribed:
                errors[(topic, partition)] = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
                continue
            errors[(topic, partition)] = ErrorCode.NONE
            if committed.pop((topic, partition), None) is not None:
                tombstones.append((records.offset_key(group_id, topic, partition), None))
        wait = self.store.append(group_id, tombstones) if tombstones else None
        return ErrorCode.NONE, errors, wait

    def expire_offsets(self) -> int:
        """Kafka's cleanupGroupMetadata: expire offsets (KIP-211 rules), drop empty groups without any."""
        now = self.clock.now_ms()
        retention = self.config.offsets_retention_ms
        removed = 0
        for group in list(self.groups.values()):
            expired: list[tuple[str, int]] = []
            if group.is_(GroupState.EMPTY):
                for tp, om in group.offsets.items():
                    if om.expire_timestamp_ms > 0:
                        due = om.expire_timestamp_ms
                    elif group.protocol_type is not None:
                        # A consumer group's offsets age from the moment it became empty.
                        due = group.state_timestamp_ms + retention
                    else:
                        due = om.commit_timestamp_ms + retention
                    if due <= now:
                        expired.append(tp)
            elif group.is_(GroupState.STABLE) and group.protocol_type == CONSUMER_PROTOCOL_TYPE:
                topics = group.subscribed_topics()
                if topics is not None:
                    for tp, om in group.offsets.items():
                        if tp[0] not in topics and om.commit_timestamp_ms + retention <= now:
                            expired.append(tp)
            if expired:
                for tp in expired:
                    del group.offsets[tp]
                self.store.append(
                    group.group_id, [(records.offset_key(group.group_id, t, p), None) for t, p in expired]
                )
                removed += len(expired)
                log.info("group %s: expired %d offsets", group.group_id, len(expired))
            if group.is_(GroupState.EMPTY) and not group.offsets and not group.members:
                self._remove_group(group)
        epoch_groups: list[ConsumerGroup | StreamsGroup] = [*self.consumer.groups.values(), *self.streams.groups.values()]
        for cgroup in epoch_groups:
            if not cgroup.is_empty():
                continue
            # An empty consumer group's offsets age from their commit; the group goes with the last one.
            expired = [tp for tp, om in cgroup.offsets.items() if om.commit_timestamp_ms + retention <= now]
            for tp in expired:
                del cgroup.offsets[tp]
            if expired:
                self.store.append(cgroup.group_id, offsets_tombstones(cgroup.group_id, expired))
                removed += len(expired)
            if not cgroup.offsets:
                if isinstance(cgroup, StreamsGroup):
                    self._remove_streams_group(cgroup)
                else:
                    self._remove_consumer_group(cgroup)
        return removed


def _gather(waits: list[Awaitable[None]]) -> Awaitable[None] | None:
    if not waits:
        return None

    async def all_done() -> None:
        await asyncio.gather(*waits)

    return all_done()
