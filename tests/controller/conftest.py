"""A fresh ZooKeeper chroot per test (the module-scoped `zookeeper` fixture is in tests/conftest.py), and
helpers to run several brokers' controllers in one process, each with its own ZooKeeper session."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable

import pytest
from kazoo.client import KazooClient

from pybroker.controller.controller import ControllerConfig, KafkaController
from pybroker.controller.metadata_loader import PartitionState
from pybroker.controller.zk_client import KafkaZkClient
from pybroker.controller.zk_data import BrokerInfo
from pybroker.controller.zookeeper_server import ZooKeeperServer

_chroots = itertools.count()


@pytest.fixture
def zk_connect(zookeeper: ZooKeeperServer) -> str:
    """A connect string with a fresh chroot, so tests of one module do not see each other's znodes."""
    chroot = f"/t{next(_chroots)}-{time.monotonic_ns()}"
    client = KazooClient(zookeeper.connect_string)
    client.start(timeout=10)
    client.ensure_path(chroot)
    client.stop()
    client.close()
    return zookeeper.connect_string + chroot


class Node:
    """One 'broker': its ZooKeeper session, its registration and its controller."""

    def __init__(self, connect: str, broker_id: int, rack: str | None = None,
                 config: ControllerConfig | None = None) -> None:
        self.connect = connect
        self.broker_id = broker_id
        self.rack = rack
        self.config = config or ControllerConfig(auto_leader_rebalance_enable=False)
        self.zk: KafkaZkClient | None = None
        self.controller: KafkaController | None = None

    async def start(self) -> Node:
        self.zk = KafkaZkClient(self.connect, session_timeout_ms=4000, connection_timeout_ms=10000)
        await asyncio.to_thread(self.zk.start)
        info = BrokerInfo(self.broker_id, "127.0.0.1", 9000 + self.broker_id, self.rack,
                          (f"PLAINTEXT://127.0.0.1:{9000 + self.broker_id}",))
        await asyncio.to_thread(self.zk.register_broker, info)
        self.controller = KafkaController(self.zk, self.broker_id, self.config)
        await self.controller.startup()
        return self

    async def stop(self) -> None:
        """The broker dies: its session closes, so its ephemeral znodes go at once."""
        if self.controller is not None:
            await self.controller.shutdown()
        if self.zk is not None:
            await asyncio.to_thread(self.zk.close)
        self.zk = None


async def wait_until(condition: Callable[[], object], timeout: float = 20.0, what: str = "condition") -> object:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def active(nodes: list[Node], timeout: float = 20.0) -> Node:
    """The one node whose controller is active (waits until exactly one is)."""
    async def one() -> Node | None:
        actives = [n for n in nodes if n.controller is not None and n.zk is not None and n.controller.is_active]
        return actives[0] if len(actives) == 1 else None

    return await wait_until(one, timeout, "one active controller")  # type: ignore[return-value]


class Recorder:
    """A MetadataListener that keeps what it was told."""

    def __init__(self) -> None:
        self.brokers: dict = {}
        self.controller = None
        self.topics: dict = {}
        self.deleted: list[str] = []
        self.partitions: dict[tuple[str, int], PartitionState] = {}

    def on_brokers(self, brokers) -> None:
        self.brokers = brokers

    def on_controller(self, controller_id) -> None:
        self.controller = controller_id

    def on_topic(self, topic, assignment, config) -> None:
        if assignment is None:
            self.topics.pop(topic, None)
            self.deleted.append(topic)
        else:
            self.topics[topic] = (assignment, config)

    def on_partition(self, topic, partition, state) -> None:
        self.partitions[(topic, partition)] = state
