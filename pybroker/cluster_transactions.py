"""Cluster mode: transactions across brokers.

A transactional id is coordinated by the leader of its ``__transaction_state`` partition (the transaction
coordinator is leadership-driven, as the group coordinator is), and the partitions of a transaction are led
by any broker. Two inter-broker paths connect them, as in Kafka:

- ``ClusterMarkerWriter`` (Kafka's TransactionMarkerChannelManager): the coordinator's markers go to each
  partition's current leader — this broker's own partitions directly, the others in one WriteTxnMarkers per
  leader over the inter-broker listener. A partition whose leader is unknown or unreachable answers
  NOT_LEADER_OR_FOLLOWER, and the coordinator retries it until it is written.
- ``TransactionRouter`` (Kafka's AddPartitionsToTxnManager, KIP-890): a partition leader that receives a
  transactional batch asks the producer's coordinator — itself, or another broker with AddPartitionsToTxn
  v4+ (``verify_only`` for Produce v3-11, adding the partition for Produce v12+).

Connections are one ``RemoteLeaderEndpoint`` per broker (the replica fetchers' channel), kept while the
broker's registered endpoint stays the same.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from pybroker.coordinator.offsets_topic import partition_for
from pybroker.protocol.errors import ErrorCode
from pybroker.replication.leader_endpoint import (
    ADD_PARTITIONS_TO_TXN,
    WRITE_TXN_MARKERS,
    LeaderEndpointError,
    RemoteLeaderEndpoint,
)

if TYPE_CHECKING:
    from pybroker.coordinator.transaction.coordinator import TransactionCoordinator
    from pybroker.coordinator.transaction.markers import LocalMarkerWriter

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
TXN_TOPIC = "__transaction_state"


class BrokerChannels:
    """One inter-broker connection per broker, made on first use."""

    def __init__(self, endpoint_for: Callable[[int], RemoteLeaderEndpoint]) -> None:
        self._endpoint_for = endpoint_for  # raises KafkaError when the broker is not registered
        self._channels: dict[int, RemoteLeaderEndpoint] = {}

    def get(self, broker_id: int) -> RemoteLeaderEndpoint:
        fresh = self._endpoint_for(broker_id)
        current = self._channels.get(broker_id)
        if current is not None and current.address == fresh.address:
            return current
        self._channels[broker_id] = fresh
        return fresh

    async def close(self) -> None:
        channels, self._channels = self._channels, {}
        for channel in channels.values():
            await channel.close()


def _by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    topics: dict[str, list[int]] = {}
    for topic, index in sorted(partitions):
        topics.setdefault(topic, []).append(index)
    return topics


class ClusterMarkerWriter:
    """The coordinator's ``write_markers`` in a cluster (an awaitable per call)."""

    def __init__(
        self,
        node_id: int,
        local: LocalMarkerWriter,
        leader_of: Callable[[str, int], int | None],
        channels: BrokerChannels,
    ) -> None:
        self.node_id = node_id
        self.local = local
        self.leader_of = leader_of
        self.channels = channels

    async def __call__(
        self,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        partitions: Iterable[TopicPartition],
        transaction_version: int = 0,
    ) -> dict[TopicPartition, ErrorCode]:
        mine: list[TopicPartition] = []
        remote: dict[int, list[TopicPartition]] = {}
        errors: dict[TopicPartition, ErrorCode] = {}
        for tp in partitions:
            leader = self.leader_of(*tp)
            if leader == self.node_id:
                mine.append(tp)
            elif leader is None or leader < 0:
                errors[tp] = ErrorCode.NOT_LEADER_OR_FOLLOWER  # no leader now: retried
            else:
                remote.setdefault(leader, []).append(tp)
        if mine:
            errors.update(
                self.local(producer_id, producer_epoch, commit, coordinator_epoch, mine, transaction_version)
            )
        for broker_id, tps in remote.items():
            errors.update(
                await self._send(
                    broker_id, producer_id, producer_epoch, commit, coordinator_epoch, tps, transaction_version
                )
            )
        return errors

    async def _send(
        self,
        broker_id: int,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        tps: list[TopicPartition],
        transaction_version: int,
    ) -> dict[TopicPartition, ErrorCode]:
        # v2 carries the transaction version (KIP-1228), so the leader checks a TV2 marker's epoch as
        # Kafka's does; all brokers of a pybroker cluster speak v2.
        marker = {
            "producer_id": producer_id,
            "producer_epoch": producer_epoch,
            "transaction_result": commit,
            "topics": [{"name": t, "partition_indexes": ps} for t, ps in _by_topic(tps).items()],
            "coordinator_epoch": coordinator_epoch,
            "transaction_version": transaction_version,
        }
        try:
            _, answer = await self.channels.get(broker_id).send(WRITE_TXN_MARKERS, lambda v: {"markers": [marker]})
        except (LeaderEndpointError, Exception) as e:  # noqa: BLE001 - unreachable, not registered: retried
            log.info("transaction markers to broker %d not sent (%s): retrying", broker_id, e)
            return dict.fromkeys(tps, ErrorCode.NOT_LEADER_OR_FOLLOWER)
        out = dict.fromkeys(tps, ErrorCode.NOT_LEADER_OR_FOLLOWER)
        for result in answer["markers"]:
            for topic in result["topics"]:
                for p in topic["partitions"]:
                    out[(topic["name"], p["partition_index"])] = ErrorCode(p["error_code"])
        return out


