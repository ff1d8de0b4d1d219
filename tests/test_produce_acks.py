"""Produce acks semantics against a real broker process, byte-exact through our own wire client."""

from __future__ import annotations

import pytest

from compat_tests.brokers import PyBroker
from pybroker.protocol.errors import ErrorCode
from pybroker.records import SimpleRecord, build_batch
from tests.wire import WireClient

PRODUCE, LIST_OFFSETS, CREATE_TOPICS = 0, 2, 19


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory):
    with PyBroker(tmp_path_factory.mktemp("acks")) as broker:
        yield broker.bootstrap


def create_topic(c: WireClient, name: str, configs: dict[str, str]) -> None:
    r = c.request(
        CREATE_TOPICS,
        7,
        {
            "topics": [
                {
                    "name": name,
                    "num_partitions": 1,
                    "replication_factor": 1,
                    "configs": [{"name": k, "value": v} for k, v in configs.items()],
                }
            ],
            "timeout_ms": 10000,
        },
    )
    assert r["topics"][0]["error_code"] == 0, r


def produce(c: WireClient, topic: str, acks: int, value: bytes) -> dict:
    batch = build_batch([SimpleRecord(b"k", value, (), 1_700_000_000_000)])
    r = c.request(
        PRODUCE,
        9,
        {
            "acks": acks,
            "timeout_ms": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}],
        },
    )
    return r["responses"][0]["partition_responses"][0]


def latest(c: WireClient, topic: str) -> int:
    r = c.request(
        LIST_OFFSETS,
        7,
        {
            "replica_id": -1,
            "topics": [{"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}],
        },
    )
    return r["topics"][0]["partitions"][0]["offset"]


def test_min_insync_replicas_above_the_replication_factor_is_capped(bootstrap):
    """Kafka's Partition.effectiveMinIsr (since KIP-966's 3.7): min.insync.replicas counts up to the
    replication factor, so a one-replica topic with min.insync.replicas=2 takes acks=all writes (seen on
    Apache Kafka 4.3.1's 3-node cluster: an RF 1 topic there, with the cluster's min.insync.replicas=2,
    took the Java producer's acks=all writes). A partition whose ISR is below it while it has more
    replicas is refused before appending: tests/test_seam.py, tests/replication/."""
    with WireClient(bootstrap) as c:
        create_topic(c, "min-isr-2", {"min.insync.replicas": "2"})
        resp = produce(c, "min-isr-2", -1, b"one replica is all there is")
        assert (resp["error_code"], resp["base_offset"]) == (0, 0)
        resp = produce(c, "min-isr-2", 1, b"leader only")
        assert (resp["error_code"], resp["base_offset"]) == (0, 1)
        assert latest(c, "min-isr-2") == 2


def test_acks_all_and_one_acknowledge_with_offsets(bootstrap):
    with WireClient(bootstrap) as c:
        create_topic(c, "acks-ok", {})
        assert produce(c, "acks-ok", -1, b"a")["base_offset"] == 0
        assert produce(c, "acks-ok", 1, b"b")["base_offset"] == 1
        assert latest(c, "acks-ok") == 2


def test_acks_zero_gets_no_response_and_is_written(bootstrap):
    with WireClient(bootstrap) as c:
        create_topic(c, "acks-zero", {})
        batch = build_batch([SimpleRecord(b"k", b"fire and forget", (), 1_700_000_000_000)])
        c.send(
            PRODUCE,
            9,
            {
                "acks": 0,
                "timeout_ms": 5000,
                "topic_data": [{"name": "acks-zero", "partition_data": [{"index": 0, "records": batch}]}],
            },
        )
        # The next response on the connection must be the ListOffsets one: no stray Produce response.
        assert latest(c, "acks-zero") == 1


def test_invalid_acks_refused(bootstrap):
    with WireClient(bootstrap) as c:
        create_topic(c, "acks-bad", {})
        assert produce(c, "acks-bad", 2, b"x")["error_code"] == ErrorCode.INVALID_REQUIRED_ACKS
        assert latest(c, "acks-bad") == 0
