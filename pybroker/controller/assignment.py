"""Replica placement for new topics and partitions (Kafka's AdminUtils.assignReplicasToBrokers).

Goals, as in Kafka: spread replicas evenly over the brokers; spread the followers of a broker's
partitions over the other brokers; when every broker has a rack, put a partition's replicas on
different racks where possible. The first replica of each partition goes round-robin from a random
start; the others follow at a shift that grows after each full round, so the same sequences do not
repeat. Rack-aware placement runs the same round-robin over a rack-alternated broker list.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from pybroker.protocol.errors import ErrorCode, KafkaError


def assign_replicas_to_brokers(
    brokers: Mapping[int, str | None] | Sequence[int],
    num_partitions: int,
    replication_factor: int,
    *,
    fixed_start_index: int = -1,
    start_partition_id: int = -1,
    rng: random.Random | None = None,
) -> dict[int, list[int]]:
    """partition id -> replica ids. ``brokers`` maps live broker ids to their rack (or is a list of ids).

    Raises KafkaError INVALID_PARTITIONS / INVALID_REPLICATION_FACTOR / INVALID_REPLICA_ASSIGNMENT (some
    brokers have a rack and others not), as Kafka does."""
    racks: dict[int, str | None] = (
        dict(brokers) if isinstance(brokers, Mapping) else {b: None for b in brokers}
    )
    if num_partitions <= 0:
        raise KafkaError(ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0.")
    if replication_factor > len(racks):
        raise KafkaError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"Replication factor: {replication_factor} larger than available brokers: {len(racks)}.",
        )
    rng = rng or random.Random()
    if all(rack is None for rack in racks.values()):
        return _rack_unaware(num_partitions, replication_factor, sorted(racks), fixed_start_index,
                             start_partition_id, rng)
    if any(rack is None for rack in racks.values()):
        raise KafkaError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            "Not all brokers have rack information for replica rack aware assignment.",
        )
    return _rack_aware(num_partitions, replication_factor, {b: str(r) for b, r in racks.items()},
                       fixed_start_index, start_partition_id, rng)


def _replica_index(first_replica_index: int, second_replica_shift: int, index: int, n_brokers: int) -> int:
    shift = 1 + (second_replica_shift + index) % (n_brokers - 1)
    return (first_replica_index + shift) % n_brokers


def _rack_unaware(
    num_partitions: int, rf: int, brokers: list[int], fixed_start: int, start_partition: int, rng: random.Random
) -> dict[int, list[int]]:
    n = len(brokers)
    start_index = fixed_start if fixed_start >= 0 else rng.randrange(n)
    next_replica_shift = fixed_start if fixed_start >= 0 else rng.randrange(n)
    current = max(0, start_partition)
    result: dict[int, list[int]] = {}
    for _ in range(num_partitions):
        if current > 0 and current % n == 0:
            next_replica_shift += 1
        first = (current + start_index) % n
        replicas = [brokers[first]]
        replicas += [brokers[_replica_index(first, next_replica_shift, j, n)] for j in range(rf - 1)]
        result[current] = replicas
        current += 1
    return result


def rack_alternated_brokers(racks: Mapping[int, str]) -> list[int]:
    """Brokers taken one rack at a time (racks sorted, brokers sorted within a rack): rack1: 0,1,2 and
    rack2: 3,4,5 give 0,3,1,4,2,5 (Kafka's getRackAlternatedBrokerList)."""
    by_rack: dict[str, list[int]] = {}
    for broker, rack in racks.items():
        by_rack.setdefault(rack, []).append(broker)
    iterators = {rack: iter(sorted(ids)) for rack, ids in by_rack.items()}
    ordered_racks = sorted(iterators)
    result: list[int] = []
    index = 0
    while len(result) < len(racks):
        taken = next(iterators[ordered_racks[index]], None)
        if taken is not None:
            result.append(taken)
        index = (index + 1) % len(ordered_racks)
    return result


def _rack_aware(
    num_partitions: int, rf: int, racks: dict[int, str], fixed_start: int, start_partition: int,
    rng: random.Random,
) -> dict[int, list[int]]:
    num_racks = len(set(racks.values()))
    arranged = rack_alternated_brokers(racks)
    n = len(arranged)
    start_index = fixed_start if fixed_start >= 0 else rng.randrange(n)
    next_replica_shift = fixed_start if fixed_start >= 0 else rng.randrange(n)
    current = max(0, start_partition)
    result: dict[int, list[int]] = {}
    for _ in range(num_partitions):
        if current > 0 and current % n == 0:
            next_replica_shift += 1
        first = (current + start_index) % n
        leader = arranged[first]
        replicas = [leader]
        racks_with = {racks[leader]}
        brokers_with = {leader}
        k = 0
        for _ in range(rf - 1):
            while True:
                broker = arranged[_replica_index(first, next_replica_shift * num_racks, k, n)]
                rack = racks[broker]
                k += 1
                # Skip a broker whose rack already has a replica while some rack has none, and a broker
                # that already has one while some broker has none.
                if (rack not in racks_with or len(racks_with) == num_racks) and (
                    broker not in brokers_with or len(brokers_with) == n
                ):
                    replicas.append(broker)
                    racks_with.add(rack)
                    brokers_with.add(broker)
                    break
        result[current] = replicas
        current += 1
    return result


def check_reassignment_target(
    target: list[int], live_brokers: set[int], current_rf: int, allow_replication_factor_change: bool
) -> KafkaError | None:
    """ReplicationControlManager's checks of a reassignment's target replicas (its messages)."""
    if not target:
        return KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes an empty replica list.")
    seen: set[int] = set()
    for broker in target:
        if broker in seen:
            return KafkaError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"The manual partition assignment includes the broker {broker} more than once.",
            )
        seen.add(broker)
        if broker not in live_brokers:
            return KafkaError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"The manual partition assignment includes broker {broker}, but no such broker is registered.",
            )
    if not allow_replication_factor_change and len(target) != current_rf:
        return KafkaError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"The replication factor is changed from {current_rf} to {len(target)} but "
            "allowReplicationFactorChange is false.",
        )
    return None
