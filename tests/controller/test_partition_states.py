"""Partition leadership through the controller against a real ZooKeeper: broker death, offline, unclean
election, conditional ISR writes, reassignment, preferred election, controlled shutdown, deletion, and
the metadata loader that brokers learn it all from."""

from __future__ import annotations

import asyncio

import pytest

from pybroker.controller.controller import ControllerConfig, ElectionType
from pybroker.controller.metadata_loader import ZkMetadataLoader, broker_registration
from pybroker.controller.zk_data import LeaderAndIsr
from pybroker.metadata.image import BrokerRegistration
from pybroker.protocol.errors import ErrorCode, KafkaError
from tests.controller.conftest import Node, Recorder, active, wait_until

pytestmark = pytest.mark.timeout(120)


async def state_of(node: Node, topic: str, partition: int = 0) -> LeaderAndIsr | None:
    return await asyncio.to_thread(node.zk.get_partition_state, topic, partition)


async def wait_state(node: Node, topic: str, check, what: str, partition: int = 0) -> LeaderAndIsr:
    async def probe() -> LeaderAndIsr | None:
        state = await state_of(node, topic, partition)
        return state if state is not None and check(state) else None

    return await wait_until(probe, what=what)  # type: ignore[return-value]


def run(scenario) -> None:
    asyncio.run(scenario())


def test_broker_death_moves_leadership_then_offline_then_back(zk_connect):
    async def scenario() -> None:
        nodes = {b: await Node(zk_connect, b).start() for b in (1, 2, 3, 4)}
        try:
            await active(list(nodes.values()))
            await asyncio.to_thread(nodes[4].zk.create_topic, "t", assignment={0: [1, 2, 3]})
            s = await wait_state(nodes[4], "t", lambda s: s.leader == 1, "t-0 led by 1")
            assert (s.leader_epoch, s.isr) == (0, (1, 2, 3))

            await nodes[1].stop()
            s = await wait_state(nodes[4], "t", lambda s: s.leader != 1, "leader moves off 1")
            assert (s.leader, s.leader_epoch, s.isr) == (2, 1, (2, 3))

            await nodes[2].stop()
            s = await wait_state(nodes[4], "t", lambda s: s.leader != 2, "leader moves off 2")
            assert (s.leader, s.leader_epoch, s.isr) == (3, 2, (3,))

            # No ISR member alive: offline (leader -1); the ISR keeps the last leader.
            await nodes[3].stop()
            s = await wait_state(nodes[4], "t", lambda s: s.leader != 3, "t-0 offline")
            assert (s.leader, s.leader_epoch, s.isr) == (-1, 3, (3,))

            # Broker 1 returns: it is not in the ISR, so (unclean election off) the partition stays offline.
            nodes[1] = await Node(zk_connect, 1).start()
            await wait_until(lambda: any(n.zk and 1 in n.controller.live_brokers and n.controller.is_active
                                         for n in nodes.values()), what="controller sees broker 1")
            assert (await state_of(nodes[4], "t")).leader == -1
            # Broker 3, the last ISR member, returns: a clean election.
            nodes[3] = await Node(zk_connect, 3).start()
            s = await wait_state(nodes[4], "t", lambda s: s.leader == 3, "3 leads again")
            assert (s.leader_epoch, s.isr) == (4, (3,))
        finally:
            for node in nodes.values():
                await node.stop()

    run(scenario)


