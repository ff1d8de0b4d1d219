"""A transactional id's state (Kafka's TransactionMetadata and TransactionState)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_EPOCH = 32767  # Short.MAX_VALUE


class TransactionState(enum.IntEnum):
    """Ids as written in TransactionLogValue.TransactionStatus."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        return _NAMES[self]


_NAMES = {
    TransactionState.EMPTY: "Empty",
    TransactionState.ONGOING: "Ongoing",
    TransactionState.PREPARE_COMMIT: "PrepareCommit",
    TransactionState.PREPARE_ABORT: "PrepareAbort",
    TransactionState.COMPLETE_COMMIT: "CompleteCommit",
    TransactionState.COMPLETE_ABORT: "CompleteAbort",
    TransactionState.DEAD: "Dead",
    TransactionState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}

S = TransactionState
# Kafka's TransactionState.validPreviousStates.
VALID_PREVIOUS: dict[TransactionState, frozenset[TransactionState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset(
        {S.ONGOING, S.PREPARE_EPOCH_FENCE, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}
    ),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}
COMPLETE_STATES = frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT})


class IllegalTransition(Exception):
    pass


@dataclass
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TransactionState = TransactionState.EMPTY
    partitions: set[tuple[str, int]] = field(default_factory=set)
    start_timestamp_ms: int = -1
    last_update_timestamp_ms: int = -1
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    # Transaction version 2 (KIP-890 part 2): the client's version, and on an epoch overflow at EndTxn
    # the producer id the transaction completes with (the Prepare record carries it).
    client_transaction_version: int = 0
    next_producer_id: int = NO_PRODUCER_ID
    previous_producer_id: int = NO_PRODUCER_ID
    # The state an operation is moving to while its record is being written; other operations on
    # this transactional id meanwhile get CONCURRENT_TRANSACTIONS.
    pending_state: TransactionState | None = None

    def transition(
        self,
        state: TransactionState,
        now_ms: int,
        *,
        partitions: set[tuple[str, int]] | None = None,
        producer_id: int | None = None,
        producer_epoch: int | None = None,
        timeout_ms: int | None = None,
        next_producer_id: int | None = None,
        client_transaction_version: int | None = None,
    ) -> None:
        if self.state not in VALID_PREVIOUS[state]:
            raise IllegalTransition(
                f"transactional id {self.transactional_id}: {self.state.kafka_name} -> {state.kafka_name}"
            )
        if state == S.ONGOING and self.state != S.ONGOING:
            self.start_timestamp_ms = now_ms
        if producer_epoch is not None and producer_epoch != self.producer_epoch:
            self.last_producer_epoch = self.producer_epoch
            self.producer_epoch = producer_epoch
        if producer_id is not None and producer_id != self.producer_id:
            self.previous_producer_id = self.producer_id
            self.producer_id = producer_id
        if next_producer_id is not None:
            self.next_producer_id = next_producer_id
        if client_transaction_version is not None:
            self.client_transaction_version = client_transaction_version
        if timeout_ms is not None:
            self.timeout_ms = timeout_ms
        if partitions is not None:
            self.partitions = partitions
        if state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT, S.EMPTY):
            self.partitions = set()
        self.state = state
        self.last_update_timestamp_ms = now_ms

    def to_value(self) -> dict[str, Any]:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(self.partitions):
            by_topic.setdefault(topic, []).append(partition)
        return {
            "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch,
            "transaction_timeout_ms": self.timeout_ms,
            "transaction_status": int(self.state),
            # Kafka writes null partitions for Empty, CompleteCommit and CompleteAbort.
            "transaction_partitions": (
                None
                if self.state in COMPLETE_STATES
                else [{"topic": t, "partition_ids": ps} for t, ps in by_topic.items()]
            ),
            "transaction_last_update_timestamp_ms": self.last_update_timestamp_ms,
            "transaction_start_timestamp_ms": self.start_timestamp_ms,
            "previous_producer_id": self.previous_producer_id,
            "next_producer_id": self.next_producer_id,
            "client_transaction_version": self.client_transaction_version,
        }

    @classmethod
    def from_value(cls, transactional_id: str, v: dict[str, Any]) -> TransactionMetadata:
        partitions = {
            (t["topic"], p) for t in v.get("transaction_partitions") or () for p in t["partition_ids"]
        }
        return cls(
            transactional_id,
            v["producer_id"],
            v["producer_epoch"],
            v["transaction_timeout_ms"],
            TransactionState(v["transaction_status"]),
            partitions,
            v["transaction_start_timestamp_ms"],
            v["transaction_last_update_timestamp_ms"],
            client_transaction_version=v.get("client_transaction_version", 0),
            next_producer_id=v.get("next_producer_id", NO_PRODUCER_ID),
            previous_producer_id=v.get("previous_producer_id", NO_PRODUCER_ID),
        )
