"""Builds the broker's transaction coordinator: ``__transaction_state`` as its store (created and
replayed at start), producer ids from the metadata store, markers written to the local partitions."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pybroker.coordinator.offsets_topic import InternalTopic
from pybroker.coordinator.transaction.coordinator import TransactionConfig, TransactionCoordinator
from pybroker.coordinator.transaction.markers import LocalMarkerWriter

if TYPE_CHECKING:
    from pybroker.broker import Broker

TOPIC = "__transaction_state"
# What Kafka gives the topic (TransactionLog / TransactionStateManager.transactionTopicConfigs).
TOPIC_CONFIGS = {
    "cleanup.policy": "compact",
    "compression.type": "uncompressed",
    "segment.bytes": "104857600",
    "unclean.leader.election.enable": "false",
}


def marker_writer(broker: Broker) -> LocalMarkerWriter:
    def offsets_marker(producer_id: int, commit: bool, partition: int) -> None:
        gc = broker.group_coordinator
        if gc is not None:
            gc.txn_offsets.complete(producer_id, commit, partition)

    return LocalMarkerWriter(broker.partition, offsets_marker)


async def start_transaction_coordinator(broker: Broker) -> TransactionCoordinator:
    c = broker.config
    topic = InternalTopic(broker, TOPIC, c.get("transaction.state.log.num.partitions"), TOPIC_CONFIGS)
    topic.ensure_topic()
    coordinator = TransactionCoordinator(
        allocate_producer_id=broker.metadata.allocate_producer_id,
        write_markers=marker_writer(broker),
        store=topic,
        config=TransactionConfig(
            max_timeout_ms=c.get("transaction.max.timeout.ms"),
            id_expiration_ms=c.get("transactional.id.expiration.ms"),
            abort_check_interval_ms=c.get("transaction.abort.timed.out.transaction.cleanup.interval.ms"),
            expiration_check_interval_ms=c.get("transaction.remove.expired.transaction.cleanup.interval.ms"),
        ),
    )
    coordinator.load(topic.replay())
    await coordinator.start()
    return coordinator
