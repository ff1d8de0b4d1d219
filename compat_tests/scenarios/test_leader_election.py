"""ElectLeaders (43), AlterPartitionReassignments (45) and ListPartitionReassignments (46) over a raw
socket at every version and through kafka-python's admin client, where no election or reassignment has
anything to do: the preferred replica leads already (ELECTION_NOT_NEEDED), a reassignment to the
partition's own replicas moves nothing, and the errors of each refusal. On a cluster (``--broker
pybroker-cluster``/``kafka-cluster``) the same holds for a new topic's replica set.

Every expectation holds on both brokers (``--broker kafka`` runs it against Apache Kafka 4.3.1). The
replicated behaviour (elections that move leadership, reassignments that move data) is tested on a
real cluster in tests/cluster/test_leadership.py.
"""

from __future__ import annotations

import pytest
from kafka import TopicPartition
from kafka.admin import KafkaAdminClient

from compat_tests.reference import kafka_probe
from compat_tests.scenarios.support import partition_leader
from compat_tests.scenarios.test_newest_versions import call

LEDGER_COLUMN = "raw-socket"

ELECT_LEADERS, ALTER_REASSIGNMENTS, LIST_REASSIGNMENTS = 43, 45, 46
NONE, UNKNOWN_TOPIC_OR_PARTITION, INVALID_REPLICA_ASSIGNMENT, INVALID_REQUEST = 0, 3, 39, 42
NO_REASSIGNMENT_IN_PROGRESS, ELECTION_NOT_NEEDED = 85, 84


def replicas_and_absent_node(bootstrap: str, topic: str) -> tuple[list[int], int]:
    """Partition 0's replica set as Metadata names it (on one broker: that broker), and a node id no
    broker has. On a cluster the broker learns of a new topic a moment after CreateTopics answers."""
    partition_leader(bootstrap, topic)
    host, _, port = bootstrap.split(",")[0].rpartition(":")
    brokers, states = kafka_probe.topic_metadata(host, int(port), topic)
    replicas = states[0]["replicas"]
    assert isinstance(replicas, list) and replicas, states
    return replicas, max(brokers) + 100


def elect(bootstrap: str, version: int, election_type: int, topic_partitions: list[dict] | None) -> dict:
    body = {"election_type": election_type, "topic_partitions": topic_partitions, "timeout_ms": 30000}
    return call(bootstrap, ELECT_LEADERS, version, body)


def results(answer: dict) -> list[tuple[str, int, int]]:
    return sorted(
        (r["topic"], p["partition_id"], p["error_code"])
        for r in answer["replica_election_results"]
        for p in r["partition_result"]
    )


@pytest.mark.parametrize("version", [0, 1, 2])
def test_preferred_election_is_not_needed(bootstrap: str, make_topic, version: int) -> None:
    topic = make_topic(partitions=2)
    answer = elect(
        bootstrap,
        version,
        0,
        [{"topic": topic, "partitions": [0, 1]}, {"topic": topic + "-missing", "partitions": [0]}],
    )
    assert answer.get("error_code", 0) == NONE
    assert results(answer) == [
        (topic, 0, ELECTION_NOT_NEEDED),
        (topic, 1, ELECTION_NOT_NEEDED),
        (topic + "-missing", 0, UNKNOWN_TOPIC_OR_PARTITION),
    ]
    messages = {
        (r["topic"], p["partition_id"]): p["error_message"]
        for r in answer["replica_election_results"]
        for p in r["partition_result"]
    }
    assert messages[(topic + "-missing", 0)] == f"No such topic as {topic}-missing"


def test_unclean_election_of_a_led_partition_is_not_needed(bootstrap: str, make_topic) -> None:
    topic = make_topic()
    answer = elect(bootstrap, 2, 1, [{"topic": topic, "partitions": [0, 7]}])
    assert results(answer) == [(topic, 0, ELECTION_NOT_NEEDED), (topic, 7, UNKNOWN_TOPIC_OR_PARTITION)]
    [result] = answer["replica_election_results"]
    assert result["partition_result"][1]["error_message"] == f"No such partition as {topic}-7"


