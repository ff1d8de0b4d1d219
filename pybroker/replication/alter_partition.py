"""AlterPartition: how a partition leader asks the controller to change its ISR (Kafka's
AlterPartitionManager).

The leader proposes a new ISR for its epoch and the partition epoch it knows; the controller
(ZooKeeper in cluster mode, an in-memory one in tests) applies it as a conditional write and
answers the state it committed, or an error: FENCED_LEADER_EPOCH when the leader was replaced,
INVALID_UPDATE_VERSION when the partition epoch moved on (another change won), and so on.  Until
the answer arrives the leader keeps the proposal "in flight" and proposes nothing else.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from pybroker.protocol.errors import ErrorCode, KafkaError


@dataclass(frozen=True)
class LeaderAndIsr:
    """A partition's leadership state as the controller stores it (Kafka's LeaderAndIsr)."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    partition_epoch: int


@dataclass(frozen=True)
class AlterPartitionResult:
    error: ErrorCode
    state: LeaderAndIsr | None = None  # the committed state when error is NONE


class AlterPartitionManager(Protocol):
    async def submit(self, topic: str, partition: int, proposed: LeaderAndIsr) -> AlterPartitionResult:
        """Ask the controller to store ``proposed`` (leader and leader epoch unchanged, a new ISR,
        ``partition_epoch`` the one the leader knows).  Never raises for a refusal: the error is
        in the result; a controller that cannot be reached answers an error too (the leader retries
        on its next ISR check)."""
        ...


class InMemoryAlterPartition:
    """A controller's partition states in a dict: conditional ISR changes as ZooKeeper's versioned
    writes would apply them (the unit tier's controller; ``submitted`` records every proposal)."""

    def __init__(self) -> None:
        self.states: dict[tuple[str, int], LeaderAndIsr] = {}
        self.submitted: list[tuple[str, int, LeaderAndIsr]] = []

    async def submit(self, topic: str, partition: int, proposed: LeaderAndIsr) -> AlterPartitionResult:
        self.submitted.append((topic, partition, proposed))
        current = self.states.get((topic, partition))
        if current is None:
            return AlterPartitionResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        if proposed.leader_epoch < current.leader_epoch or proposed.leader != current.leader:
            return AlterPartitionResult(ErrorCode.FENCED_LEADER_EPOCH)
        if proposed.leader_epoch > current.leader_epoch:
            return AlterPartitionResult(ErrorCode.UNKNOWN_LEADER_EPOCH)
        if proposed.partition_epoch != current.partition_epoch:
            return AlterPartitionResult(ErrorCode.INVALID_UPDATE_VERSION)
        committed = LeaderAndIsr(
            current.leader, current.leader_epoch, tuple(proposed.isr), current.partition_epoch + 1
        )
        self.states[(topic, partition)] = committed
        return AlterPartitionResult(ErrorCode.NONE, committed)


AlterIsr = Callable[[str, int, int, Iterable[int], int], Awaitable[int]]


class AlterIsrManager:
    """An AlterPartitionManager over a coroutine ``alter_isr(topic, partition, leader_epoch, isr,
    partition_epoch) -> new partition epoch`` that raises KafkaError on refusal — the ZooKeeper
    wiring's ``ZkMetadataLoader.alter_isr`` (a write conditional on the state znode's version)."""

    def __init__(self, alter_isr: AlterIsr) -> None:
        self._alter_isr = alter_isr

    async def submit(self, topic: str, partition: int, proposed: LeaderAndIsr) -> AlterPartitionResult:
        try:
            epoch = await self._alter_isr(
                topic, partition, proposed.leader_epoch, proposed.isr, proposed.partition_epoch
            )
        except KafkaError as e:
            return AlterPartitionResult(ErrorCode(e.code))
        return AlterPartitionResult(
            ErrorCode.NONE, LeaderAndIsr(proposed.leader, proposed.leader_epoch, tuple(proposed.isr), epoch)
        )
