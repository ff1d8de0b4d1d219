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
  share coordinator: a share partition's state is read (or initialized) when it is first used, before any
  record is acquired, and every state change is a WriteShareGroupState of its in-flight window, which an
  acknowledgement waits for. The calls are in-process for the keys whose state partition this broker leads;
  in a cluster the others go to the broker that leads it (``persister``: Kafka's DefaultStatePersister,
  coordinator/share/persister.py), one write of a share partition in flight at a time.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from pybroker.coordinator.clock import Clock, LoopClock
from pybroker.coordinator.share.share_coordinator import (
    TOPIC,
    TOPIC_CONFIGS,
    UNINITIALIZED_START_OFFSET,
    ShareCoordinator,
)
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
    from collections.abc import Awaitable, Callable

    from pybroker.coordinator.services import CoordinatorServices
    from pybroker.coordinator.share.persister import RemoteStatePersister
    from pybroker.metadata.image import MetadataImage
    from pybroker.replication.partition import Partition

log = logging.getLogger(__name__)

SHARE_GROUP_CONFIG_KEYS = ("share.auto.offset.reset", "share.record.lock.duration.ms", "share.delivery.count.limit")
_DONE = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)
INITIAL_SESSION_EPOCH = 0
FINAL_SESSION_EPOCH = -1


class ShareStateUnavailable(Exception):
    """The share coordinator did not give a share partition's state (the fetch answers this error)."""

    def __init__(self, code: ErrorCode, message: str | None) -> None:
        super().__init__(message or code.name)
        self.code = code


def _done(batches: list[StateBatch]) -> int:
    return sum(b.last_offset - b.first_offset + 1 for b in batches if b.delivery_state in _DONE)


