"""Replica placement (Kafka's AdminUtils.assignReplicasToBrokers) and the election rules, no ZooKeeper."""

from __future__ import annotations

import pytest

from pybroker.controller.assignment import assign_replicas_to_brokers, rack_alternated_brokers
from pybroker.controller.election import (
    controlled_shutdown_partition_leader_election,
    offline_partition_leader_election,
    preferred_replica_partition_leader_election,
)
from pybroker.protocol.errors import ErrorCode, KafkaError


def test_rack_unaware_matches_kafkas_documented_layout():
    # AdminUtils' scaladoc: 5 brokers, 10 partitions, RF 3, start index 0 and shift 0.
    got = assign_replicas_to_brokers([0, 1, 2, 3, 4], 10, 3, fixed_start_index=0)
    assert got[0] == [0, 1, 2]
    assert got[4] == [4, 0, 1]
    assert got[5] == [0, 2, 3]  # after a full round the followers shift
    assert got[9] == [4, 1, 2]


def test_rack_aware_matches_kafkas_documented_layout():
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assert rack_alternated_brokers(racks) == [0, 3, 1, 5, 4, 2]
    got = assign_replicas_to_brokers(racks, 7, 3, fixed_start_index=0)
    assert [got[p] for p in range(6)] == [[0, 3, 1], [3, 1, 5], [1, 5, 4], [5, 4, 2], [4, 2, 0], [2, 0, 3]]
    assert got[6] == [0, 4, 2]
    for replicas in got.values():
        assert len({racks[b] for b in replicas}) == 3


def test_even_spread_random_start():
    got = assign_replicas_to_brokers([1, 2, 3], 6, 3)
    assert all(sorted(r) == [1, 2, 3] for r in got.values())
    assert sorted(r[0] for r in got.values()) == [1, 1, 2, 2, 3, 3]


@pytest.mark.parametrize(
    ("brokers", "partitions", "rf", "code"),
    [
        ([1, 2], 1, 3, ErrorCode.INVALID_REPLICATION_FACTOR),
        ([1, 2], 1, 0, ErrorCode.INVALID_REPLICATION_FACTOR),
        ([1, 2], 0, 1, ErrorCode.INVALID_PARTITIONS),
        ({1: "a", 2: None}, 1, 1, ErrorCode.INVALID_REPLICA_ASSIGNMENT),
    ],
)
def test_refusals(brokers, partitions, rf, code):
    with pytest.raises(KafkaError) as error:
        assign_replicas_to_brokers(brokers, partitions, rf)
    assert error.value.code == code


def test_election_rules():
    assert offline_partition_leader_election([1, 2, 3], [2, 3], {2, 3}, False) == (2, False)
    assert offline_partition_leader_election([1, 2, 3], [1], {2, 3}, False) == (None, False)
    assert offline_partition_leader_election([1, 2, 3], [1], {3}, True) == (3, True)
    assert preferred_replica_partition_leader_election([1, 2], [2], {1, 2}) is None
    assert preferred_replica_partition_leader_election([1, 2], [2, 1], {1, 2}) == 1
    assert controlled_shutdown_partition_leader_election([1, 2, 3], [1, 2, 3], {1, 2, 3}, {1, 2}) == 3
