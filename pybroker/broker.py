"""The broker process: wires config, storage, metadata, partitions and the server together,
runs the background tasks (retention, flush, checkpoints) and shuts down cleanly on a signal."""

from __future__ import annotations

import asyncio
import functools
import logging
import signal
import time
from collections.abc import Callable, Coroutine
from functools import partial
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from pybroker import config as broker_config
from pybroker.apis import load_all
from pybroker.apis.fetch_session import FetchSessions
from pybroker.apis.metadata import TopicMetadataCache
from pybroker.apis.services import BrokerServices
from pybroker.apis.telemetry import ClientMetricsManager
from pybroker.config import ConfigError
from pybroker.controller.delegation_tokens import DelegationTokenManager
from pybroker.controller.local import LocalController
from pybroker.coordinator.coordinator import GroupCoordinator
from pybroker.coordinator.offsets_topic import TOPIC as OFFSETS_TOPIC
from pybroker.coordinator.services import CoordinatorServices
from pybroker.coordinator.transaction.coordinator import TransactionCoordinator
from pybroker.coordinator.transaction.service import start_transaction_coordinator
from pybroker.metadata.features import FinalizedFeatures
from pybroker.metadata.image import BrokerRegistration, MetadataImage
from pybroker.metadata.local import LocalMetadataPublisher, MetadataPublisher
from pybroker.metadata.store import MetadataStore, TopicRecord
from pybroker.metrics.recorder import BrokerMetrics
from pybroker.protocol.api import REQUESTS
from pybroker.protocol.memory_pool import MemoryPool
from pybroker.quotas.client_quotas import ClientQuotaManager
from pybroker.quotas.connection_quotas import ConnectionQuotas, parse_overrides
from pybroker.replication.log_dir_mover import ReplicaAlterLogDirsManager
from pybroker.replication.partition import Partition
from pybroker.replication.replica_manager import ReplicaManager
from pybroker.security.authorizer import Authorizer, authorizer_from_config
from pybroker.security.context import SASL_SSL, uses_sasl, uses_ssl
from pybroker.security.delegation_token import TokenCredential
from pybroker.security.sasl_config import build_listener_config
from pybroker.security.scram import ScramCredential, ScramMechanism
from pybroker.security.ssl_factory import ServerSslFactory, SslConfigError
from pybroker.server import Acceptor, MemoryWaiters, raise_open_file_limit, serve
from pybroker.storage import LogManager
from pybroker.storage.errors import LogDirLockedError, StorageError, io_failure
from pybroker.storage.manager import remove_directories

if TYPE_CHECKING:
    from pybroker.cluster_mode import ClusterMode
    from pybroker.config import BrokerConfig

log = logging.getLogger(__name__)

# Kafka spells "never" as Long.MAX_VALUE; intervals at or above this do not get a task at all.
NEVER_MS = 2**40


