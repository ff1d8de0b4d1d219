"""A broker whose ZooKeeper session expired registers again under a new session, so its broker epoch
(the registration's czxid) changes; the epoch it sends with its controlled shutdown must be the new one.

Found by the failure harness (tools/chaos): a leader frozen past its session and bounced later asked for
a controlled shutdown with the epoch of its first registration, the controller refused it
(STALE_BROKER_EPOCH), and the bounce became a hard stop that kept leadership on the stopping broker."""

from __future__ import annotations

import asyncio

import pytest
from kazoo.client import KazooClient

from pybroker.config import BrokerConfig
from pybroker.controller.cluster import ZkClusterMembership
from tests.controller.conftest import Recorder, wait_until

pytestmark = pytest.mark.timeout(120)


def membership(connect: str, broker_id: int, recorder: Recorder) -> ZkClusterMembership:
    config = BrokerConfig({"zookeeper.connect": connect, "node.id": str(broker_id),
                           "zookeeper.session.timeout.ms": "4000", "auto.leader.rebalance.enable": "false"})
    return ZkClusterMembership.from_config(config, recorder, host="127.0.0.1", port=9200 + broker_id)


def test_controlled_shutdown_after_a_new_session_uses_the_new_broker_epoch(zk_connect, zookeeper):
    async def scenario() -> None:
        recorders = {b: Recorder() for b in (1, 2)}
        members = {b: membership(zk_connect, b, recorders[b]) for b in (1, 2)}
        try:
            await members[1].start()  # broker 1 starts first: it is the controller
            await wait_until(lambda: members[1].controller.is_active, what="broker 1 the controller")
            await members[2].start()
            await wait_until(lambda: 2 in recorders[1].brokers, what="broker 2 registered")
            first_epoch = members[2].broker_epoch
            assert first_epoch == recorders[1].brokers[2].broker_epoch

            # Broker 2's session is expired from outside (as a SIGSTOP past the session timeout does).
            killer = KazooClient(zookeeper.connect_string, client_id=members[2].zk.kazoo.client_id)
            await asyncio.to_thread(killer.start, 10)
            await asyncio.to_thread(killer.stop)
            killer.close()
            await wait_until(
                lambda: 2 in recorders[1].brokers and recorders[1].brokers[2].broker_epoch != first_epoch,
                what="broker 2 registered again under a new session",
            )
            await wait_until(lambda: 2 in members[1].controller.live_brokers
                             and members[1].controller.live_brokers[2].broker_epoch != first_epoch,
                             what="the controller sees the new registration")
            assert members[2].broker_epoch == recorders[1].brokers[2].broker_epoch != first_epoch
            # The controller accepts a controlled shutdown with the epoch the broker now holds.
            await members[1].controller.controlled_shutdown(2, members[2].broker_epoch)
            assert 2 in members[1].controller.shutting_down_brokers
        finally:
            for m in members.values():
                await m.stop()

    asyncio.run(scenario())
