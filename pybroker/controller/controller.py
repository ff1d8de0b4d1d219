"""The cluster controller elected through ZooKeeper (Kafka's KafkaController, ZK mode), for asyncio.

Every broker runs a ``KafkaController``; the one whose ephemeral /controller znode wins is active and
the others watch that znode to take over. Winning bumps /controller_epoch in the same transaction, and
every write of an active controller is fenced by that znode's version: a controller that lost its
session (or was paused past it) cannot write once another one was elected, and it stops acting as soon
as kazoo tells it the session is gone.

kazoo's watch callbacks run on its threads; they only hand an event to the asyncio loop
(``call_soon_threadsafe``). One task takes events off a queue and processes them one at a time (Kafka's
ControllerEventManager), doing the blocking ZooKeeper calls on a single worker thread.

What the active controller does:
- broker change (/brokers/ids): partitions led by a dead broker elect a new leader from the live ISR
  (leader epoch + 1, the dead broker out of the ISR), or go offline (leader -1) when no ISR member is
  alive, unless ``unclean.leader.election.enable`` lets a live out-of-sync replica lead; a dead follower
  leaves the ISR; offline partitions elect again when brokers return;
- topic change (/brokers/topics, each topic's assignment): new partitions get their first state, leader
  = the first live replica, ISR = the live replicas;
- topic deletion (/admin/delete_topics): the topic's znodes are removed; brokers delete their logs when
  the metadata loader reports the topic gone;
- ISR change notifications (/isr_change_notification): the controller re-reads those partitions'
  states (and finishes reassignments whose new replicas caught up);
- preferred leader election every ``leader.imbalance.check.interval.seconds`` when
  ``auto.leader.rebalance.enable``, and on request (``elect_leaders``, for ElectLeaders);
- controlled shutdown (``controlled_shutdown``, for the ControlledShutdown API): leadership moves off
  the broker and it leaves the ISRs before it stops;
- reassignment (``alter_partition_reassignments`` / ``list_partition_reassignments``, and the
  /admin/reassign_partitions znode): add the new replicas, wait until they are in the ISR, elect a
  leader among the target replicas, drop the old ones;
- ElectLeaders and the reassignment APIs received by another broker, forwarded through ZooKeeper
  (zk_data.FORWARDED_REQUESTS_PATH): answered in the request's znode (``serve_forwarded``).

Topic creation, CreatePartitions and DeleteTopics are ZooKeeper writes any broker makes
(``KafkaZkClient.create_topic`` / ``add_partitions`` / ``request_topic_deletion``); this controller
reacts to them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import enum
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    SessionExpiredError,
)

from pybroker.config import BrokerConfig
from pybroker.controller.assignment import check_reassignment_target
from pybroker.controller.election import (
    controlled_shutdown_partition_leader_election,
    offline_partition_leader_election,
    preferred_replica_partition_leader_election,
    reassign_partition_leader_election,
    unknown_partition,
)
from pybroker.controller.zk_client import ControllerMovedError, KafkaZkClient
from pybroker.controller.zk_data import (
    NO_LEADER,
    BrokerInfo,
    LeaderAndIsr,
    ReplicaAssignment,
    TopicAssignment,
)
from pybroker.protocol.errors import ErrorCode, KafkaError

logger = logging.getLogger(__name__)

T = TypeVar("T")
TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class ControllerConfig:
    """The broker settings the controller reads (Kafka's key names)."""

    unclean_leader_election_enable: bool = False
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: float = 300.0
    leader_imbalance_per_broker_percentage: int = 10

    @classmethod
    def from_broker_config(cls, config: BrokerConfig) -> ControllerConfig:
        return cls(
            unclean_leader_election_enable=bool(config.get("unclean.leader.election.enable")),
            auto_leader_rebalance_enable=bool(config.get("auto.leader.rebalance.enable")),
            leader_imbalance_check_interval_seconds=float(config.get("leader.imbalance.check.interval.seconds")),
            leader_imbalance_per_broker_percentage=int(config.get("leader.imbalance.per.broker.percentage")),
        )


class ElectionType(enum.IntEnum):
    """ElectLeaders' ElectionType."""

    PREFERRED = 0
    UNCLEAN = 1


class KafkaController:
    """One broker's controller. ``await startup()`` joins the election; ``await shutdown()`` leaves it.

    ``zk`` is this broker's ``KafkaZkClient`` (its session); the controller shares it with the broker's
    registration and metadata loader, as Kafka does."""

    def __init__(
        self, zk: KafkaZkClient, broker_id: int, config: ControllerConfig | None = None,
        *, on_active_change: Callable[[bool, int], None] | None = None,
    ) -> None:
        self.zk = zk
        self.broker_id = broker_id
        self.config = config or ControllerConfig()
        self.on_active_change = on_active_change
        self.epoch = 0
        self.epoch_zk_version = -1
        self.active = False
        self.live_brokers: dict[int, BrokerInfo] = {}
        self.shutting_down_brokers: set[int] = set()
        self.assignments: dict[str, TopicAssignment] = {}
        self.states: dict[TopicPartition, LeaderAndIsr] = {}
        self.topics_being_deleted: set[str] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: asyncio.Queue[tuple[str, Any, asyncio.Future[Any] | None]] = asyncio.Queue()
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"controller-{broker_id}")
        self._worker: asyncio.Task[None] | None = None
        self._rebalance_task: asyncio.Task[None] | None = None
        # Watches belong to one term as controller: a watch of an older term is ignored.
        self._term = 0
        self._stopped = False
        self._event_topic_configs: dict[str, dict[str, str]] = {}

    # -- lifecycle

    async def startup(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._worker = self._loop.create_task(self._process_events(), name=f"controller-{self.broker_id}")
        self.zk.add_state_listener(self._on_session_state)
        self._enqueue("elect")

    async def shutdown(self) -> None:
        self._stopped = True
        if self._worker is not None and not self._worker.done():
            assert self._loop is not None  # set with the worker (startup)
            done: asyncio.Future[Any] = self._loop.create_future()
            self._queue.put_nowait(("shutdown", None, done))
            try:
                await asyncio.wait_for(done, timeout=30)
            except (TimeoutError, asyncio.CancelledError):
                pass
            self._worker.cancel()
        self._executor.shutdown(wait=False)

    @property
    def is_active(self) -> bool:
        return self.active

    # -- requests from the broker (the active controller answers; the others raise NOT_CONTROLLER)

    async def elect_leaders(
        self, partitions: Iterable[TopicPartition] | None, election_type: ElectionType = ElectionType.PREFERRED
    ) -> dict[TopicPartition, KafkaError | None]:
        """ElectLeaders: None per partition that now has the wanted leader, else ELECTION_NOT_NEEDED,
        PREFERRED_LEADER_NOT_AVAILABLE, ELIGIBLE_LEADERS_NOT_AVAILABLE or UNKNOWN_TOPIC_OR_PARTITION.
        ``partitions=None`` means every partition."""
        return await self._request("elect_leaders", (None if partitions is None else list(partitions), election_type))

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int = -1) -> set[TopicPartition]:
        """ControlledShutdown: move leadership off ``broker_id`` and take it out of the ISRs; returns the
        partitions it still leads (those with no other eligible leader; the broker retries). A
        ``broker_epoch`` (ControlledShutdown v2+) other than the registration's czxid is refused with
        STALE_BROKER_EPOCH; -1 skips the check, as Kafka does for old versions."""
        return await self._request("controlled_shutdown", (broker_id, broker_epoch))

    async def alter_partition_reassignments(
        self, reassignments: Mapping[TopicPartition, Iterable[int] | None]
    ) -> dict[TopicPartition, KafkaError | None]:
        """AlterPartitionReassignments: target replicas per partition, or None to cancel a reassignment."""
        request = {tp: (None if r is None else tuple(r)) for tp, r in reassignments.items()}
        return await self._request("reassign", request)

    async def list_partition_reassignments(
        self, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, ReplicaAssignment]:
        """ListPartitionReassignments: the ongoing reassignments (replicas, adding, removing)."""
        return await self._request("list_reassignments", None if partitions is None else set(partitions))

    async def serve(self, kind: str, request: dict[str, Any]) -> dict[str, Any]:
        """A request in the forwarded form (``_serve_forwarded``), served here: ElectLeaders and the
        reassignment APIs answer the same JSON whether this broker or another one received them."""
        return await self._request("serve", (kind, request))

    async def _request(self, kind: str, payload: Any) -> Any:
        if self._loop is None:
            raise KafkaError(ErrorCode.NOT_CONTROLLER)
        future: asyncio.Future[Any] = self._loop.create_future()
        self._queue.put_nowait((kind, payload, future))
        return await future

    # -- events

    def _enqueue(self, kind: str, payload: Any = None) -> None:
        """Thread-safe: kazoo threads call this."""
        loop = self._loop
        if loop is None or self._stopped or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(self._queue.put_nowait, (kind, payload, None))
        except RuntimeError:
            pass  # the loop closed meanwhile

    def _watch(self, kind: str, payload: Any = None) -> Callable[[Any], None]:
        term = self._term

        def fire(_event: Any) -> None:
            if term == self._term:
                self._enqueue(kind, payload)

        return fire

    def _on_session_state(self, what: str) -> None:
        self._enqueue("expire" if what == "expired" else "elect")

    async def _zk(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        assert self._loop is not None
        return await self._loop.run_in_executor(self._executor, lambda: self.zk.call(fn, *args, **kwargs))

    async def _process_events(self) -> None:
        handlers: dict[str, Callable[[Any], Awaitable[Any]]] = {
            "elect": self._elect,
            "controller_change": self._controller_change,
            "expire": self._expire,
            "broker_change": self._broker_change,
            "topic_change": self._topic_change,
            "partition_modifications": self._partition_modifications,
            "topic_deletion": self._topic_deletion,
            "isr_change": self._isr_change,
            "reassign_znode": self._reassign_znode,
            "auto_rebalance": self._auto_rebalance,
            "elect_leaders": self._elect_leaders,
            "controlled_shutdown": self._controlled_shutdown,
            "controlled_shutdown_znode": self._controlled_shutdown_znode,
            "reassign": lambda request: self._reassign(request),
            "list_reassignments": self._list_reassignments,
            "forwarded_requests": self._forwarded_requests,
            "serve": lambda payload: self._serve_forwarded(*payload),
        }
        while True:
            kind, payload, future = await self._queue.get()
            if kind == "shutdown":
                await self._resign()
                if future is not None and not future.done():
                    future.set_result(None)
                return
            is_request = future is not None
            self._event_topic_configs = {}
            try:
                if is_request and not self.active:
                    raise KafkaError(ErrorCode.NOT_CONTROLLER)
                if not is_request and not self.active and kind not in ("elect", "controller_change", "expire"):
                    continue  # a watch of a term that ended
                result = await handlers[kind](payload)
                if future is not None and not future.done():
                    future.set_result(result)
            except ControllerMovedError as e:
                logger.warning("controller %d: %s; resigning", self.broker_id, e)
                await self._resign()
                self._enqueue("elect")
                if future is not None and not future.done():
                    future.set_exception(KafkaError(ErrorCode.NOT_CONTROLLER))
            except (SessionExpiredError, ConnectionLoss) as e:
                # The session is gone or the connection dropped: the "expire" event (or a later watch)
                # follows; a request fails as it would against a broker that is not the controller.
                logger.info("controller %d: event %s interrupted: %r", self.broker_id, kind, e)
                if future is not None and not future.done():
                    future.set_exception(KafkaError(ErrorCode.NOT_CONTROLLER))
            except Exception as e:  # noqa: BLE001 - one bad event must not stop the controller
                if future is not None and not future.done():
                    future.set_exception(e)
                elif not isinstance(e, KafkaError):
                    logger.exception("controller %d: event %s failed", self.broker_id, kind)

    # -- election (Kafka's elect / onControllerFailover / onControllerResignation)

    async def _elect(self, _payload: Any = None) -> None:
        if self._stopped:
            return
        if self.active:
            current = await self._zk(self.zk.get_controller_id, self._watch("controller_change"))
            if current == self.broker_id:
                return
            await self._resign()
        won = await self._zk(self.zk.register_controller_and_increment_epoch, self.broker_id)
        if won is None:
            current = await self._zk(self.zk.get_controller_id, self._watch("controller_change"))
            if current is None:
                self._enqueue("elect")  # it vanished between our attempt and the read: try again
            elif current == self.broker_id:
                # Our own znode from before (a new session of the same broker): Kafka resigns and waits.
                logger.info("controller %d: /controller still names this broker; waiting for it to go", self.broker_id)
            return
        self.epoch, self.epoch_zk_version = won
        self._term += 1
        self.active = True
        logger.info("broker %d is the controller, epoch %d", self.broker_id, self.epoch)
        await self._zk(self.zk.get_controller_id, self._watch("controller_change"))
        await self._on_failover()
        if self.on_active_change is not None:
            self.on_active_change(True, self.epoch)

    async def _controller_change(self, _payload: Any = None) -> None:
        current = await self._zk(self.zk.get_controller_id, self._watch("controller_change"))
        if current is None:
            await self._elect()
        elif current != self.broker_id and self.active:
            await self._resign()

    async def _expire(self, _payload: Any = None) -> None:
        if self.active:
            logger.warning("controller %d lost its ZooKeeper session; it stops acting", self.broker_id)
        await self._resign()

    async def _resign(self) -> None:
        was_active = self.active
        self.active = False
        self._term += 1
        if self._rebalance_task is not None:
            self._rebalance_task.cancel()
            self._rebalance_task = None
        self.assignments.clear()
        self.states.clear()
        self.shutting_down_brokers.clear()
        if was_active and self.on_active_change is not None:
            self.on_active_change(False, self.epoch)

    async def _on_failover(self) -> None:
        self.live_brokers = await self._zk(self.zk.get_all_brokers, self._watch("broker_change"))
        topics = await self._zk(self.zk.get_all_topics, self._watch("topic_change"))
        for topic in topics:
            await self._load_topic(topic)
        await self._zk(self.zk.get_isr_change_notifications, self._watch("isr_change"))
        # New partitions without state, and partitions whose leader is gone.
        await self._initialize_new_partitions()
        await self._elect_offline_partitions()
        await self._remove_offline_replicas_from_isr()
        await self._resume_reassignments()
        await self._topic_deletion()
        await self._reassign_znode()
        await self._controlled_shutdown_znode()
        await self._forwarded_requests()
        if self.config.auto_leader_rebalance_enable:
            self._rebalance_task = asyncio.get_running_loop().create_task(self._rebalance_timer(self._term))

    async def _load_topic(self, topic: str) -> None:
        assignment = await self._zk(
            self.zk.get_topic_assignment, topic, self._watch("partition_modifications", topic)
        )
        if assignment is None:
            self._forget_topic(topic)
            return
        self.assignments[topic] = assignment
        states = await self._zk(self.zk.get_partition_states, topic, list(assignment.partitions))
        for partition, state in states.items():
            self.states[(topic, partition)] = state

    def _forget_topic(self, topic: str) -> None:
        self.assignments.pop(topic, None)
        for tp in [tp for tp in self.states if tp[0] == topic]:
            del self.states[tp]

    # -- partition state machine

    async def _initialize_new_partitions(self, topics: Iterable[str] | None = None) -> None:
        """NewPartition -> OnlinePartition: leader = first live replica, ISR = the live replicas."""
        live = set(self.live_brokers)
        new_states: dict[TopicPartition, LeaderAndIsr] = {}
        for topic in topics if topics is not None else list(self.assignments):
            assignment = self.assignments.get(topic)
            if assignment is None or topic in self.topics_being_deleted:
                continue
            for partition, replicas in assignment.partitions.items():
                if (topic, partition) in self.states:
                    continue
                existing = await self._zk(self.zk.get_partition_state, topic, partition)
                if existing is not None:
                    self.states[(topic, partition)] = existing
                    continue
                live_replicas = [r for r in replicas.replicas if r in live]
                leader = live_replicas[0] if live_replicas else NO_LEADER
                new_states[(topic, partition)] = LeaderAndIsr(leader, 0, tuple(live_replicas), self.epoch)
        if not new_states:
            return
        try:
            created = await self._zk(self.zk.create_partition_states, self.epoch_zk_version, new_states)
        except NodeExistsError:
            for tp in new_states:  # raced with an earlier attempt: read what is there
                state = await self._zk(self.zk.get_partition_state, *tp)
                if state is not None:
                    self.states[tp] = state
            return
        self.states.update(created)
        for (topic, partition), state in created.items():
            logger.info("controller %d: %s-%d online, leader %d, isr %s", self.broker_id, topic, partition,
                        state.leader, list(state.isr))

    async def _write_state(self, tp: TopicPartition, make: Callable[[LeaderAndIsr], LeaderAndIsr | None]) -> LeaderAndIsr | None:
        """Read-modify-write of a partition's state, conditional on its zk version; retried on a stale
        version (a leader changed the ISR meanwhile). ``make`` returns None to leave the state alone."""
        for _ in range(10):
            current = self.states.get(tp) or await self._zk(self.zk.get_partition_state, *tp)
            if current is None:
                return None
            wanted = make(current)
            if wanted is None:
                self.states[tp] = current
                return current
            try:
                written = await self._zk(self.zk.update_leader_and_isr, self.epoch_zk_version, tp[0], tp[1], wanted)
            except BadVersionError:
                fresh = await self._zk(self.zk.get_partition_state, *tp)
                if fresh is None:
                    self.states.pop(tp, None)
                    return None
                self.states[tp] = fresh
                continue
            except NoNodeError:
                self.states.pop(tp, None)
                return None
            self.states[tp] = written
            return written
        raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"{tp}: partition state kept changing")

    async def _write_states(
        self, changes: Mapping[TopicPartition, Callable[[LeaderAndIsr], LeaderAndIsr | None]]
    ) -> dict[TopicPartition, LeaderAndIsr | None]:
        """_write_state for many partitions, their writes sent together (``update_leader_and_isr_many``);
        a partition whose write found a newer version (or no znode) goes through _write_state again."""
        out: dict[TopicPartition, LeaderAndIsr | None] = {}
        wanted: list[tuple[TopicPartition, LeaderAndIsr]] = []
        for tp, make in changes.items():
            current = self.states.get(tp)
            if current is None:
                out[tp] = await self._write_state(tp, make)
                continue
            new = make(current)
            if new is None:
                out[tp] = current
            else:
                wanted.append((tp, new))
        if not wanted:
            return out
        results = await self._zk(
            self.zk.update_leader_and_isr_many, self.epoch_zk_version, [(tp[0], tp[1], s) for tp, s in wanted]
        )
        for (tp, _), result in zip(wanted, results, strict=True):
            if isinstance(result, LeaderAndIsr):
                self.states[tp] = out[tp] = result
            elif isinstance(result, (BadVersionError, NoNodeError)):
                self.states.pop(tp, None)  # stale: _write_state reads it again
                out[tp] = await self._write_state(tp, changes[tp])
            else:
                raise result
        return out

    def _replicas(self, tp: TopicPartition) -> tuple[int, ...]:
        assignment = self.assignments.get(tp[0])
        if assignment is None or tp[1] not in assignment.partitions:
            return ()
        return assignment.partitions[tp[1]].replicas

    async def _elect_offline_partitions(self) -> None:
        live = set(self.live_brokers)
        await self._elect_offline_many(
            tp for tp, state in list(self.states.items())
            if tp[0] not in self.topics_being_deleted and (state.leader == NO_LEADER or state.leader not in live)
        )

    async def _offline_election(
        self, tp: TopicPartition, excluded: set[int] | frozenset[int] = frozenset()
    ) -> Callable[[LeaderAndIsr], LeaderAndIsr | None]:
        """Kafka's OfflinePartitionLeaderElectionStrategy for ``tp``, as a state change for _write_state."""
        # Brokers in controlled shutdown are not eligible (Kafka's liveBrokerIds leaves them out), nor
        # ``excluded`` ones (failed, even if already back).
        live = set(self.live_brokers) - self.shutting_down_brokers - set(excluded)
        replicas = self._replicas(tp)
        # The topic's own setting wins, read at election time as Kafka does (it may have changed); read
        # once per topic and event, so a broker failure does not cost a read per partition.
        if tp[0] not in self._event_topic_configs:
            self._event_topic_configs[tp[0]] = await self._zk(self.zk.get_topic_config, tp[0])
        setting = self._event_topic_configs[tp[0]].get("unclean.leader.election.enable")
        unclean_enabled = (
            setting.strip().lower() == "true" if setting is not None else self.config.unclean_leader_election_enable
        )

        def make(current: LeaderAndIsr) -> LeaderAndIsr | None:
            if current.leader != NO_LEADER and current.leader in live:
                return None  # someone elected it meanwhile
            leader, unclean = offline_partition_leader_election(replicas, current.isr, live, unclean_enabled)
            if leader is None:
                if current.leader == NO_LEADER:
                    return None
                # Offline (leader -1). As Kafka's removeReplicasFromIsr, the ISR is never emptied: it keeps
                # the last leader, the replica with the most data, so a clean election can happen when it returns.
                isr = (current.leader,) if current.leader in current.isr else current.isr[-1:]
                return current.new_leader_and_isr(NO_LEADER, isr, self.epoch)
            isr = (leader,) if unclean else tuple(r for r in current.isr if r in live)
            return current.new_leader_and_isr(leader, isr, self.epoch)

        return make

    async def _elect_offline_many(
        self, partitions: Iterable[TopicPartition], excluded: set[int] | frozenset[int] = frozenset()
    ) -> None:
        partitions = list(partitions)
        unread = {tp[0] for tp in partitions} - self._event_topic_configs.keys()
        if len(unread) > 1:
            self._event_topic_configs.update(await self._zk(self.zk.get_topic_configs, sorted(unread)))
        changes = {tp: await self._offline_election(tp, excluded) for tp in partitions}
        for tp, state in (await self._write_states(changes)).items():
            if state is not None:
                logger.info("controller %d: %s-%d leader %d epoch %d isr %s", self.broker_id, tp[0], tp[1],
                            state.leader, state.leader_epoch, list(state.isr))

    async def _remove_offline_replicas_from_isr(self) -> None:
        """Kafka's ReplicaStateMachine.startup: replicas on brokers that are not registered go
        OfflineReplica, which takes them out of the ISR.  A controller elected after brokers died
        (the old controller among them) never saw them leave; without this an idle partition's ISR
        would keep them (a leader shrinks only followers that fall behind its log end)."""
        live = set(self.live_brokers)
        await self._remove_from_isrs(
            tp for tp, state in list(self.states.items()) if any(b not in live and b != state.leader for b in state.isr)
        )

    async def _remove_from_isr(self, tp: TopicPartition, broker_id: int) -> None:
        await self._write_state(tp, self._isr_without({broker_id}))

    async def _remove_from_isrs(self, partitions: Iterable[TopicPartition]) -> None:
        """OfflineReplica for every replica on a broker that is not registered, in the ISRs of ``partitions``."""
        await self._write_states({tp: self._isr_without(set(self.live_brokers), keep=True) for tp in partitions})

    def _isr_without(self, brokers: set[int], *, keep: bool = False) -> Callable[[LeaderAndIsr], LeaderAndIsr | None]:
        """OfflineReplica: followers leave the ISR (leader epoch + 1, as Kafka's removeReplicasFromIsr) —
        those in ``brokers``, or with ``keep`` those not in it. The leader stays, and the ISR is never
        emptied: its last member keeps the partition's history."""

        def make(current: LeaderAndIsr) -> LeaderAndIsr | None:
            isr = tuple(r for r in current.isr if r == current.leader or ((r in brokers) == keep))
            if isr == current.isr:
                return None
            if not isr:
                isr = current.isr[-1:]
                if isr == current.isr:
                    return None
            return current.new_leader_and_isr(current.leader, isr, self.epoch)

        return make

    # -- broker changes

    async def _broker_change(self, _payload: Any = None) -> None:
        brokers = await self._zk(self.zk.get_all_brokers, self._watch("broker_change"))
        old = self.live_brokers
        dead = {b for b in old if b not in brokers or brokers[b].broker_epoch != old[b].broker_epoch}
        new = {b for b in brokers if b not in old or b in dead}
        self.live_brokers = brokers
        if dead:
            # A bounced broker (gone and back with a new registration between two looks) is handled as a
            # failure first, as Kafka does: it may have lost unflushed data, so it leads nothing and
            # leaves the ISRs until it catches up again.
            bounced = dead & set(brokers)
            logger.info("controller %d: brokers %s left%s", self.broker_id, sorted(dead),
                        f" ({sorted(bounced)} came back)" if bounced else "")
            self.shutting_down_brokers -= dead
            await self._on_brokers_failure(dead)
        if new:
            logger.info("controller %d: brokers %s joined", self.broker_id, sorted(new))
            await self._elect_offline_partitions()
            await self._resume_reassignments()

    async def _on_brokers_failure(self, dead: set[int]) -> None:
        # Every partition the dead brokers led moves in one round of writes (Kafka's onBrokerFailure hands
        # them all to the partition state machine at once): one at a time, the last would stay leaderless
        # for as many ZooKeeper round trips as there are partitions, and clients would see it offline.
        await self._elect_offline_many((tp for tp, state in list(self.states.items()) if state.leader in dead), dead)
        await self._write_states({
            tp: self._isr_without(dead)
            for tp, state in list(self.states.items())
            if state.leader not in dead and any(b in dead for b in state.isr)
        })

    # -- topics

    async def _topic_change(self, _payload: Any = None) -> None:
        topics = set(await self._zk(self.zk.get_all_topics, self._watch("topic_change")))
        for gone in set(self.assignments) - topics:
            self._forget_topic(gone)
        added = topics - set(self.assignments)
        for topic in sorted(added):
            await self._load_topic(topic)
        await self._initialize_new_partitions(sorted(added))

    async def _partition_modifications(self, topic: str) -> None:
        assignment = await self._zk(
            self.zk.get_topic_assignment, topic, self._watch("partition_modifications", topic)
        )
        if assignment is None:
            self._forget_topic(topic)
            return
        self.assignments[topic] = assignment
        await self._initialize_new_partitions([topic])

    async def _topic_deletion(self, _payload: Any = None) -> None:
        queued = await self._zk(self.zk.get_topic_deletions, self._watch("topic_deletion"))
        for topic in queued:
            self.topics_being_deleted.add(topic)
            logger.info("controller %d: deleting topic %s", self.broker_id, topic)
            await self._zk(self.zk.delete_topic_znodes, self.epoch_zk_version, topic)
            self._forget_topic(topic)
            self.topics_being_deleted.discard(topic)

    # -- ISR changes

    async def _isr_change(self, _payload: Any = None) -> None:
        names = await self._zk(self.zk.get_isr_change_notifications, self._watch("isr_change"))
        if not names:
            return
        changed = await self._zk(self.zk.read_and_delete_isr_changes, names)
        for tp in changed:
            state = await self._zk(self.zk.get_partition_state, *tp)
            if state is not None:
                self.states[tp] = state
        await self._resume_reassignments({tp for tp in changed})

    # -- preferred leader election

    async def _elect_preferred(self, tp: TopicPartition) -> KafkaError | None:
        replicas = self._replicas(tp)
        state = self.states.get(tp)
        if state is None or not replicas:
            return unknown_partition(tp, tp[0] in self.assignments)
        if state.leader == replicas[0]:
            return KafkaError(ErrorCode.ELECTION_NOT_NEEDED)
        live = set(self.live_brokers) - self.shutting_down_brokers

        def make(current: LeaderAndIsr) -> LeaderAndIsr | None:
            leader = preferred_replica_partition_leader_election(replicas, current.isr, live)
            if leader is None or leader == current.leader:
                return None
            return current.new_leader_and_isr(leader, current.isr, self.epoch)

        written = await self._write_state(tp, make)
        if written is None or written.leader != replicas[0]:
            return KafkaError(ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE)
        return None

    async def _elect_unclean(self, tp: TopicPartition) -> KafkaError | None:
        replicas = self._replicas(tp)
        state = self.states.get(tp)
        if state is None or not replicas:
            return unknown_partition(tp, tp[0] in self.assignments)
        live = set(self.live_brokers)
        if state.leader != NO_LEADER and state.leader in live:
            return KafkaError(ErrorCode.ELECTION_NOT_NEEDED)

        def make(current: LeaderAndIsr) -> LeaderAndIsr | None:
            leader, unclean = offline_partition_leader_election(replicas, current.isr, live, True)
            if leader is None:
                return None
            isr = (leader,) if unclean else tuple(r for r in current.isr if r in live)
            return current.new_leader_and_isr(leader, isr, self.epoch)

        written = await self._write_state(tp, make)
        if written is None or written.leader == NO_LEADER or written.leader not in live:
            return KafkaError(ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE)
        return None

    async def _elect_leaders(self, payload: tuple[list[TopicPartition] | None, ElectionType]) -> dict[TopicPartition, KafkaError | None]:
        partitions, election_type = payload
        wanted = list(self.states) if partitions is None else partitions
        results: dict[TopicPartition, KafkaError | None] = {}
        for tp in wanted:
            if election_type == ElectionType.UNCLEAN:
                results[tp] = await self._elect_unclean(tp)
            else:
                results[tp] = await self._elect_preferred(tp)
        return results

    async def _rebalance_timer(self, term: int) -> None:
        interval = max(0.05, self.config.leader_imbalance_check_interval_seconds)
        while term == self._term:
            await asyncio.sleep(interval)
            self._enqueue("auto_rebalance")

    async def _auto_rebalance(self, _payload: Any = None) -> None:
        """Kafka's checkAndTriggerAutoLeaderRebalance: per preferred broker, when more than
        leader.imbalance.per.broker.percentage of its partitions are led elsewhere, elect it back."""
        by_preferred: dict[int, list[TopicPartition]] = {}
        for tp in self.states:
            replicas = self._replicas(tp)
            if replicas and tp[0] not in self.topics_being_deleted:
                by_preferred.setdefault(replicas[0], []).append(tp)
        live = set(self.live_brokers) - self.shutting_down_brokers
        for broker, tps in by_preferred.items():
            if broker not in live:
                continue
            imbalanced = [tp for tp in tps if self.states[tp].leader != broker]
            if not imbalanced or len(imbalanced) * 100 / len(tps) <= self.config.leader_imbalance_per_broker_percentage:
                continue
            for tp in imbalanced:
                if broker in self.states[tp].isr:
                    await self._elect_preferred(tp)

    # -- controlled shutdown

    async def _controlled_shutdown(self, payload: tuple[int, int]) -> set[TopicPartition]:
        broker_id, broker_epoch = payload
        if broker_id not in self.live_brokers:
            raise KafkaError(ErrorCode.BROKER_NOT_AVAILABLE, f"broker {broker_id} is not registered")
        if broker_epoch != -1 and broker_epoch != self.live_brokers[broker_id].broker_epoch:
            raise KafkaError(ErrorCode.STALE_BROKER_EPOCH)
        self.shutting_down_brokers.add(broker_id)
        live = set(self.live_brokers)
        for tp, state in list(self.states.items()):
            replicas = self._replicas(tp)
            if len(replicas) <= 1:
                continue
            if state.leader == broker_id:
                def make(current: LeaderAndIsr, replicas: tuple[int, ...] = replicas) -> LeaderAndIsr | None:
                    if current.leader != broker_id:
                        return None
                    leader = controlled_shutdown_partition_leader_election(
                        replicas, current.isr, live, self.shutting_down_brokers
                    )
                    if leader is None:
                        return None
                    isr = tuple(r for r in current.isr if r != broker_id)
                    return current.new_leader_and_isr(leader, isr, self.epoch)

                await self._write_state(tp, make)
            elif broker_id in state.isr:
                await self._remove_from_isr(tp, broker_id)
        return {tp for tp, state in self.states.items() if state.leader == broker_id and len(self._replicas(tp)) > 1}

    # -- reassignment (KIP-455)

    async def _reassign(
        self, request: dict[TopicPartition, tuple[int, ...] | None], allow_replication_factor_change: bool = True
    ) -> dict[TopicPartition, KafkaError | None]:
        results: dict[TopicPartition, KafkaError | None] = {}
        for tp, target in request.items():
            try:
                await self._start_reassignment(tp, target, allow_replication_factor_change)
                results[tp] = None
            except KafkaError as e:
                results[tp] = e
        return results

    async def _start_reassignment(
        self, tp: TopicPartition, target: tuple[int, ...] | None, allow_replication_factor_change: bool = True
    ) -> None:
        topic, partition = tp
        assignment = self.assignments.get(topic)
        if assignment is None or partition not in assignment.partitions or topic in self.topics_being_deleted:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        current = assignment.partitions[partition]
        if target is None:
            if not current.is_being_reassigned:
                raise KafkaError(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS)
            await self._finish_reassignment(tp, current.original_replicas)
            return
        original = current.original_replicas
        error = check_reassignment_target(
            list(target), set(self.live_brokers), len(original), allow_replication_factor_change
        )
        if error is not None:
            raise error
        adding = tuple(r for r in target if r not in original)
        removing = tuple(r for r in original if r not in target)
        replicas = target + removing  # Kafka: target first, then the replicas to remove
        updated = assignment.with_partitions({partition: ReplicaAssignment(replicas, adding, removing)})
        await self._zk(self.zk.set_topic_assignment, self.epoch_zk_version, updated)
        self.assignments[topic] = updated
        # The leader epoch grows so the leader and the new replicas see the new replica set.
        await self._write_state(tp, lambda s: s.new_leader_and_isr(s.leader, s.isr, self.epoch))
        await self._maybe_complete_reassignment(tp)

    async def _maybe_complete_reassignment(self, tp: TopicPartition) -> None:
        assignment = self.assignments.get(tp[0])
        if assignment is None or tp[1] not in assignment.partitions:
            return
        current = assignment.partitions[tp[1]]
        if not current.is_being_reassigned:
            return
        state = self.states.get(tp) or await self._zk(self.zk.get_partition_state, *tp)
        if state is not None and all(r in state.isr for r in current.target_replicas):
            await self._finish_reassignment(tp, current.target_replicas)

    async def _finish_reassignment(self, tp: TopicPartition, target: tuple[int, ...]) -> None:
        """The target replicas are in the ISR (or a cancel reverts): elect a leader among them if the
        current one is not, drop the other replicas from the ISR, and store the target as the assignment."""
        live = set(self.live_brokers)

        def make(current: LeaderAndIsr) -> LeaderAndIsr:
            isr = tuple(r for r in current.isr if r in target) or current.isr
            leader = current.leader
            if leader not in target or leader not in live:
                chosen = reassign_partition_leader_election(target, isr, live)
                leader = chosen if chosen is not None else NO_LEADER
            return current.new_leader_and_isr(leader, isr, self.epoch)

        await self._write_state(tp, make)
        assignment = self.assignments[tp[0]]
        updated = assignment.with_partitions({tp[1]: ReplicaAssignment(tuple(target))})
        await self._zk(self.zk.set_topic_assignment, self.epoch_zk_version, updated)
        self.assignments[tp[0]] = updated
        logger.info("controller %d: %s-%d reassigned to %s", self.broker_id, tp[0], tp[1], list(target))

    async def _resume_reassignments(self, partitions: set[TopicPartition] | None = None) -> None:
        for topic, assignment in list(self.assignments.items()):
            for partition, replicas in assignment.partitions.items():
                tp = (topic, partition)
                if replicas.is_being_reassigned and (partitions is None or tp in partitions):
                    await self._maybe_complete_reassignment(tp)

    async def _list_reassignments(self, partitions: set[TopicPartition] | None) -> dict[TopicPartition, ReplicaAssignment]:
        return {
            (topic, p): replicas
            for topic, assignment in self.assignments.items()
            for p, replicas in assignment.partitions.items()
            if replicas.is_being_reassigned and (partitions is None or (topic, p) in partitions)
        }

    async def _controlled_shutdown_znode(self, _payload: Any = None) -> None:
        """Controlled-shutdown requests of other brokers (zk_data.CONTROLLED_SHUTDOWN_PATH): leadership
        moved away as for ControlledShutdown, then the request removed (the broker watches its
        partitions' states to see the result)."""
        requests = await self._zk(self.zk.get_controlled_shutdown_requests, self._watch("controlled_shutdown_znode"))
        for broker_id, broker_epoch in requests.items():
            try:
                remaining = await self._controlled_shutdown((broker_id, broker_epoch))
                logger.info("controller %d: controlled shutdown of broker %d (%d partitions it still leads)",
                            self.broker_id, broker_id, len(remaining))
            except KafkaError as e:
                logger.warning("controller %d: controlled shutdown of broker %d refused: %s", self.broker_id,
                               broker_id, e)
            await self._zk(self.zk.delete_controlled_shutdown_request, broker_id)

    async def _reassign_znode(self, _payload: Any = None) -> None:
        """Legacy reassignment requests (/admin/reassign_partitions): started, then the znode removed."""
        request = await self._zk(self.zk.get_reassign_partitions_request, self._watch("reassign_znode"))
        if not request:
            return
        for tp, target in request.items():
            try:
                await self._start_reassignment(tp, target)
            except KafkaError as e:
                logger.warning("controller %d: reassignment of %s refused: %s", self.broker_id, tp, e)
        await self._zk(self.zk.delete_reassign_partitions_request)
        await self._zk(self.zk.get_reassign_partitions_request, self._watch("reassign_znode"))

    async def _forwarded_requests(self, _payload: Any = None) -> None:
        """Admin requests other brokers received (zk_data.FORWARDED_REQUESTS_PATH): each is served as if
        it had been made here, and its answer written into its znode for the requester to read."""
        pending = await self._zk(self.zk.get_forwarded_requests, self._watch("forwarded_requests"))
        for path, (kind, request, answered) in pending.items():
            if answered:
                continue
            try:
                response = await self._serve_forwarded(kind, request)
            except KafkaError as e:
                response = {"error": [int(e.code), e.message]}
            except (KeyError, TypeError, ValueError) as e:
                logger.warning("controller %d: malformed forwarded request %s: %r", self.broker_id, path, e)
                response = {"error": [int(ErrorCode.INVALID_REQUEST), "malformed forwarded request"]}
            await self._zk(self.zk.answer_forwarded_request, path, kind, request, response)

    async def _serve_forwarded(self, kind: str, request: Any) -> dict[str, Any]:
        if kind == "elect_leaders":
            partitions = request["partitions"]
            tps = None if partitions is None else [(str(t), int(p)) for t, p in partitions]
            results = await self._elect_leaders((tps, ElectionType(int(request["election_type"]))))
            return {"results": encode_results(results)}
        if kind == "reassign":
            targets = {
                (str(t), int(p)): (None if r is None else tuple(int(b) for b in r)) for t, p, r in request["partitions"]
            }
            allow = bool(request.get("allow_replication_factor_change", True))
            return {"results": encode_results(await self._reassign(targets, allow))}
        if kind == "list_reassignments":
            partitions = request["partitions"]
            wanted = None if partitions is None else {(str(t), int(p)) for t, p in partitions}
            ongoing = await self._list_reassignments(wanted)
            return {
                "reassignments": [
                    [t, p, list(a.replicas), list(a.adding_replicas), list(a.removing_replicas)]
                    for (t, p), a in sorted(ongoing.items())
                ]
            }
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"unknown forwarded request {kind!r}")


def encode_results(results: Mapping[TopicPartition, KafkaError | None]) -> list[list[Any]]:
    """Per-partition outcomes as JSON: [topic, partition, error code, message]."""
    return [
        [t, p, 0 if e is None else int(e.code), None if e is None else e.message]
        for (t, p), e in sorted(results.items())
    ]


def decode_results(encoded: Iterable[list[Any]]) -> dict[TopicPartition, KafkaError | None]:
    return {
        (str(t), int(p)): None if int(code) == 0 else KafkaError(ErrorCode(int(code)), msg)
        for t, p, code, msg in encoded
    }