def _log_failure(what: str):
    def done(fut: asyncio.Future) -> None:
        if not fut.cancelled() and fut.exception() is not None:
            log.error("%s failed: %s", what, fut.exception())

    return done


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.node_id: int = config.node_id
        self.log_dirs = [Path(d) for d in config.log_dirs]
        self.request_specs = REQUESTS
        self.handlers = load_all()
        self.connections: set[Any] = set()
        # queued.max.request.bytes: request bytes in memory over all connections (server.py mutes
        # a connection whose next request does not fit; waiters are woken when memory returns).
        self.memory_waiters = MemoryWaiters()
        self.memory_pool = MemoryPool(config.queued_max_request_bytes, self.memory_waiters.schedule_wake)
        self.memory_waiters.pool = self.memory_pool
        self.metadata = MetadataStore(self.log_dirs[0])
        self.connection_quotas = ConnectionQuotas(
            config.max_connections,
            config.max_connections_per_ip,
            parse_overrides(config.max_connections_per_ip_overrides),
        )
        for endpoint in config.listener_endpoints:
            limit = config.listener_overrides(endpoint.listener_name).get("max.connections")
            if limit is not None:
                self.connection_quotas.listener_max[endpoint.listener_name] = int(limit)
        self.connection_quotas.configure_creation_rates(
            config.max_connection_creation_rate,
            {
                e.listener_name: int(rate)
                for e in config.listener_endpoints
                if (rate := config.listener_overrides(e.listener_name).get("max.connection.creation.rate")) is not None
            },
            config.quota_window_num,
            config.quota_window_size_seconds,
        )
        self.controller_mutation_quotas = ClientQuotaManager(
            self.metadata.client_quotas, config.controller_quota_window_num, config.controller_quota_window_size_seconds
        )
        self.client_quotas = ClientQuotaManager(
            self.metadata.client_quotas, config.quota_window_num, config.quota_window_size_seconds
        )
        self.authorizer: Authorizer | None = None  # set at start when authorizer.class.name is set
        self.log_manager: LogManager | None = None
        self.cluster_id = ""
        self.host, self.port = config.listener_host_port()
        self.advertised_host, self.advertised_port = config.advertised_host_port()
        self.acceptors: list[Acceptor] = []  # one per listener
        # SSL listeners' contexts, made here so that a bad key store stops start-up (ConfigError)
        # before any directory is touched.
        self.ssl_factories = _ssl_factories(config)
        # Byte and message totals are counted always (plain ints: the console shows them too); request
        # latency only when metrics.listener serves it.
        self.metrics = BrokerMetrics(timed=bool(config.get("metrics.listener")))
        # The partitions this broker hosts, and the produce and fetch paths over them.
        self.replica_manager = ReplicaManager(
            self.node_id, self.metrics, topic_exists=lambda name: name in self.metadata.topics
        )
        # The metadata image handlers read: on a single broker, built from the store and the partitions.
        # The registration carries every advertised listener: Metadata answers the client's.
        listeners = {
            e.listener_name: config.advertised_host_port(e.listener_name) for e in config.advertised_endpoints
        }
        self.cluster: ClusterMode | None = None
        self.metadata_publisher: MetadataPublisher
        if config.get("zookeeper.connect"):
            # Cluster mode: the image is ZooKeeper's (brokers, controller, every topic's replicas).
            from pybroker.cluster_mode import ClusterMode

            self.cluster = ClusterMode(self)
            self.metadata_publisher = self.cluster.publisher
        else:
            self.metadata_publisher = LocalMetadataPublisher(
                self.metadata,
                self.replica_manager.get_partition,
                BrokerRegistration(
                    self.node_id, self.advertised_host, self.advertised_port, None, MappingProxyType(listeners)
                ),
            )
        self.metadata.topic_listener = self.metadata_publisher.topic_changed
        self.client_metrics = ClientMetricsManager(self.metadata)  # KIP-714 subscriptions and pushes
        # KIP-48 delegation tokens (their cache follows the store, whichever broker changed it).
        self.delegation_tokens = DelegationTokenManager(config, self.metadata)
        self.metadata_cache = TopicMetadataCache()  # encoded Metadata topic entries
        self.metadata_publisher.listeners.append(self.metadata_cache.invalidate)
        # A single broker is its own controller: topic and config changes are applied here at once.
        self.controller = LocalController(
            config, self.metadata, self.replica_manager, self.metadata_publisher, self.metrics
        )
        self._tasks: list[asyncio.Task] = []
        self.fetch_sessions = FetchSessions(config.max_incremental_fetch_session_cache_slots)
        # What the handlers may use (apis/services.py) and what the coordinators may use
        # (coordinator/services.py): the seams in front of this class.
        # Cluster mode: ids from blocks claimed in ZooKeeper, unique across brokers (ZkProducerIdManager).
        allocate_producer_id = (
            self.metadata.allocate_producer_id if self.cluster is None else self.cluster.allocate_producer_id
        )
        # Finalized features: loaded from the metadata store at start, or ZooKeeper's in a cluster.
        self.features = FinalizedFeatures(self.node_id)
        self.services = BrokerServices(
            node_id=self.node_id,
            config=config,
            log_dirs=self.log_dirs,
            replica_manager=self.replica_manager,
            metadata_image=self.metadata_publisher.image,
            metadata_cache=self.metadata_cache,
            # Cluster mode: the same TopicAdmin interface, writing through ZooKeeper (cluster_mode.py).
            topic_admin=self.controller if self.cluster is None else self.cluster.topic_admin(self.controller),
            fetch_sessions=self.fetch_sessions,
            metrics=self.metrics,
            allocate_producer_id=allocate_producer_id,
            metadata_store=self.metadata,
            cluster_mode=self.cluster is not None,
            controller_mutation_quotas=self.controller_mutation_quotas,
            client_metrics=self.client_metrics,
            delegation_tokens=self.delegation_tokens,
            features=self.features,
        )
        self.coordinator_services = CoordinatorServices(
            config=config,
            partition=self.replica_manager.get_partition,
            all_partitions=self.replica_manager.all_partitions,
            topic=self.controller.topic,
            topic_names=lambda: list(self.metadata.topics),
            create_topic=self.controller.create_topic,
            mark_internal=self.metadata.set_internal,
            allocate_producer_id=allocate_producer_id,
            group_coordinator=lambda: self.services.group_coordinator,
        )
        # What each SASL listener accepts (mechanisms, PLAIN users, OAUTHBEARER validation, reauth): a bad
        # setting stops start-up here with one line, as Kafka's channel builder does.
        self.sasl_configs = {
            e.listener_name: build_listener_config(config, e.listener_name)
            for e in config.listener_endpoints
            if uses_sasl(e.security_protocol)
        }
        self._http: Any = None  # the metrics endpoint and web console, when configured
        self.started = False

    def scram_credential(self, user: str, mechanism: ScramMechanism) -> ScramCredential | None:
        return self.metadata.scram_credential(user, mechanism.mechanism_name)

    def delegation_token_credential(self, token_id: str, mechanism: ScramMechanism) -> TokenCredential | None:
        return self.delegation_tokens.credential(token_id, mechanism)
    def _keep_features_in_metadata_store(self) -> None:
        """A single broker keeps its finalized features in the metadata store, as Kafka keeps
        FeatureLevelRecords in its metadata log: a change is written before it is answered."""
        store = self.metadata
        if store.finalized_features is not None:
            self.features.set(store.finalized_features, store.finalized_features_epoch)

        def write(levels: dict[str, int], epoch: int) -> int:
            store.set_finalized_features(levels, epoch + 1)
            return epoch + 1

        self.features.writer = write

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        for warning in self.config.warnings:
            log.warning("%s", warning)
        # The log dir locks come first: a directory in use by another process stops start-up here,
        # before meta.properties, metadata or __consumer_offsets are touched.
        log_manager = LogManager(self.log_dirs)
        log_manager.lock_dirs()
        self.log_manager = log_manager
        self.controller.log_manager = log_manager
        raise_open_file_limit()  # as Kafka's launch scripts advise: one fd per connection and segment file
        zk_cluster_id = await self.cluster.connect() if self.cluster is not None else None
        self.cluster_id = broker_config.ensure_meta_properties(self.config, zk_cluster_id)
        self.metadata_publisher.set_cluster_id(self.cluster_id)
        self.metadata.load()
        self.metadata.ensure_reserve()
        self.delegation_tokens.load()
        if self.cluster is None:
            self._keep_features_in_metadata_store()
        self.authorizer = authorizer_from_config(self.config, self.metadata)
        self.services.authorizer = self.authorizer
        self.controller.load_dynamic_configs()
        t0 = time.monotonic()
        # One LogConfig per topic, not per partition (computing it is most of a partition's cost).
        config_of = functools.lru_cache(maxsize=None)(self.controller.log_config_for)
        await asyncio.get_running_loop().run_in_executor(None, self.log_manager.startup, config_of)
        self.controller.load_partitions()
        mover = ReplicaAlterLogDirsManager(
            self.log_manager,
            self.replica_manager,
            self.controller.log_config_for,
            lambda: self.config.replica_alter_log_dirs_io_max_bytes_per_second,
        )
        self.services.log_dir_mover = mover
        mover.start()  # moves between log dirs that a stop interrupted start again
        log.info(
            "loaded %d partitions of %d topics in %.2fs",
            len(self.partitions),
            len(self.metadata.topics),
            time.monotonic() - t0,
        )
        if self.port == 0 or self.advertised_port == 0:
            raise SystemExit("listeners must name a port")
        group_coordinator = GroupCoordinator(self.coordinator_services)
        if self.cluster is not None:  # groups follow the leadership of their __consumer_offsets partition
            group_coordinator.leadership_driven = True
            group_coordinator.request_offsets_topic = self.cluster.ensure_offsets_topic
        self.services.group_coordinator = group_coordinator
        self.controller.internal_topic_creators[OFFSETS_TOPIC] = group_coordinator.ensure_offsets_topic
        self.controller.topics_deleted_listeners.append(group_coordinator.on_topics_deleted)
        await group_coordinator.start()
        if self.cluster is not None:  # share states follow the leadership of __share_group_state
            self.services.share_state_topic_creator = self.cluster.ensure_share_state_topic
            self.services.share_state_persister = self.cluster.share_persister
        if self.cluster is not None:  # transactional ids follow the leadership of __transaction_state
            self.services.transaction_router = self.cluster.transaction_router
            self.services.transaction_coordinator = await start_transaction_coordinator(
                self.coordinator_services, leadership_driven=True, wrap_markers=self.cluster.wrap_marker_writer
            )
        else:
            self.services.transaction_coordinator = await start_transaction_coordinator(self.coordinator_services)
        self.replica_manager.transaction_verifier = self.services.transaction_coordinator
        if self.cluster is not None:
            await self.cluster.start()
        if self.config.get("metrics.listener") or self.config.get("console.listener"):
            from pybroker.metrics.http import HttpEndpoints  # imports aiohttp: only when asked for

            self._http = HttpEndpoints.from_config(self, self.metrics)
            await self._http.start()
        await self._open_listeners()
        self._tasks = [
            asyncio.ensure_future(self._every(interval, fn))
            for interval, fn in (
                (self.config.log_retention_check_interval_ms, self._retention),
                (self.config.log_flush_offset_checkpoint_interval_ms, self._checkpoint),
                (self.config.log_flush_scheduler_interval_ms, self._flush),
                (self.config.producer_id_expiration_check_interval_ms, self._expire_producers),
                *(
                    [(self.delegation_tokens.expiry_check_interval_ms, self.delegation_tokens.expire_tokens)]
                    if self.delegation_tokens.enabled
                    else []
                ),
            )
            if 0 < interval < NEVER_MS
        ]
        self.started = True
        log.info("pybroker node %d started (cluster id %s)", self.node_id, self.cluster_id)

    @property
    def acceptor(self) -> Acceptor | None:
        """The first listener's acceptor."""
        return self.acceptors[0] if self.acceptors else None

    async def _open_listeners(self) -> None:
        for endpoint in self.config.listener_endpoints:
            factory = self.ssl_factories.get(endpoint.listener_name)
            self.acceptors.append(await serve(self, endpoint.host, endpoint.port, endpoint, factory))

    async def stop(self) -> None:
        log.info("shutting down")
        if self.cluster is not None and self.started:
            await self.cluster.controlled_shutdown()  # still serving while leadership moves away
        for acceptor in self.acceptors:
            acceptor.close()
        for conn in list(self.connections):
            conn.close("broker shutting down")
        for t in self._tasks:
            t.cancel()
        if self.cluster is not None:
            await self.cluster.stop()
        if self.transaction_coordinator is not None:
            await self.transaction_coordinator.stop()
        if self._http is not None:
            await self._http.stop()
        if self.group_coordinator is not None:
            await self.group_coordinator.stop()
        if self.services.share_groups is not None:  # acquisition locks and the state pruning job end
            self.services.share_groups.close()
        if self.services.log_dir_mover is not None:
            self.services.log_dir_mover.stop()
        if self.log_manager is not None:
            self.log_manager.finish_writes()  # produced batches still queued are written and answered
        self.replica_manager.close()
        if self.log_manager is None:
            return  # never got the log dirs: nothing of ours to save
        loaded = self.log_manager.loaded
        await asyncio.get_running_loop().run_in_executor(None, self.log_manager.shutdown)
        if not loaded:
            return  # start-up stopped before the logs (and perhaps the metadata) were loaded: save nothing
        try:
            self.metadata.save()
        except StorageError as e:  # every change was written when it was made; this is a courtesy
            log.error("could not write the metadata at shutdown: %s", e)
        log.info("shut down cleanly")

    async def _every(self, interval_ms: int, fn) -> None:
        # Logs are owned by the event loop (storage is not thread-safe), so these run on it; they
        # are short: metadata updates, unlinks, and fsyncs only when a flush policy asks for them.
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                fn()
            except OSError as e:  # a full or failing disk: logged once per cause, not per run
                io_failure(self.log_dirs[0], f"background task {fn.__name__}", e)
            except StorageError as e:
                log.error("background task %s failed: %s", fn.__name__, e)
            except Exception:
                log.exception("background task %s failed", fn.__name__)

    def _retention(self) -> None:
        assert self.log_manager is not None
        n = self.log_manager.retention_pass(int(time.time() * 1000))
        if n:
            log.info("retention deleted %d segments", n)
        due = self.log_manager.take_due_deletes()
        if due:
            # Off the loop: removing a deleted topic's files can take long (found by fuzzing: a
            # 1,030-partition topic on a disk with synchronous discard stalled every client).
            fut = asyncio.get_running_loop().run_in_executor(None, remove_directories, due)
            fut.add_done_callback(_log_failure("removing deleted partitions"))

    def _expire_producers(self) -> None:
        # Without this an application that starts many short-lived idempotent producers (every
        # Spark task does) grows the producer state of every partition it wrote to without bound.
        assert self.log_manager is not None
        n = self.log_manager.remove_expired_producers(self.config.producer_id_expiration_ms)
        if n:
            log.info(
                "removed %d producer ids idle for %d ms or more", n, self.config.producer_id_expiration_ms
            )

    def _checkpoint(self) -> None:
        assert self.log_manager is not None
        self.log_manager.checkpoint()
        self.metadata.ensure_reserve()  # given up on a full disk: made again once there is room

    def _flush(self) -> None:
        assert self.log_manager is not None
        self.log_manager.flush_dirty()

    @property
    def group_coordinator(self) -> GroupCoordinator | None:
        return self.services.group_coordinator

    @property
    def transaction_coordinator(self) -> TransactionCoordinator | None:
        return self.services.transaction_coordinator

    # -- topics (the single broker's own controller: controller/local.py) ------------------------
    def topic(self, name: str) -> TopicRecord | None:
        return self.metadata.topics.get(name)

    def partition(self, topic: str, index: int) -> Partition | None:
        return self.replica_manager.partitions.get((topic, index))

    @property
    def partitions(self) -> dict[tuple[str, int], Partition]:
        """The replica manager's map (``(topic, index) -> Partition``)."""
        return self.replica_manager.partitions

    def metadata_image(self) -> MetadataImage:
        return self.metadata_publisher.image()

    def create_topic(self, name: str, num_partitions: int, configs: dict[str, str | None]) -> TopicRecord:
        return self.controller.create_topic(name, num_partitions, configs)

    async def create_topic_async(
        self, name: str, num_partitions: int, configs: dict[str, str | None], **kwargs: Any
    ) -> TopicRecord | None:
        return await self.controller.create_topic_async(name, num_partitions, configs, **kwargs)

    def delete_topic(self, name: str) -> None:
        self.controller.delete_topic(name)


