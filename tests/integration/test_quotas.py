"""Client quotas against a real pybroker process with real clients: quotas set with Apache Kafka's
kafka-configs, described back, surviving a restart; a producer limited to 1 MB/s and a consumer to
2 MB/s measured within 10 % while unlimited clients are not slowed; throttle_time_ms seen by librdkafka's throttle callback.

INTEGRATION_BROKER=kafka runs the same tests against Apache Kafka 4.3.1.

Both brokers measure a quota with the same windowed rate (Kafka's Rate over SampledStat; pybroker's port is
checked event for event against kafka-clients' own classes in tests/security/test_quota_rate.py), so a
throttled client moves in bursts: a burst when old samples expire, then throttles of up to a window.  A
measurement is only as good as the number of those cycles it spans:

- the producer is measured over 12 s with a shortened window (quota.window.num=3, 1 s samples; cycles of
  about 3 s).  With Kafka's default of 11 samples the first 10 windows' burst credit is still being paid
  back after 30 s: 1.24 MB/s on Apache Kafka and 1.29 on pybroker for a 1 MiB/s quota;
- the consumer is measured over 30 s with Kafka's default quota.window.num=11: 2.197 MB/s of record values
  on pybroker for a 2 MiB/s quota, 1.97-2.20 on Apache Kafka.  With 3 samples over 12 s both brokers
  measure 1.7-1.9 (a 262 KB fetch is the grain of the consumer's cycle).

``QUOTA_MEASURE_S`` and ``QUOTA_WINDOW_NUM`` override the producer's; ``QUOTA_CONSUMER_MEASURE_S`` and
``QUOTA_CONSUMER_WINDOW_NUM`` the consumer's.
"""

from __future__ import annotations

import os
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from compat_tests.kafka_tools import run_tool
from tests.integration.conftest import launch
from tests.wire import WireClient

MEASURE_S = float(os.environ.get("QUOTA_MEASURE_S", "12"))
WINDOW_NUM = os.environ.get("QUOTA_WINDOW_NUM", "3")
PRODUCE_LIMIT = 1_048_576


def _configs(bootstrap: str, *args: str) -> str:
    return run_tool("kafka-configs", "--bootstrap-server", bootstrap, *args, timeout_s=180).check().stdout


def _produce_for(
    bootstrap: str, client_id: str, seconds: float, throttles: list[int], warm_up: float = 0.0
) -> float:
    """Bytes per second acknowledged while producing 10 KiB records as fast as the broker allows,
    counted after ``warm_up`` seconds: a quota allows a burst of up to (quota.window.num - 1) windows
    at the start, as Kafka's Rate does, so the steady rate is measured after the first full span."""
    acked = [0]

    def on_delivery(err, msg) -> None:  # noqa: ANN001 - librdkafka callback
        if err is None:
            acked[0] += len(msg.value())

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "linger.ms": 5,
            "acks": 1,
            "queue.buffering.max.kbytes": 4096,
            "throttle_cb": lambda event: throttles.append(event.throttle_time),
        }
    )
    value = b"x" * 10240
    begin = time.monotonic()
    start, base = begin, 0
    while time.monotonic() - start < seconds or start == begin and warm_up:
        if start == begin and warm_up and time.monotonic() - begin >= warm_up:
            start, base = time.monotonic(), acked[0]
        try:
            producer.produce("quota-topic", value=value, on_delivery=on_delivery)
        except BufferError:
            producer.poll(0.05)
        producer.poll(0)
    counted = acked[0] - base
    elapsed = time.monotonic() - start
    producer.flush(60)
    return counted / elapsed


def _quota_broker(tmp_path, window_num: str):
    broker = launch(tmp_path, {"quota.window.num": window_num, "quota.window.size.seconds": "1"})
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def quota_broker(tmp_path):
    yield from _quota_broker(tmp_path, WINDOW_NUM)


CONSUMER_MEASURE_S = float(os.environ.get("QUOTA_CONSUMER_MEASURE_S", "30"))
CONSUMER_WINDOW_NUM = os.environ.get("QUOTA_CONSUMER_WINDOW_NUM", "11")


@pytest.fixture
def consumer_quota_broker(tmp_path):
    yield from _quota_broker(tmp_path, CONSUMER_WINDOW_NUM)


