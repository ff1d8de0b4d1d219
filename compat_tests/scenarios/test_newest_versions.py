"""The newest request versions Apache Kafka 4.3.1 advertises, sent over a raw socket, each checked for
what the version means: Produce v13 and Fetch v18 by topic id, ListOffsets v9-11's special timestamps
(earliest-local, latest-tiered, earliest pending upload) on a broker without tiered storage, Metadata
v13's top-level error, OffsetCommit/OffsetFetch v10 by topic id, DescribeGroups v6's
GROUP_ID_NOT_FOUND, DescribeCluster v2's endpoint types and fenced brokers, DescribeLogDirs v5.

Every expectation holds on both brokers (``--broker kafka`` runs it against Apache Kafka 4.3.1).
"""

from __future__ import annotations

import socket
import struct
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from compat_tests.brokers import read_response, split_bootstrap
from compat_tests.scenarios.support import partition_leader
from pybroker.protocol import codec
from pybroker.protocol.api import REQUESTS, RESPONSES
from pybroker.records.builder import SimpleRecord, build_batch
from pybroker.records.reader import read_records

LEDGER_COLUMN = "raw-socket"

PRODUCE, FETCH, LIST_OFFSETS, METADATA, OFFSET_COMMIT, OFFSET_FETCH = 0, 1, 2, 3, 8, 9
DESCRIBE_GROUPS, DESCRIBE_LOG_DIRS, DESCRIBE_CLUSTER = 15, 35, 60
NONE, UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER = 0, 3, 6
UNSUPPORTED_VERSION, GROUP_ID_NOT_FOUND, UNKNOWN_TOPIC_ID = 35, 69, 100
MISMATCHED_ENDPOINT_TYPE, UNSUPPORTED_ENDPOINT_TYPE = 114, 115
METADATA_LAG = (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID)
EARLIEST, LATEST, EARLIEST_LOCAL, LATEST_TIERED, EARLIEST_PENDING_UPLOAD = -2, -1, -4, -5, -6
RECORDS = 3
FIND_COORDINATOR = 10
COORDINATOR_NOT_READY = (14, 15, 16)  # COORDINATOR_LOAD_IN_PROGRESS, _NOT_AVAILABLE, NOT_COORDINATOR


