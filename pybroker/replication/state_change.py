"""Applying the controller's partition states on a broker (Kafka's
ReplicaManager.becomeLeaderOrFollower): each hosted partition becomes leader or follower at the
given leader epoch, and the replica fetchers follow — a new leader stops fetching it, a follower
starts (or moves) its fetcher to the leader, truncating first.  States older than what the
partition has are refused with FENCED_LEADER_EPOCH and change nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from pybroker.protocol.errors import ErrorCode
from pybroker.replication.fetcher import InitialFetchState, ReplicaFetcherManager

if TYPE_CHECKING:
    from pybroker.replication.partition import Partition

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PartitionState:
    """One partition's leadership as the controller decided it (Kafka's LeaderAndIsrPartitionState)."""

    topic: str
    partition: int
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    partition_epoch: int


class PartitionStateLike(Protocol):
    """What become_leader_or_follower reads of a state: PartitionState, or the ZooKeeper loader's
    own PartitionState (controller/metadata_loader.py) as it is."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def leader(self) -> int: ...
    @property
    def leader_epoch(self) -> int: ...
    @property
    def isr(self) -> tuple[int, ...]: ...
    @property
    def replicas(self) -> tuple[int, ...]: ...
    @property
    def partition_epoch(self) -> int: ...


def become_leader_or_follower(
    broker_id: int,
    partitions: Callable[[str, int], Partition | None],
    fetchers: ReplicaFetcherManager,
    states: Iterable[PartitionStateLike],
) -> dict[tuple[str, int], ErrorCode]:
    """Apply ``states`` to this broker's partitions (``partitions`` looks one up; a partition this
    broker should host must have been created first).  Per partition: NONE when applied,
    FENCED_LEADER_EPOCH when older than the partition's state, UNKNOWN_TOPIC_OR_PARTITION when not
    hosted here, NOT_LEADER_OR_FOLLOWER when this broker is not among its replicas."""
    results: dict[tuple[str, int], ErrorCode] = {}
    new_leaders: list[tuple[str, int]] = []
    new_followers: dict[tuple[str, int], InitialFetchState] = {}
    for s in states:
        tp = (s.topic, s.partition)
        p = partitions(s.topic, s.partition)
        if p is None:
            results[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            continue
        if broker_id not in s.replicas:
            results[tp] = ErrorCode.NOT_LEADER_OR_FOLLOWER
            continue
        if s.leader == broker_id:
            applied = p.make_leader(s.leader_epoch, s.isr, s.replicas, s.partition_epoch)
            if applied:
                new_leaders.append(tp)
        else:
            applied = p.make_follower(s.leader, s.leader_epoch, s.isr, s.replicas, s.partition_epoch)
            if applied and s.leader >= 0:
                new_followers[tp] = InitialFetchState(s.leader, s.leader_epoch, p.high_watermark)
            elif applied:
                new_leaders.append(tp)  # no leader (offline): nothing to fetch from
        results[tp] = ErrorCode.NONE if applied else ErrorCode.FENCED_LEADER_EPOCH
    if new_leaders:
        fetchers.remove_fetcher_for_partitions(new_leaders)
    if new_followers:
        fetchers.add_fetcher_for_partitions(new_followers)
    return results