class _StateWriter:
    """The remote writes of one share partition: ``version`` counts its state changes, ``written`` the
    newest change the share coordinator has (or refused, with ``error``); waiters wait for a version."""

    def __init__(self, state_epoch: int) -> None:
        self.version = 0
        self.written = 0
        self.state_epoch = state_epoch  # the one the share coordinator has (a higher one is initialized)
        self.error = ErrorCode.NONE
        self.task: asyncio.Future[None] | None = None
        self._waiters: list[tuple[int, asyncio.Future[ErrorCode]]] = []

    def wait(self, version: int) -> asyncio.Future[ErrorCode]:
        fut: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
        self._waiters.append((version, fut))
        return fut

    def wake(self, version: int, error: ErrorCode) -> None:
        """Answer the waiters of every version up to ``version`` with ``error``."""
        keep = []
        for wanted, fut in self._waiters:
            if wanted > version:
                keep.append((wanted, fut))
            elif not fut.done():
                fut.set_result(error)
        self._waiters = keep


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
        persister: RemoteStatePersister | None = None,
        group_configs: dict[str, dict[str, str]] | None = None,
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
        # In a cluster, the calls to a share coordinator on another broker (Kafka's persister).
        self.persister = persister
        self._loading: dict[SharePartitionKey, asyncio.Future[SharePartition]] = {}
        self._writers: dict[SharePartitionKey, _StateWriter] = {}
        self._local_waits: dict[SharePartitionKey, Awaitable[Any]] = {}
        self._last_wait: Awaitable[Any] | None = None
        self.prune_interval_ms = c.get("share.coordinator.state.topic.prune.interval.ms")
        self._prune_timer = self.clock.call_later(self.prune_interval_ms, self._prune)
        self.groups: dict[str, ShareGroup] = {}
        self.share_partitions: dict[SharePartitionKey, SharePartition] = {}
        self.sessions: dict[tuple[str, str], ShareSession] = {}
        self._group_empty_tasks: set[asyncio.Future[None]] = set()
        # Group configs set with IncrementalAlterConfigs (resource type GROUP).
        self.group_configs: dict[str, dict[str, str]] = group_configs if group_configs is not None else {}

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

    async def share_partition(
        self, group_id: str, topic_id: uuid.UUID, topic: str, index: int, timeout: float | None = None
    ) -> SharePartition | None:
        """The share partition, its state read from its share coordinator first (Kafka's
        SharePartition.maybeInitialize): no record is acquired before the state is loaded. None for a topic
        partition not here, or still loading after ``timeout`` seconds (the load goes on: a later call gets
        it); ShareStateUnavailable when the share coordinator could not give the state."""
        key = SharePartitionKey(group_id, topic_id, index)
        p = self.services.partition(topic, index)
        if p is None:
            return None
        sp = self.share_partitions.get(key)
        if sp is not None:
            if self._leader_epochs.get(key) == p.leader_epoch or await self._still_current(key, sp, p.leader_epoch):
                return sp
            self._unload(key, sp)
        loading = self._loading.get(key)
        # A load through the persister already under way is waited for even when this broker has become
        # the key's share coordinator meanwhile (a cluster's state topic just made): a local load beside it
        # would initialize the state a second time and hand out a share partition the remote load then
        # replaces, losing every acknowledgement taken in between.
        if loading is None and (self.persister is None or self._local(key)):
            return self._load_local(key, topic, p)
        if loading is None:
            loading = self._loading[key] = asyncio.ensure_future(self._load_remote(key, topic, p))
            loading.add_done_callback(partial(self._loaded, key))
        try:
            return await asyncio.wait_for(asyncio.shield(loading), timeout)
        except TimeoutError:
            return None

    def _loaded(self, key: SharePartitionKey, loading: asyncio.Future[SharePartition]) -> None:
        self._loading.pop(key, None)
        if not loading.cancelled() and loading.exception() is not None:
            log.info("share partition %s not loaded: %s", key, loading.exception())  # the next fetch tries again

    async def _still_current(self, key: SharePartitionKey, sp: SharePartition, leader_epoch: int) -> bool:
        """The topic partition's leader epoch moved since ``sp`` was loaded: a leader elected elsewhere in
        between, or (ZooKeeper mode) only an ISR change made by the controller. ``sp`` is kept, writing with
        the new epoch from now on, unless another leader recorded a higher epoch at the share coordinator
        (it read, and may have changed, the state: it is read again)."""
        loaded = self._leader_epochs.get(key, -1)
        if self.persister is None or self._local(key):
            recorded = self.coordinator.leader_epoch(key)
        else:
            summary = await self.persister.read_state_summary(key, -1)
            if summary["error_code"] != ErrorCode.NONE:
                log.info("share partition %s: leader epoch %d -> %d, state summary failed (%s): reloading",
                         key, loaded, leader_epoch, ErrorCode(summary["error_code"]).name)
                return False
            recorded = summary["leader_epoch"]
        if recorded > loaded or self.share_partitions.get(key) is not sp:
            log.info("share partition %s: leader epoch %d -> %d, another leader wrote with epoch %d: reloading",
                     key, loaded, leader_epoch, recorded)
            return False
        self._leader_epochs[key] = max(leader_epoch, self._leader_epochs.get(key, -1))
        return True

    def _options(self, key: SharePartitionKey) -> SharePartitionOptions:
        group_id = key.group_id
        return {
            "delivery_count_limit": int(self._group_config(group_id, "share.delivery.count.limit", self.delivery_count_limit)),
            "record_lock_duration_ms": int(
                self._group_config(group_id, "share.record.lock.duration.ms", self.record_lock_duration_ms)
            ),
            "max_in_flight_records": self.max_record_locks,
            "on_state_change": partial(self._persist, key),
        }

    def _local(self, key: SharePartitionKey) -> bool:
        """Whether this broker is ``key``'s share coordinator (its calls stay in-process)."""
        self.coordinator.ensure_topic()
        return self.coordinator.owns(key)

    def _from_read(self, key: SharePartitionKey, topic: str, p: Partition, read: dict[str, Any]) -> SharePartition:
        if read["start_offset"] == UNINITIALIZED_START_OFFSET:
            # initialized, never written: it starts at share.auto.offset.reset, as Kafka's
            # SharePartition.maybeInitialize does for an uninitialized start offset
            sp = self._fresh(key, topic, p)
            sp.state_epoch = read["state_epoch"]
            return sp
        start = max(read["start_offset"], p.log_start_offset)
        batches = [
            StateBatch(b["first_offset"], b["last_offset"], delivery_state(b["delivery_state"]), b["delivery_count"])
            for b in read["state_batches"]
        ]
        sp = SharePartition.from_state(key.group_id, topic, key.partition, start, batches, self.clock, **self._options(key))
        sp.state_epoch = read["state_epoch"]
        return sp

    def _fresh(self, key: SharePartitionKey, topic: str, p: Partition) -> SharePartition:
        reset = self._group_config(key.group_id, "share.auto.offset.reset", "latest")
        start = p.log_start_offset if reset == "earliest" else p.high_watermark
        return SharePartition(key.group_id, topic, key.partition, start, self.clock, **self._options(key))

    def _load_local(self, key: SharePartitionKey, topic: str, p: Partition) -> SharePartition:
        # As Kafka's persister: the share coordinator's ReadShareGroupState (which records this leader's
        # epoch), and InitializeShareGroupState when the share partition has no state yet, at start offset -1
        # as Kafka's group coordinator initializes it: the start offset at share.auto.offset.reset is this
        # leader's until its first state write (DescribeShareGroupOffsets shows none before).
        self.coordinator.ensure_topic()
        self._leader_epochs[key] = p.leader_epoch
        read = self._call(key, "read", lambda: self.coordinator.read_state_and_maybe_update_leader_epoch(key, p.leader_epoch))
        if read is not None and read["error_code"] == ErrorCode.NONE:
            sp = self._from_read(key, topic, p, read)
        else:
            sp = self._fresh(key, topic, p)
            self._call(key, "initialize", lambda: self.coordinator.initialize_state(key, sp.state_epoch, UNINITIALIZED_START_OFFSET))
        self.share_partitions[key] = sp
        return sp

    async def _load_remote(self, key: SharePartitionKey, topic: str, p: Partition) -> SharePartition:
        """The same through the persister, to the share coordinator on another broker."""
        assert self.persister is not None
        leader_epoch = p.leader_epoch
        read = await self.persister.read_state(key, leader_epoch)
        code = ErrorCode(read["error_code"])
        if code == ErrorCode.NONE:
            sp = self._from_read(key, topic, p, read)
        elif code == ErrorCode.INVALID_REQUEST:  # no state yet: initialized at share.auto.offset.reset
            sp = self._fresh(key, topic, p)
            init = await self.persister.initialize_state(key, sp.state_epoch, UNINITIALIZED_START_OFFSET)
            if init["error_code"] != ErrorCode.NONE:
                sp.close()
                raise ShareStateUnavailable(ErrorCode(init["error_code"]), init.get("error_message"))
        else:
            raise ShareStateUnavailable(code, read.get("error_message"))
        if p.leader_epoch != leader_epoch or not p.is_leader:
            sp.close()  # leadership changed while the state was read: the next fetch loads it again
            raise ShareStateUnavailable(ErrorCode.NOT_LEADER_OR_FOLLOWER, None)
        self._leader_epochs[key] = leader_epoch
        self._writers[key] = _StateWriter(sp.state_epoch)
        self.share_partitions[key] = sp
        return sp

    def _unload(self, key: SharePartitionKey, sp: SharePartition) -> None:
        """Forget ``sp`` (if it is still the loaded share partition of ``key``): the next use reads the state."""
        if self.share_partitions.get(key) is not sp:
            return
        del self.share_partitions[key]
        sp.close()
        self._leader_epochs.pop(key, None)
        self._writers.pop(key, None)

    def _partition_count(self, topic_id: uuid.UUID) -> int | None:
        t = self.metadata_image().topic_by_id(topic_id)
        return None if t is None else t.num_partitions

    def _group_config(self, group_id: str, key: str, default: Any) -> Any:
        return self.group_configs.get(group_id, {}).get(key, default)

    def _persist(self, key: SharePartitionKey, sp: SharePartition) -> None:
        """Kafka's persister writeState, through the share coordinator's WriteShareGroupState: the whole
        in-flight window (the coordinator merges it into what it has). A start offset moved from outside
        (AlterShareGroupOffsets) raised the state epoch: that is a fresh InitializeShareGroupState.
        In-process when this broker coordinates ``key``; else sent by the persister, one write of a share
        partition at a time, each carrying the newest window (so writes made meanwhile are folded in)."""
        if self.persister is not None and not self.coordinator.owns(key):
            writer = self._writers.get(key)
            if writer is None:
                writer = self._writers[key] = _StateWriter(sp.state_epoch)
            writer.version += 1
            if writer.task is None:
                writer.task = asyncio.ensure_future(self._write_remote(key, sp, writer))
            return
        if sp.state_epoch > self.coordinator.state_epoch(key):
            result = self._call(key, "initialize", lambda: self.coordinator.initialize_state(key, sp.state_epoch, sp.start_offset))
        else:
            start, batches = sp.persisted_state()
            leader_epoch = self._leader_epochs.get(key, -1)
            result = self._call(
                key, "write",
                lambda: self.coordinator.write_state(key, sp.state_epoch, leader_epoch, start, batches, _done(batches)),
            )
        if result is not None and self._last_wait is not None:
            self._local_waits[key] = self._last_wait

    async def _write_remote(self, key: SharePartitionKey, sp: SharePartition, writer: _StateWriter) -> None:
        assert self.persister is not None
        try:
            while writer.written < writer.version and self.share_partitions.get(key) is sp:
                version = writer.version
                start, batches = sp.persisted_state()  # the window now, with every change made so far
                if writer.state_epoch < sp.state_epoch:
                    result = await self.persister.initialize_state(key, sp.state_epoch, sp.start_offset)
                    if result["error_code"] == ErrorCode.NONE:
                        writer.state_epoch = sp.state_epoch
                else:
                    result = await self.persister.write_state(
                        key, sp.state_epoch, self._leader_epochs.get(key, -1), start, batches, _done(batches)
                    )
                writer.written = version
                writer.error = ErrorCode(result["error_code"])
                if writer.error != ErrorCode.NONE:
                    log.warning("could not write the share state of %s: %s", key, writer.error.name)
                writer.wake(version, writer.error)
                if writer.error in (ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.FENCED_STATE_EPOCH):
                    self._unload(key, sp)  # another leader has it now (Kafka's fenced share partition)
                    break
        finally:
            writer.task = None
            writer.wake(writer.version, ErrorCode.COORDINATOR_NOT_AVAILABLE)  # not written: unloaded, or failed

    def durable(self, key: SharePartitionKey) -> Awaitable[ErrorCode] | None:
        """What to await before answering an acknowledgement of ``key``: its last state write reaching the
        share coordinator (and, in-process, the state topic's ISR); None when nothing is pending."""
        wait = self._local_waits.pop(key, None)
        if wait is not None:
            return wait
        writer = self._writers.get(key)
        if writer is None or writer.written >= writer.version:
            return None
        return writer.wait(writer.version)

    def _call(self, key: SharePartitionKey, op: str, call: Callable[[], tuple[dict[str, Any], Awaitable[Any] | None]]) -> dict[str, Any] | None:
        """One in-process share-coordinator operation for this broker's own share partition; its
        PartitionResult, or None when the state topic's partition is not open here (shutting down, or not
        made yet in a cluster) or is led by another broker (then a cluster's persister sends it there)."""
        self._last_wait = None
        if not self.coordinator.owns(key):
            if key not in self._remote_keys:
                self._remote_keys.add(key)
                log.warning("the share state of %s is coordinated by another broker: not persisted from here", key)
            return None
        try:
            result, self._last_wait = call()
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
        if not any(group_id == session.group_id for group_id, _ in self.sessions):
            self._group_empty(session.group_id)

    def _group_empty(self, group_id: str) -> None:
        """Kafka's ShareGroupListener.onGroupEmpty: the group's last share session here ended, so its share
        partitions here are dropped (once their last state write is in): the next fetch reads the state
        again, with what AlterShareGroupOffsets or DeleteShareGroupOffsets did at the share coordinator
        meanwhile. Checked again after the writes: a session opened in between keeps them."""
        keys = [k for k in self.share_partitions if k.group_id == group_id]
        if not keys:
            return

        async def drop() -> None:
            for key in keys:
                written = self.durable(key)
                if written is not None:
                    await written
            if any(g == group_id for g, _ in self.sessions):
                return
            for key in keys:
                sp = self.share_partitions.get(key)
                if sp is not None:
                    self._unload(key, sp)

        try:
            asyncio.get_running_loop()
        except RuntimeError:  # no event loop (a unit test's direct call): nothing can be pending
            for key in keys:
                self._unload(key, self.share_partitions[key])
            return
        task = asyncio.ensure_future(drop())
        self._group_empty_tasks.add(task)
        task.add_done_callback(self._group_empty_tasks.discard)

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