def call(bootstrap: str, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
    """One request at ``version`` on a fresh connection; the decoded response."""
    head = struct.pack(">hhih", api_key, version, 77, 6) + b"compat"
    if version in REQUESTS[api_key].flexible_versions:
        head += b"\x00"
    payload = head + codec.encode(REQUESTS[api_key], version, body)
    with socket.create_connection(split_bootstrap(bootstrap.split(",")[0]), timeout=30) as s:
        s.sendall(struct.pack(">i", len(payload)) + payload)
        frame = read_response(s)
    assert struct.unpack_from(">i", frame, 0)[0] == 77
    offset = 4 + (1 if version in RESPONSES[api_key].flexible_versions else 0)
    response, end = codec.decode(RESPONSES[api_key], version, frame, offset)
    assert end == len(frame)
    return response


def leader_of(bootstrap: str, topic: str) -> str:
    """The address of partition 0's leader: a partition's requests go there, as a client sends them (on a
    cluster, another broker answers NOT_LEADER_OR_FOLLOWER)."""
    return partition_leader(bootstrap, topic)[1]


def to_partition_leader(bootstrap: str, topic: str, request: Callable[[str], dict], code_of: Callable[[dict], int]) -> dict:
    """``request(leader address)``, sent again while the answer is NOT_LEADER_OR_FOLLOWER,
    UNKNOWN_TOPIC_OR_PARTITION or UNKNOWN_TOPIC_ID: a broker knows and hosts a new partition a moment after
    Metadata names it the leader, or leadership moved; a client refreshes its metadata and retries too."""
    deadline = time.monotonic() + 30
    while True:
        answer = request(leader_of(bootstrap, topic))
        if code_of(answer) not in METADATA_LAG or time.monotonic() > deadline:
            return answer
        time.sleep(0.1)


def find_coordinator(bootstrap: str, key_type: int, key: str) -> tuple[str | None, dict]:
    """FindCoordinator v4 for one key: (the coordinator's "host:port" or None, the answer)."""
    answer = call(bootstrap, FIND_COORDINATOR, 4, {"key_type": key_type, "coordinator_keys": [key]})
    (found,) = answer["coordinators"]
    return (f"{found['host']}:{found['port']}" if found["error_code"] == NONE else None), answer


def group_coordinator(bootstrap: str, group: str) -> str:
    address, answer = find_coordinator(bootstrap, 0, group)
    assert address is not None, answer
    return address


def transaction_coordinator(bootstrap: str, transactional_id: str) -> str:
    address, answer = find_coordinator(bootstrap, 1, transactional_id)
    assert address is not None, answer
    return address


def coordinator_ready(bootstrap: str, group: str, deadline_s: float = 60) -> str:
    """As a client does first: FindCoordinator until the group's coordinator is up (Apache Kafka creates
    __consumer_offsets on the first lookup and then loads it); its address, where group requests go."""
    deadline = time.monotonic() + deadline_s
    while True:
        address, answer = find_coordinator(bootstrap, 0, group)
        if address is not None:
            # ... and until a group request is no longer refused as the coordinator loads.
            (described,) = call(address, DESCRIBE_GROUPS, 5, {"groups": [group]})["groups"]
            if described["error_code"] not in COORDINATOR_NOT_READY:
                return address
        assert time.monotonic() < deadline, f"no coordinator for {group}: {answer}"
        time.sleep(0.2)


def topic_id_of(bootstrap: str, topic: str) -> uuid.UUID:
    deadline = time.monotonic() + 30
    while True:  # a broker learns of a topic a moment after CreateTopics answers (a client retries too)
        answer = call(bootstrap, METADATA, 13, {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
        assert answer["error_code"] == NONE  # v13's top-level error (KIP-1102)
        (described,) = answer["topics"]
        if described["error_code"] != UNKNOWN_TOPIC_OR_PARTITION or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert (described["name"], described["error_code"]) == (topic, NONE)
    assert described["topic_id"] != uuid.UUID(int=0)
    return described["topic_id"]


@pytest.fixture
def topic(make_topic) -> str:
    return make_topic()


@pytest.fixture
def produced(bootstrap: str, topic: str) -> uuid.UUID:
    """RECORDS records produced with Produce v13, which names the topic by id only (KIP-516)."""
    topic_id = topic_id_of(bootstrap, topic)
    batch = build_batch([SimpleRecord(b"k%d" % i, b"v%d" % i) for i in range(RECORDS)])
    body = {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 30000,
        "topic_data": [
            {"topic_id": topic_id, "partition_data": [{"index": 0, "records": batch}]},
            {"topic_id": uuid.uuid4(), "partition_data": [{"index": 0, "records": batch}]},
        ],
    }
    answer = to_partition_leader(
        bootstrap,
        topic,
        lambda leader: call(leader, PRODUCE, 13, body),
        lambda answer: answer["responses"][0]["partition_responses"][0]["error_code"],
    )
    known, unknown = answer["responses"]
    assert known["topic_id"] == topic_id
    (part,) = known["partition_responses"]
    assert (part["error_code"], part["base_offset"]) == (NONE, 0), part
    assert unknown["partition_responses"][0]["error_code"] == UNKNOWN_TOPIC_ID
    return topic_id


def test_fetch_v18_by_topic_id(bootstrap: str, topic: str, produced: uuid.UUID) -> None:
    answer = call(
        leader_of(bootstrap, topic),
        FETCH,
        18,
        {
            "max_wait_ms": 0,
            "min_bytes": 0,
            "max_bytes": 1 << 20,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {
                    "topic_id": produced,
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
    assert answer["error_code"] == NONE
    (topic,) = answer["responses"]
    assert topic["topic_id"] == produced
    (part,) = topic["partitions"]
    assert (part["error_code"], part["high_watermark"]) == (NONE, RECORDS)
    values = [r.value for r in read_records(bytes(part["records"]))]
    assert values == [b"v%d" % i for i in range(RECORDS)]


def list_offset(bootstrap: str, topic: str, version: int, timestamp: int) -> dict[str, Any]:
    answer = call(
        leader_of(bootstrap, topic),
        LIST_OFFSETS,
        version,
        {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {"partition_index": 0, "current_leader_epoch": -1, "timestamp": timestamp}
                    ],
                }
            ],
            "timeout_ms": 30000,
        },
    )
    (part,) = answer["topics"][0]["partitions"]
    return part


def test_list_offsets_v11_special_timestamps(bootstrap: str, topic: str, produced: uuid.UUID) -> None:
    def offset_and_epoch(timestamp: int) -> tuple[int, int, int]:
        part = list_offset(bootstrap, topic, 11, timestamp)
        return part["error_code"], part["offset"], part["leader_epoch"]

    assert offset_and_epoch(LATEST)[:2] == (NONE, RECORDS)
    assert offset_and_epoch(EARLIEST)[:2] == (NONE, 0)
    assert offset_and_epoch(EARLIEST_LOCAL)[:2] == (NONE, 0)  # no tiered storage: the log start
    # KIP-1005 / KIP-1023 without remote storage: nothing is tiered or waiting for upload.
    assert offset_and_epoch(LATEST_TIERED) == (NONE, -1, -1)
    assert offset_and_epoch(EARLIEST_PENDING_UPLOAD) == (NONE, -1, -1)


@pytest.mark.parametrize("version,timestamp", [(8, LATEST_TIERED), (10, EARLIEST_PENDING_UPLOAD), (11, -7)])
def test_list_offsets_timestamp_newer_than_the_version(
    bootstrap: str, topic: str, version: int, timestamp: int
) -> None:
    part = list_offset(bootstrap, topic, version, timestamp)
    assert (part["error_code"], part["offset"]) == (UNSUPPORTED_VERSION, -1)


def test_list_offsets_timestamp_newer_than_the_version_is_checked_before_the_partition(
    bootstrap: str, unique_topic: str
) -> None:
    """Kafka's ReplicaManager.fetchOffset refuses the timestamp before it looks for the partition: a
    topic that does not exist (or, on a cluster, a broker that does not lead it) answers UNSUPPORTED_VERSION
    too, and a supported timestamp on that topic is UNKNOWN_TOPIC_OR_PARTITION."""

    def code(version: int, timestamp: int) -> int:
        answer = call(
            bootstrap,
            LIST_OFFSETS,
            version,
            {
                "replica_id": -1,
                "isolation_level": 0,
                "topics": [
                    {
                        "name": f"{unique_topic}-absent",
                        "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": timestamp}],
                    }
                ],
                "timeout_ms": 30000,
            },
        )
        return answer["topics"][0]["partitions"][0]["error_code"]

    assert code(8, LATEST_TIERED) == UNSUPPORTED_VERSION
    assert code(9, LATEST_TIERED) == UNKNOWN_TOPIC_OR_PARTITION


def test_offset_commit_and_fetch_v10_by_topic_id(
    bootstrap: str, topic: str, produced: uuid.UUID, unique_topic: str
) -> None:
    group, stranger = f"{unique_topic}-group", uuid.uuid4()
    coordinator = coordinator_ready(bootstrap, group)
    committed = call(
        coordinator,
        OFFSET_COMMIT,
        10,
        {
            "group_id": group,
            "generation_id_or_member_epoch": -1,  # a simple group (the admin client's commit)
            "member_id": "",
            "group_instance_id": None,
            "topics": [
                {
                    "topic_id": produced,
                    "partitions": [
                        {
                            "partition_index": 0,
                            "committed_offset": 2,
                            "committed_leader_epoch": -1,
                            "committed_metadata": "m",
                        }
                    ],
                },
                {
                    "topic_id": stranger,
                    "partitions": [
                        {
                            "partition_index": 0,
                            "committed_offset": 1,
                            "committed_leader_epoch": -1,
                            "committed_metadata": "",
                        }
                    ],
                },
            ],
        },
    )
    codes = {t["topic_id"]: [p["error_code"] for p in t["partitions"]] for t in committed["topics"]}
    assert codes == {produced: [NONE], stranger: [UNKNOWN_TOPIC_ID]}

    def fetch(topics: list[dict] | None) -> list[dict]:
        answer = call(
            coordinator,
            OFFSET_FETCH,
            10,
            {
                "groups": [{"group_id": group, "member_id": None, "member_epoch": -1, "topics": topics}],
                "require_stable": False,
            },
        )
        (described,) = answer["groups"]
        assert described["error_code"] == NONE, described
        return described["topics"]

    named = fetch(
        [{"topic_id": produced, "partition_indexes": [0]}, {"topic_id": stranger, "partition_indexes": [0]}]
    )
    found = {
        t["topic_id"]: [(p["error_code"], p["committed_offset"], p["metadata"]) for p in t["partitions"]]
        for t in named
    }
    assert found[produced] == [(NONE, 2, "m")]
    assert found[stranger][0][:2] == (UNKNOWN_TOPIC_ID, -1)
    every = fetch(None)  # all the group's topics, each named by id
    listed = [(t["topic_id"], [p["committed_offset"] for p in t["partitions"]]) for t in every]
    assert listed == [(produced, [2])]


def test_describe_groups_v6_unknown_group(bootstrap: str, unique_topic: str) -> None:
    group = f"{unique_topic}-nobody"
    coordinator = coordinator_ready(bootstrap, group)
    (v6,) = call(coordinator, DESCRIBE_GROUPS, 6, {"groups": [group]})["groups"]
    assert (v6["error_code"], v6["group_state"], v6["error_message"]) == (
        GROUP_ID_NOT_FOUND,
        "Dead",
        f"Group {group} not found.",
    )
    (v5,) = call(coordinator, DESCRIBE_GROUPS, 5, {"groups": [group]})["groups"]
    assert (v5["error_code"], v5["group_state"]) == (NONE, "Dead")  # before KIP-1043: no error


def test_describe_cluster_v2(bootstrap: str) -> None:
    answer = call(bootstrap, DESCRIBE_CLUSTER, 2, {"endpoint_type": 1, "include_fenced_brokers": True})
    assert (answer["error_code"], answer["endpoint_type"]) == (NONE, 1)
    assert answer["brokers"] and all(b["is_fenced"] is False for b in answer["brokers"])
    assert answer["controller_id"] in {b["broker_id"] for b in answer["brokers"]}
    controllers = call(bootstrap, DESCRIBE_CLUSTER, 2, {"endpoint_type": 2})
    assert controllers["error_code"] == MISMATCHED_ENDPOINT_TYPE
    assert controllers["error_message"] == (
        "The request was sent to an endpoint of type BROKER, but we wanted an endpoint of type CONTROLLER"
    )
    unknown = call(bootstrap, DESCRIBE_CLUSTER, 2, {"endpoint_type": 3})
    assert unknown["error_code"] == UNSUPPORTED_ENDPOINT_TYPE


def test_describe_log_dirs_v5(bootstrap: str, topic: str) -> None:
    deadline = time.monotonic() + 30
    while True:  # Apache Kafka places a new topic's log a moment after CreateTopics answers
        # The leader holds a replica (DescribeLogDirs lists the answering broker's own directories).
        answer = call(leader_of(bootstrap, topic), DESCRIBE_LOG_DIRS, 5, {"topics": [{"topic": topic, "partitions": [0]}]})
        assert answer["error_code"] == NONE
        assert answer["results"] and all(r["is_cordoned"] is False for r in answer["results"])
        placed = [
            p for r in answer["results"] for t in r["topics"] if t["name"] == topic for p in t["partitions"]
        ]
        if placed or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert [p["partition_index"] for p in placed] == [0]


INIT_PRODUCER_ID, END_TXN = 22, 26
TRANSACTION_ABORTABLE = 120


def transaction_coordinator_ready(bootstrap: str, transactional_id: str, deadline_s: float = 60) -> dict:
    """FindCoordinator (key type 1) then InitProducerId to that coordinator until it answers it."""
    deadline = time.monotonic() + deadline_s
    while True:
        address, _ = find_coordinator(bootstrap, 1, transactional_id)
        if address is not None:
            init = call(
                address,
                INIT_PRODUCER_ID,
                5,
                {
                    "transactional_id": transactional_id,
                    "transaction_timeout_ms": 60000,
                    "producer_id": -1,
                    "producer_epoch": -1,
                },
            )
            if init["error_code"] not in COORDINATOR_NOT_READY:
                assert init["error_code"] == NONE, init
                return init
        assert time.monotonic() < deadline, f"no transaction coordinator for {transactional_id}"
        time.sleep(0.2)


def transactional_produce(
    bootstrap: str, version: int, transactional_id: str, topic: str, init: dict
) -> dict:
    batch = build_batch(
        [SimpleRecord(b"k%d" % i, b"t%d" % i) for i in range(RECORDS)],
        producer_id=init["producer_id"],
        producer_epoch=init["producer_epoch"],
        base_sequence=0,
        is_transactional=True,
    )
    body = {
        "transactional_id": transactional_id,
        "acks": -1,
        "timeout_ms": 30000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}],
    }
    answer = to_partition_leader(
        bootstrap,
        topic,
        lambda leader: call(leader, PRODUCE, version, body),
        lambda answer: answer["responses"][0]["partition_responses"][0]["error_code"],
    )
    return answer["responses"][0]["partition_responses"][0]


