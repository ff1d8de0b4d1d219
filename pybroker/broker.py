"""The broker process: wires config, storage, metadata, partitions and the server together,
runs the background tasks (retention, flush, checkpoints) and shuts down cleanly on a signal."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import shutil
import signal
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from pybroker import config as broker_config
from pybroker.apis import load_all
from pybroker.apis.fetch_session import FetchSessions
from pybroker.apis.metadata import TopicMetadataCache
from pybroker.config import ConfigError
from pybroker.coordinator.coordinator import GroupCoordinator
from pybroker.coordinator.offsets_topic import TOPIC as OFFSETS_TOPIC
from pybroker.coordinator.transaction.coordinator import TransactionCoordinator
from pybroker.coordinator.transaction.service import start_transaction_coordinator
from pybroker.metadata.image import BrokerRegistration, MetadataImage
from pybroker.metadata.local import LocalMetadataPublisher
from pybroker.metadata.store import InvalidTopicName, MetadataStore, TopicRecord, validate_topic_name
from pybroker.metrics.recorder import BrokerMetrics
from pybroker.protocol.api import REQUESTS
from pybroker.protocol.errors import ErrorCode, KafkaError
from pybroker.protocol.memory_pool import MemoryPool
from pybroker.replication.partition import Partition
from pybroker.replication.replica_manager import ReplicaManager
from pybroker.security.authorizer import Authorizer, authorizer_from_config
from pybroker.security.context import SASL_SSL, uses_sasl, uses_ssl
from pybroker.security.sasl_config import build_listener_config
from pybroker.security.scram import ScramCredential, ScramMechanism
from pybroker.security.ssl_factory import ServerSslFactory, SslConfigError
from pybroker.server import Acceptor, MemoryWaiters, raise_open_file_limit, serve
from pybroker.storage import LogConfig, LogManager
from pybroker.storage.errors import LogDirLockedError, StorageError, io_failure
from pybroker.storage.manager import remove_directories

if TYPE_CHECKING:
    from pybroker.cluster_mode import ClusterMode
    from pybroker.config import BrokerConfig

log = logging.getLogger(__name__)

# Kafka's controller refuses a request that creates more partitions than this
# (ReplicationControlManager.MAX_PARTITIONS_PER_BATCH) or that would write more metadata records
# than this (QuorumController.MAX_RECORDS_PER_USER_OP); both are POLICY_VIOLATION for the whole request.
MAX_PARTITIONS_PER_BATCH = 10_000
MAX_RECORDS_PER_USER_OP = 10_000
TOO_MANY_PARTITIONS = "Excessively large number of partitions per request."
TOO_MANY_RECORDS = "Unable to perform excessively large batch operation."
BUILD_THREADS = 8  # threads creating a new topic's partition files
# Up to this many partitions are created inline; more go to an executor thread.
SYNC_CREATE_PARTITIONS = 16
# Kafka spells "never" as Long.MAX_VALUE; intervals at or above this do not get a task at all.
NEVER_MS = 2**40


def new_topic_records(num_partitions: int, configs: dict[str, str | None]) -> int:
    """The metadata records Kafka's controller writes to create a topic: a TopicRecord, a
    ConfigRecord per config set, a PartitionRecord per partition."""
    return 1 + sum(1 for value in configs.values() if value is not None) + num_partitions


def check_creation_limits(partitions: int, records: int) -> None:
    """Kafka's controller limits for one request creating ``partitions`` partitions with
    ``records`` metadata records; raises POLICY_VIOLATION, which applies to the whole request."""
    if partitions > MAX_PARTITIONS_PER_BATCH:
        raise KafkaError(ErrorCode.POLICY_VIOLATION, TOO_MANY_PARTITIONS)
    if records > MAX_RECORDS_PER_USER_OP:
        raise KafkaError(ErrorCode.POLICY_VIOLATION, TOO_MANY_RECORDS)


def _log_failure(what: str):
    def done(fut: asyncio.Future) -> None:
        if not fut.cancelled() and fut.exception() is not None:
            log.error("%s failed: %s", what, fut.exception())

    return done


@contextlib.contextmanager
def storage_errors_as_kafka_errors(what: str):
    """A disk that refuses a metadata or partition write answers KAFKA_STORAGE_ERROR for that
    topic (Kafka's answer for a failed log directory), not an internal error."""
    try:
        yield
    except StorageError as e:
        raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"{what} failed: {e}") from e
    except OSError as e:
        raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"{what} failed: {e.strerror or e}") from e


