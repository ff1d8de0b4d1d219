"""Builds the broker's transaction coordinator: ``__transaction_state`` as its store (created and
replayed at start), producer ids from the metadata store, markers written to the local partitions.
Everything it needs of the broker comes in ``CoordinatorServices``."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pybroker.coordinator.offsets_topic import InternalTopic
from pybroker.coordinator.transaction.coordinator import TransactionConfig, TransactionCoordinator
from pybroker.coordinator.transaction.markers import LocalMarkerWriter

if TYPE_CHECKING:
    from pybroker.coordinator.coordinator import GroupCoordinator
    from pybroker.coordinator.services import CoordinatorServices

TOPIC = "__transaction_state"
# What Kafka gives the topic (TransactionLog / TransactionStateManager.transactionTopicConfigs).
TOPIC_CONFIGS = {
    "cleanup.policy": "compact",
    "compression.type": "uncompressed",
    "segment.bytes": "104857600",
    "unclean.leader.election.enable": "false",
}


def marker_writer(
    partition: Callable[[str, int], Any], group_coordinator: Callable[[], GroupCoordinator | None]
) -> LocalMarkerWriter:
    """Markers to the hosted partitions; one on ``__consumer_offsets`` completes the transaction's
    offsets in the group coordinator."""

    def offsets_marker(producer_id: int, commit: bool, index: int) -> None:
        gc = group_coordinator()
        if gc is not None:
            gc.txn_offsets.complete(producer_id, commit, index)

    return LocalMarkerWriter(partition, offsets_marker)


async def start_transaction_coordinator(services: CoordinatorServices) -> TransactionCoordinator:
    c = services.config
    topic = InternalTopic(services, TOPIC, c.get("transaction.state.log.num.partitions"), TOPIC_CONFIGS)
    topic.ensure_topic()
    coordinator = TransactionCoordinator(
        allocate_producer_id=services.allocate_producer_id,
        write_markers=marker_writer(services.partition, services.group_coordinator),
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
