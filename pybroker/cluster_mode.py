"""Cluster mode (``zookeeper.connect`` set): the broker's wiring to ZooKeeper.

``ClusterMode`` is the broker's ``MetadataListener`` (controller/metadata_loader.py).  What ZooKeeper
says becomes, on this broker:

- the metadata image handlers read (``ZkMetadataPublisher``): every live broker, the controller,
  every topic with its replicas, leader, leader epoch and ISR;
- the local ``MetadataStore`` mirrors the topics (name, id, partition count, configs), so the code
  that reads topic records (configs, produce metrics, DescribeConfigs) works as on a single broker;
- the partitions whose replicas include this broker: a log made when missing, then ``make_leader`` or
  ``make_follower`` and the replica fetchers (``become_leader_or_follower``); partitions it no longer
  hosts and deleted topics lose their logs;
- ISR changes a leader decides go to ZooKeeper through ``ZkMetadataLoader.alter_isr``.

Topic administration in cluster mode (create, delete, add partitions, config changes) writes to
ZooKeeper through ``KafkaZkClient`` and waits, up to the request's timeout, until this broker's image
shows the result, as Kafka's ZK-mode AdminManager does with its delayed operations. Producer ids come
from blocks claimed in ZooKeeper (controller/producer_id_manager.py), unique across brokers.

SCRAM credentials, client quotas, dynamic broker configs and ACLs live in ZooKeeper and apply on every
broker (``cluster_dynamic_state.py``); ElectLeaders and partition reassignments are the active
controller's, reached directly or, from another broker, through ZooKeeper (``_controller_request``).

``__consumer_offsets`` and ``__transaction_state`` are replicated like any topic (made through ZooKeeper on
first use, with their replication factors), and a group or transactional id is coordinated by the leader
of its partition: the coordinators load a partition's state when this broker becomes its leader and drop
it when it stops being one (``_offsets_leadership``, ``_transactions_leadership``). Transaction markers
for partitions led elsewhere and the KIP-890 checks of partition leaders travel between brokers
(``cluster_transactions.py``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from pybroker.cluster_dynamic_state import ClusterDynamicState
from pybroker.cluster_transactions import (
    BrokerChannels,
    ClusterMarkerWriter,
    TransactionRouter,
    marker_leader_lookup,
)
from pybroker.controller.cluster import ZkClusterMembership
from pybroker.controller.controller import ElectionType, decode_results
from pybroker.controller.metadata_loader import PartitionState
from pybroker.controller.producer_id_manager import PRODUCER_ID_BLOCK_SIZE, ProducerIdManager
from pybroker.controller.zk_data import BrokerInfo, TopicAssignment
from pybroker.controller.zk_features import ZkFeatures
from pybroker.coordinator.offsets_topic import TOPIC as OFFSETS_TOPIC
from pybroker.coordinator.offsets_topic import TOPIC_CONFIGS, partition_for
from pybroker.coordinator.share.persister import RemoteStatePersister
from pybroker.coordinator.share.share_coordinator import TOPIC as SHARE_STATE_TOPIC
from pybroker.coordinator.share.share_coordinator import TOPIC_CONFIGS as SHARE_STATE_TOPIC_CONFIGS
from pybroker.coordinator.transaction.service import TOPIC as TRANSACTION_TOPIC
from pybroker.coordinator.transaction.service import TOPIC_CONFIGS as TRANSACTION_TOPIC_CONFIGS
from pybroker.metadata.features import DEFAULT_LEVELS
from pybroker.metadata.image import (
    NO_LEADER,
    BrokerRegistration,
    MetadataImage,
    PartitionRegistration,
    TopicImage,
)
from pybroker.protocol.errors import ErrorCode, KafkaError
from pybroker.replication.alter_partition import AlterIsrManager
from pybroker.replication.fetcher import ReplicaFetcherConfig, ReplicaFetcherManager
from pybroker.replication.isr import run_isr_expiration
from pybroker.replication.leader_endpoint import LeaderEndpointError, RemoteLeaderEndpoint, SaslPlainLogin
from pybroker.replication.state_change import become_leader_or_follower
from pybroker.security.sasl_config import SaslConfigError, client_login
from pybroker.storage.errors import StorageError

if TYPE_CHECKING:
    from pybroker.broker import Broker
    from pybroker.controller.local import LocalController
    from pybroker.coordinator.share.state_records import SharePartitionKey
    from pybroker.metadata.store import TopicRecord
    from pybroker.replication.partition import Partition

log = logging.getLogger(__name__)

# Topics each broker would keep its own copy of, outside ZooKeeper: none now (__consumer_offsets and
# __transaction_state are replicated like any topic; their coordinators follow partition leadership).
LOCAL_TOPICS: frozenset[str] = frozenset()
# How often an admin request re-reads the image while it waits for the controller's result.
ADMIN_POLL_S = 0.05
ADMIN_TIMEOUT_MS = 30_000  # when a request names none
CLUSTER_ID_PATH = "/cluster/id"
# The longest a departed broker stays in a broker's image while partition states still name it leader
# (see ZkMetadataPublisher.set_brokers): comfortably above the controller's election round trip.
DEPARTED_BROKER_HOLD_S = 5.0


class ZkMetadataPublisher:
    """The image of a broker in a ZooKeeper cluster: brokers, controller and topics as ZooKeeper has
    them.  Same calls as metadata/local.LocalMetadataPublisher, so handlers cannot tell them apart."""

    def __init__(self, node_id: int, cluster_id: str = "") -> None:
        self._image = MetadataImage(cluster_id, -1, MappingProxyType({}))
        self.node_id = node_id
        self.assignments: dict[str, TopicAssignment] = {}
        self.configs: dict[str, dict[str, str]] = {}
        self.states: dict[tuple[str, int], PartitionState] = {}
        self.live: dict[int, BrokerInfo] = {}  # registered under /brokers/ids
        # Departed brokers still published: broker id -> (last registration, deadline, the partitions
        # whose state still names it leader).
        self.departed: dict[int, tuple[BrokerInfo, float, set[tuple[str, int]]]] = {}
        self._dirty: set[str] = set()
        self.listeners: list = []  # told each topic name whose image is about to change

    def set_cluster_id(self, cluster_id: str) -> None:
        img = self._image
        self._image = MetadataImage(cluster_id, img.controller_id, img.brokers, img.topics_by_name, img.topics_by_id)

    def set_brokers(self, brokers: Mapping[int, BrokerInfo], now: float | None = None) -> None:
        """The registrations under /brokers/ids changed. A broker that left while partition states still
        name it leader stays in the published image (not in ``live``) until the controller has rewritten
        every such state, or for DEPARTED_BROKER_HOLD_S at most. In Kafka's ZK mode the other brokers
        learn of a failure only from the controller's UpdateMetadata, which carries the removed broker and
        the leaders elected in its place together (KafkaController.onBrokerFailure); published at once,
        the departure would make clients see LEADER_NOT_AVAILABLE for its partitions until the
        election's writes arrive, and some clients (librdkafka) keep that answer until their next
        refresh. Held, the old leader is what clients see: they fail to reach it and ask again."""
        deadline = (time.monotonic() if now is None else now) + DEPARTED_BROKER_HOLD_S
        for b, info in self.live.items():
            if b not in brokers and b not in self.departed:
                led = {tp for tp, s in self.states.items() if s.leader == b}
                if led:
                    self.departed[b] = (info, deadline, led)
        for b in brokers:
            self.departed.pop(b, None)  # registered again: its new registration is the one published
        self.live = dict(brokers)
        self._publish_brokers()

    def set_state(self, tp: tuple[str, int], state: PartitionState | None) -> None:
        """A partition's state as the controller wrote it (None: its topic was deleted)."""
        if state is None:
            self.states.pop(tp, None)
        else:
            self.states[tp] = state
        if self.departed:
            released = False
            for b, (_info, _deadline, led) in list(self.departed.items()):
                if tp in led and (state is None or state.leader != b):
                    led.discard(tp)
                    if not led:
                        del self.departed[b]
                        released = True
            if released:
                self._publish_brokers()

    def release_departed(self, now: float | None = None) -> None:
        """Drop the departed brokers held past DEPARTED_BROKER_HOLD_S: the controller has not rewritten
        the partitions they led (it is being elected itself, or failed to write); clients are then told
        their leaders are not available, as before the hold."""
        now = time.monotonic() if now is None else now
        expired = [b for b, (_info, deadline, _led) in self.departed.items() if now >= deadline]
        for b in expired:
            del self.departed[b]
        if expired:
            self._publish_brokers()

    def _publish_brokers(self) -> None:
        published = {b: info for b, (info, _deadline, _led) in self.departed.items()}
        published.update(self.live)
        self._image = self._image.with_brokers(_registration(b) for b in published.values())
        for name in self.assignments:  # offline replicas and leaders change with the published set
            self.topic_changed(name)

    def set_controller(self, controller_id: int | None) -> None:
        img = self._image
        cid = -1 if controller_id is None else controller_id
        self._image = MetadataImage(img.cluster_id, cid, img.brokers, img.topics_by_name, img.topics_by_id)

    def topic_changed(self, name: str) -> None:
        self._dirty.add(name)
        for fn in self.listeners:
            fn(name)

    def partition_changed(self, partition: Any) -> None:
        """A local partition's state changed; ZooKeeper's state (delivered next) is what is published."""

    def image(self) -> MetadataImage:
        if self._dirty:
            changed: dict[str, TopicImage | None] = {}
            for name in self._dirty:
                a = self.assignments.get(name)
                changed[name] = None if a is None else self._topic_image(a)
            self._dirty.clear()
            self._image = self._image.with_topics(changed)
        return self._image

    def _topic_image(self, a: TopicAssignment) -> TopicImage:
        partitions: dict[int, PartitionRegistration] = {}
        for i, ra in sorted(a.partitions.items()):
            s = self.states.get((a.topic, i))
            if s is None:
                partitions[i] = PartitionRegistration(ra.replicas, (), NO_LEADER, -1)
            else:
                partitions[i] = PartitionRegistration(ra.replicas, s.isr, s.leader, s.leader_epoch, s.zk_version)
        return TopicImage(
            a.topic,
            a.topic_uuid or _name_uuid(a.topic),
            MappingProxyType(partitions),
            MappingProxyType(dict(self.configs.get(a.topic, {}))),
            a.topic.startswith("__"),
        )


