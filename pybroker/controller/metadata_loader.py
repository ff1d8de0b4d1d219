"""How a broker learns the cluster's state in ZooKeeper mode: watches turned into listener calls.

``ZkMetadataLoader`` watches /brokers/ids, /controller, /brokers/topics, each topic's assignment and
each partition's state znode (kazoo ChildrenWatch/DataWatch), and calls a ``MetadataListener`` on the
asyncio loop, in the order the changes were seen:

    on_brokers(brokers: dict[int, BrokerInfo])
        the live brokers (every registration under /brokers/ids), whenever that set or a registration changes
    on_controller(controller_id: int | None)
        the broker named by /controller (None while there is none)
    on_topic(topic: str, assignment: TopicAssignment | None, config: dict[str, str])
        a topic's replica assignment (partition -> replicas, adding/removing during a reassignment) and
        topic id when it appears or changes (new partitions, reassignment); None when the topic was
        deleted: the broker deletes its logs of that topic
    on_partition(topic: str, partition: int, state: PartitionState)
        a partition's leader, leader epoch, ISR, replicas and zk version (the partition epoch) whenever
        its state znode changes. States older than the one already delivered (a lower leader epoch, or
        the same leader epoch with a lower zk version) are dropped. The broker makes itself leader when
        ``state.leader == broker_id`` (ReplicaManager.make_leader), follower when it is in
        ``state.replicas`` otherwise (make_follower to ``state.leader``; -1 = offline).

A leader changes its ISR with ``alter_isr`` (Kafka's AlterPartition in ZK mode): a write conditional on
the zk version it last saw; it returns the new zk version or raises KafkaError (FENCED_LEADER_EPOCH,
INVALID_UPDATE_VERSION, NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from pybroker.controller import zk_data as z
from pybroker.controller.zk_client import KafkaZkClient
from pybroker.controller.zk_data import BrokerInfo, LeaderAndIsr, TopicAssignment
from pybroker.metadata.image import BrokerRegistration, PartitionRegistration

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PartitionState:
    """A partition as brokers see it (Kafka's PartitionRegistration in ZK terms)."""

    topic: str
    partition: int
    leader: int  # -1: offline
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    zk_version: int  # the state znode's version: the partition epoch, the condition of alter_isr
    controller_epoch: int
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()

    @property
    def partition_epoch(self) -> int:
        return self.zk_version

    def registration(self) -> PartitionRegistration:
        """This state as the metadata image's PartitionRegistration (partition epoch = zk version)."""
        return PartitionRegistration(self.replicas, self.isr, self.leader, self.leader_epoch, self.zk_version)


def broker_registration(info: BrokerInfo) -> BrokerRegistration:
    """A registration znode as the metadata image's BrokerRegistration (the address clients are given)."""
    return BrokerRegistration(info.broker_id, info.host, info.port, info.rack)


class MetadataListener(Protocol):
    def on_brokers(self, brokers: dict[int, BrokerInfo]) -> None: ...

    def on_controller(self, controller_id: int | None) -> None: ...

    def on_topic(self, topic: str, assignment: TopicAssignment | None, config: dict[str, str]) -> None: ...

    def on_partition(self, topic: str, partition: int, state: PartitionState) -> None: ...


class ZkMetadataLoader:
    """Watches ZooKeeper for one broker and feeds ``listener`` on ``loop``; ``snapshot`` views are kept
    (brokers, controller_id, topics, partitions) for code that reads rather than listens."""

    def __init__(self, zk: KafkaZkClient, broker_id: int, listener: MetadataListener) -> None:
        self.zk = zk
        self.broker_id = broker_id
        self.listener = listener
        self.brokers: dict[int, BrokerInfo] = {}
        self.controller_id: int | None = None
        self.topics: dict[str, TopicAssignment] = {}
        self.topic_configs: dict[str, dict[str, str]] = {}  # as last delivered with on_topic
        self.partitions: dict[tuple[str, int], PartitionState] = {}
        self._raw_states: dict[tuple[str, int], LeaderAndIsr] = {}
        self._watched_topics: set[str] = set()
        self._watched_partitions: set[tuple[str, int]] = set()
        self._lock = threading.Lock()  # kazoo runs watch callbacks on its threads
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped = False

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        await self._loop.run_in_executor(None, self._start_watches)

    def stop(self) -> None:
        self._stopped = True

    def _start_watches(self) -> None:
        ChildrenWatch(self.zk.kazoo, z.BROKER_IDS_PATH, self._on_broker_ids)
        DataWatch(self.zk.kazoo, z.CONTROLLER_PATH, self._on_controller)
        ChildrenWatch(self.zk.kazoo, z.TOPICS_PATH, self._on_topics)

    def _deliver(self, fn: Callable[..., None], *args: Any) -> None:
        loop = self._loop
        if loop is None or loop.is_closed() or self._stopped:
            return
        try:
            loop.call_soon_threadsafe(self._call, fn, args)
        except RuntimeError:
            pass

    @staticmethod
    def _call(fn: Callable[..., None], args: tuple[Any, ...]) -> None:
        try:
            fn(*args)
        except Exception:  # noqa: BLE001 - a listener bug must not stop metadata delivery
            logger.exception("metadata listener %s failed", getattr(fn, "__name__", fn))

    # -- watches (kazoo threads)

    def _on_broker_ids(self, children: list[str]) -> bool | None:
        if self._stopped:
            return False
        brokers = self.zk.call(self.zk.get_all_brokers)
        with self._lock:
            self.brokers = brokers
        self._deliver(self.listener.on_brokers, dict(brokers))
        return None

    def _on_controller(self, data: bytes | None, _stat: Any) -> bool | None:
        if self._stopped:
            return False
        controller = z.decode_controller(data) if data else None
        with self._lock:
            self.controller_id = controller
        self._deliver(self.listener.on_controller, controller)
        return None

    def _on_topics(self, children: list[str]) -> bool | None:
        if self._stopped:
            return False
        for topic in children:
            with self._lock:
                new = topic not in self._watched_topics
                self._watched_topics.add(topic)
            if new:
                DataWatch(self.zk.kazoo, z.topic_path(topic), self._topic_watcher(topic))
                # Config changes (AlterConfigs on any broker) rewrite /config/topics/<topic>.
                DataWatch(self.zk.kazoo, z.topic_config_path(topic), self._config_watcher(topic))
        return None

    def _config_watcher(self, topic: str) -> Callable[[bytes | None, Any], bool | None]:
        def on_config(data: bytes | None, stat: Any) -> bool | None:
            if self._stopped:
                return False
            config = z.decode_topic_config(data) if stat is not None else None
            with self._lock:
                if topic not in self._watched_topics:
                    return False  # deleted: a re-created topic gets a new watch
                assignment = self.topics.get(topic)
                # The watch's first call, and the assignment watcher's own read, deliver nothing new:
                # on_topic would re-apply every partition's state of the topic for nothing.
                changed = False
                if assignment is not None and config is not None and config != self.topic_configs.get(topic):
                    self.topic_configs[topic] = config
                    changed = True
            if changed:
                self._deliver(self.listener.on_topic, topic, assignment, config)
            return None

        return on_config

    def _topic_watcher(self, topic: str) -> Callable[[bytes | None, Any], bool | None]:
        def on_assignment(data: bytes | None, stat: Any) -> bool | None:
            if self._stopped:
                return False
            if stat is None:  # deleted
                with self._lock:
                    self._watched_topics.discard(topic)
                    known = self.topics.pop(topic, None)
                    self.topic_configs.pop(topic, None)
                    for tp in [tp for tp in self.partitions if tp[0] == topic]:
                        del self.partitions[tp]
                        self._raw_states.pop(tp, None)
                        self._watched_partitions.discard(tp)
                if known is not None:
                    self._deliver(self.listener.on_topic, topic, None, {})
                return False  # a re-created topic gets a new watch from the topics watch
            assignment = TopicAssignment.decode(topic, data)
            config = self.zk.call(self.zk.get_topic_config, topic)
            with self._lock:
                self.topics[topic] = assignment
                self.topic_configs[topic] = config
            self._deliver(self.listener.on_topic, topic, assignment, config)
            for partition in assignment.partitions:
                tp = (topic, partition)
                with self._lock:
                    new = tp not in self._watched_partitions
                    self._watched_partitions.add(tp)
                    raw = self._raw_states.get(tp)
                if new:
                    # The state znode may not exist yet (the controller writes it after the assignment):
                    # DataWatch watches for its creation too.
                    DataWatch(self.zk.kazoo, z.partition_state_path(topic, partition), self._state_watcher(tp))
                elif raw is not None:
                    self._publish(tp, raw, force=True)  # replicas changed (reassignment)
            return None

        return on_assignment

    def _state_watcher(self, tp: tuple[str, int]) -> Callable[[bytes | None, Any], bool | None]:
        def on_state(data: bytes | None, stat: Any) -> bool | None:
            if self._stopped:
                return False
            with self._lock:
                if tp not in self._watched_partitions:
                    return False  # the topic was deleted
            if data is None or stat is None:
                with self._lock:
                    seen = tp in self._raw_states
                    if seen:  # the state znode was deleted with its topic: this watch ends
                        self._watched_partitions.discard(tp)
                # Not seen yet: the controller has not written the first state; keep watching for it.
                return False if seen else None
            self._publish(tp, LeaderAndIsr.decode(data, stat.version))
            return None

        return on_state

    def _publish(self, tp: tuple[str, int], raw: LeaderAndIsr, *, force: bool = False) -> None:
        with self._lock:
            known = self._raw_states.get(tp)
            if known is not None and not force:
                if (raw.leader_epoch, raw.zk_version) <= (known.leader_epoch, known.zk_version):
                    return  # older than (or the same as) what was delivered
            self._raw_states[tp] = raw
            assignment = self.topics.get(tp[0])
            replicas = assignment.partitions.get(tp[1]) if assignment is not None else None
            state = PartitionState(
                tp[0], tp[1], raw.leader, raw.leader_epoch, raw.isr,
                replicas.replicas if replicas else (), raw.zk_version, raw.controller_epoch,
                replicas.adding_replicas if replicas else (), replicas.removing_replicas if replicas else (),
            )
            self.partitions[tp] = state
        self._deliver(self.listener.on_partition, tp[0], tp[1], state)

    # -- a leader's ISR change

    async def alter_isr(
        self, topic: str, partition: int, leader_epoch: int, new_isr: Iterable[int], zk_version: int
    ) -> int:
        """Kafka's AlterPartition for this broker as leader: returns the new zk version (partition epoch)
        or raises KafkaError (FENCED_LEADER_EPOCH, INVALID_UPDATE_VERSION, NOT_LEADER_OR_FOLLOWER,
        UNKNOWN_TOPIC_OR_PARTITION)."""
        assert self._loop is not None, "start() first"
        isr = tuple(new_isr)
        return await self._loop.run_in_executor(
            None, self.zk.call, self.zk.alter_isr, topic, partition, self.broker_id, leader_epoch, isr, zk_version
        )
