"""Kafka's ZooKeeper operations over kazoo (Kafka's KafkaZkClient and AdminZkClient, ZK mode).

Every method blocks on ZooKeeper: call them from a worker thread (the controller and the metadata
loader run them in an executor), never on the event loop.

Fencing, as Kafka does it:
- the controller's writes go in a multi-op transaction whose first op checks ``/controller_epoch``'s
  znode version; a controller that lost the election fails that check (``ControllerMovedError``);
- partition state writes are conditional on the state znode's version (the partition epoch); a stale
  version fails (``BadVersionError`` from the controller's writes, ``KafkaError`` from ``alter_isr``).
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
    RuntimeInconsistency,
)
from kazoo.protocol.states import WatchedEvent
from kazoo.retry import KazooRetry

from pybroker.controller import zk_data as z
from pybroker.controller.assignment import assign_replicas_to_brokers
from pybroker.controller.zk_data import BrokerInfo, LeaderAndIsr, ReplicaAssignment, TopicAssignment
from pybroker.protocol.errors import ErrorCode, KafkaError

logger = logging.getLogger(__name__)

Watcher = Callable[[WatchedEvent], None]
T = TypeVar("T")


class ZkTransaction(Protocol):
    """What the controller's fenced writes use of kazoo's TransactionRequest (kazoo has no type hints)."""

    def check(self, path: str, version: int) -> None: ...
    def create(self, path: str, value: bytes = b"") -> None: ...
    def set_data(self, path: str, value: bytes, version: int = -1) -> None: ...
    def delete(self, path: str, version: int = -1) -> None: ...
    def commit(self) -> list[Any]: ...
    def commit_async(self) -> Any: ...  # an IAsyncResult whose get() is commit()'s list


class BrokerIdInUseError(Exception):
    """/brokers/ids/<id> belongs to another session (Kafka fails start-up with NodeExistsException)."""


class ControllerMovedError(Exception):
    """A controller write failed its /controller_epoch check: another controller was elected."""


def _check_controller_epoch(result: Any, epoch_zk_version: int) -> None:
    """The result of a transaction's first op, the check of /controller_epoch's version. When a later op
    fails, ZooKeeper answers the ops before it RolledBackError: the check itself passed, and the later
    op's own error (BadVersionError of a stale partition state) is the caller's to handle. Any other
    error is the check's: another controller was elected."""
    if isinstance(result, Exception) and not isinstance(result, RolledBackError):
        raise ControllerMovedError(
            f"controller epoch znode version is no longer {epoch_zk_version}: another controller was elected"
        )


def _transaction_error(results: list[Any]) -> Exception | None:
    """The error of the op that failed a transaction: the ops before it are answered RolledBackError and
    those after it RuntimeInconsistency, which say nothing of the cause."""
    for result in results:
        if isinstance(result, Exception) and not isinstance(result, (RolledBackError, RuntimeInconsistency)):
            return result
    return None