def _ssl_factories(config: BrokerConfig) -> dict[str, ServerSslFactory]:
    factories: dict[str, ServerSslFactory] = {}
    for endpoint in config.listener_endpoints:
        if uses_ssl(endpoint.security_protocol):
            name = endpoint.listener_name
            get = partial(config.listener_value, name)
            if endpoint.security_protocol == SASL_SSL:
                # KIP-684: a SASL_SSL listener asks for client certificates only when its own
                # listener.name.<l>.ssl.client.auth says so (SASL authenticates the client).
                get = partial(_sasl_ssl_value, config, name)
            try:
                factories[name] = ServerSslFactory(name, get, endpoint.security_protocol)
            except SslConfigError as e:
                message = f"Invalid configuration of listener {name} ({e.key}): {e.message}"
                raise ConfigError(e.key, message) from None
    return factories


def _sasl_ssl_value(config: BrokerConfig, listener_name: str, key: str) -> Any:
    if key == "ssl.client.auth":
        return config.listener_overrides(listener_name).get(key, "none")
    return config.listener_value(listener_name, key)


def run(config: BrokerConfig) -> int:
    """Run the broker until SIGTERM/SIGINT; returns the process exit code."""
    if getattr(config, "event_loop", "uvloop") == "uvloop":
        import uvloop

        runner: Callable[[Coroutine[Any, Any, int]], int] = uvloop.run
    else:
        runner = asyncio.run
    return runner(_main(config))


async def _main(config: BrokerConfig) -> int:
    broker = Broker(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await broker.start()
    except LogDirLockedError as e:
        log.error("%s", e)
        return 1
    except OSError as e:
        log.error("cannot start: %s", e)
        return 1
    await stop.wait()
    await broker.stop()
    return 0
