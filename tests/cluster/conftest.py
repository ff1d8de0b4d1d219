"""A real 3-broker pybroker cluster for the module: ZooKeeper (tests/conftest.py's ``zookeeper``) and three
``python -m pybroker serve`` processes with ``zookeeper.connect``, each stopped by its pid."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from compat_tests.brokers import PyBroker, free_port
from pybroker.cli.client import KafkaClient

# ZooKeeper's 200 ms tick (tests/conftest.py) caps sessions at 4 s: a killed broker's session expires fast.
SESSION_TIMEOUT_MS = "4000"


class Cluster:
    def __init__(
        self, workdir: Path, connect: str, size: int = 3, overrides: dict[str, str] | None = None, log_dirs: int = 1
    ) -> None:
        self.brokers: dict[int, PyBroker] = {}
        for node in range(1, size + 1):
            self.brokers[node] = PyBroker(
                workdir / f"broker-{node}",
                port=free_port(),
                overrides={
                    "node.id": str(node),
                    "zookeeper.connect": connect,
                    "zookeeper.session.timeout.ms": SESSION_TIMEOUT_MS,
                    "replica.lag.time.max.ms": "6000",
                    "offsets.topic.replication.factor": "1",
                    "num.partitions": "3",
                    "default.replication.factor": "3",
                    **(overrides or {}),
                },
                log_dirs=log_dirs,
            )

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values() if b.process and b.process.poll() is None)

    def start(self) -> None:
        for b in self.brokers.values():
            b.start(timeout_s=60)
        # Serving is not yet registered: every broker must see all of them (its ZooKeeper watches).
        for node, b in self.brokers.items():
            wait_for(lambda b=b: len(self.metadata_of(b.bootstrap).brokers) == len(self.brokers),
                     what=f"broker {node} to see every broker")

    @staticmethod
    def metadata_of(bootstrap: str):
        with KafkaClient(bootstrap) as c:
            return c.metadata([])

    def stop(self) -> None:
        for b in self.brokers.values():
            b.stop()

    def metadata(self, node: int, topic: str):
        with KafkaClient(self.brokers[node].bootstrap) as c:
            return c.metadata([topic])


def wait_for(condition: Callable[[], object], timeout_s: float = 30, what: str = "condition") -> object:
    deadline = time.monotonic() + timeout_s
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = condition()
            if value:
                return value
        except Exception as e:  # noqa: BLE001 - a broker still starting or electing
            last_error = e
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what} (last error: {last_error})")


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("cluster"), zookeeper.connect_string)
    try:
        c.start()
        yield c
    finally:
        c.stop()
