"""KIP-714 client telemetry end to end on a real broker process: a client-metrics subscription made with
Kafka's own ``kafka-configs --entity-type client-metrics`` (the admin API), then a librdkafka producer
(confluent-kafka, ``enable.metrics.push`` on by default) pushes its metrics, and they arrive decoded on
the broker's Prometheus endpoint; the subscription survives a restart (it lives in the metadata store).
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families

from compat_tests.brokers import PyBroker, free_port
from compat_tests.kafka_tools import run_tool
from compat_tests.scenarios.test_client_telemetry import described
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