class KafkaZkClient:
    """One ZooKeeper session (a kazoo client) with Kafka's znode operations."""

    def __init__(
        self,
        connect: str,
        *,
        session_timeout_ms: int = 18000,
        connection_timeout_ms: int | None = None,
    ) -> None:
        self.connect = connect
        self.session_timeout_ms = session_timeout_ms
        self.connection_timeout_ms = connection_timeout_ms or session_timeout_ms
        # A lost connection is retried for ever: the session decides when this broker is gone.
        self.kazoo = KazooClient(
            hosts=connect, timeout=session_timeout_ms / 1000, connection_retry={"max_tries": -1, "max_delay": 1},
        )
        # Kafka's ZooKeeperClient retries a request through connection losses until the session expires:
        # ``call`` does the same (a lost session is not retried: the caller's identity went with it).
        self._command_retry = KazooRetry(
            max_tries=-1, delay=0.05, max_delay=1.0, ignore_expire=False,
            deadline=max(1.0, session_timeout_ms / 1000 * 1.5),
        )
        self._registration: BrokerInfo | None = None
        # The czxid of this broker's current registration: a new session registers again, so it changes.
        self.broker_epoch = -1
        self._state_listeners: list[Callable[[str], None]] = []
        self._lost = False
        self._lock = threading.Lock()
        self.kazoo.add_listener(self._on_state)

    # -- session

    def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` retried through connection losses (ConnectionLoss, OperationTimeout).
        A write retried after a loss may have been applied once already: callers re-read on BadVersion
        or NodeExists, as Kafka's controller does."""
        return self._command_retry.copy()(fn, *args, **kwargs)

    def start(self) -> None:
        self.kazoo.start(timeout=self.connection_timeout_ms / 1000)
        self.create_top_level_paths()

    def close(self) -> None:
        try:
            self.kazoo.stop()
        finally:
            self.kazoo.close()

    @property
    def session_id(self) -> int | None:
        client_id = self.kazoo.client_id
        return client_id[0] if client_id else None

    def add_state_listener(self, listener: Callable[[str], None]) -> None:
        """``listener("expired")`` when the session was lost (ephemeral znodes are gone) and
        ``listener("new_session")`` once a new session is established after that. Runs on a kazoo thread."""
        self._state_listeners.append(listener)

    def _on_state(self, state: str) -> None:
        # Runs on kazoo's connection thread: it must not block, so work goes to a handler thread.
        if state == KazooState.LOST:
            with self._lock:
                self._lost = True
            self._notify("expired")
        elif state == KazooState.CONNECTED:
            with self._lock:
                renewed, self._lost = self._lost, False
            if renewed:
                self.kazoo.handler.spawn(self._after_new_session)

    def _after_new_session(self) -> None:
        if self._registration is not None:
            try:
                self.register_broker(self._registration)
            except Exception:  # noqa: BLE001 - logged; the next session change retries
                logger.exception("re-registering broker %d after a new session failed", self._registration.broker_id)
        self._notify("new_session")

    def _notify(self, what: str) -> None:
        for listener in list(self._state_listeners):
            try:
                listener(what)
            except Exception:  # noqa: BLE001 - a listener's failure must not stop the others
                logger.exception("ZooKeeper state listener failed")

    def create_top_level_paths(self) -> None:
        for path in z.PERSISTENT_PATHS:
            self.kazoo.ensure_path(path)

    # -- brokers

    def register_broker(self, info: BrokerInfo) -> int:
        """Create /brokers/ids/<id> (ephemeral); returns the broker epoch (the znode's czxid). A znode
        left by another session raises BrokerIdInUseError."""
        path = z.broker_path(info.broker_id)
        try:
            self.kazoo.create(path, info.encode(), ephemeral=True, makepath=True)
        except NodeExistsError:
            data, stat = self.kazoo.get(path)
            if stat.ephemeralOwner != self.session_id:
                raise BrokerIdInUseError(
                    f"broker id {info.broker_id} is registered by another ZooKeeper session ({path}); "
                    "another broker has this id, or this broker's previous session has not expired yet"
                ) from None
        self._registration = info
        _, stat = self.kazoo.get(path)
        self.broker_epoch = stat.czxid
        return stat.czxid

    def get_all_brokers(self, watch: Watcher | None = None) -> dict[int, BrokerInfo]:
        brokers: dict[int, BrokerInfo] = {}
        for child in self.kazoo.get_children(z.BROKER_IDS_PATH, watch=watch):
            try:
                data, stat = self.kazoo.get(z.broker_path(int(child)))
            except (NoNodeError, ValueError):
                continue  # gone between the listing and the read
            brokers[int(child)] = BrokerInfo.decode(int(child), data, stat.czxid)
        return brokers

    # -- controller election

    def get_controller_id(self, watch: Watcher | None = None) -> int | None:
        stat = self.kazoo.exists(z.CONTROLLER_PATH, watch=watch)
        if stat is None:
            return None
        try:
            data, _ = self.kazoo.get(z.CONTROLLER_PATH)
        except NoNodeError:
            return None
        return z.decode_controller(data)

    def get_controller_epoch(self) -> tuple[int, int] | None:
        """(epoch, znode version) of /controller_epoch, or None before the first election."""
        try:
            data, stat = self.kazoo.get(z.CONTROLLER_EPOCH_PATH)
        except NoNodeError:
            return None
        return z.decode_controller_epoch(data), stat.version

    def register_controller_and_increment_epoch(self, broker_id: int) -> tuple[int, int] | None:
        """Kafka's registerControllerAndIncrementControllerEpoch: create /controller and bump
        /controller_epoch in one transaction. Returns (new epoch, its znode version), or None when another
        broker is the controller."""
        while True:
            current = self.get_controller_epoch()
            if current is None:
                try:
                    self.kazoo.create(z.CONTROLLER_EPOCH_PATH, z.encode_controller_epoch(z.INITIAL_CONTROLLER_EPOCH))
                except NodeExistsError:
                    pass
                continue
            epoch, version = current
            transaction = self.kazoo.transaction()
            transaction.create(z.CONTROLLER_PATH, z.encode_controller(broker_id), ephemeral=True)
            transaction.set_data(z.CONTROLLER_EPOCH_PATH, z.encode_controller_epoch(epoch + 1), version=version)
            results = transaction.commit()
            if not any(isinstance(r, Exception) for r in results):
                return epoch + 1, version + 1
            if isinstance(results[0], NodeExistsError):
                # Ours already if an earlier attempt succeeded but its answer was lost with the connection.
                try:
                    _, stat = self.kazoo.get(z.CONTROLLER_PATH)
                except NoNodeError:
                    continue
                if stat.ephemeralOwner == self.session_id and self.get_controller_id() == broker_id:
                    current = self.get_controller_epoch()
                    if current is not None:
                        return current
                return None  # someone else is the controller
            if isinstance(results[1], BadVersionError):
                continue  # the epoch moved under us: read it again
            raise _transaction_error(results) or RuntimeError(f"controller election failed: {results}")

    def _controller_transaction(self, epoch_zk_version: int, build: Callable[[ZkTransaction], None]) -> list[Any]:
        """Run ops in a transaction fenced by /controller_epoch's version (Kafka's checkControllerEpoch).
        The results are kazoo's, one per op built: a ZnodeStat for set_data, the path for create, True for delete."""
        transaction: ZkTransaction = self.kazoo.transaction()
        transaction.check(z.CONTROLLER_EPOCH_PATH, epoch_zk_version)
        build(transaction)
        results = transaction.commit()
        _check_controller_epoch(results[0], epoch_zk_version)
        error = _transaction_error(results)
        if error is not None:
            raise error
        return results[1:]

    # -- topics

    def get_all_topics(self, watch: Watcher | None = None) -> list[str]:
        return sorted(self.kazoo.get_children(z.TOPICS_PATH, watch=watch))

    def get_topic_assignment(self, topic: str, watch: Watcher | None = None) -> TopicAssignment | None:
        try:
            data, _ = self.kazoo.get(z.topic_path(topic), watch=watch)
        except NoNodeError:
            return None
        return TopicAssignment.decode(topic, data)

    def get_topic_config(self, topic: str) -> dict[str, str]:
        try:
            data, _ = self.kazoo.get(z.topic_config_path(topic))
        except NoNodeError:
            return {}
        return z.decode_topic_config(data)

    def get_topic_configs(self, topics: Iterable[str]) -> dict[str, dict[str, str]]:
        """get_topic_config of many topics, the reads sent together (one round trip, not one per topic)."""
        pending = [(topic, self.kazoo.get_async(z.topic_config_path(topic))) for topic in topics]
        out: dict[str, dict[str, str]] = {}
        for topic, result in pending:
            try:
                data, _ = result.get()
            except NoNodeError:
                out[topic] = {}
            else:
                out[topic] = z.decode_topic_config(data)
        return out

    def set_topic_config(self, topic: str, config: Mapping[str, str]) -> None:
        """Replace the topic's config znode (/config/topics/<topic>, Kafka's format); every broker's
        metadata loader watches it (ZkMetadataLoader) and applies the change."""
        data = z.encode_topic_config(config)
        try:
            self.call(self.kazoo.set, z.topic_config_path(topic), data)
        except NoNodeError:
            try:
                self.call(self.kazoo.create, z.topic_config_path(topic), data, makepath=True)
            except NodeExistsError:
                self.call(self.kazoo.set, z.topic_config_path(topic), data)

    def create_topic(
        self,
        topic: str,
        num_partitions: int = 1,
        replication_factor: int = 1,
        *,
        assignment: Mapping[int, Iterable[int]] | None = None,
        config: Mapping[str, str] | None = None,
        validate_only: bool = False,
    ) -> TopicAssignment:
        """Kafka's AdminZkClient.createTopic, usable on any broker: place replicas over the live brokers
        (or check a given assignment), write /config/topics/<t> then /brokers/topics/<t>. The controller
        sees the new topic and elects its leaders. Raises KafkaError TOPIC_ALREADY_EXISTS,
        INVALID_REPLICATION_FACTOR, INVALID_PARTITIONS, INVALID_REPLICA_ASSIGNMENT."""
        brokers = self.get_all_brokers()
        if assignment is None:
            placement = assign_replicas_to_brokers(
                {b: info.rack for b, info in brokers.items()}, num_partitions, replication_factor
            )
        else:
            placement = {int(p): list(replicas) for p, replicas in assignment.items()}
            self._validate_assignment(placement, brokers, expected_partitions=range(len(placement)))
        if self.kazoo.exists(z.topic_path(topic)) is not None:
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{topic}' already exists.")
        result = TopicAssignment(
            topic, _new_topic_id(), {p: ReplicaAssignment(tuple(r)) for p, r in placement.items()}
        )
        if validate_only:
            return result
        transaction = self.kazoo.transaction()
        if self.kazoo.exists(z.topic_config_path(topic)) is None:
            transaction.create(z.topic_config_path(topic), z.encode_topic_config(config or {}))
        else:
            transaction.set_data(z.topic_config_path(topic), z.encode_topic_config(config or {}))
        transaction.create(z.topic_path(topic), result.encode())
        results = transaction.commit()
        if any(isinstance(r, NodeExistsError) for r in results):
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{topic}' already exists.")
        error = _transaction_error(results)
        if error is not None:
            raise error
        return result

    def add_partitions(
        self, topic: str, total_count: int, *, assignment: Iterable[Iterable[int]] | None = None,
        validate_only: bool = False,
    ) -> TopicAssignment:
        """CreatePartitions (AdminZkClient.addPartitions): new partitions placed with the topic's
        replication factor, starting after the existing ones; the controller elects their leaders."""
        while True:
            try:
                data, stat = self.kazoo.get(z.topic_path(topic))
            except NoNodeError:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{topic}' does not exist.") from None
            existing = TopicAssignment.decode(topic, data)
            current = len(existing.partitions)
            # Kafka 4.3.1's messages (ReplicationControlManager), as the broker's own pre-check words them:
            # a request that raced another to the same count ends here.
            if total_count < current:
                raise KafkaError(
                    ErrorCode.INVALID_PARTITIONS,
                    f"The topic {topic} currently has {current} partition(s); {total_count} would not be an increase.",
                )
            if total_count == current:
                raise KafkaError(ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partition(s).")
            brokers = self.get_all_brokers()
            rf = len(existing.partitions[0].replicas) if 0 in existing.partitions else 1
            if assignment is None:
                # Kafka's AdminZkClient.addPartitions: continue the round-robin from partition 0's leader.
                first = existing.partitions.get(0)
                ids = sorted(brokers)
                leader0 = first.replicas[0] if first and first.replicas else -1
                start_index = max(0, next((i for i, b in enumerate(ids) if b >= leader0), -1))
                placement = assign_replicas_to_brokers(
                    {b: info.rack for b, info in brokers.items()}, total_count - current, rf,
                    fixed_start_index=start_index, start_partition_id=current,
                )
            else:
                given = [list(r) for r in assignment]
                if len(given) != total_count - current:
                    raise KafkaError(
                        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                        f"Increasing the number of partitions by {total_count - current} but "
                        f"{len(given)} assignments provided.",
                    )
                placement = {current + i: r for i, r in enumerate(given)}
                self._validate_assignment(placement, brokers, expected_partitions=placement.keys())
            updated = existing.with_partitions({p: ReplicaAssignment(tuple(r)) for p, r in placement.items()})
            if validate_only:
                return updated
            try:
                self.kazoo.set(z.topic_path(topic), updated.encode(), version=stat.version)
                return updated
            except BadVersionError:
                continue

    @staticmethod
    def _validate_assignment(
        placement: Mapping[int, list[int]], brokers: Mapping[int, BrokerInfo], expected_partitions: Iterable[int]
    ) -> None:
        if sorted(placement) != sorted(expected_partitions):
            raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Partitions must be consecutive from 0.")
        sizes = {len(r) for r in placement.values()}
        if len(sizes) > 1:
            raise KafkaError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT, "All partitions should have the same number of replicas."
            )
        for p, replicas in placement.items():
            if not replicas or len(set(replicas)) != len(replicas):
                raise KafkaError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Duplicate or empty replica assignment for partition {p}."
                )
            unknown = [r for r in replicas if r not in brokers]
            if unknown:
                raise KafkaError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Unknown broker(s) {unknown} in the assignment of {p}."
                )

    def request_topic_deletion(self, topic: str) -> None:
        """DeleteTopics on any broker: queue /admin/delete_topics/<t>; the controller deletes the topic."""
        if self.kazoo.exists(z.topic_path(topic)) is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{topic}' does not exist.")
        try:
            self.kazoo.create(z.delete_topic_path(topic), b"", makepath=True)
        except NodeExistsError:
            pass  # already queued

    def get_topic_deletions(self, watch: Watcher | None = None) -> list[str]:
        return sorted(self.kazoo.get_children(z.DELETE_TOPICS_PATH, watch=watch))

    # -- partition state

    def get_partition_state(self, topic: str, partition: int, watch: Watcher | None = None) -> LeaderAndIsr | None:
        try:
            data, stat = self.kazoo.get(z.partition_state_path(topic, partition), watch=watch)
        except NoNodeError:
            return None
        return LeaderAndIsr.decode(data, stat.version)

    def get_partition_states(self, topic: str, partitions: Iterable[int]) -> dict[int, LeaderAndIsr]:
        """get_partition_state of many partitions of ``topic``, the reads sent together; a partition
        without a state znode is left out."""
        pending = [(p, self.kazoo.get_async(z.partition_state_path(topic, p))) for p in partitions]
        out: dict[int, LeaderAndIsr] = {}
        for partition, result in pending:
            try:
                data, stat = result.get()
            except NoNodeError:
                continue
            out[partition] = LeaderAndIsr.decode(data, stat.version)
        return out

    def create_partition_states(
        self, epoch_zk_version: int, states: Mapping[tuple[str, int], LeaderAndIsr]
    ) -> dict[tuple[str, int], LeaderAndIsr]:
        """The controller's first state of new partitions (NewPartition -> OnlinePartition)."""
        for topic, partition in states:
            self.kazoo.ensure_path(z.partition_path(topic, partition))

        def build(transaction: ZkTransaction) -> None:
            for (topic, partition), state in states.items():
                transaction.create(z.partition_state_path(topic, partition), state.encode())

        self._controller_transaction(epoch_zk_version, build)
        return {tp: LeaderAndIsr(s.leader, s.leader_epoch, s.isr, s.controller_epoch, 0) for tp, s in states.items()}

    def update_leader_and_isr(
        self, epoch_zk_version: int, topic: str, partition: int, state: LeaderAndIsr
    ) -> LeaderAndIsr:
        """The controller's write of a partition state: fenced by the controller epoch and conditional on
        ``state.zk_version``. Returns the state with its new zk version; BadVersionError when stale."""
        path = z.partition_state_path(topic, partition)
        results = self._controller_transaction(
            epoch_zk_version,
            lambda t: t.set_data(path, state.encode(), version=state.zk_version),
        )
        stat = results[0]
        return LeaderAndIsr(state.leader, state.leader_epoch, state.isr, state.controller_epoch, stat.version)

    def update_leader_and_isr_many(
        self, epoch_zk_version: int, writes: Sequence[tuple[str, int, LeaderAndIsr]]
    ) -> list[LeaderAndIsr | Exception]:
        """Many partition states written at once, as Kafka's ``updateLeaderAndIsr`` pipelines its
        setData requests: one fenced transaction per partition, all sent before any answer is awaited,
        so a broker failure moves every partition's leadership in about one round trip rather than one
        per partition. Per write, the state with its new zk version, or the error (BadVersionError,
        NoNodeError) for the caller to read again; ControllerMovedError if the epoch check failed."""
        pending = []
        for topic, partition, state in writes:
            transaction: ZkTransaction = self.kazoo.transaction()
            transaction.check(z.CONTROLLER_EPOCH_PATH, epoch_zk_version)
            transaction.set_data(z.partition_state_path(topic, partition), state.encode(), version=state.zk_version)
            pending.append((state, transaction.commit_async()))
        out: list[LeaderAndIsr | Exception] = []
        for state, result in pending:
            check, written = result.get()
            _check_controller_epoch(check, epoch_zk_version)
            if isinstance(written, Exception):
                out.append(written)
            else:
                out.append(LeaderAndIsr(state.leader, state.leader_epoch, state.isr, state.controller_epoch, written.version))
        return out

    def set_topic_assignment(self, epoch_zk_version: int, assignment: TopicAssignment) -> None:
        self._controller_transaction(
            epoch_zk_version,
            lambda t: t.set_data(z.topic_path(assignment.topic), assignment.encode()),
        )

    def delete_topic_znodes(self, epoch_zk_version: int, topic: str) -> None:
        """Remove a deleted topic's znodes (the state of each partition, the assignment, its config, the
        deletion request), fenced by the controller epoch."""
        paths: list[str] = []
        for p in self._children(z.partitions_path(topic)):
            paths += [z.partition_state_path(topic, int(p)), z.partition_path(topic, int(p))]
        if self.kazoo.exists(z.partitions_path(topic)) is not None:
            paths.append(z.partitions_path(topic))
        paths.append(z.topic_path(topic))

        def build(transaction: ZkTransaction) -> None:
            for path in paths:
                if self.kazoo.exists(path) is not None:
                    transaction.delete(path)

        try:
            self._controller_transaction(epoch_zk_version, build)
        except (NoNodeError, NotEmptyError):
            pass  # raced with another deletion; the next pass finishes it
        for path in (z.topic_config_path(topic), z.delete_topic_path(topic)):
            try:
                self.kazoo.delete(path)
            except NoNodeError:
                pass

    def _children(self, path: str) -> list[str]:
        try:
            return self.kazoo.get_children(path)
        except NoNodeError:
            return []

    # -- ISR changes by partition leaders

    def alter_isr(
        self, topic: str, partition: int, leader: int, leader_epoch: int, new_isr: Iterable[int], zk_version: int,
    ) -> int:
        """A leader's ISR change (Kafka ZK mode: ReplicationUtils.updateLeaderAndIsr, then a sequential
        /isr_change_notification znode). Conditional on the state's zk version (the partition epoch);
        returns the new version. Raises KafkaError FENCED_LEADER_EPOCH when the leader epoch moved on
        (another leader was elected), INVALID_UPDATE_VERSION when only the zk version is stale,
        NOT_LEADER_OR_FOLLOWER when ``leader`` does not lead the partition, UNKNOWN_TOPIC_OR_PARTITION
        when the partition is gone."""
        isr = tuple(new_isr)
        current = self.get_partition_state(topic, partition)
        if current is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic}-{partition} has no state")
        if current.leader_epoch != leader_epoch:
            raise KafkaError(
                ErrorCode.FENCED_LEADER_EPOCH,
                f"{topic}-{partition}: leader epoch {leader_epoch} is not the current {current.leader_epoch}",
            )
        if current.leader != leader:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"{leader} does not lead {topic}-{partition}")
        if leader not in isr:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "the leader must stay in the ISR")
        state = LeaderAndIsr(leader, leader_epoch, isr, current.controller_epoch, zk_version)
        try:
            stat = self.kazoo.set(z.partition_state_path(topic, partition), state.encode(), version=zk_version)
        except BadVersionError:
            latest = self.get_partition_state(topic, partition)
            if latest is not None and (latest.leader, latest.leader_epoch, latest.isr, latest.zk_version) == (
                leader, leader_epoch, isr, zk_version + 1
            ):
                # Our write, applied by an attempt whose answer was lost with the connection (Kafka's
                # checker for conditional updates).
                self._notify_isr_change(topic, partition)
                return latest.zk_version
            if latest is not None and latest.leader_epoch != leader_epoch:
                raise KafkaError(ErrorCode.FENCED_LEADER_EPOCH, f"{topic}-{partition}: leader epoch moved on") from None
            raise KafkaError(
                ErrorCode.INVALID_UPDATE_VERSION,
                f"{topic}-{partition}: partition epoch {zk_version} is stale "
                f"(now {latest.zk_version if latest else 'gone'})",
            ) from None
        except NoNodeError:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic}-{partition} has no state") from None
        self._notify_isr_change(topic, partition)
        return stat.version

    def _notify_isr_change(self, topic: str, partition: int) -> None:
        self.kazoo.create(
            f"{z.ISR_CHANGE_NOTIFICATION_PATH}/{z.ISR_CHANGE_PREFIX}",
            z.encode_isr_change([(topic, partition)]),
            sequence=True,
            makepath=True,
        )

    def get_isr_change_notifications(self, watch: Watcher | None = None) -> list[str]:
        return sorted(self.kazoo.get_children(z.ISR_CHANGE_NOTIFICATION_PATH, watch=watch))

    def read_and_delete_isr_changes(self, names: Iterable[str]) -> set[tuple[str, int]]:
        changed: set[tuple[str, int]] = set()
        for name in names:
            path = f"{z.ISR_CHANGE_NOTIFICATION_PATH}/{name}"
            try:
                data, _ = self.kazoo.get(path)
                changed.update(z.decode_isr_change(data))
                self.kazoo.delete(path)
            except NoNodeError:
                continue
        return changed

    # -- reassignment requests through /admin/reassign_partitions (kafka-reassign-partitions --zookeeper)

    def request_controlled_shutdown(self, broker_id: int, broker_epoch: int) -> None:
        """Ask the controller to move this broker's leadership away (see zk_data.CONTROLLED_SHUTDOWN_PATH)."""
        path = f"{z.CONTROLLED_SHUTDOWN_PATH}/{broker_id}"
        data = json.dumps({"broker_epoch": broker_epoch}).encode()
        try:
            self.kazoo.create(path, data, ephemeral=True, makepath=True)
        except NodeExistsError:
            self.kazoo.set(path, data)

    def claim_producer_id_block(self, broker_id: int, block_size: int) -> tuple[int, int]:
        """Claim the next ``block_size`` producer ids: (first, last). Kafka's
        ZkProducerIdManager.getNewProducerIdBlock: read the latest block, write the one after it
        conditionally on the znode's version, and start over when another broker won the race."""
        while True:
            try:
                data, stat = self.call(self.kazoo.get, z.PRODUCER_ID_BLOCK_PATH)
            except NoNodeError:
                data, stat = None, None
            first = 0
            if data:
                first = int(json.loads(data)["block_end"]) + 1
            last = first + block_size - 1
            block = json.dumps(
                {"version": 1, "broker": broker_id, "block_start": str(first), "block_end": str(last)}
            ).encode()
            try:
                if stat is None:
                    self.call(self.kazoo.create, z.PRODUCER_ID_BLOCK_PATH, block)
                else:
                    self.call(self.kazoo.set, z.PRODUCER_ID_BLOCK_PATH, block, version=stat.version)
            except (BadVersionError, NodeExistsError):
                continue  # another broker claimed a block meanwhile (or our retried write landed): re-read
            return first, last

    def get_controlled_shutdown_requests(self, watch: Watcher | None = None) -> dict[int, int]:
        """broker id -> broker epoch of every pending controlled-shutdown request."""
        self.kazoo.ensure_path(z.CONTROLLED_SHUTDOWN_PATH)
        requests: dict[int, int] = {}
        for name in self.kazoo.get_children(z.CONTROLLED_SHUTDOWN_PATH, watch=watch):
            try:
                data, _ = self.kazoo.get(f"{z.CONTROLLED_SHUTDOWN_PATH}/{name}")
                requests[int(name)] = int(json.loads(data or b"{}").get("broker_epoch", -1))
            except (NoNodeError, ValueError):
                continue
        return requests

    def delete_controlled_shutdown_request(self, broker_id: int) -> None:
        try:
            self.kazoo.delete(f"{z.CONTROLLED_SHUTDOWN_PATH}/{broker_id}")
        except NoNodeError:
            pass

    def get_reassign_partitions_request(self, watch: Watcher | None = None) -> dict[tuple[str, int], tuple[int, ...]]:
        stat = self.kazoo.exists(z.REASSIGN_PARTITIONS_PATH, watch=watch)
        if stat is None:
            return {}
        try:
            data, _ = self.kazoo.get(z.REASSIGN_PARTITIONS_PATH)
        except NoNodeError:
            return {}
        return z.decode_reassignment(data)

    # -- admin requests forwarded to the controller (zk_data.FORWARDED_REQUESTS_PATH)

    def create_forwarded_request(self, kind: str, request: Any) -> str:
        """Queue a request for the active controller; returns its znode's path (ephemeral: gone with
        this broker's session if it never reads the answer)."""
        data = json.dumps({"kind": kind, "request": request}).encode()
        return self.kazoo.create(
            f"{z.FORWARDED_REQUESTS_PATH}/{z.FORWARDED_REQUEST_PREFIX}", data, ephemeral=True, sequence=True,
            makepath=True,
        )

    def get_forwarded_response(self, path: str) -> Any | None:
        """The controller's answer to a forwarded request, or None while it has not answered."""
        try:
            data, _ = self.kazoo.get(path)
        except NoNodeError:
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, "the forwarded request vanished") from None
        return json.loads(data or b"{}").get("response")

    def delete_forwarded_request(self, path: str) -> None:
        try:
            self.kazoo.delete(path)
        except NoNodeError:
            pass

    def get_forwarded_requests(self, watch: Watcher | None = None) -> dict[str, tuple[str, Any, bool]]:
        """Pending forwarded requests: znode path -> (kind, request, answered)."""
        self.kazoo.ensure_path(z.FORWARDED_REQUESTS_PATH)
        out: dict[str, tuple[str, Any, bool]] = {}
        for name in sorted(self.kazoo.get_children(z.FORWARDED_REQUESTS_PATH, watch=watch)):
            path = f"{z.FORWARDED_REQUESTS_PATH}/{name}"
            try:
                data, _ = self.kazoo.get(path)
                entry = json.loads(data or b"{}")
            except (NoNodeError, ValueError):
                continue
            out[path] = (str(entry.get("kind", "")), entry.get("request"), "response" in entry)
        return out

    def answer_forwarded_request(self, path: str, kind: str, request: Any, response: Any) -> None:
        try:
            self.kazoo.set(path, json.dumps({"kind": kind, "request": request, "response": response}).encode())
        except NoNodeError:
            pass  # the requester gave up (timed out, or its session ended)

    def delete_reassign_partitions_request(self) -> None:
        try:
            self.kazoo.delete(z.REASSIGN_PARTITIONS_PATH)
        except NoNodeError:
            pass


def _new_topic_id() -> str:
    # Kafka writes Uuid.toString(): url-safe base64 of the 16 bytes, no padding.
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