def test_producer_byte_rate_set_with_kafka_configs_enforced_and_kept(quota_broker) -> None:
    bootstrap = quota_broker.bootstrap
    _configs(
        bootstrap, "--alter", "--entity-type", "clients", "--entity-name", "limited",
        "--add-config", f"producer_byte_rate={PRODUCE_LIMIT},consumer_byte_rate=2097152",
    )
    described = _configs(bootstrap, "--describe", "--entity-type", "clients", "--entity-name", "limited")
    assert "producer_byte_rate=1048576.0" in described, described
    assert "consumer_byte_rate=2097152.0" in described, described

    throttles: list[int] = []
    rate = _produce_for(bootstrap, "limited", MEASURE_S, throttles, warm_up=int(WINDOW_NUM) + 1)
    assert abs(rate - PRODUCE_LIMIT) <= 0.1 * PRODUCE_LIMIT, f"limited producer: {rate / 1e6:.3f} MB/s"
    assert throttles and max(throttles) > 0, "the client never saw throttle_time_ms"

    free_throttles: list[int] = []
    free = _produce_for(bootstrap, "free", 4, free_throttles)
    assert free > 2 * PRODUCE_LIMIT, f"unlimited producer slowed to {free / 1e6:.3f} MB/s"
    assert not any(free_throttles), free_throttles

    quota_broker.stop()
    quota_broker.start()
    described = _configs(bootstrap, "--describe", "--entity-type", "clients", "--entity-name", "limited")
    assert "producer_byte_rate=1048576.0" in described, described
    _configs(
        bootstrap, "--alter", "--entity-type", "clients", "--entity-name", "limited",
        "--delete-config", "producer_byte_rate,consumer_byte_rate",
    )
    described = _configs(bootstrap, "--describe", "--entity-type", "clients", "--entity-name", "limited")
    assert "producer_byte_rate" not in described, described


CONSUME_LIMIT = 2_097_152


def _consume_for(bootstrap: str, client_id: str, seconds: float, warm_up: float = 0.0) -> tuple[float, int]:
    """(bytes per second, total bytes) a consumer of quota-topic from the start receives, counted
    after ``warm_up`` seconds, together with the largest throttle time librdkafka reported."""
    throttles: list[int] = []
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "group.id": client_id,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "throttle_cb": lambda event: throttles.append(event.throttle_time),
            # A throttled fetch is answered empty but counted in the throttle time (Kafka's
            # KafkaApis): smaller fetches make that overshoot a smaller share of each cycle.
            "fetch.max.bytes": 262144,
            "message.max.bytes": 262144,
            "max.partition.fetch.bytes": 262144,
        }
    )
    consumer.assign([TopicPartition("quota-topic", 0, 0)])
    begin = time.monotonic()
    start, received, base = begin, 0, 0
    try:
        while time.monotonic() - start < seconds or (start == begin and warm_up):
            if start == begin and warm_up and time.monotonic() - begin >= warm_up:
                start, base = time.monotonic(), received
            msg = consumer.poll(0.1)
            if msg is not None and msg.error() is None:
                received += len(msg.value())
    finally:
        consumer.close()
    return (received - base) / (time.monotonic() - start), max(throttles, default=0)


def test_consumer_byte_rate_enforced_while_another_consumer_is_not(consumer_quota_broker) -> None:
    bootstrap = consumer_quota_broker.bootstrap
    warm_up = int(CONSUMER_WINDOW_NUM) + 1
    # Enough data for the limited consumer's whole run, written by an unlimited producer.
    # 64 KiB batches: a fetch returns whole batches, and a throttled fetch is answered empty (its bytes
    # still counted in the throttle), so the batch size is the grain of the measured rate.
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": 1, "batch.size": 65536})
    value = b"c" * 10240
    for _ in range(int(CONSUME_LIMIT * (CONSUMER_MEASURE_S + warm_up + int(CONSUMER_WINDOW_NUM) + 4) / len(value))):
        while True:
            try:
                producer.produce("quota-topic", value=value, partition=0)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(120) == 0
    with WireClient(bootstrap) as wire:
        response = wire.request(
            49,
            1,
            {
                "entries": [
                    {
                        "entity": [{"entity_type": "client-id", "entity_name": "limited-consumer"}],
                        "ops": [{"key": "consumer_byte_rate", "value": float(CONSUME_LIMIT), "remove": False}],
                    }
                ],
                "validate_only": False,
            },
        )
        assert response["entries"][0]["error_code"] == 0

    rate, throttled = _consume_for(bootstrap, "limited-consumer", CONSUMER_MEASURE_S, warm_up=warm_up)
    assert abs(rate - CONSUME_LIMIT) <= 0.1 * CONSUME_LIMIT, f"limited consumer: {rate / 1e6:.3f} MB/s"
    assert throttled > 0, "the consumer never saw throttle_time_ms"
    free, free_throttled = _consume_for(bootstrap, "free-consumer", 3)
    assert free > 2 * CONSUME_LIMIT, f"unlimited consumer slowed to {free / 1e6:.3f} MB/s"
    assert free_throttled == 0
