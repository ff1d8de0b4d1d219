"""Writing transaction markers to the partitions this broker leads (WriteTxnMarkers, and the
coordinator's own marker writes on a single broker).

A marker on a ``__consumer_offsets`` partition also completes the transaction's pending offsets in
the group coordinator, as Kafka's GroupCoordinator.onTransactionCompleted does.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from pybroker.coordinator.offsets_topic import TOPIC as OFFSETS_TOPIC
from pybroker.protocol.errors import ErrorCode
from pybroker.storage.errors import InvalidProducerEpochError, StorageError, TransactionCoordinatorFencedError

log = logging.getLogger(__name__)


class LocalMarkerWriter:
    def __init__(
        self,
        partition: Callable[[str, int], Any],
        on_offsets_marker: Callable[[int, bool, int], None] | None = None,
    ) -> None:
        self.partition = partition
        self.on_offsets_marker = on_offsets_marker

    def __call__(
        self,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        partitions: Iterable[tuple[str, int]],
        transaction_version: int = 0,
    ) -> dict[tuple[str, int], ErrorCode]:
        now_ms = int(time.time() * 1000)
        errors: dict[tuple[str, int], ErrorCode] = {}
        for topic, index in sorted(partitions):
            p = self.partition(topic, index)
            if p is None:
                errors[(topic, index)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            if not p.is_leader:  # a follower of the partition: the marker goes to its leader
                errors[(topic, index)] = ErrorCode.NOT_LEADER_OR_FOLLOWER
                continue
            try:
                p.append_marker_as_leader(
                    producer_id, producer_epoch, commit, coordinator_epoch, now_ms, transaction_version
                )
            except InvalidProducerEpochError as e:
                log.warning("marker for %s-%d refused: %s", topic, index, e)
                errors[(topic, index)] = ErrorCode.INVALID_PRODUCER_EPOCH
                continue
            except TransactionCoordinatorFencedError as e:
                log.warning("marker for %s-%d refused: %s", topic, index, e)
                errors[(topic, index)] = ErrorCode.TRANSACTION_COORDINATOR_FENCED
                continue
            except StorageError as e:
                log.error("marker for %s-%d failed: %s", topic, index, e)
                errors[(topic, index)] = ErrorCode.KAFKA_STORAGE_ERROR
                continue
            errors[(topic, index)] = ErrorCode.NONE
            if topic == OFFSETS_TOPIC and self.on_offsets_marker is not None:
                self.on_offsets_marker(producer_id, commit, index)
        return errors