class TopicLocks:
    """One ``asyncio.Lock`` per topic name, kept while someone holds or awaits it.

    Kafka's controller applies admin changes one after another; here CreateTopics and
    CreatePartitions await partition files being made in a thread, so without this a concurrent
    CreatePartitions, DeleteTopics or CreateTopics of the same topic could interleave with them
    (two requests building the same partition directory, a topic deleted under a growing one)."""

    def __init__(self) -> None:
        self._locks: dict[str, asyncio.Lock] = {}
        self._users: dict[str, int] = {}

    @contextlib.asynccontextmanager
    async def hold(self, name: str, timeout_ms: int | None = None):
        """Hold the topic's lock; with ``timeout_ms`` (the request's own timeout) a request that
        cannot have it in time gets REQUEST_TIMED_OUT, as a controller operation past its
        deadline does in Kafka, instead of queueing behind a long one without limit."""
        lock = self._locks.get(name)
        if lock is None:
            lock = self._locks[name] = asyncio.Lock()
        self._users[name] = self._users.get(name, 0) + 1
        try:
            if timeout_ms is None or not lock.locked():
                await lock.acquire()
            else:
                try:
                    await asyncio.wait_for(lock.acquire(), max(timeout_ms, 0) / 1000)
                except TimeoutError:
                    raise KafkaError(
                        ErrorCode.REQUEST_TIMED_OUT,
                        f"Timed out waiting for another change of topic {name} to finish.",
                    ) from None
            try:
                yield
            finally:
                lock.release()
        finally:
            self._users[name] -= 1
            if not self._users[name]:
                del self._users[name], self._locks[name]

    def __len__(self) -> int:
        return len(self._locks)


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
        self.metadata_cache = TopicMetadataCache()  # encoded Metadata topic entries
        self.metadata_publisher.listeners.append(self.metadata_cache.invalidate)
        self._tasks: list[asyncio.Task] = []
        self._creating: set[str] = set()  # topics whose partitions are being created right now
        self.topic_locks = TopicLocks()  # admin changes to one topic run one at a time
        self.group_coordinator: GroupCoordinator | None = None
        self.transaction_coordinator: TransactionCoordinator | None = None
        self.fetch_sessions = FetchSessions(config.max_incremental_fetch_session_cache_slots)
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

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        for warning in self.config.warnings:
            log.warning("%s", warning)
        # The log dir locks come first: a directory in use by another process stops start-up here,
        # before meta.properties, metadata or __consumer_offsets are touched.
        log_manager = LogManager(self.log_dirs)
        log_manager.lock_dirs()
        self.log_manager = log_manager
        raise_open_file_limit()  # as Kafka's launch scripts advise: one fd per connection and segment file
        zk_cluster_id = await self.cluster.connect() if self.cluster is not None else None
        self.cluster_id = broker_config.ensure_meta_properties(self.config, zk_cluster_id)
        self.metadata_publisher.set_cluster_id(self.cluster_id)
        self.metadata.load()
        self.metadata.ensure_reserve()
        self.authorizer = authorizer_from_config(self.config, self.metadata)
        self._load_dynamic_configs()
        t0 = time.monotonic()
        # One LogConfig per topic, not per partition (computing it is most of a partition's cost).
        config_of = functools.lru_cache(maxsize=None)(self._log_config_for)
        await asyncio.get_running_loop().run_in_executor(None, self.log_manager.startup, config_of)
        self._open_partitions()
        log.info(
            "loaded %d partitions of %d topics in %.2fs",
            len(self.partitions),
            len(self.metadata.topics),
            time.monotonic() - t0,
        )
        if self.port == 0 or self.advertised_port == 0:
            raise SystemExit("listeners must name a port")
        self.group_coordinator = GroupCoordinator(self)
        await self.group_coordinator.start()
        self.transaction_coordinator = await start_transaction_coordinator(self)
        self.replica_manager.transaction_verifier = self.transaction_coordinator
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

    def _open_partitions(self) -> None:
        assert self.log_manager is not None
        for rec in self.metadata.topics.values():
            cfg = self.log_config(rec)
            min_isr = self._min_insync_replicas(rec)
            for i in range(rec.partitions):
                lg = self.log_manager.get_log(rec.name, i)
                if lg is None:
                    lg = self.log_manager.create_log(rec.name, i, cfg, rec.topic_id)
                elif lg.config != cfg:
                    lg.update_config(cfg)
                self.replica_manager.add_partition(self._new_partition(rec, i, lg, min_isr))
        known = set(self.partitions)
        for lg in list(self.log_manager.all_logs()):
            if (lg.topic, lg.partition) not in known:
                # A log whose topic was deleted (or never committed to metadata) before a crash.
                log.warning("deleting stray log %s-%d with no topic metadata", lg.topic, lg.partition)
                self.log_manager.delete_log(lg.topic, lg.partition)

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

    # -- topics ------------------------------------------------------------------------------
    def _log_config_for(self, topic: str) -> LogConfig:
        rec = self.metadata.topics.get(topic)
        if rec is None:
            return LogConfig(
                **broker_config.log_config_kwargs(broker_config.effective_topic_config(self.config, {}))
            )
        return self.log_config(rec)

    def _new_partition(self, rec: TopicRecord, index: int, lg, min_isr: int | None = None) -> Partition:
        p = Partition(rec.name, index, rec.topic_id, lg, self.node_id)
        p.state_listener = self.metadata_publisher.partition_changed
        self.metadata_publisher.topic_changed(rec.name)  # a partition (re)registered
        p.min_insync_replicas = self._min_insync_replicas(rec) if min_isr is None else min_isr
        p.replica_lag_time_max_ms = self.config.replica_lag_time_max_ms
        if self.cluster is not None and rec.name not in _cluster_local_topics():
            self.cluster.prepare_partition(p)
        return p

    def _min_insync_replicas(self, rec: TopicRecord) -> int:
        return int(broker_config.effective_topic_config(self.config, rec.configs)["min.insync.replicas"])

    def log_config(self, rec: TopicRecord) -> LogConfig:
        effective = broker_config.effective_topic_config(self.config, rec.configs)
        return LogConfig(**broker_config.log_config_kwargs(effective))

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

    def check_new_topic(
        self, name: str, num_partitions: int, configs: dict[str, str | None]
    ) -> dict[str, str]:
        """Validate a CreateTopics entry; raises KafkaError with the code CreateTopics returns."""
        try:
            validate_topic_name(name)
        except InvalidTopicName as e:
            raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, str(e)) from None
        if name in self.metadata.topics or name in self._creating:
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        if num_partitions <= 0:
            raise KafkaError(ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0.")
        try:
            broker_config.validate_topic_configs(configs)
        except broker_config.ConfigError as e:
            raise KafkaError(ErrorCode.INVALID_CONFIG, str(e)) from None
        return {k: v for k, v in configs.items() if v is not None}

    def create_topic(self, name: str, num_partitions: int, configs: dict[str, str | None]) -> TopicRecord:
        """Create a small topic at once, on the loop (auto-creation: num.partitions partitions)."""
        kept = self.check_new_topic(name, num_partitions, configs)
        check_creation_limits(num_partitions, new_topic_records(num_partitions, kept))
        with storage_errors_as_kafka_errors(f"creating topic {name}"):
            rec = self.metadata.add_topic(name, num_partitions, kept)
            try:
                self._create_partitions(rec, 0, num_partitions)
            except BaseException:
                self._undo_topic(rec)
                raise
        log.info("created topic %s (id %s) with %d partitions", name, rec.topic_id, num_partitions)
        return rec

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
        """CreateTopics: the partitions' files are made in an executor thread, so a topic with
        thousands of partitions does not stall other clients; the topic becomes visible (metadata,
        partitions) only once every log exists."""
        if self.cluster is not None:
            kept = self.check_new_topic(name, num_partitions, configs)
            return await self.cluster.create_topic(
                name,
                num_partitions,
                kept,
                replication_factor=replication_factor,
                assignments=assignments,
                validate_only=validate_only,
                timeout_ms=timeout_ms,
            )
        if validate_only:
            self.check_new_topic(name, num_partitions, configs)
            return None
        async with self.topic_locks.hold(name, timeout_ms):
            kept = self.check_new_topic(name, num_partitions, configs)
            if num_partitions <= SYNC_CREATE_PARTITIONS:
                return self.create_topic(name, num_partitions, kept)
            topic_id = uuid.uuid4()
            cfg = LogConfig(
                **broker_config.log_config_kwargs(broker_config.effective_topic_config(self.config, kept))
            )
            self._creating.add(name)
            try:
                with storage_errors_as_kafka_errors(f"creating topic {name}"):
                    logs = await self._build_logs(name, range(num_partitions), cfg, topic_id)
                    try:
                        rec = self.metadata.add_topic(name, num_partitions, kept, topic_id=topic_id)
                    except BaseException:
                        self._discard_logs(logs)
                        raise
            finally:
                self._creating.discard(name)
            self._register_partitions(rec, logs)
            log.info("created topic %s (id %s) with %d partitions", name, rec.topic_id, num_partitions)
            return rec

    async def _build_logs(self, topic: str, indexes: range, cfg: LogConfig, topic_id: uuid.UUID) -> list:
        lm = self.log_manager
        assert lm is not None
        placed = [(i, lm.choose_log_dir()) for i in indexes]
        now_ms = int(time.time() * 1000)
        built: list = []

        def build_one(item: tuple[int, Path]) -> None:
            i, d = item
            built.append((lm.build_log(d, topic, i, cfg, topic_id, now_ms), d))

        def build() -> None:
            # Each new partition costs a few fsyncs (files, then directories); on several threads
            # they wait on the disk together (fsync releases the GIL) instead of one after another.
            with ThreadPoolExecutor(max_workers=BUILD_THREADS, thread_name_prefix="log-create") as pool:
                for _ in pool.map(build_one, placed):
                    pass  # re-raises the first failure

        try:
            await asyncio.get_running_loop().run_in_executor(None, build)
        except BaseException:
            self._discard_logs(built)  # leave no half-created topic behind
            raise
        return built

    @staticmethod
    def _discard_logs(logs: list) -> None:
        """Remove partitions made for a change that did not happen (their files go, errors or not)."""
        for lg, _ in logs:
            try:
                lg.close(durable=False)
            except OSError:
                pass
            shutil.rmtree(lg.directory, ignore_errors=True)

    def _undo_topic(self, rec: TopicRecord) -> None:
        """A topic recorded whose partitions could not all be made: forget it again."""
        assert self.log_manager is not None
        for i in range(rec.partitions):
            if self.replica_manager.remove_partition(rec.name, i) is not None:
                self.log_manager.delete_log(rec.name, i)
        try:
            self.metadata.remove_topic(rec.name)
        except StorageError:
            log.error("topic %s could not be created and its record could not be removed", rec.name)
        self.metadata_publisher.topic_changed(rec.name)

    def _register_partitions(self, rec: TopicRecord, logs: list) -> None:
        assert self.log_manager is not None
        min_isr = self._min_insync_replicas(rec)
        cfg = self.log_config(rec)  # the topic's configs may have changed while the files were made
        for lg, d in logs:
            if lg.config != cfg:
                lg.update_config(cfg)
            self.log_manager.register_log(lg, d, rec.topic_id)
            self.replica_manager.add_partition(self._new_partition(rec, lg.partition, lg, min_isr))

    def _create_partitions(self, rec: TopicRecord, start: int, end: int) -> None:
        assert self.log_manager is not None
        cfg = self.log_config(rec)
        min_isr = self._min_insync_replicas(rec)
        for i in range(start, end):
            lg = self.log_manager.create_log(rec.name, i, cfg, rec.topic_id)
            self.replica_manager.add_partition(self._new_partition(rec, i, lg, min_isr))

    def auto_create_topic(self, name: str) -> TopicRecord | None:
        if not self.config.auto_create_topics_enable:
            return None
        if name == OFFSETS_TOPIC and self.group_coordinator is not None:
            # Kafka's AutoTopicCreationManager gives it the coordinator's partitions and configs.
            self.group_coordinator.ensure_offsets_topic()
            return self.metadata.topics.get(name)
        if self.cluster is not None:
            self.cluster.auto_create_topic(name)
            return None
        try:
            return self.create_topic(name, self.config.num_partitions, {})
        except KafkaError:
            return None

    def delete_topic(self, name: str) -> None:
        assert self.log_manager is not None
        rec = self.metadata.topics.get(name)
        if rec is None:
            raise KafkaError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition."
            )
        if not self.config.delete_topic_enable:
            raise KafkaError(ErrorCode.TOPIC_DELETION_DISABLED, "Topic deletion is disabled.")
        with storage_errors_as_kafka_errors(f"deleting topic {name}"):
            self.metadata.remove_topic(name)
        self.metrics.forget_topic(name)
        for i in range(rec.partitions):
            p = self.replica_manager.remove_partition(name, i)
            if p is not None:
                p.close()
            self.log_manager.delete_log(name, i)
        log.info("deleted topic %s", name)
        if self.group_coordinator is not None:  # its committed offsets go too (Kafka: onTopicsDeleted)
            try:
                self.group_coordinator.on_topics_deleted([name])
            except StorageError as e:
                # A full disk: the topic is gone; the offsets' tombstones could not be written.
                log.error("deleted topic %s, but not its committed offsets: %s", name, e)

    async def delete_topic_async(
        self, name: str, topic_id: uuid.UUID | None = None, timeout_ms: int | None = None
    ) -> None:
        """DeleteTopics: waits for any CreateTopics/CreatePartitions of the topic in progress;
        ``topic_id``, when the request named the topic by id, must still be the topic's id then."""
        if self.cluster is not None:
            await self.cluster.delete_topic(name, topic_id, timeout_ms)
            return
        async with self.topic_locks.hold(name, timeout_ms):
            rec = self.metadata.topics.get(name)
            if topic_id is not None and (rec is None or rec.topic_id != topic_id):
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_ID, "unknown topic id")
            self.delete_topic(name)

    async def add_partitions(
        self,
        name: str,
        total: int,
        *,
        validate_only: bool = False,
        timeout_ms: int | None = None,
        assignments: list[list[int]] | None = None,
    ) -> None:
        if self.cluster is not None:
            await self.cluster.add_partitions(
                name, total, assignments=assignments, validate_only=validate_only, timeout_ms=timeout_ms
            )
            return
        if validate_only:
            self._check_new_partition_count(name, total)
            return
        async with self.topic_locks.hold(name, timeout_ms):
            rec = self._check_new_partition_count(name, total)
            old = rec.partitions
            self._creating.add(name)
            try:
                with storage_errors_as_kafka_errors(f"adding partitions to {name}"):
                    logs = await self._build_logs(name, range(old, total), self.log_config(rec), rec.topic_id)
                    try:
                        self.metadata.set_partitions(name, total)
                    except BaseException:
                        self._discard_logs(logs)
                        raise
            finally:
                self._creating.discard(name)
            self._register_partitions(rec, logs)
            log.info("topic %s now has %d partitions", name, total)

    def _check_new_partition_count(self, name: str, total: int) -> TopicRecord:
        """The topic a CreatePartitions entry names; raises KafkaError with Kafka's answer."""
        rec = self.metadata.topics.get(name)
        if rec is None or name in self._creating:
            raise KafkaError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition."
            )
        if total < rec.partitions:
            raise KafkaError(
                ErrorCode.INVALID_PARTITIONS,
                f"The topic {name} currently has {rec.partitions} partition(s); {total} would not be an increase.",
            )
        if total == rec.partitions:
            # Kafka 4.3.1's controller words, measured (compat_tests/scenarios/test_admin_concurrency.py).
            raise KafkaError(ErrorCode.INVALID_PARTITIONS, f"Topic already has {rec.partitions} partition(s).")
        if total - rec.partitions > MAX_RECORDS_PER_USER_OP:  # a PartitionRecord per new partition
            raise KafkaError(ErrorCode.POLICY_VIOLATION, TOO_MANY_RECORDS)
        return rec

    def set_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        rec = self.metadata.topics[name]
        with storage_errors_as_kafka_errors(f"changing the configs of {name}"):
            self.metadata.set_configs(name, configs)
        cfg = self.log_config(rec)
        min_isr = self._min_insync_replicas(rec)
        for i in range(rec.partitions):
            p = self.partitions.get((name, i))
            if p is not None:
                p.log.update_config(cfg)
                p.min_insync_replicas = min_isr

    # -- dynamic broker configs ----------------------------------------------------------------
    def dynamic_config_level(self, resource_name: str) -> broker_config.ConfigSource:
        """The level a BROKER resource name addresses: "" the cluster default, the node id this broker."""
        if resource_name == "":
            return broker_config.ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
        return broker_config.ConfigSource.DYNAMIC_BROKER_CONFIG

    def set_dynamic_broker_configs(self, resource_name: str, configs: dict[str, str]) -> None:
        """Replace the dynamic configs of the cluster default ("") or of this broker (its node id):
        validated (ConfigError), persisted, then applied to every topic that does not override them."""
        self.config.set_dynamic(self.dynamic_config_level(resource_name), configs)
        self.metadata.set_broker_configs(resource_name, configs)
        log.info(
            "dynamic broker configs of %s now %s",
            "the cluster default" if resource_name == "" else f"broker {resource_name}",
            configs,
        )
        self._apply_topic_defaults()

    def _load_dynamic_configs(self) -> None:
        for resource_name in ("", str(self.node_id)):
            stored = self.metadata.broker_configs.get(resource_name)
            if not stored:
                continue
            level = self.dynamic_config_level(resource_name)
            kept = dict(stored)
            for key in list(stored):
                try:
                    self.config.validate_dynamic(level, {key: stored[key]})
                except broker_config.ConfigError as e:
                    log.warning("ignoring stored dynamic config %s of %r: %s", key, resource_name, e)
                    kept.pop(key)
            self.config.set_dynamic(level, kept)
            log.info("dynamic broker configs of %r: %s", resource_name, kept)

    def _apply_topic_defaults(self) -> None:
        """New broker defaults reach every open log and partition (topic overrides still win)."""
        for rec in self.metadata.topics.values():
            cfg = self.log_config(rec)
            min_isr = self._min_insync_replicas(rec)
            for i in range(rec.partitions):
                p = self.partitions.get((rec.name, i))
                if p is not None:
                    if p.log.config != cfg:
                        p.log.update_config(cfg)
                    p.min_insync_replicas = min_isr

    def new_topic_id(self) -> uuid.UUID:
        return uuid.uuid4()


def _cluster_local_topics() -> frozenset[str]:
    from pybroker.cluster_mode import LOCAL_TOPICS

    return LOCAL_TOPICS


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

        runner = uvloop.run
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
