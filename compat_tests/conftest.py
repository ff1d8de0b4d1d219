"""pytest wiring for the compat scenarios: which broker, which clients, fresh topics.

pytest compat_tests                         # starts pybroker once per session
pytest compat_tests --broker kafka          # starts Apache Kafka (compat_tests/reference)
pytest compat_tests --broker kafka-cluster  # 3 Apache Kafka KRaft nodes, topics RF 3 (reference/kafka_cluster.py)
pytest compat_tests --broker pybroker-cluster  # ZooKeeper + 3 pybroker brokers (compat_tests/pybroker_cluster.py)
pytest compat_tests --bootstrap HOST:PORT   # an already-running broker of any kind
pytest compat_tests --clients confluent,java
pytest compat_tests --full                  # plus the heavy variants (see FULL_HELP)
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from compat_tests.brokers import PyBroker
from compat_tests.clients.registry import CLIENT_NAMES, make_client
from compat_tests.scenarios.support import CLUSTER_BROKERS, NOT_EXPRESSIBLE_LOG

# Brokers started for the scenarios run the codec strictly (codec.strict_field_names): a handler's
# misspelt field name fails the scenario instead of being encoded as the default.
os.environ.setdefault("PYBROKER_STRICT_CODEC", "1")

FULL_HELP = (
    "also run the heavy variants the default run leaves out for time (tests marked 'full'): "
    "2000 records per codec per client, a record near the size limit through every client, "
    "every cross-client pair with every codec; they are not ledger rows"
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("compat", "Kafka client compatibility")
    group.addoption("--bootstrap", default=None, help="HOST:PORT of an already-running broker (any kind)")
    group.addoption(
        "--broker",
        default="pybroker",
        choices=["pybroker", "kafka", *CLUSTER_BROKERS],
        help="broker to start when --bootstrap is not given",
    )
    group.addoption(
        "--clients", default=",".join(CLIENT_NAMES), help="comma-separated adapters to run (default: all)"
    )
    group.addoption("--full", action="store_true", default=False, help=FULL_HELP)


def selected_clients(config: pytest.Config) -> list[str]:
    names = [name.strip() for name in config.getoption("--clients").split(",") if name.strip()]
    unknown = sorted(set(names) - set(CLIENT_NAMES))
    if unknown:
        raise pytest.UsageError(f"unknown clients {unknown}; known: {CLIENT_NAMES}")
    return names


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    names = selected_clients(metafunc.config)
    if "client_name" in metafunc.fixturenames:
        metafunc.parametrize("client_name", names)
    if "client_pair" in metafunc.fixturenames:
        pairs = [(a, b) for a in names for b in names]
        metafunc.parametrize("client_pair", pairs, ids=[f"{a}->{b}" for a, b in pairs])


@pytest.fixture(scope="session")
def broker(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The launcher object of the broker under test, or None for an external --bootstrap."""
    if request.config.getoption("--bootstrap"):
        yield None
        return
    workdir = tmp_path_factory.mktemp("broker")
    kind = request.config.getoption("--broker")
    if kind == "kafka":
        from compat_tests.reference.apache_kafka import ApacheKafka

        launcher: Any = ApacheKafka(workdir)
    elif kind == "kafka-cluster":
        from compat_tests.reference.kafka_cluster import ApacheKafkaCluster

        launcher = ApacheKafkaCluster(workdir, nodes=3)
    elif kind == "pybroker-cluster":
        from compat_tests.pybroker_cluster import PyBrokerCluster

        launcher = PyBrokerCluster(workdir, nodes=3)
    else:
        launcher = PyBroker(workdir)
    launcher.start()
    try:
        yield launcher
    finally:
        launcher.stop()


@pytest.fixture(scope="session")
def bootstrap(request: pytest.FixtureRequest, broker: Any) -> str:
    return request.config.getoption("--bootstrap") or broker.bootstrap


@pytest.fixture(scope="session")
def admin() -> Any:
    """The admin used to set scenarios up (confluent-kafka: the most complete admin API)."""
    return make_client("confluent")


@pytest.fixture
def unique_topic(request: pytest.FixtureRequest) -> str:
    safe = "".join(ch if ch.isalnum() else "-" for ch in request.node.name)[:60].strip("-")
    return f"compat-{safe}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def make_topic(
    request: pytest.FixtureRequest, admin: Any, bootstrap: str, unique_topic: str
) -> Callable[..., str]:
    """Create a fresh topic (``unique_topic`` plus an optional suffix) and return its name.

    Against a cluster the topic takes the broker's default replication factor (3), not 1."""
    replication = -1 if request.config.getoption("--broker") in CLUSTER_BROKERS else 1

    def create(suffix: str = "", *, partitions: int = 1, configs: dict[str, str] | None = None) -> str:
        name = unique_topic + suffix
        admin.create_topic(
            bootstrap, name, partitions=partitions, configs=configs, replication_factor=replication
        )
        return name

    return create


@pytest.fixture
def client(client_name: str) -> Any:
    return make_client(client_name)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without --full, the 'full' variants are deselected (not skipped: they are simply not run)."""
    if config.getoption("--full"):
        return
    heavy = [item for item in items if item.get_closest_marker("full")]
    if heavy:
        config.hook.pytest_deselected(items=heavy)
        items[:] = [item for item in items if not item.get_closest_marker("full")]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "full: a heavy variant, run only with --full (" + FULL_HELP + ")")
    # The conformance ledger: records outcomes, checks COMPATIBILITY.md (compat_tests/ledger_plugin.py).
    from compat_tests.ledger_plugin import register

    register(config)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    # Read from the skip reports, not from NOT_EXPRESSIBLE_LOG: under pytest-xdist the skips happen in
    # the workers and only their reports reach this process.
    lines = set(NOT_EXPRESSIBLE_LOG)
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = getattr(report, "longrepr", None)
        message = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
        if "NOT EXPRESSIBLE" in message:
            lines.add(message.removeprefix("Skipped: "))
    if lines:
        terminalreporter.section("scenarios a client cannot express (reported as skipped, never passed)")
        for line in sorted(lines):
            terminalreporter.write_line(line)
