"""Fixtures shared by every test package."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from pybroker.controller.zookeeper_server import ZooKeeperServer

# The tests run the codec strictly (codec.strict_field_names): a handler that names a field its message
# does not declare fails the test instead of encoding a default.  In the environment, it reaches the
# broker processes the tests start too.
os.environ.setdefault("PYBROKER_STRICT_CODEC", "1")


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