def test_produce_v12_adds_the_partition_to_the_transaction(
    bootstrap: str, topic: str, unique_topic: str
) -> None:
    """KIP-890 part 2: from Produce v12 a transactional batch needs no AddPartitionsToTxn before it; the
    broker adds the partition to the transaction itself.  Committed with EndTxn, the records become
    visible to read_committed."""
    transactional_id = f"{unique_topic}-txn"
    init = transaction_coordinator_ready(bootstrap, transactional_id)
    # v11 only verifies: the partition was never added, so the batch is refused.
    refused = transactional_produce(bootstrap, 11, transactional_id, topic, init)
    assert refused["error_code"] == TRANSACTION_ABORTABLE, refused
    # That aborted nothing on the coordinator side; a fresh producer epoch starts clean.
    init = transaction_coordinator_ready(bootstrap, transactional_id)
    added = transactional_produce(bootstrap, 12, transactional_id, topic, init)
    assert (added["error_code"], added["base_offset"]) == (NONE, 0), added
    assert list_offset_committed(bootstrap, topic) == 0  # open transaction: the LSO stays at its start
    ended = call(
        transaction_coordinator(bootstrap, transactional_id),
        END_TXN,
        4,
        {
            "transactional_id": transactional_id,
            "producer_id": init["producer_id"],
            "producer_epoch": init["producer_epoch"],
            "committed": True,
        },
    )
    assert ended["error_code"] == NONE, ended
    deadline = time.monotonic() + 30
    while list_offset_committed(bootstrap, topic) != RECORDS + 1:  # the records and the commit marker
        assert time.monotonic() < deadline, "the commit never became visible to read_committed"
        time.sleep(0.1)


