"""ZkMetadataPublisher's hold of a departed broker (the image a non-controller broker publishes between a
broker's deregistration and the controller's election), step by step with an explicit clock. The cluster
behaviour is tests/cluster/test_leadership.py::test_no_leaderless_window_after_a_broker_failure."""

from __future__ import annotations

from pybroker.cluster_mode import DEPARTED_BROKER_HOLD_S, ZkMetadataPublisher
from pybroker.controller.metadata_loader import PartitionState
from pybroker.controller.zk_data import BrokerInfo, ReplicaAssignment, TopicAssignment

BROKERS = {n: BrokerInfo(n, "localhost", 9090 + n) for n in (1, 2, 3)}


def state(partition: int, leader: int, epoch: int) -> PartitionState:
    return PartitionState("t", partition, leader, epoch, (1, 2, 3), (1, 2, 3), epoch, 1)


def publisher() -> ZkMetadataPublisher:
    pub = ZkMetadataPublisher(1, "cluster")
    pub.assignments["t"] = TopicAssignment("t", None, {0: ReplicaAssignment((3, 1, 2)), 1: ReplicaAssignment((2, 3, 1))})
    pub.set_brokers(BROKERS, now=0.0)
    pub.set_state(("t", 0), state(0, 3, 0))
    pub.set_state(("t", 1), state(1, 2, 0))
    return pub


def leaders(pub: ZkMetadataPublisher) -> dict[int, tuple[int, bool]]:
    """partition -> (leader, whether the image has that leader's broker)."""
    img = pub.image()
    return {i: (p.leader, p.leader in img.brokers) for i, p in img.topic("t").partitions.items()}


def test_a_departed_leader_stays_until_the_controller_rewrites_what_it_led() -> None:
    pub = publisher()
    pub.set_brokers({n: BROKERS[n] for n in (1, 2)}, now=10.0)
    assert set(pub.live) == {1, 2}  # topic admin's live brokers: without it at once
    assert leaders(pub) == {0: (3, True), 1: (2, True)}  # the old leader, not LEADER_NOT_AVAILABLE
    pub.set_state(("t", 0), state(0, 1, 1))  # the controller's election
    assert leaders(pub) == {0: (1, True), 1: (2, True)}
    assert set(pub.image().brokers) == {1, 2}


def test_a_partition_left_without_a_leader_goes_offline_when_the_controller_says_so() -> None:
    pub = publisher()
    pub.set_brokers({n: BROKERS[n] for n in (1, 2)}, now=10.0)
    pub.set_state(("t", 0), state(0, -1, 1))
    assert leaders(pub)[0] == (-1, False)
    assert set(pub.image().brokers) == {1, 2}


def test_the_hold_is_bounded() -> None:
    pub = publisher()
    pub.set_brokers({n: BROKERS[n] for n in (1, 2)}, now=10.0)
    pub.release_departed(now=10.0 + DEPARTED_BROKER_HOLD_S - 0.1)
    assert 3 in pub.image().brokers
    pub.release_departed(now=10.0 + DEPARTED_BROKER_HOLD_S)
    assert set(pub.image().brokers) == {1, 2}
    assert leaders(pub)[0] == (3, False)  # the controller never rewrote it: leader not available


def test_a_departed_broker_that_led_nothing_goes_at_once_and_one_back_is_live() -> None:
    pub = publisher()
    pub.set_brokers({n: BROKERS[n] for n in (2, 3)}, now=10.0)  # broker 1 led nothing
    assert set(pub.image().brokers) == {2, 3}
    pub.set_brokers({n: BROKERS[n] for n in (2,)}, now=11.0)  # 3 leaves: held
    back = BrokerInfo(3, "localhost", 9999, broker_epoch=7)
    pub.set_brokers({2: BROKERS[2], 3: back}, now=12.0)  # registered again
    assert pub.departed == {}
    assert pub.image().brokers[3].port == 9999