def _get_or_create_cluster_id(kazoo: Any) -> str:
    """Kafka's KafkaZkClient.getClusterId / createOrGetClusterId: {"version":"1","id":...} at /cluster/id."""
    from kazoo.exceptions import NodeExistsError

    from pybroker.config import random_kafka_uuid

    try:
        kazoo.create(CLUSTER_ID_PATH, json.dumps({"version": "1", "id": random_kafka_uuid()}).encode(), makepath=True)
    except NodeExistsError:
        pass
    data, _ = kazoo.get(CLUSTER_ID_PATH)
    return str(json.loads(data)["id"])


def _name_uuid(name: str) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_URL, "pybroker-topic:" + name)


def _registration(info: BrokerInfo) -> BrokerRegistration:
    listeners: dict[str, tuple[str, int]] = {}
    for text in info.endpoints:
        name = text.partition("://")[0]
        ep = info.endpoint(name)
        if ep is not None:
            listeners[name] = ep
    # One listener: every client (whatever its listener is called) is given it.
    return BrokerRegistration(
        info.broker_id, info.host, info.port, info.rack, MappingProxyType(listeners if len(listeners) > 1 else {})
    )


def inter_broker_login(config: Any, listener_name: str) -> SaslPlainLogin | None:
    """How this broker authenticates to the others: nothing on a PLAINTEXT inter-broker listener; on a
    SASL_PLAINTEXT one, sasl.mechanism.inter.broker.protocol (PLAIN) with that listener's JAAS username
    and password, so a peer's authorizer sees this broker's own principal (a super user, typically)."""
    protocol = next(
        (e.security_protocol for e in config.advertised_endpoints if e.listener_name == listener_name), "PLAINTEXT"
    )
    if protocol not in ("SASL_PLAINTEXT", "SASL_SSL"):
        return None
    mechanism = config.get("sasl.mechanism.inter.broker.protocol")
    if protocol == "SASL_SSL" or mechanism != "PLAIN":
        raise SaslConfigError(
            f"inter-broker listener {listener_name} ({protocol}, sasl.mechanism.inter.broker.protocol="
            f"{mechanism}): pybroker's brokers authenticate to each other with PLAIN over SASL_PLAINTEXT only"
        )
    return SaslPlainLogin(*client_login(config, listener_name, mechanism))