def list_offset_committed(bootstrap: str, topic: str) -> int:
    answer = call(
        leader_of(bootstrap, topic),
        LIST_OFFSETS,
        11,
        {
            "replica_id": -1,
            "isolation_level": 1,
            "topics": [
                {
                    "name": topic,
                    "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": LATEST}],
                }
            ],
            "timeout_ms": 30000,
        },
    )
    part = answer["topics"][0]["partitions"][0]
    assert part["error_code"] == NONE
    return part["offset"]


TXN_OFFSET_COMMIT, LIST_TRANSACTIONS = 28, 66
INVALID_REGULAR_EXPRESSION = 128


def txn_offset_commit(
    bootstrap: str, version: int, transactional_id: str, init: dict, group: str, topic: str
) -> int:
    answer = call(
        group_coordinator(bootstrap, group),
        TXN_OFFSET_COMMIT,
        version,
        {
            "transactional_id": transactional_id,
            "group_id": group,
            "producer_id": init["producer_id"],
            "producer_epoch": init["producer_epoch"],
            "generation_id": -1,
            "member_id": "",
            "group_instance_id": None,
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {
                            "partition_index": 0,
                            "committed_offset": RECORDS,
                            "committed_leader_epoch": -1,
                            "committed_metadata": "txn",
                        }
                    ],
                }
            ],
        },
    )
    return answer["topics"][0]["partitions"][0]["error_code"]