def test_unclean_election_only_when_enabled(zk_connect):
    async def scenario() -> None:
        nodes = {b: await Node(zk_connect, b).start() for b in (1, 2, 3)}
        try:
            await active(list(nodes.values()))
            zk = nodes[3].zk
            await asyncio.to_thread(zk.create_topic, "clean", assignment={0: [1, 2]})
            await asyncio.to_thread(zk.create_topic, "unclean", assignment={0: [1, 2]},
                                    config={"unclean.leader.election.enable": "true"})
            for topic in ("clean", "unclean"):
                s = await wait_state(nodes[3], topic, lambda s: s.leader == 1, f"{topic} led by 1")
                # The leader shrinks the ISR to itself (broker 2 fell behind).
                await asyncio.to_thread(zk.alter_isr, topic, 0, 1, s.leader_epoch, (1,), s.zk_version)
            await nodes[1].stop()
            s = await wait_state(nodes[3], "unclean", lambda s: s.leader == 2, "unclean election of 2")
            assert (s.leader_epoch, s.isr) == (1, (2,))
            s = await wait_state(nodes[3], "clean", lambda s: s.leader != 1, "clean goes offline")
            assert (s.leader, s.isr) == (-1, (1,))
            # ElectLeaders(UNCLEAN) forces it on request.
            ctl = (await active([n for n in nodes.values() if n.zk])).controller
            result = await ctl.elect_leaders([("clean", 0)], ElectionType.UNCLEAN)
            assert result == {("clean", 0): None}
            s = await state_of(nodes[3], "clean")
            assert (s.leader, s.isr) == (2, (2,))
        finally:
            for node in nodes.values():
                await node.stop()

    run(scenario)


def test_alter_isr_is_conditional_on_the_partition_epoch(zk_connect):
    async def scenario() -> None:
        nodes = {b: await Node(zk_connect, b).start() for b in (1, 2, 3)}
        try:
            await active(list(nodes.values()))
            zk = nodes[1].zk
            await asyncio.to_thread(zk.create_topic, "t", assignment={0: [1, 2, 3]})
            s = await wait_state(nodes[1], "t", lambda s: s.leader == 1, "t-0 led by 1")
            version = await asyncio.to_thread(zk.alter_isr, "t", 0, 1, s.leader_epoch, (1, 2), s.zk_version)
            assert version == s.zk_version + 1
            assert (await state_of(nodes[1], "t")).isr == (1, 2)
            with pytest.raises(KafkaError) as stale:
                await asyncio.to_thread(zk.alter_isr, "t", 0, 1, s.leader_epoch, (1,), s.zk_version)
            assert stale.value.code == ErrorCode.INVALID_UPDATE_VERSION
            with pytest.raises(KafkaError) as fenced:
                await asyncio.to_thread(zk.alter_isr, "t", 0, 1, s.leader_epoch - 1, (1,), version)
            assert fenced.value.code == ErrorCode.FENCED_LEADER_EPOCH
            with pytest.raises(KafkaError) as not_leader:
                await asyncio.to_thread(zk.alter_isr, "t", 0, 2, s.leader_epoch, (2,), version)
            assert not_leader.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER
            assert (await state_of(nodes[1], "t")).isr == (1, 2)
            # The controller consumes the ISR-change notification and caches the new state.
            ctl = (await active(list(nodes.values()))).controller
            await wait_until(lambda: ctl.states[("t", 0)].isr == (1, 2), what="controller saw the ISR change")
            await wait_until(lambda: not zk.get_isr_change_notifications(), what="notifications consumed")
        finally:
            for node in nodes.values():
                await node.stop()

    run(scenario)


def test_invalid_replication_factor_and_placement(zk_connect):
    async def scenario() -> None:
        nodes = [await Node(zk_connect, b, rack=r).start() for b, r in ((1, "a"), (2, "a"), (3, "b"), (4, "b"))]
        try:
            await active(nodes)
            zk = nodes[0].zk
            with pytest.raises(KafkaError) as error:
                await asyncio.to_thread(zk.create_topic, "too-big", 1, 5)
            assert error.value.code == ErrorCode.INVALID_REPLICATION_FACTOR
            created = await asyncio.to_thread(zk.create_topic, "spread", 8, 2)
            racks = {1: "a", 2: "a", 3: "b", 4: "b"}
            for replicas in created.partitions.values():
                assert {racks[r] for r in replicas.replicas} == {"a", "b"}  # rack-aware
            counts = {b: sum(b in a.replicas for a in created.partitions.values()) for b in racks}
            assert set(counts.values()) == {4}  # 16 replicas evenly over 4 brokers
            leaders = {b: sum(a.replicas[0] == b for a in created.partitions.values()) for b in racks}
            assert set(leaders.values()) == {2}
            with pytest.raises(KafkaError) as exists:
                await asyncio.to_thread(zk.create_topic, "spread", 1, 1)
            assert exists.value.code == ErrorCode.TOPIC_ALREADY_EXISTS
            # CreatePartitions: the controller brings the new partitions online.
            await asyncio.to_thread(zk.add_partitions, "spread", 10)
            for p in (8, 9):
                await wait_state(nodes[0], "spread", lambda s: s.leader > 0, f"spread-{p} online", partition=p)
        finally:
            for node in nodes:
                await node.stop()

    run(scenario)