class ClusterMode:
    """One broker's part in a ZooKeeper cluster (see the module docstring)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.config = broker.config
        self.node_id = broker.node_id
        self.publisher = ZkMetadataPublisher(self.node_id)
        self.listener_name = self.config.get("inter.broker.listener.name") or "PLAINTEXT"
        self.inter_broker_login = inter_broker_login(self.config, self.listener_name)
        self.fetchers = ReplicaFetcherManager(
            self.node_id,
            self._endpoint_for,
            broker.replica_manager.get_partition,
            ReplicaFetcherConfig.from_broker_config(self.config),
        )
        self.membership: ZkClusterMembership | None = None
        self.alter_partition: AlterIsrManager | None = None
        self.producer_ids: ProducerIdManager | None = None
        self._creating: set[str] = set()  # internal topics being created through ZooKeeper
        self._tasks: list[asyncio.Task] = []
        # Transactions across brokers (cluster_transactions.py): markers to remote leaders and
        # AddPartitionsToTxn to the coordinating broker, over one connection per broker.
        self.channels = BrokerChannels(self._endpoint_for)
        leader_of = marker_leader_lookup(self.publisher.image)
        self.transaction_router = TransactionRouter(
            self.node_id,
            lambda: broker.services.transaction_coordinator,
            lambda: self.config.get("transaction.state.log.num.partitions"),
            leader_of,
            self.channels,
            self.ensure_transaction_topic,
        )
        self._leader_of = leader_of
        # The share-state calls of this broker's share partitions to the share coordinator on another broker
        # (Kafka's persister), on connections of their own.
        self.share_channels = BrokerChannels(self._endpoint_for)
        self.share_persister = RemoteStatePersister(self._share_coordinator_of, self._send_share_state)
        # Set when the broker stops: metadata deliveries already queued on the loop change nothing
        # any more (no leader or follower changes, no fetchers, no log deletions on closing logs).
        self._stopping = False
        self.dynamic_state: ClusterDynamicState | None = None  # quotas, SCRAM, broker configs, ACLs
        self.zk_features: ZkFeatures | None = None  # the /feature znode: finalized features
        self.local: LocalController  # set by topic_admin(): the store mirror and partition factory

    # -- lifecycle -------------------------------------------------------------------------
    async def connect(self) -> str:
        """Open the ZooKeeper session and return the cluster's id (/cluster/id, made by the first
        broker ever to start), before the log directories are checked against it."""
        host, port = self.config.advertised_host_port(self.listener_name)
        self.membership = ZkClusterMembership.from_config(self.config, self, host=host, port=port)
        self.alter_partition = AlterIsrManager(self.membership.loader.alter_isr)
        zk = self.membership.zk
        await asyncio.to_thread(zk.start)
        cluster_id = await asyncio.to_thread(zk.call, _get_or_create_cluster_id, zk.kazoo)
        # Producer ids come from blocks claimed in ZooKeeper: unique across the cluster.
        self.producer_ids = ProducerIdManager(
            lambda: zk.claim_producer_id_block(self.node_id, PRODUCER_ID_BLOCK_SIZE)
        )
        await asyncio.to_thread(self.producer_ids.start)
        return cluster_id

    def allocate_producer_id(self) -> int:
        if self.producer_ids is None:
            raise KafkaError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, "not connected to ZooKeeper yet")
        return self.producer_ids.generate_producer_id()

    def topic_admin(self, local: LocalController) -> ClusterTopicAdmin:
        self.local = local
        return ClusterTopicAdmin(self, local)

    async def start(self) -> None:
        assert self.membership is not None and self.alter_partition is not None, "connect() first"
        # Partitions loaded from disk lead nothing until ZooKeeper's state says so.
        for p in self.broker.replica_manager.all_partitions():
            if p.topic not in LOCAL_TOPICS:
                self.prepare_partition(p)
        # Quotas, SCRAM credentials, dynamic broker configs and ACLs are the cluster's (ZooKeeper's):
        # the store takes them before clients are served, and publishes this broker's changes there.
        dynamic = self.dynamic_state = ClusterDynamicState(
            self.membership.zk,
            self.broker.metadata,
            self.node_id,
            lambda: self.broker.authorizer,
            self.local.set_dynamic_broker_configs,
            self.broker.services.group_configs,
        )
        self.broker.services.publish_group_configs = dynamic.publish_group_configs
        await asyncio.to_thread(dynamic.sync_from_zookeeper)
        dynamic.apply_snapshot()
        self.broker.metadata.publisher = dynamic
        await dynamic.start_watching()
        await self._follow_features()
        await self.membership.start()
        # Logs of topics ZooKeeper does not know (deleted while this broker was down) go now.
        known = set(await asyncio.to_thread(self.membership.zk.get_all_topics))
        for name in [n for n in self.broker.metadata.topics if n not in known and n not in LOCAL_TOPICS]:
            log.info("topic %s is not in ZooKeeper: deleting its local logs", name)
            self._delete_local_topic(name)
        self._tasks.append(
            asyncio.ensure_future(
                run_isr_expiration(self.broker.replica_manager.all_partitions, self.config.replica_lag_time_max_ms)
            )
        )

    async def _follow_features(self) -> None:
        """Finalized features are the cluster's: ``/feature`` in ZooKeeper (controller/zk_features.py),
        read before clients are served, written by UpdateFeatures on any broker, followed by all."""
        assert self.membership is not None
        zk_features = self.zk_features = ZkFeatures(self.membership.zk)
        features = self.broker.features
        levels, epoch = await asyncio.to_thread(zk_features.read_or_create, DEFAULT_LEVELS)
        features.set(levels, epoch)
        features.writer = zk_features.write

        def follow(levels: dict[str, int], epoch: int) -> None:
            if epoch >= features.epoch:  # a watch event older than this broker's own write changes nothing
                features.set(levels, epoch)

        await zk_features.watch(follow)

    async def controlled_shutdown(self, timeout_s: float = 15.0) -> None:
        """``controlled.shutdown.enable``: before this broker stops serving, the controller moves its
        leadership to other ISR members (Kafka's controlledShutdown).  The active controller is asked
        directly; another broker writes a request znode the controller watches (Kafka 4's protocol has
        no ControlledShutdown API to send, and advertising one would change what ApiVersions answers).
        Waits, bounded, until this broker leads no partition that has another replica."""
        m = self.membership
        if m is None or not self.config.get("controlled.shutdown.enable"):
            return
        t0 = time.monotonic()
        try:
            if m.controller.is_active:
                await m.controller.controlled_shutdown(self.node_id, m.broker_epoch)
            else:
                await self._zk(m.zk.request_controlled_shutdown, self.node_id, m.broker_epoch)
        except Exception as e:  # noqa: BLE001 - the broker stops anyway; the controller sees the session go
            log.warning("controlled shutdown request failed: %s", e)
            return

        def leads_nothing() -> bool:
            return not any(
                s.leader == self.node_id and len(s.replicas) > 1 and len(s.isr) > 1
                for s in self.publisher.states.values()
            )

        moved = await self._wait_until(leads_nothing, int(timeout_s * 1000))
        log.info("controlled shutdown: %s after %.1fs", "leadership moved" if moved else "gave up waiting",
                 time.monotonic() - t0)

    async def stop(self) -> None:
        self._stopping = True
        await self.channels.close()
        await self.share_channels.close()
        if self.dynamic_state is not None:
            self.dynamic_state.stop()
        if self.zk_features is not None:
            self.zk_features.stop()
        for t in self._tasks:
            t.cancel()
        await self.fetchers.shutdown()
        if self.membership is not None:
            await self.membership.stop()

    def prepare_partition(self, p: Partition) -> None:
        """A partition opened or made here leads nothing until ZooKeeper's state says so."""
        p._leader_id = NO_LEADER  # noqa: SLF001 - before the partition is published
        p._leader_epoch = -1  # noqa: SLF001
        p.alter_partition = self.alter_partition

    def _endpoint_for(self, leader_id: int) -> RemoteLeaderEndpoint:
        assert self.membership is not None
        info = self.membership.loader.brokers.get(leader_id)
        if info is None:
            raise KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, f"broker {leader_id} is not registered")
        host, port = info.endpoint(self.listener_name) or (info.host, info.port)
        return RemoteLeaderEndpoint(leader_id, host, port, self.node_id, sasl=self.inter_broker_login)

    # -- MetadataListener ------------------------------------------------------------------
    def on_brokers(self, brokers: dict[int, BrokerInfo]) -> None:
        self.publisher.set_brokers(brokers)
        if self.publisher.departed:
            # The bound on holding a departed broker (ZkMetadataPublisher.set_brokers).
            asyncio.get_running_loop().call_later(DEPARTED_BROKER_HOLD_S + 0.01, self.publisher.release_departed)

    def on_controller(self, controller_id: int | None) -> None:
        self.publisher.set_controller(controller_id)

    def on_topic(self, topic: str, assignment: TopicAssignment | None, config: dict[str, str]) -> None:
        if topic in LOCAL_TOPICS or self._stopping:
            return
        pub = self.publisher
        if assignment is None:
            pub.assignments.pop(topic, None)
            pub.configs.pop(topic, None)
            for tp in [tp for tp in pub.states if tp[0] == topic]:
                pub.set_state(tp, None)
            pub.topic_changed(topic)
            self._delete_local_topic(topic)
            self._forget_committed_offsets(topic)
            return
        old = pub.assignments.get(topic)
        if old is not None and old.topic_uuid != assignment.topic_uuid and assignment.topic_uuid is not None:
            self._delete_local_topic(topic)  # deleted and created again while we looked away
            self._forget_committed_offsets(topic)
        pub.assignments[topic] = assignment
        pub.configs[topic] = dict(config)
        pub.topic_changed(topic)
        self._mirror_topic(topic, assignment, config)
        # Partitions reassigned away from this broker go.
        for i, ra in assignment.partitions.items():
            if self.node_id not in ra.replicas and self.broker.replica_manager.get_partition(topic, i) is not None:
                self._remove_local_partition(topic, i)
            elif (state := pub.states.get((topic, i))) is not None:
                self.on_partition(topic, i, state)  # a state seen before its topic was mirrored

    def on_partition(self, topic: str, partition: int, state: PartitionState) -> None:
        if topic in LOCAL_TOPICS or self._stopping:
            return
        self.publisher.set_state((topic, partition), state)
        self.publisher.topic_changed(topic)
        if self.node_id not in state.replicas:
            return
        rm = self.broker.replica_manager
        if rm.get_partition(topic, partition) is None and not self._create_local_partition(topic, partition):
            return
        results = become_leader_or_follower(self.node_id, rm.get_partition, self.fetchers, [state])
        log.debug("%s-%d: %s -> %s", topic, partition, state, results)
        if topic == OFFSETS_TOPIC:
            self._offsets_leadership(partition, state.leader == self.node_id)
        elif topic == TRANSACTION_TOPIC:
            self._transactions_leadership(partition, state.leader == self.node_id, state.leader_epoch)
        elif topic == SHARE_STATE_TOPIC:
            self._share_state_leadership(partition, state.leader == self.node_id)

    def _spawn(self, work: Awaitable[Any]) -> None:
        """Run ``work`` in the background; stop() cancels what is still running."""
        task = asyncio.ensure_future(work)
        self._tasks.append(task)
        task.add_done_callback(lambda t: self._tasks.remove(t) if t in self._tasks else None)

    def _forget_committed_offsets(self, topic: str) -> None:
        """A deleted topic's committed offsets go from the groups this broker coordinates (Kafka's
        onTopicsDeleted, run by every coordinator for its own groups), with tombstones replicated like
        any commit, so a group resuming on a topic re-created under the name does not skip its records."""
        coordinator = self.broker.services.group_coordinator
        if coordinator is None or topic == OFFSETS_TOPIC:
            return
        try:
            wait = coordinator.on_topics_deleted([topic])
        except StorageError as e:
            log.error("deleted topic %s, but not its committed offsets: %s", topic, e)
            return
        if wait is not None:
            self._spawn(wait)

    def _offsets_leadership(self, partition: int, leader: bool) -> None:
        """Kafka's GroupCoordinator.onElection / onResignation: this broker coordinates the groups of the
        __consumer_offsets partitions it leads, loaded from the partition when it becomes their leader."""
        coordinator = self.broker.services.group_coordinator
        if coordinator is None:
            return
        if leader:
            coordinator.on_election(partition)
        else:
            coordinator.on_resignation(partition)

    def _transactions_leadership(self, partition: int, leader: bool, leader_epoch: int) -> None:
        """Kafka's TransactionCoordinator.onElection / onResignation for a __transaction_state partition;
        the leader epoch is the coordinator epoch its markers carry."""
        coordinator = self.broker.services.transaction_coordinator
        if coordinator is None:
            return
        if leader:
            coordinator.on_election(partition, leader_epoch)
        else:
            coordinator.on_resignation(partition)

    def _share_state_leadership(self, partition: int, leader: bool) -> None:
        """The share coordinator's onElection / onResignation for a __share_group_state partition (nothing to
        do before share groups are first used: the coordinator then loads what it leads)."""
        share_groups = self.broker.services.share_groups
        if share_groups is None:
            return
        if leader:
            share_groups.coordinator.on_election(partition)
        else:
            share_groups.coordinator.on_resignation(partition)

    def ensure_share_state_topic(self) -> None:
        """__share_group_state through ZooKeeper on first use (FindCoordinator of a share key, as Kafka's):
        share.coordinator.state.topic.replication.factor replicas, its min.insync.replicas
        share.coordinator.state.topic.min.isr."""
        configs = {
            **SHARE_STATE_TOPIC_CONFIGS,
            "min.insync.replicas": str(self.config.get("share.coordinator.state.topic.min.isr")),
        }
        self._ensure_internal_topic(
            SHARE_STATE_TOPIC,
            self.config.get("share.coordinator.state.topic.num.partitions"),
            self.config.get("share.coordinator.state.topic.replication.factor"),
            configs,
            "share.coordinator.state.topic.replication.factor",
        )

    def _share_coordinator_of(self, key: SharePartitionKey) -> int | None:
        """The broker coordinating a share partition: its __share_group_state partition's leader in the
        metadata (Kafka's ShareCoordinatorMetadataCacheHelper); before the topic exists it is made (what a
        FindCoordinator of key type SHARE does) and the caller retries."""
        t = self.publisher.image().topics_by_name.get(SHARE_STATE_TOPIC)
        if t is None or not t.partitions:
            self.ensure_share_state_topic()
            return None
        return self._leader_of(SHARE_STATE_TOPIC, partition_for(key.coordinator_key, t.num_partitions))

    async def _send_share_state(self, broker_id: int, api_key: int, body: dict[str, Any]) -> dict[str, Any] | None:
        try:
            _, answer = await self.share_channels.get(broker_id).send(api_key, lambda _v: body)
        except (LeaderEndpointError, KafkaError) as exc:
            log.info("share state api %d to broker %d: %s", api_key, broker_id, exc)
            return None
        return answer

    def wrap_marker_writer(self, local: Any) -> ClusterMarkerWriter:
        """The transaction coordinator's marker writer: this broker's partitions, and the leaders of the others."""
        return ClusterMarkerWriter(self.node_id, local, self._leader_of, self.channels)

    def ensure_transaction_topic(self) -> None:
        """__transaction_state through ZooKeeper on first use (FindCoordinator of a transactional id, as
        Kafka's TransactionStateManager does): transaction.state.log.replication.factor replicas, its
        min.insync.replicas transaction.state.log.min.isr."""
        configs = {**TRANSACTION_TOPIC_CONFIGS, "min.insync.replicas": str(self.config.get("transaction.state.log.min.isr"))}
        self._ensure_internal_topic(
            TRANSACTION_TOPIC,
            self.config.get("transaction.state.log.num.partitions"),
            self.config.get("transaction.state.log.replication.factor"),
            configs,
            "transaction.state.log.replication.factor",
        )

    def ensure_offsets_topic(self) -> None:
        """Create __consumer_offsets through ZooKeeper on first use (Kafka's FindCoordinator does): with
        offsets.topic.replication.factor replicas, refused (and logged) while fewer brokers are alive, as
        Kafka refuses it; clients are answered COORDINATOR_NOT_AVAILABLE until its leaders are elected."""
        self._ensure_internal_topic(
            OFFSETS_TOPIC,
            self.config.offsets_topic_num_partitions,
            self.config.get("offsets.topic.replication.factor"),
            dict(TOPIC_CONFIGS),
            "offsets.topic.replication.factor",
        )

    def _ensure_internal_topic(
        self, name: str, partitions: int, rf: int, configs: dict[str, str], rf_key: str
    ) -> None:
        if name in self._creating or self.publisher.image().topic(name) is not None:
            return
        live = len(self.live_brokers())
        if live < rf:
            log.warning("not creating %s yet: %s is %d and %d brokers are alive", name, rf_key, rf, live)
            return
        self._creating.add(name)

        async def create() -> None:
            try:
                assert self.membership is not None
                await self._zk(self.membership.zk.create_topic, name, partitions, rf, config=configs)
                log.info("created %s with %d partitions, replication factor %d", name, partitions, rf)
            except KafkaError as e:
                if e.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                    log.warning("creating %s failed: %s", name, e.message)
            except Exception:
                log.exception("creating %s failed", name)
            finally:
                self._creating.discard(name)

        self._spawn(create())

    # -- local logs --------------------------------------------------------------------------
    def _mirror_topic(self, topic: str, assignment: TopicAssignment, config: dict[str, str]) -> None:
        store = self.broker.metadata
        n = max(assignment.partitions, default=-1) + 1
        rec = store.topics.get(topic)
        if rec is None:
            store.add_topic(topic, n, dict(config), topic_id=assignment.topic_uuid or _name_uuid(topic))
            return
        if rec.partitions != n:
            store.set_partitions(topic, n)
        if rec.configs != config:
            self.local.set_topic_configs(topic, dict(config))

    def _create_local_partition(self, topic: str, index: int) -> bool:
        b = self.broker
        rec = b.metadata.topics.get(topic)
        if rec is None or b.log_manager is None:
            return False
        lg = b.log_manager.get_log(topic, index)
        if lg is None:
            lg = b.log_manager.create_log(topic, index, self.local.log_config(rec), rec.topic_id)
        p = self.local._new_partition(rec, index, lg)  # noqa: SLF001
        self.prepare_partition(p)
        b.replica_manager.add_partition(p)
        return True

    def _remove_local_partition(self, topic: str, index: int) -> None:
        if topic == OFFSETS_TOPIC:
            self._offsets_leadership(index, False)
        self.fetchers.remove_fetcher_for_partitions([(topic, index)])
        p = self.broker.replica_manager.remove_partition(topic, index)
        if p is not None:
            p.close()
        if self.broker.log_manager is not None:
            self.broker.log_manager.delete_log(topic, index)

    def _delete_local_topic(self, topic: str) -> None:
        b = self.broker
        rec = b.metadata.topics.get(topic)
        if rec is None:
            return
        for i in range(rec.partitions):
            self._remove_local_partition(topic, i)
        b.metadata.remove_topic(topic)
        b.metrics.forget_topic(topic)
        log.info("deleted the local logs of topic %s", topic)

    # -- topic administration (the ZooKeeper-backed TopicAdmin) ------------------------------
    def live_brokers(self) -> set[int]:
        return set(self.publisher.live)  # not the departed brokers the image still holds

    async def _zk(self, fn, *args, **kwargs):
        assert self.membership is not None
        zk = self.membership.zk
        return await asyncio.to_thread(zk.call, fn, *args, **kwargs)

    async def _wait_until(self, done, timeout_ms: int | None) -> bool:
        deadline = time.monotonic() + max(timeout_ms if timeout_ms is not None else 30_000, 0) / 1000
        while not done():
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(ADMIN_POLL_S)
        return True

    async def create_topic(
        self,
        name: str,
        num_partitions: int,
        configs: dict[str, str],
        *,
        replication_factor: int,
        assignments: Mapping[int, list[int]] | None = None,
        validate_only: bool = False,
        timeout_ms: int | None = None,
    ) -> TopicRecord | None:
        assert self.membership is not None
        zk = self.membership.zk
        result = await self._zk(
            zk.create_topic,
            name,
            num_partitions,
            replication_factor,
            assignment=assignments or None,
            config=configs,
            validate_only=validate_only,
        )
        if validate_only:
            return None

        def visible() -> bool:
            t = self.publisher.image().topic(name)
            return (
                t is not None
                and t.num_partitions == num_partitions
                and all(r.has_leader() for r in t.partitions.values())
                and name in self.broker.metadata.topics
            )

        if not await self._wait_until(visible, timeout_ms):
            # Kafka's answer when the controller has not finished in time: the topic will still appear.
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"Topic {name} is not ready yet (leaders being elected).")
        log.info("created topic %s (id %s) with %d partitions, RF %d", name, result.topic_id, num_partitions,
                 replication_factor)
        return self.broker.metadata.topics.get(name)

    async def alter_topic_configs(self, name: str, configs: dict[str, str], timeout_ms: int = 30_000) -> None:
        """Write the topic's configs to ZooKeeper (/config/topics/<topic>): every broker's metadata loader
        sees the change and applies it. Answered once this broker has applied it, so a DescribeConfigs
        here right after shows it (Kafka's ZK-mode AdminZkClient.changeTopicConfig, then the watch)."""
        if name in LOCAL_TOPICS:
            self.local.set_topic_configs(name, configs)
            return
        assert self.membership is not None
        await asyncio.to_thread(self.membership.zk.set_topic_config, name, configs)

        def applied() -> bool:
            return self.publisher.configs.get(name) == configs

        if not await self._wait_until(applied, timeout_ms):
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"The new configs of {name} are not applied yet.")

    def auto_create_topic(self, name: str) -> None:
        """Metadata's auto-creation: the write happens in the background; the client is answered
        LEADER_NOT_AVAILABLE meanwhile and asks again, as with Kafka."""
        rf = min(self.config.default_replication_factor, max(len(self.live_brokers()), 1))

        async def create() -> None:
            try:
                assert self.membership is not None
                await self._zk(self.membership.zk.create_topic, name, self.config.num_partitions, rf)
            except KafkaError as e:
                if e.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                    log.info("auto-creating topic %s failed: %s", name, e.message)
            except Exception:
                log.exception("auto-creating topic %s failed", name)

        self._spawn(create())

    async def delete_topic(self, name: str, topic_id: uuid.UUID | None, timeout_ms: int | None) -> None:
        assert self.membership is not None
        t = self.publisher.image().topic(name)
        if t is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.")
        if topic_id is not None and t.topic_id != topic_id:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_ID, "unknown topic id")
        if not self.config.delete_topic_enable:
            raise KafkaError(ErrorCode.TOPIC_DELETION_DISABLED, "Topic deletion is disabled.")
        await self._zk(self.membership.zk.request_topic_deletion, name)
        if not await self._wait_until(lambda: self.publisher.image().topic(name) is None, timeout_ms):
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"Topic {name} is being deleted.")

    async def add_partitions(
        self,
        name: str,
        total: int,
        *,
        assignments: list[list[int]] | None = None,
        validate_only: bool = False,
        timeout_ms: int | None = None,
    ) -> None:
        assert self.membership is not None
        t = self.publisher.image().topic(name)
        if t is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.")
        if total < t.num_partitions:
            raise KafkaError(
                ErrorCode.INVALID_PARTITIONS,
                f"The topic {name} currently has {t.num_partitions} partition(s); {total} would not be an increase.",
            )
        if total == t.num_partitions:
            raise KafkaError(ErrorCode.INVALID_PARTITIONS, f"Topic already has {t.num_partitions} partition(s).")
        await self._zk(
            self.membership.zk.add_partitions, name, total, assignment=assignments, validate_only=validate_only
        )
        if validate_only:
            return

        def visible() -> bool:
            img = self.publisher.image().topic(name)
            return img is not None and img.num_partitions >= total and all(
                r.has_leader() for r in img.partitions.values()
            )

        if not await self._wait_until(visible, timeout_ms):
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"The new partitions of {name} have no leader yet.")

    # -- leadership and replica placement (ElectLeaders, Alter/ListPartitionReassignments) -----
    async def _controller_request(self, kind: str, request: dict[str, Any], timeout_ms: int) -> dict[str, Any]:
        """Served by the active controller: this broker's own when it is active, else forwarded through
        ZooKeeper (zk_data.FORWARDED_REQUESTS_PATH). Bounded by ``timeout_ms`` (REQUEST_TIMED_OUT)."""
        assert self.membership is not None
        m = self.membership
        deadline = time.monotonic() + max(timeout_ms, 0) / 1000
        if m.controller.is_active:
            try:
                response = await asyncio.wait_for(m.controller.serve(kind, request), max(timeout_ms, 0) / 1000)
            except TimeoutError:
                raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, "The controller did not answer in time.") from None
            except KafkaError as e:
                if e.code != ErrorCode.NOT_CONTROLLER:
                    raise
                response = None  # it resigned meanwhile: the new controller serves it
            if response is not None:
                return response
        path = await self._zk(m.zk.create_forwarded_request, kind, request)
        try:
            while (response := await self._zk(m.zk.get_forwarded_response, path)) is None:
                if time.monotonic() >= deadline:
                    raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, "The controller did not answer in time.")
                await asyncio.sleep(ADMIN_POLL_S)
        finally:
            await self._zk(m.zk.delete_forwarded_request, path)
        if "error" in response:
            raise KafkaError(*response["error"])
        return response

    async def elect_leaders(
        self, partitions: list[tuple[str, int]] | None, election_type: ElectionType, timeout_ms: int | None
    ) -> dict[tuple[str, int], KafkaError | None]:
        """ElectLeaders: the controller elects; the answer waits (bounded by ``timeout_ms``) until this
        broker's metadata shows the elected leaders, as Kafka's DelayedElectLeader does."""
        timeout_ms = ADMIN_TIMEOUT_MS if timeout_ms is None else timeout_ms
        deadline = time.monotonic() + max(timeout_ms, 0) / 1000
        request = {
            "election_type": int(election_type),
            "partitions": None if partitions is None else [[t, p] for t, p in partitions],
        }
        results = decode_results((await self._controller_request("elect_leaders", request, timeout_ms))["results"])

        def elected(tp: tuple[str, int]) -> bool:
            t = self.publisher.image().topic(tp[0])
            reg = t.partitions.get(tp[1]) if t is not None else None
            if reg is None or not reg.replicas:
                return False
            if election_type == ElectionType.PREFERRED:
                return reg.leader == reg.replicas[0]
            return reg.has_leader()

        done = [tp for tp, e in results.items() if e is None]
        remaining_ms = int(max(0.0, deadline - time.monotonic()) * 1000)
        if not await self._wait_until(lambda: all(elected(tp) for tp in done), remaining_ms):
            for tp in done:
                if not elected(tp):
                    results[tp] = KafkaError(ErrorCode.REQUEST_TIMED_OUT, "The election's result is not visible yet.")
        return results

    async def alter_partition_reassignments(
        self,
        targets: Mapping[tuple[str, int], list[int] | None],
        allow_replication_factor_change: bool,
        timeout_ms: int | None,
    ) -> dict[tuple[str, int], KafkaError | None]:
        """The controller checks each target (ReplicationControlManager's rules and messages) and starts
        the reassignments; answered once they started, as Kafka does."""
        request = {
            "partitions": [[t, p, r] for (t, p), r in targets.items()],
            "allow_replication_factor_change": allow_replication_factor_change,
        }
        timeout_ms = ADMIN_TIMEOUT_MS if timeout_ms is None else timeout_ms
        return decode_results((await self._controller_request("reassign", request, timeout_ms))["results"])

    async def list_partition_reassignments(
        self, partitions: set[tuple[str, int]] | None, timeout_ms: int | None
    ) -> dict[tuple[str, int], tuple[list[int], list[int], list[int]]]:
        request = {"partitions": None if partitions is None else [[t, p] for t, p in sorted(partitions)]}
        timeout_ms = ADMIN_TIMEOUT_MS if timeout_ms is None else timeout_ms
        response = await self._controller_request("list_reassignments", request, timeout_ms)
        return {(str(t), int(p)): (replicas, adding, removing) for t, p, replicas, adding, removing in response["reassignments"]}