def test_txn_offset_commit_v5_adds_the_offsets_partition_and_list_transactions_v2(
    bootstrap: str, topic: str, unique_topic: str
) -> None:
    """TxnOffsetCommit v5 needs no AddOffsetsToTxn before it (KIP-890 part 2: the broker adds the
    group's __consumer_offsets partition itself); v4 only verifies.  ListTransactions v2 filters by a
    transactional id pattern (KIP-1152)."""
    transactional_id, group = f"{unique_topic}-txn", f"{unique_topic}-group"
    coordinator_ready(bootstrap, group)
    init = transaction_coordinator_ready(bootstrap, transactional_id)
    assert transactional_produce(bootstrap, 12, transactional_id, topic, init)["error_code"] == NONE
    assert txn_offset_commit(bootstrap, 4, transactional_id, init, group, topic) != NONE
    assert txn_offset_commit(bootstrap, 5, transactional_id, init, group, topic) == NONE

    def listed(pattern: str | None) -> tuple[int, list[str]]:
        # Each broker lists the transactions its coordinator holds (Kafka's admin client asks them all).
        answer = call(
            transaction_coordinator(bootstrap, transactional_id),
            LIST_TRANSACTIONS,
            2,
            {
                "state_filters": [],
                "producer_id_filters": [],
                "duration_filter": -1,
                "transactional_id_pattern": pattern,
            },
        )
        return answer["error_code"], [s["transactional_id"] for s in answer["transaction_states"]]

    assert listed(f"{unique_topic}-t.*") == (NONE, [transactional_id])
    assert listed(f"{unique_topic}-t") == (NONE, [])  # the whole id must match
    assert listed("(")[0] == INVALID_REGULAR_EXPRESSION
    assert transactional_id in listed(None)[1]

    ended = call(
        transaction_coordinator(bootstrap, transactional_id),
        END_TXN,
        4,
        {
            "transactional_id": transactional_id,
            "producer_id": init["producer_id"],
            "producer_epoch": init["producer_epoch"],
            "committed": True,
        },
    )
    assert ended["error_code"] == NONE, ended
    deadline = time.monotonic() + 30
    while True:  # the offsets become visible once the commit marker is written
        answer = call(
            group_coordinator(bootstrap, group),
            OFFSET_FETCH,
            9,
            {
                "groups": [{"group_id": group, "member_id": None, "member_epoch": -1, "topics": None}],
                "require_stable": True,
            },
        )
        topics = answer["groups"][0]["topics"]
        offsets = [(t["name"], p["committed_offset"]) for t in topics for p in t["partitions"]]
        if offsets == [(topic, RECORDS)] or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert offsets == [(topic, RECORDS)]