def test_reassignment_adds_catches_up_switches_and_drops(zk_connect):
    async def scenario() -> None:
        nodes = {b: await Node(zk_connect, b).start() for b in (1, 2, 3)}
        try:
            ctl = (await active(list(nodes.values()))).controller
            zk = nodes[1].zk
            await asyncio.to_thread(zk.create_topic, "t", assignment={0: [1, 2]})
            s = await wait_state(nodes[1], "t", lambda s: s.leader == 1, "t-0 led by 1")
            assert await ctl.alter_partition_reassignments({("t", 0): [2, 3]}) == {("t", 0): None}
            ongoing = await ctl.list_partition_reassignments()
            assert ongoing[("t", 0)].adding_replicas == (3,)
            assert ongoing[("t", 0)].removing_replicas == (1,)
            assert ongoing[("t", 0)].replicas == (2, 3, 1)
            s = await wait_state(nodes[1], "t", lambda s: s.leader_epoch == 1, "epoch bump for the new replica set")
            # Broker 3 caught up: the leader adds it to the ISR; the controller completes the move.
            await asyncio.to_thread(zk.alter_isr, "t", 0, 1, s.leader_epoch, (1, 2, 3), s.zk_version)
            s = await wait_state(nodes[1], "t", lambda s: s.leader != 1, "leadership leaves 1")
            assert (s.leader, s.isr) == (2, (2, 3))
            assignment = await asyncio.to_thread(zk.get_topic_assignment, "t")
            assert assignment.partitions[0].replicas == (2, 3)
            assert not assignment.partitions[0].is_being_reassigned
            assert await ctl.list_partition_reassignments() == {}
            result = await ctl.alter_partition_reassignments({("t", 0): None})
            assert result[("t", 0)].code == ErrorCode.NO_REASSIGNMENT_IN_PROGRESS
        finally:
            for node in nodes.values():
                await node.stop()

    run(scenario)


def test_controlled_shutdown_then_preferred_election(zk_connect):
    async def scenario() -> None:
        nodes = {b: await Node(zk_connect, b).start() for b in (1, 2, 3)}
        try:
            ctl = (await active(list(nodes.values()))).controller
            zk = nodes[1].zk
            await asyncio.to_thread(zk.create_topic, "t", assignment={0: [1, 2], 1: [3, 2]})
            await wait_state(nodes[1], "t", lambda s: s.leader == 1, "t-0 led by 1")
            with pytest.raises(KafkaError) as stale:
                await ctl.controlled_shutdown(1, broker_epoch=12345)
            assert stale.value.code == ErrorCode.STALE_BROKER_EPOCH
            remaining = await ctl.controlled_shutdown(1, broker_epoch=ctl.live_brokers[1].broker_epoch)
            assert remaining == set()
            s = await state_of(nodes[1], "t")
            assert (s.leader, s.leader_epoch, s.isr) == (2, 1, (2,))
            # Broker 1 stays (the shutdown was called off) and catches up; the leader adds it back.
            ctl.shutting_down_brokers.discard(1)
            await asyncio.to_thread(zk.alter_isr, "t", 0, 2, s.leader_epoch, (2, 1), s.zk_version)
            await wait_until(lambda: ctl.states[("t", 0)].isr == (2, 1), what="controller saw the ISR change")
            result = await ctl.elect_leaders([("t", 0), ("t", 1), ("missing", 0)])
            assert result[("t", 0)] is None
            assert result[("t", 1)].code == ErrorCode.ELECTION_NOT_NEEDED
            assert result[("missing", 0)].code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            s = await state_of(nodes[1], "t")
            assert (s.leader, s.leader_epoch) == (1, 2)
            # A non-controller refuses.
            other = next(n for n in nodes.values() if n.controller is not ctl)
            with pytest.raises(KafkaError) as error:
                await other.controller.elect_leaders([("t", 0)])
            assert error.value.code == ErrorCode.NOT_CONTROLLER
        finally:
            for node in nodes.values():
                await node.stop()

    run(scenario)


