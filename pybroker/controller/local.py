"""The controller of a single broker (no ``zookeeper.connect``): it is its own controller, and applies
topic and partition changes (CreateTopics, DeleteTopics, CreatePartitions, topic and broker configs)
at once to its metadata store, its logs and its replica manager.

The handlers reach it through the ``TopicAdmin`` interface (apis/services.py); the metadata image
they read follows through the store's and the partitions' listeners (metadata/local.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pybroker import config as broker_config
from pybroker.controller.assignment import check_reassignment_target
from pybroker.controller.election import unknown_partition
from pybroker.controller.limits import (
    MAX_RECORDS_PER_USER_OP,
    TOO_MANY_RECORDS,
    check_creation_limits,
    new_topic_records,
)
from pybroker.metadata.local import MetadataPublisher
from pybroker.metadata.store import InvalidTopicName, MetadataStore, TopicRecord, validate_topic_name
from pybroker.protocol.errors import ErrorCode, KafkaError
from pybroker.replication.partition import Partition
from pybroker.replication.replica_manager import ReplicaManager
from pybroker.storage import LogConfig, LogManager
from pybroker.storage.errors import StorageError

if TYPE_CHECKING:
    from pybroker.config import BrokerConfig
    from pybroker.metrics.recorder import BrokerMetrics

log = logging.getLogger(__name__)

BUILD_THREADS = 8  # threads creating a new topic's partition files
# Up to this many partitions are created inline; more go to an executor thread.
SYNC_CREATE_PARTITIONS = 16


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


class LocalController:
    """Topic administration of a broker that is its own controller (Kafka's controller, in small)."""

    def __init__(
        self,
        config: BrokerConfig,
        store: MetadataStore,
        replica_manager: ReplicaManager,
        publisher: MetadataPublisher,
        metrics: BrokerMetrics,
    ) -> None:
        self.config = config
        self.node_id = config.node_id
        self.metadata = store
        self.replica_manager = replica_manager
        self.publisher = publisher
        self.metrics = metrics
        self.log_manager: LogManager | None = None  # set once the log directories are locked
        self._creating: set[str] = set()  # topics whose partitions are being created right now
        self.topic_locks = TopicLocks()  # admin changes to one topic run one at a time
        # Told the names of deleted topics (the group coordinator drops their committed offsets).
        self.topics_deleted_listeners: list[Callable[[list[str]], Any]] = []
        # Internal topics made by their coordinator when auto-created (__consumer_offsets).
        self.internal_topic_creators: dict[str, Callable[[], None]] = {}

    def load_partitions(self) -> None:
        """At start-up: a Partition for every partition of every recorded topic, logs made or
        reconfigured as needed, and stray logs of topics no longer recorded deleted."""
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
        known = set(self.replica_manager.partitions)
        for lg in list(self.log_manager.all_logs()):
            if (lg.topic, lg.partition) not in known:
                # A log whose topic was deleted (or never committed to metadata) before a crash.
                log.warning("deleting stray log %s-%d with no topic metadata", lg.topic, lg.partition)
                self.log_manager.delete_log(lg.topic, lg.partition)

    # -- topics ------------------------------------------------------------------------------
    def log_config_for(self, topic: str) -> LogConfig:
        rec = self.metadata.topics.get(topic)
        if rec is None:
            return LogConfig(
                **broker_config.log_config_kwargs(broker_config.effective_topic_config(self.config, {}))
            )
        return self.log_config(rec)

    def _new_partition(self, rec: TopicRecord, index: int, lg, min_isr: int | None = None) -> Partition:
        p = Partition(rec.name, index, rec.topic_id, lg, self.node_id)
        p.state_listener = self.publisher.partition_changed
        self.publisher.topic_changed(rec.name)  # a partition (re)registered
        p.min_insync_replicas = self._min_insync_replicas(rec) if min_isr is None else min_isr
        p.replica_lag_time_max_ms = self.config.replica_lag_time_max_ms
        return p

    def _min_insync_replicas(self, rec: TopicRecord) -> int:
        return int(broker_config.effective_topic_config(self.config, rec.configs)["min.insync.replicas"])

    def log_config(self, rec: TopicRecord) -> LogConfig:
        effective = broker_config.effective_topic_config(self.config, rec.configs)
        return LogConfig(**broker_config.log_config_kwargs(effective))

    def topic(self, name: str) -> TopicRecord | None:
        return self.metadata.topics.get(name)

    def check_new_topic(
        self, name: str, num_partitions: int, configs: Mapping[str, str | None]
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

    def create_topic(self, name: str, num_partitions: int, configs: Mapping[str, str | None]) -> TopicRecord:
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
        partitions) only once every log exists.  ``replication_factor``/``assignments``: one replica,
        this broker (the handler has refused anything else)."""
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
        self.publisher.topic_changed(rec.name)

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
        creator = self.internal_topic_creators.get(name)
        if creator is not None:
            # Kafka's AutoTopicCreationManager gives it the coordinator's partitions and configs.
            creator()
            return self.metadata.topics.get(name)
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
        for listener in self.topics_deleted_listeners:  # committed offsets go too (Kafka: onTopicsDeleted)
            try:
                listener([name])
            except StorageError as e:
                # A full disk: the topic is gone; the offsets' tombstones could not be written.
                log.error("deleted topic %s, but not its committed offsets: %s", name, e)

    async def delete_topic_async(
        self, name: str, topic_id: uuid.UUID | None = None, timeout_ms: int | None = None
    ) -> None:
        """DeleteTopics: waits for any CreateTopics/CreatePartitions of the topic in progress;
        ``topic_id``, when the request named the topic by id, must still be the topic's id then."""
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
            raise KafkaError(
                ErrorCode.INVALID_PARTITIONS, f"Topic already has {rec.partitions} partition(s)."
            )
        if total - rec.partitions > MAX_RECORDS_PER_USER_OP:  # a PartitionRecord per new partition
            raise KafkaError(ErrorCode.POLICY_VIOLATION, TOO_MANY_RECORDS)
        return rec

    async def alter_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        self.set_topic_configs(name, configs)

    def set_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        rec = self.metadata.topics[name]
        with storage_errors_as_kafka_errors(f"changing the configs of {name}"):
            self.metadata.set_configs(name, configs)
        cfg = self.log_config(rec)
        min_isr = self._min_insync_replicas(rec)
        for i in range(rec.partitions):
            p = self.replica_manager.partitions.get((name, i))
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

    def load_dynamic_configs(self) -> None:
        """At start-up, before the logs load: the stored dynamic broker configs (a stored value no
        longer valid is skipped with a warning)."""
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
                p = self.replica_manager.partitions.get((rec.name, i))
                if p is not None:
                    if p.log.config != cfg:
                        p.log.update_config(cfg)
                    p.min_insync_replicas = min_isr

    # -- leadership and replica placement (ElectLeaders, partition reassignments) ----------------
    # One broker leads every partition it has, each with one replica: an election is never needed,
    # and the only valid assignment is this broker.  Kafka's controller answers the same.
    def _known(self, tp: tuple[str, int]) -> bool:
        rec = self.metadata.topics.get(tp[0])
        return rec is not None and 0 <= tp[1] < rec.partitions

    def _all_partitions(self) -> list[tuple[str, int]]:
        return [(rec.name, i) for rec in self.metadata.topics.values() for i in range(rec.partitions)]

    async def elect_leaders(
        self, partitions: list[tuple[str, int]] | None, election_type: int, timeout_ms: int | None = None
    ) -> dict[tuple[str, int], KafkaError | None]:
        wanted = self._all_partitions() if partitions is None else partitions
        return {
            tp: KafkaError(ErrorCode.ELECTION_NOT_NEEDED)
            if self._known(tp)
            else unknown_partition(tp, tp[0] in self.metadata.topics)
            for tp in wanted
        }

    async def alter_partition_reassignments(
        self,
        reassignments: dict[tuple[str, int], list[int] | None],
        allow_replication_factor_change: bool = True,
        timeout_ms: int | None = None,
    ) -> dict[tuple[str, int], KafkaError | None]:
        results: dict[tuple[str, int], KafkaError | None] = {}
        for tp, target in reassignments.items():
            if not self._known(tp):
                results[tp] = KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            elif target is None:
                results[tp] = KafkaError(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS)
            else:
                results[tp] = check_reassignment_target(target, {self.node_id}, 1, allow_replication_factor_change)
        return results

    async def list_partition_reassignments(
        self, partitions: set[tuple[str, int]] | None = None, timeout_ms: int | None = None
    ) -> dict[tuple[str, int], tuple[list[int], list[int], list[int]]]:
        return {}

    def new_topic_id(self) -> uuid.UUID:
        return uuid.uuid4()