class ClusterTopicAdmin:
    """The TopicAdmin of a broker in a cluster (apis/services.TopicAdmin): topic creation, deletion and new
    partitions go through ZooKeeper (ClusterMode); validation, configs and dynamic broker configs are
    the LocalController's, on the topics ZooKeeper mirrored here."""

    def __init__(self, cluster: ClusterMode, local: LocalController) -> None:
        self._cluster = cluster
        self._local = local

    def __getattr__(self, name: str) -> Any:
        return getattr(self._local, name)

    async def create_topic_async(
        self,
        name: str,
        num_partitions: int,
        configs: dict[str, str | None],
        *,
        validate_only: bool = False,
        timeout_ms: int | None = None,
        replication_factor: int = 1,
        assignments: dict[int, list[int]] | None = None,
    ) -> TopicRecord | None:
        kept = self._local.check_new_topic(name, num_partitions, configs)
        return await self._cluster.create_topic(
            name,
            num_partitions,
            kept,
            replication_factor=replication_factor,
            assignments=assignments,
            validate_only=validate_only,
            timeout_ms=timeout_ms,
        )

    def auto_create_topic(self, name: str) -> TopicRecord | None:
        if name in LOCAL_TOPICS or not self._cluster.config.auto_create_topics_enable:
            return self._local.auto_create_topic(name)
        self._cluster.auto_create_topic(name)
        return None

    async def delete_topic_async(
        self, name: str, topic_id: uuid.UUID | None = None, timeout_ms: int | None = None
    ) -> None:
        await self._cluster.delete_topic(name, topic_id, timeout_ms)

    async def alter_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        await self._cluster.alter_topic_configs(name, configs)

    async def add_partitions(
        self,
        name: str,
        total: int,
        *,
        validate_only: bool = False,
        timeout_ms: int | None = None,
        assignments: list[list[int]] | None = None,
    ) -> None:
        await self._cluster.add_partitions(
            name, total, assignments=assignments, validate_only=validate_only, timeout_ms=timeout_ms
        )

    async def elect_leaders(
        self, partitions: list[tuple[str, int]] | None, election_type: int, timeout_ms: int | None = None
    ) -> dict[tuple[str, int], KafkaError | None]:
        return await self._cluster.elect_leaders(partitions, ElectionType(election_type), timeout_ms)

    async def alter_partition_reassignments(
        self,
        reassignments: Mapping[tuple[str, int], list[int] | None],
        allow_replication_factor_change: bool = True,
        timeout_ms: int | None = None,
    ) -> dict[tuple[str, int], KafkaError | None]:
        return await self._cluster.alter_partition_reassignments(
            reassignments, allow_replication_factor_change, timeout_ms
        )

    async def list_partition_reassignments(
        self, partitions: set[tuple[str, int]] | None = None, timeout_ms: int | None = None
    ) -> dict[tuple[str, int], tuple[list[int], list[int], list[int]]]:
        return await self._cluster.list_partition_reassignments(partitions, timeout_ms)
