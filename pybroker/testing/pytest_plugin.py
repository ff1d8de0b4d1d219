"""pytest fixtures that give a test suite a real Kafka-protocol broker: no Docker, no JVM.

Installed with pybroker and loaded by pytest through the `pytest11` entry point, so a test only
names the fixtures:

    def test_round_trip(kafka_broker, kafka_topic):
        topic = kafka_topic(partitions=3)               # a fresh topic, deleted after the test
        Producer({"bootstrap.servers": kafka_broker})   # "127.0.0.1:<port>"

`kafka_broker` starts one pybroker per test session, in-process on its own event loop thread, on a
free port with a temporary log dir that is removed afterwards. Broker settings (Kafka's
server.properties keys) come from the `kafka_broker_overrides` fixture; override it in a conftest.py:

    @pytest.fixture(scope="session")
    def kafka_broker_overrides():
        return {"num.partitions": "3", "auto.create.topics.enable": "false"}

Disable the plugin with `pytest -p no:pybroker`.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator, Mapping

import pytest

from pybroker.testing.embedded import EmbeddedBroker

_NOT_IN_TOPIC_NAME = re.compile(r"[^a-zA-Z0-9._-]+")
TOPIC_NAME_PREFIX_CHARS = 80  # of the test's name; Kafka allows 249 characters in all


@pytest.fixture(scope="session")
def kafka_broker_overrides() -> Mapping[str, str]:
    """Broker settings (server.properties keys and string values) for `kafka_broker`; none by default."""
    return {}


@pytest.fixture(scope="session")
def embedded_kafka_broker(kafka_broker_overrides: Mapping[str, str]) -> Iterator[EmbeddedBroker]:
    """The running `EmbeddedBroker` behind `kafka_broker` (its `.broker`, `.log_dir`, `.create_topic`)."""
    broker = EmbeddedBroker(overrides=kafka_broker_overrides)
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def kafka_broker(embedded_kafka_broker: EmbeddedBroker) -> str:
    """The bootstrap address ("127.0.0.1:<port>") of a pybroker shared by the whole test session."""
    return embedded_kafka_broker.bootstrap


@pytest.fixture
def kafka_topic(
    request: pytest.FixtureRequest, embedded_kafka_broker: EmbeddedBroker
) -> Iterator[Callable[..., str]]:
    """`kafka_topic(partitions=1, configs=None) -> name`: creates a topic whose name is unique to this
    call (the test's name plus a random suffix) and deletes it when the test ends."""
    created: list[str] = []

    def create(partitions: int = 1, configs: Mapping[str, str] | None = None) -> str:
        stem = _NOT_IN_TOPIC_NAME.sub("-", request.node.name)[:TOPIC_NAME_PREFIX_CHARS].strip("-.")
        name = f"{stem or 'topic'}-{uuid.uuid4().hex[:8]}"
        embedded_kafka_broker.create_topic(name, partitions, configs)
        created.append(name)
        return name

    yield create
    for name in created:
        embedded_kafka_broker.delete_topic(name)