def test_auto_preferred_leader_rebalance(zk_connect):
    async def scenario() -> None:
        config = ControllerConfig(auto_leader_rebalance_enable=True, leader_imbalance_check_interval_seconds=0.2)
        nodes = {b: await Node(zk_connect, b, config=config).start() for b in (1, 2)}
        try:
            ctl = (await active(list(nodes.values()))).controller
            zk = nodes[1].zk
            await asyncio.to_thread(zk.create_topic, "t", assignment={0: [1, 2]})
            s = await wait_state(nodes[1], "t", lambda s: s.leader == 1, "t-0 led by 1")
            # Leadership moved away (as a controlled shutdown of broker 1 does) while 1 is in the ISR.
            moved = LeaderAndIsr(2, s.leader_epoch + 1, (2, 1), ctl.epoch, s.zk_version)
            ctl.states[("t", 0)] = await asyncio.to_thread(
                zk.update_leader_and_isr, ctl.epoch_zk_version, "t", 0, moved)
            s = await wait_state(nodes[1], "t", lambda s: s.leader == 1 and s.leader_epoch == 2, "auto rebalance")
        finally:
            for node in nodes.values():
                await node.stop()

    run(scenario)


def test_metadata_loader_and_topic_deletion(zk_connect):
    async def scenario() -> None:
        nodes = {b: await Node(zk_connect, b).start() for b in (1, 2, 3)}
        recorder = Recorder()
        loader = ZkMetadataLoader(nodes[2].zk, 2, recorder)
        try:
            ctl_node = await active(list(nodes.values()))
            await loader.start()
            await wait_until(lambda: sorted(recorder.brokers) == [1, 2, 3], what="brokers")
            await wait_until(lambda: recorder.controller == ctl_node.broker_id, what="controller")
            zk = nodes[1].zk
            await asyncio.to_thread(zk.create_topic, "t", assignment={0: [2, 3], 1: [3, 1]},
                                    config={"cleanup.policy": "compact"})
            await wait_until(lambda: len(recorder.partitions) == 2, what="partition states")
            state = recorder.partitions[("t", 0)]
            assert (state.leader, state.leader_epoch, state.isr, state.replicas) == (2, 0, (2, 3), (2, 3))
            assert recorder.topics["t"][1] == {"cleanup.policy": "compact"}
            # What the wiring puts into the metadata image.
            registration = state.registration()
            assert (registration.replicas, registration.isr, registration.leader) == ((2, 3), (2, 3), 2)
            assert registration.partition_epoch == state.zk_version
            assert recorder.topics["t"][0].topic_uuid.int != 0
            assert broker_registration(recorder.brokers[3]) == BrokerRegistration(3, "127.0.0.1", 9003, None)
            # The leader changes the ISR through the loader; listeners see the new partition epoch.
            version = await loader.alter_isr("t", 0, 0, (2,), state.zk_version)
            await wait_until(lambda: recorder.partitions[("t", 0)].zk_version == version, what="new ISR")
            assert recorder.partitions[("t", 0)].isr == (2,)
            # An older state is dropped.
            loader._publish(("t", 0), LeaderAndIsr(3, 0, (3,), 1, 0))
            await asyncio.sleep(0.2)
            assert recorder.partitions[("t", 0)].isr == (2,)
            # Broker 2 dies: listeners learn the new broker set and leader.
            await nodes[3].stop()
            await wait_until(lambda: sorted(recorder.brokers) == [1, 2], what="broker 3 gone")
            await wait_until(lambda: recorder.partitions[("t", 1)].leader == 1, what="t-1 moved to 1")
            # Deletion: any broker queues it, the controller removes the znodes, brokers hear "gone".
            await asyncio.to_thread(zk.request_topic_deletion, "t")
            await wait_until(lambda: recorder.deleted == ["t"], what="topic deleted")
            assert await asyncio.to_thread(zk.get_all_topics) == []
            assert await asyncio.to_thread(zk.get_topic_deletions) == []
            with pytest.raises(KafkaError) as error:
                await asyncio.to_thread(zk.request_topic_deletion, "t")
            assert error.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        finally:
            loader.stop()
            for node in nodes.values():
                await node.stop()

    run(scenario)


