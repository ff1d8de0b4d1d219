"""The Prometheus endpoint of a real broker process (metrics.listener), scraped over HTTP while a real
client (confluent-kafka) produces and a group consumes: counters move, per-partition gauges match the
log, and the consumer-lag gauge equals the lag computed from the wire (OffsetFetch + ListOffsets),
the same numbers `kafka-consumer-groups --describe` prints."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from compat_tests.brokers import PyBroker, free_port
from compat_tests.scenarios.test_cli import cli_json
from tests.integration.conftest import against_kafka
from tests.wire import WireClient

PARTITIONS = 2
PER_PARTITION = 40
COMMITTED = {0: 10, 1: 15}  # the group's committed offsets after it consumed
OFFSET_FETCH, LIST_OFFSETS, LATEST = 9, 2, -1


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PyBroker]:
    if against_kafka():
        pytest.skip("pybroker's own metrics endpoint")
    port = free_port()
    b = PyBroker(
        tmp_path_factory.mktemp("metrics"),
        overrides={
            "metrics.listener": f"http://127.0.0.1:{port}",
            "group.initial.rebalance.delay.ms": "0",
            "offsets.topic.num.partitions": "3",
        },
    )
    b.metrics_url = f"http://127.0.0.1:{port}/metrics"  # type: ignore[attr-defined]
    b.start()
    try:
        yield b
    finally:
        b.stop()


def scrape(url: str) -> dict[tuple[str, frozenset], float]:
    """Every sample of the endpoint, keyed by (sample name, labels)."""
    with urllib.request.urlopen(url, timeout=15) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain")
        text = resp.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return samples


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def produce(bootstrap: str, topic: str) -> None:
    """PER_PARTITION records to each partition."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(PER_PARTITION):
        for part in range(PARTITIONS):
            p.produce(topic, value=f"value-{part}-{i}".encode() * 8, key=str(i).encode(), partition=part)
    assert p.flush(30) == 0


