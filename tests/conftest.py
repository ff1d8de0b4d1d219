"""Fixtures shared by every test package."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pybroker.controller.zookeeper_server import ZooKeeperServer


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """A real standalone ZooKeeper for the test module (cluster mode), started and stopped by pid;
    `zookeeper.connect_string` is the value of zookeeper.connect."""
    # A 200 ms tick allows sessions of 0.4 s to 4 s; tests end sessions by closing them (at once).
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"), tick_time_ms=200)
    server.start()
    try:
        yield server
    finally:
        server.stop()
