"""Builds the broker's transaction coordinator: ``__transaction_state`` as its store (created and
replayed at start), producer ids from the metadata store, markers written to the local partitions.
Everything it needs of the broker comes in ``CoordinatorServices``."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from pybroker.coordinator.offsets_topic import InternalTopic
from pybroker.coordinator.transaction.coordinator import TransactionConfig, TransactionCoordinator
from pybroker.coordinator.transaction.markers import LocalMarkerWriter
from pybroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from pybroker.coordinator.coordinator import GroupCoordinator
    from pybroker.coordinator.services import CoordinatorServices

log = logging.getLogger(__name__)

TOPIC = "__transaction_state"
# Test-only: markers to this topic's partitions fail as on a failed disk (KAFKA_STORAGE_ERROR), so a test
# can stop the coordinator between PrepareCommit and the markers and kill the broker there
# (tests/integration/test_transactions_crash.py). Never set it on a real broker.
FAIL_MARKERS_ENV = "PYBROKER_TEST_FAIL_TXN_MARKERS_TOPIC"
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

    writer = LocalMarkerWriter(partition, offsets_marker)
    failing_topic = os.environ.get(FAIL_MARKERS_ENV)
    if not failing_topic:
        return writer
    log.warning("test hook %s=%s: markers to that topic fail", FAIL_MARKERS_ENV, failing_topic)

    def write(
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        partitions: Iterable[Any],
        transaction_version: int = 0,
    ) -> dict[tuple[str, int], ErrorCode]:
        wanted = set(partitions)
        failed = {tp: ErrorCode.KAFKA_STORAGE_ERROR for tp in wanted if tp[0] == failing_topic}
        rest = writer(
            producer_id, producer_epoch, commit, coordinator_epoch, wanted - set(failed), transaction_version
        )
        return {**rest, **failed}

    return write  # type: ignore[return-value]


async def start_transaction_coordinator(
    services: CoordinatorServices,
    *,
    leadership_driven: bool = False,
    wrap_markers: Callable[[LocalMarkerWriter], Any] | None = None,
) -> TransactionCoordinator:
    """``leadership_driven`` (cluster mode): __transaction_state is made through ZooKeeper and each of its
    partitions is loaded when this broker becomes its leader; ``wrap_markers`` turns the local marker
    writer into one that also reaches the leaders on other brokers."""
    c = services.config
    topic = InternalTopic(services, TOPIC, c.get("transaction.state.log.num.partitions"), TOPIC_CONFIGS)
    if leadership_driven:
        topic.local_creation = False
    else:
        topic.ensure_topic()
    local_markers = marker_writer(services.partition, services.group_coordinator)
    coordinator = TransactionCoordinator(
        allocate_producer_id=services.allocate_producer_id,
        write_markers=wrap_markers(local_markers) if wrap_markers is not None else local_markers,
        store=topic,
        config=TransactionConfig(
            max_timeout_ms=c.get("transaction.max.timeout.ms"),
            id_expiration_ms=c.get("transactional.id.expiration.ms"),
            abort_check_interval_ms=c.get("transaction.abort.timed.out.transaction.cleanup.interval.ms"),
            expiration_check_interval_ms=c.get("transaction.remove.expired.transaction.cleanup.interval.ms"),
        ),
    )
    if leadership_driven:
        coordinator.leadership_driven = True
        coordinator.partition_of = topic.partition_for
        coordinator.replay_partition = lambda partition: topic.replay([partition])
    else:
        coordinator.load(topic.replay())
    await coordinator.start()
    return coordinator
