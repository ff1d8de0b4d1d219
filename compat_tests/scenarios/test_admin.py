"""Admin operations through each client's admin API, checked through the setup admin and consumers."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.clients.base import ClientError, Record

from .support import expressible, wait_for


def test_create_describe_alter_delete_topic(client, client_name, bootstrap, unique_topic, admin) -> None:
    topic = unique_topic
    with expressible(client_name):
        client.create_topic(bootstrap, topic, partitions=2, configs={"retention.ms": "123456789"})
    assert admin.describe_topic(bootstrap, topic).partitions == 2
    assert client.describe_topic(bootstrap, topic).partitions == 2

    configs = client.describe_configs(bootstrap, topic)
    assert configs["retention.ms"] == "123456789"
    assert "cleanup.policy" in configs  # defaults are reported too

    with expressible(client_name):
        client.alter_configs(bootstrap, topic, {"retention.ms": "987654321"})
    altered = admin.describe_configs(bootstrap, topic)
    assert altered["retention.ms"] == "987654321"

    client.delete_topic(bootstrap, topic)

    def gone() -> bool:
        try:
            admin.describe_topic(bootstrap, topic)
        except ClientError as exc:
            return exc.error == "UNKNOWN_TOPIC_OR_PARTITION"
        return False

    wait_for(gone, what=f"{topic} to be deleted")


def test_create_partitions_then_produce_to_new_partition(
    client, client_name, bootstrap, make_topic, admin
) -> None:
    topic = make_topic(partitions=1)
    with expressible(client_name):
        client.create_partitions(bootstrap, topic, 3)
    assert admin.describe_topic(bootstrap, topic).partitions == 3
    deliveries = wait_for(
        lambda: _try_produce(admin, bootstrap, topic, Record(b"k", b"to-partition-2", partition=2)),
        what="producing to the new partition 2",
    )
    assert (deliveries[0].partition, deliveries[0].offset) == (2, 0)
    got = client.consume(bootstrap, topic, 2, start="beginning", count=1)
    assert [(r.partition, r.offset, r.value) for r in got] == [(2, 0, b"to-partition-2")]


def _try_produce(admin, bootstrap, topic, record):
    try:
        return admin.produce(bootstrap, topic, [record])
    except ClientError:
        return None


def test_list_offsets_and_delete_records(client, client_name, bootstrap, make_topic, admin) -> None:
    topic = make_topic()
    base = int(time.time() * 1000) - 60_000
    # The highest timestamp sits in the middle, so max-timestamp is not simply the last record.
    stamps = [base, base + 10, base + 50, base + 20, base + 30]
    admin.produce(
        bootstrap, topic, [Record(b"k", f"v{i}".encode(), timestamp_ms=ts) for i, ts in enumerate(stamps)]
    )

    with expressible(client_name):
        assert client.list_offsets(bootstrap, topic, 0, "earliest").offset == 0
    assert client.list_offsets(bootstrap, topic, 0, "latest").offset == len(stamps)
    by_time = client.list_offsets(bootstrap, topic, 0, base + 15)
    assert (by_time.offset, by_time.timestamp_ms) == (2, base + 50)
    assert client.list_offsets(bootstrap, topic, 0, base + 51).offset == -1
    with expressible(client_name):
        max_ts = client.list_offsets(bootstrap, topic, 0, "max-timestamp")
    assert (max_ts.offset, max_ts.timestamp_ms) == (2, base + 50)


def test_delete_records_moves_earliest(client, client_name, bootstrap, make_topic, admin) -> None:
    topic = make_topic()
    admin.produce(bootstrap, topic, [Record(b"k", f"v{i}".encode()) for i in range(6)])
    with expressible(client_name):
        low_watermark = client.delete_records(bootstrap, topic, 0, 4)
    assert low_watermark == 4
    assert admin.list_offsets(bootstrap, topic, 0, "earliest").offset == 4
    assert admin.list_offsets(bootstrap, topic, 0, "latest").offset == 6
    got = admin.consume(bootstrap, topic, 0, start="beginning", count=2)
    assert [(r.offset, r.value) for r in got] == [(4, b"v4"), (5, b"v5")]


def test_describe_missing_topic(client, client_name, bootstrap) -> None:
    if client_name == "aiokafka":
        pytest.skip("NOT EXPRESSIBLE by aiokafka: describe_topics sends Metadata with auto-creation on")
    with expressible(client_name), pytest.raises(ClientError) as raised:
        client.describe_topic(bootstrap, f"compat-missing-{time.time_ns()}")
    assert raised.value.error == "UNKNOWN_TOPIC_OR_PARTITION"


# (topics as (partitions, configs set), what every topic gets) — validate_only, so nothing is
# created; Kafka's controller still counts what the request would write. Measured on Apache Kafka
# 4.3.1: over 10,000 partitions in the request, or over 10,000 metadata records (a TopicRecord,
# a ConfigRecord per config, a PartitionRecord per partition, over all valid topics), refuses the
# whole request with POLICY_VIOLATION.
CREATE_TOPICS_LIMIT_CASES = {
    "9999-partitions": ([(9999, 0)], "ok"),
    "10000-partitions": ([(10000, 0)], "POLICY_VIOLATION"),
    "10001-partitions": ([(10001, 0)], "POLICY_VIOLATION"),
    "9998-partitions-1-config": ([(9998, 1)], "ok"),
    "9999-partitions-1-config": ([(9999, 1)], "POLICY_VIOLATION"),
    "two-topics-of-5000": ([(5000, 0), (5000, 0)], "POLICY_VIOLATION"),
    "4999-4999-1": ([(4999, 0), (4999, 0), (1, 0)], "POLICY_VIOLATION"),
}


def _validate_only_outcomes(bootstrap: str, new: list[NewTopic]) -> dict[str, str]:
    """Topic -> "ok" or the error name, for one validate_only CreateTopics of ``new``."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    outcomes = {}
    for name, future in admin.create_topics(new, validate_only=True, request_timeout=60).items():
        try:
            future.result(60)
            outcomes[name] = "ok"
        except KafkaException as e:
            outcomes[name] = e.args[0].name()
    listed = admin.list_topics(timeout=30).topics
    assert not [t.topic for t in new if t.topic in listed], "validate_only created a topic"
    return outcomes


@pytest.mark.parametrize("case", CREATE_TOPICS_LIMIT_CASES, ids=lambda case: f"case={case}")
def test_create_topics_request_size_limits(bootstrap, unique_topic, case) -> None:
    topics, expected = CREATE_TOPICS_LIMIT_CASES[case]
    new = [
        NewTopic(f"{unique_topic}-{i}", n, 1, config={"retention.ms": "86400000"} if configs else {})
        for i, (n, configs) in enumerate(topics)
    ]
    assert _validate_only_outcomes(bootstrap, new) == {t.topic: expected for t in new}


def test_create_topics_limit_does_not_count_an_invalid_topic(bootstrap, unique_topic) -> None:
    """10,000 records with the invalid topic's included, 9,999 without: the valid topics pass."""
    new = [NewTopic(f"{unique_topic}-a", 5000, 1), NewTopic(f"{unique_topic}-b", 4998, 1)]
    new.append(NewTopic(f"{unique_topic} bad name!", 1, 1))
    assert _validate_only_outcomes(bootstrap, new) == {
        new[0].topic: "ok",
        new[1].topic: "ok",
        new[2].topic: "TOPIC_EXCEPTION",
    }