def consume_and_commit(bootstrap: str, topic: str, group: str) -> None:
    """Join the group, consume what it is given, commit COMMITTED (both partitions) and leave."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        c.subscribe([topic])
        got = 0
        deadline = time.monotonic() + 60
        while got < 10 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got += 1
        assert got == 10, f"consumed {got} of 10"
        c.commit(offsets=[TopicPartition(topic, p, o) for p, o in COMMITTED.items()], asynchronous=False)
    finally:
        c.close()


def wire_lag(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    """Per-partition lag as kafka-consumer-groups computes it: ListOffsets LATEST - committed offset."""
    with WireClient(bootstrap) as w:
        fetched = w.request(
            OFFSET_FETCH,
            6,
            {"group_id": group, "topics": [{"name": topic, "partition_indexes": list(range(PARTITIONS))}]},
        )
        assert fetched["error_code"] == 0
        committed = {
            p["partition_index"]: p["committed_offset"] for t in fetched["topics"] for p in t["partitions"]
        }
        listed = w.request(
            LIST_OFFSETS,
            5,
            {
                "replica_id": -1,
                "isolation_level": 0,
                "topics": [
                    {
                        "name": topic,
                        "partitions": [
                            {"partition_index": i, "current_leader_epoch": -1, "timestamp": LATEST}
                            for i in range(PARTITIONS)
                        ],
                    }
                ],
            },
        )
        latest = {p["partition_index"]: p["offset"] for t in listed["topics"] for p in t["partitions"]}
    return {i: latest[i] - committed[i] for i in range(PARTITIONS) if committed[i] >= 0}


def create_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)


def test_counters_move_and_lag_matches_the_wire(broker: Any) -> None:
    topic = f"metrics-{uuid.uuid4().hex[:8]}"
    group = f"metrics-group-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic)
    before = scrape(broker.metrics_url)
    assert value(before, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == 0
    produce_count = value(
        before, "kafka_network_requestmetrics_requests_total", request="Produce", version="11"
    )

    produce(broker.bootstrap, topic)
    after = scrape(broker.metrics_url)
    total = PARTITIONS * PER_PARTITION
    assert value(after, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == total
    bytes_in = value(after, "kafka_server_brokertopicmetrics_bytesin_total", topic=topic)
    payload = sum(len(f"value-{p}-{i}".encode() * 8) for p in range(PARTITIONS) for i in range(PER_PARTITION))
    assert bytes_in > payload  # record batches: values plus keys and framing
    produce_requests = [
        (dict(labels), v)
        for (name, labels), v in after.items()
        if name == "kafka_network_requestmetrics_requests_total" and dict(labels)["request"] == "Produce"
    ]
    assert sum(v for _, v in produce_requests) > produce_count
    version = next(labels["version"] for labels, v in produce_requests if v > 0)
    histogram_count = value(
        after, "kafka_network_requestmetrics_totaltime_seconds_count", request="Produce", version=version
    )
    inf_bucket = value(
        after,
        "kafka_network_requestmetrics_totaltime_seconds_bucket",
        request="Produce",
        version=version,
        le="+Inf",
    )
    assert (
        histogram_count
        == inf_bucket
        == value(after, "kafka_network_requestmetrics_requests_total", request="Produce", version=version)
    )
    assert (
        value(after, "kafka_server_socketservermetrics_connection_creation_total", listener="PLAINTEXT") > 0
    )
    for part in range(PARTITIONS):
        labels = {"topic": topic, "partition": str(part)}
        assert value(after, "kafka_log_log_logendoffset", **labels) == PER_PARTITION
        assert value(after, "kafka_cluster_partition_highwatermark", **labels) == PER_PARTITION
        assert value(after, "kafka_log_log_numlogsegments", **labels) == 1
        assert value(after, "kafka_log_log_size", **labels) > 0
        assert value(after, "kafka_cluster_partition_underreplicated", **labels) == 0
    assert value(after, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert value(after, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0

    consume_and_commit(broker.bootstrap, topic, group)
    scraped = scrape(broker.metrics_url)
    expected = wire_lag(broker.bootstrap, group, topic)
    assert expected == {p: PER_PARTITION - o for p, o in COMMITTED.items()}
    for part, lag in expected.items():
        labels = {"consumergroup": group, "topic": topic, "partition": str(part)}
        assert value(scraped, "kafka_consumergroup_lag", **labels) == lag, (part, lag)
    assert value(scraped, "kafka_consumergroup_lag_sum", consumergroup=group, topic=topic) == sum(
        expected.values()
    )
    # ... and equals what the operator's CLI shows for the group.
    described = cli_json(broker.bootstrap, "group", "describe", group)
    assert {r["partition"]: r["lag"] for r in described["partitions"] if r["topic"] == topic} == expected
    assert value(scraped, "kafka_consumergroup_members", consumergroup=group) == 0  # it left
    assert (
        value(scraped, "kafka_consumergroup_state", consumergroup=group, state="Empty", type="classic") == 1
    )
    assert value(scraped, "kafka_server_brokertopicmetrics_bytesout_total", topic=topic) > 0
    assert value(scraped, "process_resident_memory_bytes") > 0
    # The event-loop lag is sampled twice a second from start-up: wait for a sample, not a sleep.
    deadline = time.monotonic() + 30
    while value(scraped, "pybroker_event_loop_lag_seconds_count") == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
        scraped = scrape(broker.metrics_url)
    assert value(scraped, "pybroker_event_loop_lag_seconds_count") > 0


def test_metrics_endpoint_is_off_by_default(tmp_path: Any) -> None:
    """No metrics.listener: no HTTP endpoint, and the broker does not even import aiohttp or
    prometheus_client (they load only when an endpoint is configured)."""
    if against_kafka():
        pytest.skip("pybroker's own metrics endpoint")
    from pybroker.config import BrokerConfig

    config = BrokerConfig({})
    assert config.get("metrics.listener") == "" and config.get("console.listener") == ""
    assert config.get("console.admin") is False
    probe = (
        "import sys, pybroker.broker, pybroker.server; "
        "print(sorted(m for m in ('aiohttp', 'prometheus_client') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_kip848_consumer_group_lag_matches_the_wire(broker: Any) -> None:
    """A consumer group of the new protocol (group.protocol=consumer): its members, type and lag."""
    topic = f"metrics-848-{uuid.uuid4().hex[:8]}"
    group = f"metrics-848-group-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic)
    produce(broker.bootstrap, topic)
    c = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        c.subscribe([topic])
        got = 0
        deadline = time.monotonic() + 60
        while got < 5 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got += 1
        assert got == 5
        c.commit(offsets=[TopicPartition(topic, p, o) for p, o in COMMITTED.items()], asynchronous=False)
        scraped = scrape(broker.metrics_url)
        assert value(scraped, "kafka_consumergroup_members", consumergroup=group) == 1
        states = [
            dict(labels)
            for (name, labels), v in scraped.items()
            if name == "kafka_consumergroup_state" and dict(labels)["consumergroup"] == group and v == 1
        ]
        assert [s["type"] for s in states] == ["consumer"]
        expected = wire_lag(broker.bootstrap, group, topic)
        assert expected == {p: PER_PARTITION - o for p, o in COMMITTED.items()}
        for part, lag in expected.items():
            labels = {"consumergroup": group, "topic": topic, "partition": str(part)}
            assert value(scraped, "kafka_consumergroup_lag", **labels) == lag
    finally:
        c.close()


def test_a_streams_group_in_the_group_gauges(broker: Any) -> None:
    """A streams group (KIP-1071, made with raw StreamsGroupHeartbeats) is listed with its type, state
    and members, and its lag is what its committed offsets leave."""
    from compat_tests.scenarios.test_streams_groups import (
        group_call,
        heartbeat_until,
        join_once_source_is_seen,
        streams_coordinator_ready,
        word_count_topology,
    )

    bootstrap = broker.bootstrap
    topic = f"metrics-streams-{uuid.uuid4().hex[:8]}"
    cli_json(bootstrap, "topic", "create", topic, "--partitions", str(PARTITIONS))
    produce(bootstrap, topic)
    group = f"metrics-streams-group-{uuid.uuid4().hex[:8]}"
    streams_coordinator_ready(bootstrap, group)
    member = str(uuid.uuid4())
    joined = join_once_source_is_seen(bootstrap, group, member, word_count_topology(group, topic))
    every = {(s, p) for s in ("0", "1") for p in range(PARTITIONS)}
    epoch, _ = heartbeat_until(
        bootstrap, group, member, joined["member_epoch"], set(), lambda owned: owned == every
    )
    partitions = [
        {"partition_index": p, "committed_offset": o, "committed_leader_epoch": -1, "committed_metadata": ""}
        for p, o in COMMITTED.items()
    ]
    body = {
        "group_id": group,
        "generation_id_or_member_epoch": epoch,
        "member_id": member,
        "group_instance_id": None,
        "topics": [{"name": topic, "partitions": partitions}],
    }
    committed = group_call(bootstrap, group, 8, 9, body)
    assert all(p["error_code"] == 0 for p in committed["topics"][0]["partitions"]), committed

    scraped = scrape(broker.metrics_url)
    assert (
        value(scraped, "kafka_consumergroup_state", consumergroup=group, state="Stable", type="streams") == 1
    )
    assert value(scraped, "kafka_consumergroup_members", consumergroup=group) == 1
    for part, offset in COMMITTED.items():
        labels = {"consumergroup": group, "topic": topic, "partition": str(part)}
        assert value(scraped, "kafka_consumergroup_lag", **labels) == PER_PARTITION - offset