def test_a_broker_death_moves_every_partition_it_led(zk_connect):
    """Kafka's onBrokerFailure: every partition the dead broker led gets a leader from the live ISR and
    loses the dead broker from its ISR, and the followers' ISRs lose it too — written together
    (update_leader_and_isr_many), not one round trip per partition."""

    async def scenario() -> None:
        nodes = {b: await Node(zk_connect, b).start() for b in (1, 2, 3, 4)}
        try:
            await active(list(nodes.values()))
            led_by_1 = {p: [1, 2, 3] for p in range(24)}
            followed_by_1 = {p: [2, 1, 3] for p in range(24, 30)}
            await asyncio.to_thread(nodes[4].zk.create_topic, "many", assignment=led_by_1 | followed_by_1)
            for p in range(30):
                await wait_state(nodes[4], "many", lambda s: s.leader != -1, f"many-{p} has a leader", partition=p)
            survivor = nodes[4]
            await nodes[1].stop()
            for p in range(24):
                s = await wait_state(survivor, "many", lambda s: s.leader != 1, f"many-{p} moves off 1", partition=p)
                assert (s.leader, s.leader_epoch, s.isr) == (2, 1, (2, 3)), p
            for p in range(24, 30):
                s = await wait_state(survivor, "many", lambda s: 1 not in s.isr, f"1 leaves many-{p}'s ISR", partition=p)
                assert (s.leader, s.leader_epoch, s.isr) == (2, 1, (2, 3)), p
        finally:
            for node in nodes.values():
                await node.stop()

    run(scenario)


def test_a_stale_partition_state_is_read_again_not_taken_for_a_new_controller(zk_connect, caplog):
    """A partition state changed behind the controller's cache (a leader's AlterPartition it has not
    seen yet): its write fails the version check, which ZooKeeper reports beside a RolledBackError for
    the transaction's controller-epoch check. The controller reads the state again and writes; it does not
    resign as if another controller had been elected."""

    async def scenario() -> None:
        nodes = {b: await Node(zk_connect, b).start() for b in (1, 2, 3)}
        try:
            node = await active(list(nodes.values()))
            ctl = node.controller
            epoch = ctl.epoch
            await asyncio.to_thread(node.zk.create_topic, "stale", assignment={0: [3, 1, 2], 1: [3, 2, 1]})
            for p in (0, 1):
                await wait_state(node, "stale", lambda s: s.leader == 3, f"stale-{p} led by 3", partition=p)
                await wait_until(lambda p=p: ("stale", p) in ctl.states, what="the controller caches the state")
                # The same state, one zk version on: the controller's cached version is now stale.
                path = f"/brokers/topics/stale/partitions/{p}/state"
                data, _ = await asyncio.to_thread(node.zk.kazoo.get, path)
                await asyncio.to_thread(node.zk.kazoo.set, path, data)
            follower = 2 if node is not nodes[2] else 1
            await nodes[follower].stop()
            for p in (0, 1):
                s = await wait_state(node, "stale", lambda s: follower not in s.isr, f"{follower} leaves stale-{p}'s ISR",
                                     partition=p)
                assert s.leader == 3
            assert ctl.is_active and ctl.epoch == epoch
            resigned = [r.getMessage() for r in caplog.records if "resigning" in r.getMessage()]
            assert not resigned, f"the controller resigned over a stale partition state: {resigned}"
        finally:
            for node_ in nodes.values():
                await node_.stop()

    run(scenario)
