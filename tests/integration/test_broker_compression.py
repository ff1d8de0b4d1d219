"""Topics with ``compression.type`` set to a codec: the broker stores every data batch in that codec
whatever the producer used (Kafka's LogValidator recompression), and stock clients read it back.

Broker-agnostic: ``INTEGRATION_BROKER=kafka`` runs the same checks against Apache Kafka.
"""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer
from kafka import TopicPartition as KpTopicPartition

from pybroker.records import iter_batch_headers, read_records
from pybroker.records.compression import CODECS_BY_NAME
from tests.wire import WireClient

FETCH = 1
RECORDS = [
    (f"key-{i}".encode(), f"value-{i}-".encode() * (i + 1), [("h", f"{i}".encode())]) for i in range(40)
]


def make_topic(bootstrap: str, configs: dict[str, str]) -> str:
    topic = f"bc-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config=configs)])[topic].result(30)
    return topic


def produce(bootstrap: str, topic: str, codec: str, idempotent: bool = False) -> None:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "compression.type": codec,
            "linger.ms": 50,
            "enable.idempotence": idempotent,
        }
    )
    for key, value, headers in RECORDS:
        producer.produce(topic, value, key, headers=headers)
    assert producer.flush(30) == 0


def stored_batches(bootstrap: str, topic: str) -> bytes:
    """The raw batches as the broker serves them (Fetch v12 by topic name)."""
    with WireClient(bootstrap) as wire:
        response = wire.request(
            FETCH,
            12,
            {
                "replica_id": -1,
                "max_wait_ms": 0,
                "min_bytes": 1,
                "max_bytes": 1 << 20,
                "isolation_level": 0,
                "session_id": 0,
                "session_epoch": -1,
                "topics": [
                    {
                        "topic": topic,
                        "partitions": [
                            {
                                "partition": 0,
                                "current_leader_epoch": -1,
                                "fetch_offset": 0,
                                "last_fetched_epoch": -1,
                                "log_start_offset": -1,
                                "partition_max_bytes": 1 << 20,
                            }
                        ],
                    }
                ],
                "forgotten_topics_data": [],
                "rack_id": "",
            },
        )
    partition = response["responses"][0]["partitions"][0]
    assert partition["error_code"] == 0
    records = partition["records"]
    return records if isinstance(records, bytes) else bytes(records)


@pytest.mark.parametrize(
    ("topic_codec", "producer_codec"),
    [("uncompressed", "gzip"), ("gzip", "lz4"), ("snappy", "zstd"), ("lz4", "none"), ("zstd", "snappy")],
)
def test_batches_are_stored_in_the_topic_codec(shared_broker, topic_codec, producer_codec) -> None:
    bootstrap = shared_broker.bootstrap
    topic = make_topic(bootstrap, {"compression.type": topic_codec})
    produce(bootstrap, topic, producer_codec, idempotent=True)
    data = stored_batches(bootstrap, topic)
    headers = list(iter_batch_headers(data, verify_crc=True))
    assert headers and {h.compression for h in headers} == {CODECS_BY_NAME[topic_codec]}
    assert all(h.producer_id >= 0 for h in headers)  # idempotence fields survive the rewrite
    stored = [(r.key, r.value, [(k, v) for k, v in r.headers]) for r in read_records(data)]
    assert stored == RECORDS
    assert [r.offset for r in read_records(data)] == list(range(len(RECORDS)))

    # librdkafka and kafka-python decode what the broker wrote.
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": topic, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = []
    while len(got) < len(RECORDS):
        message = consumer.poll(10)
        assert message is not None, f"confluent-kafka read {len(got)} of {len(RECORDS)} records"
        assert message.error() is None, message.error()
        got.append((message.key(), message.value(), [(k, v) for k, v in message.headers()]))
    consumer.close()
    assert got == RECORDS
    kp = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=10_000)
    kp.assign([KpTopicPartition(topic, 0)])
    kp.seek_to_beginning()
    got = [
        (m.key, m.value, list(m.headers)) for _, m in zip(RECORDS, kp, strict=False)
    ]  # RECORDS first: no extra poll
    kp.close()
    assert got == RECORDS


def test_producer_keeps_each_producers_codec(shared_broker) -> None:
    bootstrap = shared_broker.bootstrap
    topic = make_topic(bootstrap, {"compression.type": "producer"})
    produce(bootstrap, topic, "lz4")
    produce(bootstrap, topic, "none")
    codecs = [h.compression for h in iter_batch_headers(stored_batches(bootstrap, topic))]
    assert CODECS_BY_NAME["lz4"] in codecs and CODECS_BY_NAME["uncompressed"] in codecs