def test_every_partition_leaves_out_those_needing_no_election(bootstrap: str, make_topic) -> None:
    topic = make_topic(partitions=2)
    answer = elect(bootstrap, 2, 0, None)
    assert answer["error_code"] == NONE
    # Every topic has an entry (Kafka's ReplicationControlManager.electLeaders), without partitions:
    # the only replica leads each of them.
    entries = {r["topic"]: r["partition_result"] for r in answer["replica_election_results"]}
    assert entries[topic] == []
    assert all(partitions == [] for partitions in entries.values()), entries


def test_unknown_election_type(bootstrap: str, make_topic) -> None:
    topic = make_topic()
    answer = elect(bootstrap, 2, 5, [{"topic": topic, "partitions": [0]}])
    assert answer["error_code"] == INVALID_REQUEST
    assert results(answer) == [(topic, 0, INVALID_REQUEST)]


def reassign(
    bootstrap: str, version: int, topic: str, partition: int, replicas: list[int] | None
) -> tuple[int, int]:
    body = {
        "timeout_ms": 30000,
        "allow_replication_factor_change": True,
        "topics": [{"name": topic, "partitions": [{"partition_index": partition, "replicas": replicas}]}],
    }
    answer = call(bootstrap, ALTER_REASSIGNMENTS, version, body)
    return answer["error_code"], answer["responses"][0]["partitions"][0]["error_code"]


@pytest.mark.parametrize("version", [0, 1])
def test_reassignments_on_one_broker(bootstrap: str, make_topic, version: int) -> None:
    """Reassignments that move nothing: to the partition's own replica set (on one broker, that broker;
    on a cluster, the replicas Metadata names), to a broker that does not exist, of what does not exist."""
    topic = make_topic()
    replicas, absent = replicas_and_absent_node(bootstrap, topic)
    assert reassign(bootstrap, version, topic, 0, replicas) == (NONE, NONE)  # its own replicas: nothing to do
    assert reassign(bootstrap, version, topic, 0, None) == (NONE, NO_REASSIGNMENT_IN_PROGRESS)
    assert reassign(bootstrap, version, topic, 0, [*replicas, absent]) == (NONE, INVALID_REPLICA_ASSIGNMENT)
    assert reassign(bootstrap, version, topic, 0, [absent]) == (NONE, INVALID_REPLICA_ASSIGNMENT)
    assert reassign(bootstrap, version, topic, 3, replicas) == (NONE, UNKNOWN_TOPIC_OR_PARTITION)
    assert reassign(bootstrap, version, topic + "-missing", 0, replicas) == (NONE, UNKNOWN_TOPIC_OR_PARTITION)
    listed = call(bootstrap, LIST_REASSIGNMENTS, 0, {"timeout_ms": 30000, "topics": None})
    assert (listed["error_code"], listed["topics"]) == (NONE, [])
    listed = call(
        bootstrap,
        LIST_REASSIGNMENTS,
        0,
        {
            "timeout_ms": 30000,
            "topics": [
                {"name": topic, "partition_indexes": [0]},
                {"name": topic + "-missing", "partition_indexes": [0]},
            ],
        },
    )
    assert (listed["error_code"], listed["topics"]) == (NONE, [])


def test_kafka_python_admin(bootstrap: str, make_topic) -> None:
    topic = make_topic()
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        response = admin.elect_leaders(0, {topic: [0]}, timeout_ms=30000)  # ELECTION_NOT_NEEDED: not raised
        assert [
            (r.topic, p.partition_id, p.error_code)
            for r in response.replica_election_results
            for p in r.partition_result
        ] == [(topic, 0, ELECTION_NOT_NEEDED)]
        tp = TopicPartition(topic, 0)
        errors = admin.alter_partition_reassignments({tp: None}, timeout_ms=30000)
        assert errors[tp].errno == NO_REASSIGNMENT_IN_PROGRESS
        assert admin.list_partition_reassignments(timeout_ms=30000) == {}
    finally:
        admin.close()
