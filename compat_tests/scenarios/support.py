"""Shared helpers for the scenarios: 'not expressible' reporting, record sets, waiting."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pytest

from compat_tests.clients.base import Compression, ConsumedRecord, Delivery, NotSupportedByClient, Record
from compat_tests.reference import kafka_probe

if TYPE_CHECKING:
    from tests.wire import WireClient

CODECS: list[Compression] = ["none", "gzip", "snappy", "lz4", "zstd"]
NOT_EXPRESSIBLE_LOG: list[str] = []
T = TypeVar("T")
# The replicated brokers: 3 nodes, default.replication.factor 3, min.insync.replicas 2.
CLUSTER_BROKERS = ("kafka-cluster", "pybroker-cluster")
ONE_BROKER_ONLY = "ONE BROKER ONLY"


def cluster_launcher(
    kind: str,
    workdir: Path,
    settings: dict[str, str],
    *,
    extra_listeners: dict[str, str] | None = None,
    authorizer: bool = False,
    log_dirs: int = 1,
) -> Any:
    """For a scenario that starts a broker of its own with settings of its own, on a cluster run: a
    3-node cluster of the kind under test (``kind``, a CLUSTER_BROKERS name) with those settings on every
    node, the same as the session's cluster otherwise. ``extra_listeners`` (name -> security protocol):
    client listeners beside PLAINTEXT, a port of each on every node (``listener_bootstrap(name)``);
    ``authorizer``: StandardAuthorizer semantics, the nodes' own traffic a super user's; ``log_dirs``: that
    many log dirs on every node (``launcher.log_dirs(node)``). Not started."""
    if kind == "kafka-cluster":
        from compat_tests.reference.kafka_cluster import ApacheKafkaCluster

        return ApacheKafkaCluster(
            workdir, nodes=3, overrides=dict(settings), extra_listeners=extra_listeners, authorizer=authorizer,
            log_dirs=log_dirs,
        )  # fmt: skip
    from compat_tests.pybroker_cluster import PyBrokerCluster

    return PyBrokerCluster(
        workdir, nodes=3, overrides=dict(settings), extra_listeners=extra_listeners, authorizer=authorizer,
        log_dirs=log_dirs,
    )  # fmt: skip


def started_bootstrap(
    request: pytest.FixtureRequest, workdir: Path, launcher: Callable[[str, Path], Any]
) -> Iterator[str]:
    """A module fixture's broker: an external ``--bootstrap`` as is, else ``launcher(kind, workdir)``
    (one broker or a cluster of the kind under test) started, its bootstrap yielded, then stopped."""
    external = request.config.getoption("--bootstrap")
    if external:
        yield external
        return
    started = launcher(request.config.getoption("--broker"), workdir)
    started.start()
    try:
        yield started.bootstrap
    finally:
        started.stop()


def one_broker_only(request: pytest.FixtureRequest, why: str) -> None:
    """A scenario that starts a single broker of its own (settings or listeners of its own, or a broker
    it kills and restarts): against ``--broker pybroker-cluster``/``kafka-cluster`` it would run on that
    one pybroker, not on the cluster under test, and pass for the wrong broker. It is skipped there with
    the reason, which the ledger's cluster columns record as ``one broker only``, never as a pass."""
    if request.config.getoption("--broker") in CLUSTER_BROKERS:
        pytest.skip(f"{ONE_BROKER_ONLY}: {why}")


@contextmanager
def expressible(client_name: str) -> Iterator[None]:
    """Turn NotSupportedByClient into an explicit, listed 'not expressible' skip (never a pass)."""
    try:
        yield
    except NotSupportedByClient as exc:
        message = f"NOT EXPRESSIBLE by {client_name}: {exc}"
        NOT_EXPRESSIBLE_LOG.append(message)
        pytest.skip(message)


def mixed_records(tag: str, count: int = 12, timestamp_base: int | None = None) -> list[Record]:
    """Keys, binary values, headers, a NULL key and a NULL value — what every client can express."""
    records = []
    for i in range(count):
        key: bytes | None = f"{tag}-key-{i}".encode()
        value: bytes | None = f"{tag}-value-{i}-".encode() + bytes(range(256)) * (i % 3) + b"\x00\xff"
        if i % 4 == 1:
            key = None
        if i % 4 == 3:
            value = None
        headers = (("trace", f"t{i}".encode()), ("bin", b"\x01\x02\xfe")) if i % 2 == 0 else ()
        timestamp = None if timestamp_base is None else timestamp_base + i * 10
        records.append(Record(key, value, headers, timestamp))
    return records