class TransactionRouter:
    """AddPartitionsToTxn for a partition leader: to this broker's coordinator when it coordinates the
    transactional id, else to the broker that does (the leader of its __transaction_state partition)."""

    def __init__(
        self,
        node_id: int,
        coordinator: Callable[[], TransactionCoordinator | None],
        txn_partitions: Callable[[], int],
        leader_of: Callable[[str, int], int | None],
        channels: BrokerChannels,
        ensure_topic: Callable[[], None],
    ) -> None:
        self.node_id = node_id
        self.ensure_topic = ensure_topic  # __transaction_state made through ZooKeeper on first use
        self._coordinator = coordinator
        self._txn_partitions = txn_partitions
        self.leader_of = leader_of
        self.channels = channels

    def _coordinator_broker(self, transactional_id: str) -> int | None:
        count = self._txn_partitions()
        if count <= 0:
            return None
        return self.leader_of(TXN_TOPIC, partition_for(transactional_id, count))

    @property
    def started(self) -> bool:
        return True

    async def add_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Iterable[TopicPartition]
    ) -> ErrorCode:
        partitions = list(partitions)
        results = await self._route(transactional_id, producer_id, producer_epoch, partitions, verify_only=False)
        codes = set(results.values())
        return codes.pop() if len(codes) == 1 else max(codes, key=lambda c: c != ErrorCode.NONE)

    async def verify(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, ErrorCode]:
        return await self._route(transactional_id, producer_id, producer_epoch, list(partitions), verify_only=True)

    async def _route(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: list[TopicPartition],
        *,
        verify_only: bool,
    ) -> dict[TopicPartition, ErrorCode]:
        broker_id = self._coordinator_broker(transactional_id)
        coordinator = self._coordinator()
        if broker_id == self.node_id and coordinator is not None and coordinator.is_coordinator_for(transactional_id):
            if verify_only:
                return coordinator.verify_partitions(transactional_id, producer_id, producer_epoch, partitions)
            code = await coordinator.add_partitions(transactional_id, producer_id, producer_epoch, partitions)
            return dict.fromkeys(partitions, code)
        if broker_id is None or broker_id < 0 or broker_id == self.node_id:
            # Not elected yet, or this broker is still loading it: the producer retries.
            return dict.fromkeys(partitions, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        body = {
            "transactions": [
                {
                    "transactional_id": transactional_id,
                    "producer_id": producer_id,
                    "producer_epoch": producer_epoch,
                    "verify_only": verify_only,
                    "topics": [{"name": t, "partitions": ps} for t, ps in _by_topic(partitions).items()],
                }
            ]
        }
        try:
            version, answer = await self.channels.get(broker_id).send(ADD_PARTITIONS_TO_TXN, lambda v: body)
        except (LeaderEndpointError, Exception) as e:  # noqa: BLE001 - the producer retries
            log.info("AddPartitionsToTxn to broker %d failed: %s", broker_id, e)
            return dict.fromkeys(partitions, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        out = dict.fromkeys(partitions, ErrorCode(answer.get("error_code") or ErrorCode.COORDINATOR_NOT_AVAILABLE))
        for txn in answer.get("results_by_transaction") or []:
            for topic in txn["topic_results"]:
                for p in topic["results_by_partition"]:
                    out[(topic["name"], p["partition_index"])] = ErrorCode(p["partition_error_code"])
        return out


def marker_leader_lookup(image: Callable[[], Any]) -> Callable[[str, int], int | None]:
    """(topic, partition) -> its leader in the current metadata image (None when unknown)."""

    def leader_of(topic: str, index: int) -> int | None:
        t = image().topics_by_name.get(topic)
        if t is None or index not in t.partitions:
            return None
        leader = t.partitions[index].leader
        return None if leader < 0 else leader

    return leader_of
