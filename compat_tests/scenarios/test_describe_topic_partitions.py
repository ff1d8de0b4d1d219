"""DescribeTopicPartitions (75, KIP-966) over a raw socket and through the Java AdminClient 4.x, whose
describeTopics pages through it: name order, the response partition limit, the cursor (into a topic and
at the next topic), unknown and invalid names, the cursor-topic check.

Every expectation holds on both brokers (``--broker kafka`` runs it against Apache Kafka 4.3.1).
"""

from __future__ import annotations

import uuid

import pytest

from compat_tests.clients.registry import make_client
from compat_tests.scenarios.support import wait_for
from compat_tests.scenarios.test_newest_versions import call

LEDGER_COLUMN = "raw-socket"

DESCRIBE_TOPIC_PARTITIONS = 75
NONE, UNKNOWN_TOPIC_OR_PARTITION, INVALID_TOPIC_EXCEPTION, INVALID_REQUEST = 0, 3, 17, 42
ZERO_UUID = uuid.UUID(int=0)


def describe(
    bootstrap: str, names: list[str], limit: int = 2000, cursor: tuple[str, int] | None = None
) -> dict:
    body = {
        "topics": [{"name": n} for n in names],
        "response_partition_limit": limit,
        "cursor": None if cursor is None else {"topic_name": cursor[0], "partition_index": cursor[1]},
    }
    return call(bootstrap, DESCRIBE_TOPIC_PARTITIONS, 0, body)


def page(answer: dict) -> list[tuple[str, list[int]]]:
    return [(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in answer["topics"]]


def cursor_of(answer: dict) -> tuple[str, int] | None:
    c = answer["next_cursor"]
    return None if c is None else (c["topic_name"], c["partition_index"])


@pytest.fixture
def topics(make_topic, bootstrap: str) -> tuple[str, str]:
    a, b = make_topic("-a", partitions=3), make_topic("-b", partitions=2)
    # Apache Kafka creates a topic before its partitions reach the broker's metadata: wait for both.
    wait_for(lambda: page(describe(bootstrap, [a, b])) == [(a, [0, 1, 2]), (b, [0, 1])], what="topics")
    return a, b


def test_describes_topics_in_name_order_with_partitions(bootstrap: str, topics: tuple[str, str]) -> None:
    a, b = topics
    answer = describe(bootstrap, [b, a])
    assert page(answer) == [(a, [0, 1, 2]), (b, [0, 1])]
    assert cursor_of(answer) is None
    for t in answer["topics"]:
        assert t["error_code"] == NONE and t["topic_id"] != ZERO_UUID and t["is_internal"] is False
        for p in t["partitions"]:
            assert p["error_code"] == NONE and p["leader_id"] >= 0 and p["leader_epoch"] >= 0
            assert p["leader_id"] in p["replica_nodes"] and p["leader_id"] in p["isr_nodes"]
            assert p["offline_replicas"] == [] and p["eligible_leader_replicas"] == []


def test_partition_limit_pages_through_the_cursor(bootstrap: str, topics: tuple[str, str]) -> None:
    a, b = topics
    first = describe(bootstrap, [a, b], limit=2)
    assert page(first) == [(a, [0, 1])] and cursor_of(first) == (a, 2)
    second = describe(bootstrap, [a, b], limit=2, cursor=cursor_of(first))
    # The rest of a, then as much of b as the limit leaves.
    assert page(second) == [(a, [2]), (b, [0])] and cursor_of(second) == (b, 1)
    rest = describe(bootstrap, [a, b], limit=2, cursor=cursor_of(second))
    assert page(rest) == [(b, [1])] and cursor_of(rest) is None
    # A page that ends exactly at a topic's end points the cursor at the next topic's partition 0.
    exact = describe(bootstrap, [a, b], limit=3)
    assert page(exact) == [(a, [0, 1, 2])] and cursor_of(exact) == (b, 0)
    tail = describe(bootstrap, [a, b], limit=3, cursor=(b, 0))
    assert page(tail) == [(b, [0, 1])] and cursor_of(tail) is None


def test_unknown_and_invalid_names(bootstrap: str, topics: tuple[str, str]) -> None:
    a, _ = topics
    missing = a + "-missing"
    answer = describe(bootstrap, [a, missing, "bad/name"])
    by_name = {t["name"]: t for t in answer["topics"]}
    assert by_name[missing]["error_code"] == UNKNOWN_TOPIC_OR_PARTITION
    assert by_name[missing]["topic_id"] == ZERO_UUID and by_name[missing]["partitions"] == []
    assert by_name["bad/name"]["error_code"] == INVALID_TOPIC_EXCEPTION
    assert by_name[a]["error_code"] == NONE and len(by_name[a]["partitions"]) == 3


def test_cursor_topic_must_be_requested(bootstrap: str, topics: tuple[str, str]) -> None:
    a, b = topics
    answer = describe(bootstrap, [b], cursor=(a, 0))
    assert [(t["name"], t["error_code"]) for t in answer["topics"]] == [(b, INVALID_REQUEST)]


def test_every_topic_when_none_named(bootstrap: str, topics: tuple[str, str]) -> None:
    a, b = topics
    answer = describe(bootstrap, [], cursor=(a, 1))
    listed = page(answer)
    assert listed[:2] == [(a, [1, 2]), (b, [0, 1])]
    assert all(name > b for name, _ in listed[2:])


def test_java_admin_describe_topics(bootstrap: str, make_topic) -> None:
    topic = make_topic(partitions=5)
    described = make_client("java4").describe_topic_detailed(bootstrap, topic)
    assert described["topic"] == topic and described["internal"] is False
    assert [p["partition"] for p in described["partitions"]] == [0, 1, 2, 3, 4]
    assert all(p["leader"] is not None and p["leader"] in p["replicas"] for p in described["partitions"])
