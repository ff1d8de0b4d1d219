"""ZkClusterMembership, the object the broker wiring uses: built from BrokerConfig, it registers, watches
and joins the controller election; a lost session re-registers; a lingering registration is waited out."""

from __future__ import annotations

import asyncio

import pytest
from kazoo.client import KazooClient

from pybroker.config import BrokerConfig
from pybroker.controller.cluster import ZkClusterMembership
from pybroker.controller.zk_data import BrokerInfo, broker_path
from tests.controller.conftest import Recorder, wait_until

pytestmark = pytest.mark.timeout(120)


def membership(connect: str, broker_id: int, recorder: Recorder, **extra: str) -> ZkClusterMembership:
    config = BrokerConfig({"zookeeper.connect": connect, "node.id": str(broker_id),
                           "zookeeper.session.timeout.ms": "4000", "broker.rack": f"r{broker_id % 2}",
                           "auto.leader.rebalance.enable": "false", **extra})
    return ZkClusterMembership.from_config(config, recorder, host="127.0.0.1", port=9100 + broker_id)


def test_members_register_learn_metadata_and_survive_session_loss(zk_connect, zookeeper):
    async def scenario() -> None:
        recorders = {b: Recorder() for b in (1, 2, 3)}
        members = {b: membership(zk_connect, b, recorders[b]) for b in (1, 2, 3)}
        try:
            for m in members.values():
                await m.start()
            for r in recorders.values():
                await wait_until(lambda r=r: sorted(r.brokers) == [1, 2, 3], what="three brokers")
            registration = recorders[1].brokers[2]
            assert (registration.host, registration.port, registration.rack) == ("127.0.0.1", 9102, "r0")
            assert registration.endpoints == ("PLAINTEXT://127.0.0.1:9102",)
            controller = await wait_until(lambda: recorders[1].controller, what="a controller")
            assert members[controller].controller.is_active

            await asyncio.to_thread(members[1].zk.create_topic, "t", assignment={0: [2, 1]})
            await wait_until(lambda: ("t", 0) in recorders[3].partitions, what="t-0 state")
            assert recorders[3].partitions[("t", 0)].leader == 2

            # Broker 2's session is expired from outside: its registration goes, leadership moves, and
            # its client re-registers on the new session (a new broker epoch).
            old_epoch = registration.broker_epoch
            killer = KazooClient(zookeeper.connect_string, client_id=members[2].zk.kazoo.client_id)
            await asyncio.to_thread(killer.start, 10)
            await asyncio.to_thread(killer.stop)
            killer.close()
            await wait_until(lambda: recorders[1].partitions[("t", 0)].leader == 1, what="t-0 moves to 1")
            await wait_until(
                lambda: 2 in recorders[1].brokers and recorders[1].brokers[2].broker_epoch != old_epoch,
                what="broker 2 registered again",
            )
            # Broker 2's watches outlived its session: it learns of a topic created afterwards.
            await asyncio.to_thread(members[1].zk.create_topic, "u", assignment={0: [3, 2]})
            await wait_until(lambda: ("u", 0) in recorders[2].partitions, what="broker 2 learns u-0")
            assert recorders[2].partitions[("u", 0)].replicas == (3, 2)
        finally:
            for m in members.values():
                await m.stop()

    asyncio.run(scenario())


def test_start_waits_out_a_lingering_registration(zk_connect):
    async def scenario() -> None:
        # A previous incarnation of broker 4 whose session is still open.
        ghost = KazooClient(zk_connect)
        await asyncio.to_thread(ghost.start, 10)
        await asyncio.to_thread(ghost.create, broker_path(4), BrokerInfo(4, "127.0.0.1", 1).encode(),
                                ephemeral=True, makepath=True)
        recorder = Recorder()
        member = membership(zk_connect, 4, recorder)
        starting = asyncio.ensure_future(member.start())
        try:
            await asyncio.sleep(1.0)
            assert not starting.done()
            await asyncio.to_thread(ghost.stop)
            await asyncio.wait_for(starting, 15)
            await wait_until(lambda: 4 in recorder.brokers and recorder.brokers[4].port == 9104,
                             what="broker 4 registered by the new incarnation")
        finally:
            ghost.close()
            await member.stop()

    asyncio.run(scenario())
