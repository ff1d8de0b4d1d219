"""Registration, controller election and failover against a real ZooKeeper; a fenced controller cannot write."""

from __future__ import annotations

import asyncio

import pytest
from kazoo.client import KazooClient

from pybroker.controller.zk_client import ControllerMovedError
from pybroker.controller.zk_data import LeaderAndIsr
from pybroker.controller.zookeeper_server import four_letter_word
from tests.controller.conftest import Node, active, wait_until

pytestmark = pytest.mark.timeout(120)


def test_zookeeper_runs_by_pid(zookeeper):
    assert zookeeper.pid is not None
    assert "Mode: standalone" in four_letter_word(zookeeper.host, zookeeper.port, "srvr")


def test_registration_election_and_failover(zk_connect):
    async def scenario() -> None:
        nodes = [await Node(zk_connect, b).start() for b in (1, 2, 3)]
        try:
            first = await active(nodes)
            zk = nodes[0].zk
            assert sorted(await asyncio.to_thread(zk.get_all_brokers)) == [1, 2, 3]
            registration = (await asyncio.to_thread(zk.get_all_brokers))[2]
            assert (registration.host, registration.port) == ("127.0.0.1", 9002)
            assert registration.endpoints == ("PLAINTEXT://127.0.0.1:9002",)
            assert await asyncio.to_thread(zk.get_controller_id) == first.broker_id
            assert first.controller.epoch == 1
            assert (await asyncio.to_thread(zk.get_controller_epoch))[0] == 1

            # The controller's broker dies: another takes over with a strictly greater epoch.
            await first.stop()
            survivors = [n for n in nodes if n is not first]
            second = await active(survivors)
            assert second.controller.epoch == 2
            assert await asyncio.to_thread(survivors[0].zk.get_controller_id) == second.broker_id
            assert sorted(await asyncio.to_thread(survivors[0].zk.get_all_brokers)) == sorted(
                n.broker_id for n in survivors)
        finally:
            for node in nodes:
                await node.stop()

    asyncio.run(scenario())


def test_controller_whose_session_expired_stops_acting_and_cannot_write(zk_connect, zookeeper):
    async def scenario() -> None:
        nodes = [await Node(zk_connect, b).start() for b in (1, 2, 3)]
        try:
            old = await active(nodes)
            await asyncio.to_thread(old.zk.create_topic, "t", assignment={0: [1, 2, 3]})
            await wait_until(lambda: old.controller.states.get(("t", 0)), what="t-0 online")
            stale_epoch_version = old.controller.epoch_zk_version
            old_epoch = old.controller.epoch

            # Expire the controller's session from outside, as a long pause would: kazoo reconnects the
            # old client with a new session, but ZooKeeper already dropped /controller.
            session_id, password = old.zk.kazoo.client_id
            killer = KazooClient(zookeeper.connect_string, client_id=(session_id, password))
            await asyncio.to_thread(killer.start, 10)
            await asyncio.to_thread(killer.stop)
            killer.close()

            await wait_until(lambda: any(n.controller.is_active and n.controller.epoch > old_epoch for n in nodes),
                             what="a controller of a later epoch")
            new = await active(nodes)
            await wait_until(lambda: not old.controller.is_active or old is new, what="old controller resigned")
            assert new.controller.epoch > old_epoch

            # The old term's writes are fenced by /controller_epoch's version, even through a live session.
            state = await asyncio.to_thread(new.zk.get_partition_state, "t", 0)
            forged = LeaderAndIsr(3, state.leader_epoch + 7, (3,), old_epoch, state.zk_version)
            await wait_until(lambda: old.zk.kazoo.connected, what="old client reconnected")
            with pytest.raises(ControllerMovedError):
                await asyncio.to_thread(old.zk.update_leader_and_isr, stale_epoch_version, "t", 0, forged)
            # Nothing of the forged write landed (the new controller may have moved t-0 meanwhile: broker 1's
            # registration went with its session, but never by seven epochs).
            after = await asyncio.to_thread(new.zk.get_partition_state, "t", 0)
            assert after.leader_epoch < forged.leader_epoch
        finally:
            for node in nodes:
                await node.stop()

    asyncio.run(scenario())


def test_zookeeper_stops_by_pid_and_keeps_its_data(tmp_path):
    import os

    from pybroker.controller.zookeeper_server import ZooKeeperServer

    server = ZooKeeperServer(tmp_path / "zk", tick_time_ms=200).start()
    pid = server.pid
    client = KazooClient(server.connect_string)
    client.start(timeout=10)
    client.create("/kept", b"yes")
    client.stop()
    client.close()
    server.stop()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    server = ZooKeeperServer(tmp_path / "zk", tick_time_ms=200).start()
    try:
        client = KazooClient(server.connect_string)
        client.start(timeout=10)
        assert client.get("/kept")[0] == b"yes"
        client.stop()
        client.close()
    finally:
        server.stop()
