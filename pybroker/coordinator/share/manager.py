"""The broker's share-group service: share groups, share sessions and share partitions together.

Kafka splits this between the group coordinator (ShareGroupHeartbeat), the SharePartitionManager
(ShareFetch/ShareAcknowledge over share sessions) and the share coordinator (durable state). On a
single pybroker node they live side by side on the event loop:

- ``groups``: ``ShareGroup`` per group id (membership, epochs, simple assignment);
- ``share_partitions``: ``SharePartition`` per (group, topic id, partition), created on the first fetch
  from the persisted snapshot or at ``share.auto.offset.reset`` (latest by default, a group config);
- ``sessions``: the share fetch session per (group, member): its epoch, and which connection holds it,
  so that closing the connection releases the member's acquired records (as Kafka does);
- ``coordinator``: ``ShareCoordinator`` over ``__share_group_state``, called as Kafka's persister calls the
  share coordinator: a share partition's state is read (or initialized) when it is first used and every
  state change is a WriteShareGroupState of its in-flight window. The calls are in-process, for the keys
  whose state partition this broker leads; in a cluster a key led elsewhere is not persisted from here
  (Kafka's persister would send the request to that broker).
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from pybroker.coordinator.clock import Clock, LoopClock
from pybroker.coordinator.share.share_coordinator import TOPIC, TOPIC_CONFIGS, ShareCoordinator
from pybroker.coordinator.share.share_group import ShareGroup, ShareMember
from pybroker.coordinator.share.share_partition import (
    RecordState,
    SharePartition,
    SharePartitionOptions,
    StateBatch,
)
from pybroker.coordinator.share.state_records import SharePartitionKey, delivery_state
from pybroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from collections.abc import Callable

    from pybroker.coordinator.services import CoordinatorServices
    from pybroker.metadata.image import MetadataImage

log = logging.getLogger(__name__)

SHARE_GROUP_CONFIG_KEYS = ("share.auto.offset.reset", "share.record.lock.duration.ms", "share.delivery.count.limit")
_DONE = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)
INITIAL_SESSION_EPOCH = 0
FINAL_SESSION_EPOCH = -1


@dataclass
class ShareSession:
    """Kafka's ShareSession: the epoch the next request must carry and the partitions it fetches."""

    group_id: str
    member_id: str
    connection: str
    epoch: int = 1
    partitions: set[tuple[uuid.UUID, int]] = field(default_factory=set)


