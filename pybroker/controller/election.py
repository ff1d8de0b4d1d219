"""Leader election rules (Kafka's PartitionLeaderElectionAlgorithms), pure functions.

Each returns the new leader's id, or None when no replica qualifies. Replicas are considered in
assignment order, so the first replica (the preferred leader) wins whenever it qualifies.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from pybroker.protocol.errors import ErrorCode, KafkaError


def offline_partition_leader_election(
    assignment: Sequence[int], isr: Collection[int], live: Collection[int], unclean_enabled: bool
) -> tuple[int | None, bool]:
    """A leader for a partition whose leader died: the first live ISR member; when none is alive and
    unclean election is enabled, the first live replica (data past its log end may be lost).
    Returns (leader, unclean)."""
    for replica in assignment:
        if replica in live and replica in isr:
            return replica, False
    if unclean_enabled:
        for replica in assignment:
            if replica in live:
                return replica, True
    return None, False


def reassign_partition_leader_election(
    reassignment: Sequence[int], isr: Collection[int], live: Collection[int]
) -> int | None:
    """After a reassignment: the first target replica that is alive and in the ISR."""
    for replica in reassignment:
        if replica in live and replica in isr:
            return replica
    return None


def preferred_replica_partition_leader_election(
    assignment: Sequence[int], isr: Collection[int], live: Collection[int]
) -> int | None:
    """The preferred (first) replica, if it is alive and in the ISR."""
    if assignment and assignment[0] in live and assignment[0] in isr:
        return assignment[0]
    return None


def controlled_shutdown_partition_leader_election(
    assignment: Sequence[int], isr: Collection[int], live: Collection[int], shutting_down: Collection[int]
) -> int | None:
    """While brokers shut down: the first live ISR member that is not shutting down."""
    for replica in assignment:
        if replica in live and replica in isr and replica not in shutting_down:
            return replica
    return None


def unknown_partition(tp: tuple[str, int], topic_exists: bool) -> KafkaError:
    """UNKNOWN_TOPIC_OR_PARTITION with the message of Kafka's ReplicationControlManager.electLeader."""
    if not topic_exists:
        return KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such topic as {tp[0]}")
    return KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such partition as {tp[0]}-{tp[1]}")
