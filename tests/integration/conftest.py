"""Fixtures for pybroker process tests: brokers started in temporary directories, stopped by pid.

``INTEGRATION_BROKER=kafka`` runs the broker-agnostic tests against Apache Kafka instead
(compat_tests/reference), to check that a test expects what real Kafka does.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from compat_tests.brokers import PyBroker

# Small enough that a test can exceed it cheaply; large enough for every normal request.
SOCKET_REQUEST_MAX_BYTES = 1_048_576


def against_kafka() -> bool:
    return os.environ.get("INTEGRATION_BROKER", "pybroker") == "kafka"


def launch(workdir: Any, overrides: dict[str, str] | None = None) -> Any:
    if against_kafka():
        from compat_tests.reference.apache_kafka import ApacheKafka

        return ApacheKafka(workdir, overrides=overrides)
    return PyBroker(workdir, overrides=overrides)


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One broker for a module's tests that do not stop it."""
    broker = launch(
        tmp_path_factory.mktemp("broker"), {"socket.request.max.bytes": str(SOCKET_REQUEST_MAX_BYTES)}
    )
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def own_pybroker(tmp_path: Any) -> Iterator[PyBroker]:
    """A pybroker this test may stop, kill and restart."""
    if against_kafka():
        pytest.skip("pybroker process test (stops/kills/restarts pybroker itself)")
    broker = PyBroker(tmp_path)
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()