def assert_same_records(sent: list[Record], deliveries: list[Delivery], got: list[ConsumedRecord]) -> None:
    """Byte-for-byte: key, value, headers (order kept) and offset; timestamp when one was set."""
    assert len(got) == len(sent), f"consumed {len(got)} of {len(sent)} records"
    for index, (record, delivery, consumed) in enumerate(zip(sent, deliveries, got, strict=True)):
        where = f"record {index}"
        assert consumed.offset == delivery.offset, where
        assert consumed.key == record.key, where
        assert consumed.value == record.value, where
        assert consumed.headers == tuple(record.headers), where
        if record.timestamp_ms is not None:
            if consumed.timestamp_type is not None:  # None: the client does not report it (sarama)
                assert consumed.timestamp_type == "CreateTime", where
            assert consumed.timestamp_ms == record.timestamp_ms, where


def wait_for(condition: Callable[[], T], timeout_s: float = 30.0, what: str = "condition") -> T:
    """Poll ``condition`` until it returns something truthy; fail with ``what`` at the deadline."""
    deadline = time.monotonic() + timeout_s
    last: T = condition()
    while not last:
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.2)  # poll interval, the deadline above bounds the wait
        last = condition()
    return last


def confluent_round_trip(
    conf: dict, topic: str, values: list[bytes], *, producer_extra: dict | None = None, timeout_s: float = 30
) -> list[bytes]:
    """Produce `values` to `topic` with confluent-kafka and read them back from the start with a fresh
    group: what came back, in order (the caller asserts). The secured-listener tests share this."""
    from confluent_kafka import Consumer, Producer

    producer = Producer({**conf, **(producer_extra or {})})
    for value in values:
        producer.produce(topic, value)
    assert producer.flush(timeout_s) == 0
    consumer = Consumer({**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < len(values) and time.monotonic() < deadline:
        for message in consumer.consume(100, 1.0):
            if message.error() is None:
                got.append(message.value())
    consumer.commit(asynchronous=False)
    consumer.close()
    return got


def first_broker(bootstrap: str) -> tuple[int, str]:
    """(node id, "host:port") of the first bootstrap address: the broker a scenario's raw requests go to
    (on a cluster, a per-broker config or log directory belongs to one broker; Metadata names it)."""
    address = bootstrap.split(",")[0]
    host, _, port = address.rpartition(":")
    brokers, _ = kafka_probe.topic_metadata(host, int(port), None)
    (node,) = (n for n, endpoint in brokers.items() if endpoint == (host, int(port)))
    return node, address


def leader_address(wire: WireClient, topic: str, partition: int = 0) -> str | None:
    """"host:port" of the partition's leader as Metadata names it over ``wire`` (so on the listener, and
    as the principal, that ``wire`` speaks for), or None when it names none: a topic unknown, or one the
    principal may not describe (every broker refuses that one the same). A partition's raw requests go
    there, as a client sends them: on a cluster another broker answers NOT_LEADER_OR_FOLLOWER."""
    answer = wire.request(3, 12, {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
    brokers = {b["node_id"]: f"{b['host']}:{b['port']}" for b in answer["brokers"]}
    leaders = [p["leader_id"] for t in answer["topics"] for p in t["partitions"] if p["partition_index"] == partition]
    return brokers.get(leaders[0]) if leaders else None


def coordinator_address(wire: WireClient, key: str, key_type: int = 0, timeout_s: float = 30.0) -> str:
    """"host:port" of the coordinator FindCoordinator names for ``key`` over ``wire`` (key type 0: a
    group, 1: a transactional id, 2: a share partition key), asked again while it names none (an ACL just
    made, or the internal topic being created). A group's or a transaction's raw requests go there, as a
    client sends them: on a cluster another broker answers NOT_COORDINATOR."""
    version = 6 if key_type == 2 else 4

    def find() -> str | None:
        (found,) = wire.request(10, version, {"key_type": key_type, "coordinator_keys": [key]})["coordinators"]
        return f"{found['host']}:{found['port']}" if found["error_code"] == 0 else None

    return wait_for(find, timeout_s, what=f"the coordinator of {key} (key type {key_type})")


def partition_leader(bootstrap: str, topic: str, partition: int = 0) -> tuple[int, str]:
    """(node id, "host:port") of the partition's leader, as a client finds it through Metadata."""
    leader, (host, port) = kafka_probe.partition_leader(bootstrap, topic, partition)
    return leader, f"{host}:{port}"


# -- a scenario's own broker, killed or restarted: one broker, or a 3-node cluster of the kind under test --
def broker_launcher(kind: str, workdir: Path, settings: dict[str, str]) -> Any:
    """The broker a scenario starts itself with ``settings``: a 3-node cluster of the kind under test
    (``cluster_launcher``), one Apache Kafka 4.3.1 under ``--broker kafka``, else one pybroker. Not
    started."""
    if kind in CLUSTER_BROKERS:
        return cluster_launcher(kind, workdir, settings)
    if kind == "kafka":
        from compat_tests.reference.apache_kafka import ApacheKafka

        return ApacheKafka(workdir, overrides=dict(settings))
    from compat_tests.brokers import PyBroker

    return PyBroker(workdir, overrides=dict(settings))


def is_cluster(launcher: Any) -> bool:
    return getattr(launcher, "kind", "") in CLUSTER_BROKERS


def _live_addresses(launcher: Any) -> list[str]:
    """The "host:port" of every node that runs (the bootstrap list is in node-id order on both clusters)."""
    addresses = launcher.bootstrap.split(",")
    return [a for n, a in zip(launcher.node_ids(), addresses, strict=True) if launcher.is_running(n)]


def coordinator_node(launcher: Any, key: str, key_type: int = 0, timeout_s: float = 120) -> int:
    """The node id FindCoordinator (v4) names for ``key`` (0: a group, 1: a transactional id, 2: a share
    partition key), asked of the running nodes as a client does, and which then answers a group request
    for it (not loading, not NOT_COORDINATOR): where the group's state is served now."""
    from compat_tests.scenarios.test_newest_versions import DESCRIBE_GROUPS, FIND_COORDINATOR, call

    deadline = time.monotonic() + timeout_s
    answer: Any = None
    while True:
        for address in _live_addresses(launcher):
            try:
                answer = call(address, FIND_COORDINATOR, 4, {"key_type": key_type, "coordinator_keys": [key]})
                (found,) = answer["coordinators"]
                if found["error_code"] != 0 or not launcher.is_running(found["node_id"]):
                    continue
                if key_type == 0:
                    coordinator = f"{found['host']}:{found['port']}"
                    (described,) = call(coordinator, DESCRIBE_GROUPS, 5, {"groups": [key]})["groups"]
                    if described["error_code"] in (14, 15, 16):  # loading, not available, NOT_COORDINATOR
                        continue
                return int(found["node_id"])
            except OSError:
                continue  # a node on its way down
        assert time.monotonic() < deadline, f"no live coordinator for {key} within {timeout_s}s: {answer}"
        time.sleep(0.3)


def kill_coordinator(launcher: Any, group: str) -> int:
    """kill -9 the node that coordinates ``group`` (what a broker kill means on a cluster: the group's
    state must then be served by another node, from its replica of the group's __consumer_offsets
    partition). The killed node's id."""
    node = coordinator_node(launcher, group)
    launcher.kill(node)
    return node


def wait_fully_replicated(launcher: Any, topics: list[str], timeout_s: float = 120) -> None:
    """Until every running node names a leader and a full ISR for every partition of ``topics``: after a
    node came back, before the next one goes down (as a rolling restart waits for no under-replicated
    partition)."""
    deadline = time.monotonic() + timeout_s
    states: Any = None
    while True:
        try:
            done = True
            for address in _live_addresses(launcher):
                host, _, port = address.rpartition(":")
                for topic in topics:
                    states = kafka_probe.partition_states(host, int(port), topic)
                    if not states or any(
                        s["leader"] < 0 or sorted(s["isr"]) != sorted(s["replicas"])  # type: ignore[operator, arg-type]
                        for s in states.values()
                    ):
                        done = False
            if done:
                return
        except (OSError, kafka_probe.ProbeError):
            pass
        assert time.monotonic() < deadline, f"{topics} not fully replicated within {timeout_s}s: {states}"
        time.sleep(0.3)


def restart_every_node(launcher: Any, topics: list[str]) -> None:
    """A rolling restart: each node stopped (SIGTERM: controlled shutdown) and started again on its data,
    one after the other, each time once ``topics`` (and __consumer_offsets) are fully replicated again, so
    every partition's leadership and every coordinator moves at least once."""
    host, _, port = _live_addresses(launcher)[0].rpartition(":")
    watched = [*topics]
    if kafka_probe.partition_states(host, int(port), "__consumer_offsets"):  # when a group made it
        watched.append("__consumer_offsets")
    for node in launcher.node_ids():
        wait_fully_replicated(launcher, watched)
        launcher.terminate(node)
        launcher.restart(node)
    wait_fully_replicated(launcher, watched)


def kill9_and_start(launcher: Any) -> str:
    """One broker: SIGKILL it (no shutdown, no flush) and start it again on its data; its bootstrap."""
    import os
    import signal

    from compat_tests.brokers import PyBroker

    if isinstance(launcher, PyBroker):
        launcher.kill9()
    else:
        os.kill(launcher.pid, signal.SIGKILL)
        launcher.stop()  # reaps the killed JVM, so start() can run again
    return str(launcher.start())