class ShareGroupService:
    def __init__(
        self,
        services: CoordinatorServices,
        metadata_image: Callable[[], MetadataImage],
        clock: Clock | None = None,
        request_state_topic: Callable[[], None] | None = None,
    ) -> None:
        from pybroker.coordinator.offsets_topic import InternalTopic

        self.services = services
        self.metadata_image = metadata_image
        self.clock = clock or LoopClock()
        c = services.config
        self.heartbeat_interval_ms = max(
            c.get("group.share.heartbeat.interval.ms"), c.get("group.share.min.heartbeat.interval.ms")
        )
        self.session_timeout_ms = max(c.get("group.share.session.timeout.ms"), c.get("group.share.min.session.timeout.ms"))
        self.record_lock_duration_ms = c.get("group.share.record.lock.duration.ms")
        self.delivery_count_limit = c.get("group.share.delivery.count.limit")
        self.max_record_locks = c.get("group.share.partition.max.record.locks")
        topic = InternalTopic(services, TOPIC, c.get("share.coordinator.state.topic.num.partitions"), TOPIC_CONFIGS)
        topic.local_creation = request_state_topic is None
        self.coordinator = ShareCoordinator(
            topic,
            self._partition_count,
            updates_per_snapshot=c.get("share.coordinator.snapshot.update.records.per.snapshot"),
            request_topic=request_state_topic,
        )
        # The leader epoch each share partition's state was read with (what its writes carry).
        self._leader_epochs: dict[SharePartitionKey, int] = {}
        self._remote_keys: set[SharePartitionKey] = set()  # warned once: coordinated elsewhere
        self.prune_interval_ms = c.get("share.coordinator.state.topic.prune.interval.ms")
        self._prune_timer = self.clock.call_later(self.prune_interval_ms, self._prune)
        self.groups: dict[str, ShareGroup] = {}
        self.share_partitions: dict[SharePartitionKey, SharePartition] = {}
        self.sessions: dict[tuple[str, str], ShareSession] = {}
        # Group configs set with IncrementalAlterConfigs (resource type GROUP).
        self.group_configs: dict[str, dict[str, str]] = {}

    # -- groups -------------------------------------------------------------------------------------

    def group(self, group_id: str, create: bool = False) -> ShareGroup | None:
        g = self.groups.get(group_id)
        if g is None and create:
            g = ShareGroup(
                group_id,
                self.clock,
                heartbeat_interval_ms=self.heartbeat_interval_ms,
                session_timeout_ms=self.session_timeout_ms,
                on_member_removed=self._member_removed,
            )
            self.groups[group_id] = g
        return g

    def list_entries(self, states: list[str] | None, types: list[str] | None) -> list[dict[str, Any]]:
        """ListGroups rows: a share group's protocol type and group type are both "share" (as Kafka's)."""
        if types and "share" not in {t.lower() for t in types}:
            return []
        wanted = {s.lower() for s in states} if states else None
        return [
            {"group_id": g.group_id, "protocol_type": "share", "group_state": g.state.value, "group_type": "share"}
            for g in self.groups.values()
            if wanted is None or g.state.value.lower() in wanted
        ]

    def topics(self) -> dict[str, tuple[uuid.UUID, int]]:
        image = self.metadata_image()
        return {
            name: (t.topic_id, t.num_partitions)
            for name, t in image.topics_by_name.items()
            if not t.internal and not name.startswith("__")
        }

    def _member_removed(self, group: ShareGroup, member: ShareMember) -> None:
        session = self.sessions.pop((group.group_id, member.member_id), None)
        if session is not None:
            self._release_session(session)

    # -- share partitions ---------------------------------------------------------------------------

    def share_partition(self, group_id: str, topic_id: uuid.UUID, topic: str, index: int) -> SharePartition | None:
        key = SharePartitionKey(group_id, topic_id, index)
        sp = self.share_partitions.get(key)
        if sp is not None:
            return sp
        p = self.services.partition(topic, index)
        if p is None:
            return None
        kwargs: SharePartitionOptions = {
            "delivery_count_limit": int(self._group_config(group_id, "share.delivery.count.limit", self.delivery_count_limit)),
            "record_lock_duration_ms": int(
                self._group_config(group_id, "share.record.lock.duration.ms", self.record_lock_duration_ms)
            ),
            "max_in_flight_records": self.max_record_locks,
            "on_state_change": partial(self._persist, key),
        }
        # As Kafka's persister: the share coordinator's ReadShareGroupState (which records this leader's
        # epoch), and InitializeShareGroupState when the share partition has no state yet.
        self.coordinator.ensure_topic()
        self._leader_epochs[key] = p.leader_epoch
        read = self._call(key, "read", lambda: self.coordinator.read_state_and_maybe_update_leader_epoch(key, p.leader_epoch))
        if read is not None and read["error_code"] == ErrorCode.NONE:
            start = max(read["start_offset"], p.log_start_offset)
            batches = [
                StateBatch(b["first_offset"], b["last_offset"], delivery_state(b["delivery_state"]), b["delivery_count"])
                for b in read["state_batches"]
            ]
            sp = SharePartition.from_state(group_id, topic, index, start, batches, self.clock, **kwargs)
            sp.state_epoch = read["state_epoch"]
        else:
            reset = self._group_config(group_id, "share.auto.offset.reset", "latest")
            start = p.log_start_offset if reset == "earliest" else p.high_watermark
            sp = SharePartition(group_id, topic, index, start, self.clock, **kwargs)
            # the start offset is fixed from now on
            self._call(key, "initialize", lambda: self.coordinator.initialize_state(key, sp.state_epoch, sp.start_offset))
        self.share_partitions[key] = sp
        return sp

    def _partition_count(self, topic_id: uuid.UUID) -> int | None:
        t = self.metadata_image().topic_by_id(topic_id)
        return None if t is None else t.num_partitions

    def _group_config(self, group_id: str, key: str, default: Any) -> Any:
        return self.group_configs.get(group_id, {}).get(key, default)

    def _persist(self, key: SharePartitionKey, sp: SharePartition) -> None:
        """Kafka's persister writeState, through the share coordinator's WriteShareGroupState: the whole
        in-flight window (the coordinator merges it into what it has). A start offset moved from outside
        (AlterShareGroupOffsets) raised the state epoch: that is a fresh InitializeShareGroupState."""
        if sp.state_epoch > self.coordinator.state_epoch(key):
            self._call(key, "initialize", lambda: self.coordinator.initialize_state(key, sp.state_epoch, sp.start_offset))
            return
        batches = sp.state_batches()
        done = sum(b.last_offset - b.first_offset + 1 for b in batches if b.delivery_state in _DONE)
        leader_epoch = self._leader_epochs.get(key, -1)
        self._call(
            key, "write", lambda: self.coordinator.write_state(key, sp.state_epoch, leader_epoch, sp.start_offset, batches, done)
        )

    def _call(self, key: SharePartitionKey, op: str, call: Callable[[], tuple[dict[str, Any], object]]) -> dict[str, Any] | None:
        """One share-coordinator operation for this broker's own share partition; its PartitionResult, or None
        when the state topic's partition is not open here (shutting down, or not made yet in a cluster) or is
        led by another broker: Kafka's persister would send the request there; this broker does not (yet), and
        never appends to a partition it only follows."""
        if not self.coordinator.owns(key):
            if key not in self._remote_keys:
                self._remote_keys.add(key)
                log.warning("the share state of %s is coordinated by another broker: not persisted from here", key)
            return None
        try:
            result, _replicated = call()
        except RuntimeError as exc:
            log.warning("could not %s the share state of %s: %s", op, key, exc)
            return None
        # A read of a share partition with no state yet is expected (it is initialized next).
        if result["error_code"] != ErrorCode.NONE and not (op == "read" and result["error_code"] == ErrorCode.INVALID_REQUEST):
            log.warning("could not %s the share state of %s: %s", op, key, result["error_message"])
        return result

    # -- share sessions -----------------------------------------------------------------------------

    def release_member(self, group_id: str, member_id: str) -> int:
        released = 0
        for key, sp in self.share_partitions.items():
            if key.group_id == group_id:
                released += sp.release_acquired_records(member_id)
        return released

    def _release_session(self, session: ShareSession) -> None:
        n = self.release_member(session.group_id, session.member_id)
        if n:
            log.info("released %d records of share group %s member %s", n, session.group_id, session.member_id)

    def connection_closed(self, connection: str) -> None:
        """A client connection closed: its share sessions end and their acquired records are released."""
        for key, session in list(self.sessions.items()):
            if session.connection == connection:
                del self.sessions[key]
                self._release_session(session)

    def _prune(self) -> None:
        try:
            self.coordinator.prune()
        except Exception:  # noqa: BLE001 - a failed pass must not end the job (Kafka logs and reschedules)
            log.exception("pruning %s failed", TOPIC)
        self._prune_timer = self.clock.call_later(self.prune_interval_ms, self._prune)

    def close(self) -> None:
        self._prune_timer.cancel()
        for sp in self.share_partitions.values():
            sp.close()
