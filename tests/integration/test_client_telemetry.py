"""KIP-714 client telemetry end to end on a real broker process: a client-metrics subscription made with
Kafka's own ``kafka-configs --entity-type client-metrics`` (the admin API), then a librdkafka producer
(confluent-kafka, ``enable.metrics.push`` on by default) pushes its metrics, and they arrive decoded on
the broker's Prometheus endpoint; the subscription survives a restart (it lives in the metadata store).
"""

from __future__ import annotations

import time
import urllib.request
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families

from compat_tests.brokers import PyBroker, free_port
from compat_tests.clients.base import Record
from compat_tests.clients.registry import make_client
from compat_tests.kafka_tools import run_tool
from compat_tests.scenarios.test_client_telemetry import PUSH, alter, described, get, otlp_metrics
from compat_tests.scenarios.test_newest_versions import call
from tests.integration.conftest import against_kafka


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PyBroker]:
    if against_kafka():
        pytest.skip("pybroker's own metrics endpoint")
    port = free_port()
    b = PyBroker(tmp_path_factory.mktemp("telemetry"), overrides={"metrics.listener": f"http://127.0.0.1:{port}"})
    b.metrics_url = f"http://127.0.0.1:{port}/metrics"  # type: ignore[attr-defined]
    b.start()
    try:
        yield b
    finally:
        b.stop()


def telemetry_samples(url: str) -> list:
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    return [
        s
        for family in text_string_to_metric_families(text)
        if family.name == "pybroker_client_telemetry_metric"
        for s in family.samples
    ]


def test_librdkafka_pushes_arrive_decoded(broker: PyBroker) -> None:
    run_tool(
        "kafka-configs", "--bootstrap-server", broker.bootstrap, "--alter", "--entity-type", "client-metrics",
        "--entity-name", "everything", "--add-config", "metrics=*,interval.ms=1000",
    ).check()
    assert described(broker.bootstrap, "everything")["interval.ms"] == "1000"
    producer = Producer({"bootstrap.servers": broker.bootstrap, "client.id": "telemetry-probe"})
    try:
        producer.produce("telemetry-probe-topic", b"v")
        producer.flush(30)
        deadline = time.monotonic() + 60
        mine: list = []
        while not mine:
            assert time.monotonic() < deadline, "no decoded telemetry push from the librdkafka producer"
            producer.poll(0.5)
            mine = [s for s in telemetry_samples(broker.metrics_url) if s.labels["client_id"] == "telemetry-probe"]
    finally:
        producer.flush(10)
    names = {s.labels["metric"] for s in mine}
    # librdkafka names its metrics as the Java producer does (KIP-714's standard metrics).
    assert any(n.startswith("org.apache.kafka.producer.") for n in names), names
    broker.restart()
    assert described(broker.bootstrap, "everything")["metrics"] == "*"


def test_push_interval_and_terminating(broker: PyBroker) -> None:
    """Kafka's ClientMetricsManager checks that the shared scenario cannot pin down on Apache Kafka (where
    any subscription change resets them): a second push within the interval is throttled, nothing is
    accepted after the terminating push, an oversized or unknown-codec push is refused."""
    assert alter(broker.bootstrap, "slow", {"metrics": "org.apache.kafka.", "interval.ms": "60000",
                                            "match": "client_id=compat"}) == 0
    answer = get(broker.bootstrap)
    push = {
        "client_instance_id": answer["client_instance_id"],
        "subscription_id": answer["subscription_id"],
        "terminating": False,
        "compression_type": 0,
        "metrics": otlp_metrics("org.apache.kafka.producer.record.send.total"),
    }
    assert get(broker.bootstrap, answer["client_instance_id"])["error_code"] == 89  # within the interval
    assert call(broker.bootstrap, PUSH, 0, {**push, "compression_type": 9})["error_code"] == 76
    get(broker.bootstrap, answer["client_instance_id"])
    too_large = {**push, "metrics": b"\0" * (1024 * 1024 + 1)}
    assert call(broker.bootstrap, PUSH, 0, too_large)["error_code"] == 118
    get(broker.bootstrap, answer["client_instance_id"])
    assert call(broker.bootstrap, PUSH, 0, push)["error_code"] == 0
    assert call(broker.bootstrap, PUSH, 0, push)["error_code"] == 89  # THROTTLING_QUOTA_EXCEEDED
    assert call(broker.bootstrap, PUSH, 0, {**push, "terminating": True})["error_code"] == 0
    assert call(broker.bootstrap, PUSH, 0, {**push, "terminating": True})["error_code"] == 42
    assert call(broker.bootstrap, PUSH, 0, {**push, "client_instance_id": uuid.uuid4()})["error_code"] == 117
    alter(broker.bootstrap, "slow", {"metrics": None, "interval.ms": None, "match": None})


def test_java4_consumer_pushes_arrive_decoded(broker: PyBroker) -> None:
    """A Java 4.x consumer fetches its subscription when it connects and pushes its metrics each interval
    while it polls (here: waiting 6 s for a record that never comes)."""
    assert alter(broker.bootstrap, "java", {"metrics": "org.apache.kafka.", "interval.ms": "1000"}) == 0
    before = {s.labels["client_instance_id"] for s in telemetry_samples(broker.metrics_url)}
    client = make_client("java4")
    client.produce(broker.bootstrap, "telemetry-java-topic", [Record(b"k", b"v")])
    got = client.consume(broker.bootstrap, "telemetry-java-topic", 0, start="beginning", count=2, timeout_s=6)
    assert len(got) == 1
    fresh = [s for s in telemetry_samples(broker.metrics_url) if s.labels["client_instance_id"] not in before]
    names = {s.labels["metric"] for s in fresh}
    assert any(n.startswith("org.apache.kafka.consumer.") for n in names), names
    alter(broker.bootstrap, "java", {"metrics": None, "interval.ms": None})
