"""ElectLeaders (43), AlterPartitionReassignments (45) and ListPartitionReassignments (46) on a single
broker, over a raw socket and through confluent-kafka's AdminClient: one broker leads every partition
with one replica, so no election is needed, no reassignment is in progress, and the only valid target
is the broker itself. Every expectation holds on both brokers (``--broker kafka``); the cluster behaviour
(elections and reassignments that move leaders and replicas) is tests/cluster/test_partition_admin.py.
"""

from __future__ import annotations

import pytest
from confluent_kafka import ElectionType, TopicPartition
from confluent_kafka.admin import AdminClient

from compat_tests.scenarios.support import wait_for
from compat_tests.scenarios.test_newest_versions import call

LEDGER_COLUMN = "raw-socket"

ELECT_LEADERS, ALTER_REASSIGNMENTS, LIST_REASSIGNMENTS, METADATA = 43, 45, 46, 3
NONE, UNKNOWN_TOPIC_OR_PARTITION, INVALID_REPLICA_ASSIGNMENT = 0, 3, 39
ELECTION_NOT_NEEDED, NO_REASSIGNMENT_IN_PROGRESS = 84, 85
PREFERRED, UNCLEAN = 0, 1


def node_id(bootstrap: str) -> int:
    return call(bootstrap, METADATA, 12, {"topics": [], "allow_auto_topic_creation": False})["brokers"][0][
        "node_id"
    ]


def elect(bootstrap: str, election_type: int, partitions: dict[str, list[int]] | None) -> dict:
    body = {
        "election_type": election_type,
        "topic_partitions": None
        if partitions is None
        else [{"topic": t, "partitions": ps} for t, ps in partitions.items()],
        "timeout_ms": 10000,
    }
    return call(bootstrap, ELECT_LEADERS, 2, body)


def election_codes(answer: dict) -> dict[tuple[str, int], int]:
    return {
        (t["topic"], p["partition_id"]): p["error_code"]
        for t in answer["replica_election_results"]
        for p in t["partition_result"]
    }


def reassign(bootstrap: str, topic: str, targets: dict[int, list[int] | None]) -> dict:
    body = {
        "timeout_ms": 10000,
        "allow_replication_factor_change": True,
        "topics": [
            {"name": topic, "partitions": [{"partition_index": p, "replicas": r} for p, r in targets.items()]}
        ],
    }
    return call(bootstrap, ALTER_REASSIGNMENTS, 1, body)


def reassignment_codes(answer: dict) -> dict[int, int]:
    return {p["partition_index"]: p["error_code"] for t in answer["responses"] for p in t["partitions"]}


@pytest.fixture
def topic(make_topic, bootstrap: str) -> str:
    name = make_topic("-elect", partitions=2)
    # Apache Kafka creates a topic before its partitions reach the broker's metadata.
    wait_for(
        lambda: (
            election_codes(elect(bootstrap, PREFERRED, {name: [0, 1]}))
            == {(name, 0): ELECTION_NOT_NEEDED, (name, 1): ELECTION_NOT_NEEDED}
        ),
        what="partitions known to the controller",
    )
    return name


def test_elect_leaders_needs_no_election_on_one_broker(bootstrap: str, topic: str) -> None:
    for election_type in (PREFERRED, UNCLEAN):
        answer = elect(bootstrap, election_type, {topic: [0, 1, 7], "no-such-topic-elect": [0]})
        assert answer["error_code"] == NONE
        assert election_codes(answer) == {
            (topic, 0): ELECTION_NOT_NEEDED,
            (topic, 1): ELECTION_NOT_NEEDED,
            (topic, 7): UNKNOWN_TOPIC_OR_PARTITION,
            ("no-such-topic-elect", 0): UNKNOWN_TOPIC_OR_PARTITION,
        }, answer
    # Every partition: those that needed no election are left out of the answer.
    everything = elect(bootstrap, PREFERRED, None)
    assert everything["error_code"] == NONE and election_codes(everything) == {}, everything


def test_reassignments_on_one_broker(bootstrap: str, topic: str) -> None:
    me = node_id(bootstrap)
    answer = reassign(bootstrap, topic, {0: [me], 1: None})
    assert answer["error_code"] == NONE, answer
    assert reassignment_codes(answer) == {0: NONE, 1: NO_REASSIGNMENT_IN_PROGRESS}, answer
    bad = reassign(bootstrap, topic, {0: [me, me + 100], 1: [me, me]})
    assert reassignment_codes(bad) == {0: INVALID_REPLICA_ASSIGNMENT, 1: INVALID_REPLICA_ASSIGNMENT}, bad
    unknown = reassign(bootstrap, "no-such-topic-reassign", {0: [me]})
    assert reassignment_codes(unknown) == {0: UNKNOWN_TOPIC_OR_PARTITION}, unknown
    listed = call(bootstrap, LIST_REASSIGNMENTS, 0, {"timeout_ms": 10000, "topics": None})
    assert listed["error_code"] == NONE and listed["topics"] == [], listed
    listed_one = call(bootstrap, LIST_REASSIGNMENTS, 0, {"timeout_ms": 10000,
                      "topics": [{"name": topic, "partition_indexes": [0, 1]}]})  # fmt: skip
    assert listed_one["error_code"] == NONE and listed_one["topics"] == [], listed_one


def test_confluent_admin_elect_leaders(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    future = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 0)])
    results = future.result(timeout=30)
    (error,) = results.values()
    assert error is not None and error.code() == ELECTION_NOT_NEEDED, results
