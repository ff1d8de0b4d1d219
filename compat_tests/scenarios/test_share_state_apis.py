"""The share coordinator's own RPCs (KIP-932) over a raw socket: InitializeShareGroupState (83),
ReadShareGroupState (84), WriteShareGroupState (85), DeleteShareGroupState (86) and
ReadShareGroupStateSummary (87), and FindCoordinator's key type 2 (SHARE) that locates the coordinator of a
share partition (the leader of its ``__share_group_state`` partition).

In Kafka only a share-partition leader's persister sends these, but they are on the broker listener and a
principal with CLUSTER_ACTION may send them; each expectation here holds on both brokers
(``--broker kafka`` runs it against Apache Kafka 4.3.1, whose freshly formatted cluster has share groups on).
Besides the answers, the records each call leaves in ``__share_group_state`` are read back with Fetch and
decoded: a ShareSnapshot for Initialize, a ShareUpdate for Write, a tombstone for Delete, in the key's
partition (Kafka's ``SharePartitionKey.asCoordinatorKey`` hashed over the topic's 50 partitions).

Each test starts its own broker, so that the state topic does not exist until a test asks for it: under
``--broker kafka-cluster`` / ``pybroker-cluster`` a 3-node cluster of that kind. There every request goes
where a share-partition leader's persister sends it: each state call to the coordinator FindCoordinator
(key type SHARE) names for its "group:topicId:partition" key, the state topic's Fetch and ListOffsets to
that partition's leader. On one broker all of them are that broker.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from compat_tests.scenarios.support import broker_launcher, partition_leader
from compat_tests.scenarios.test_newest_versions import call, topic_id_of
from pybroker.coordinator.offsets_topic import partition_for
from pybroker.coordinator.share.state_records import (
    SHARE_SNAPSHOT_RECORD_TYPE,
    SHARE_UPDATE_RECORD_TYPE,
    SharePartitionKey,
    decode_key,
    decode_record_type,
    decode_update_value,
    decode_value,
)
from pybroker.records.reader import read_records

LEDGER_COLUMN = "raw-socket"

FETCH, LIST_OFFSETS, METADATA, FIND_COORDINATOR = 1, 2, 3, 10
INITIALIZE, READ, WRITE, DELETE, READ_SUMMARY = 83, 84, 85, 86, 87
NONE, UNKNOWN_TOPIC_OR_PARTITION, NOT_COORDINATOR, INVALID_REQUEST = 0, 3, 16, 42
FENCED_LEADER_EPOCH, FENCED_STATE_EPOCH = 74, 124
COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE = 14, 15
STATE_TOPIC = "__share_group_state"
STATE_TOPIC_PARTITIONS = 50  # share.coordinator.state.topic.num.partitions, Kafka's default on both
KEY_TYPE_SHARE = 2


PRUNE_INTERVAL_S = 1.0


def _fresh(request: pytest.FixtureRequest, workdir: Path, overrides: dict[str, str]) -> Iterator[str]:
    launcher = broker_launcher(request.config.getoption("--broker"), workdir, overrides)
    launcher.start()
    try:
        yield launcher.bootstrap
    finally:
        launcher.stop()


@pytest.fixture
def fresh_bootstrap(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A broker (or 3-node cluster) of the kind under test started for this test alone (no
    __share_group_state yet); its bootstrap, every node's address."""
    yield from _fresh(request, tmp_path, {})


@pytest.fixture
def pruning_bootstrap(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The same, pruning the state topic every second (Kafka's default is every 5 minutes)."""
    yield from _fresh(request, tmp_path, {"share.coordinator.state.topic.prune.interval.ms": str(int(PRUNE_INTERVAL_S * 1000))})


def kafka_uuid(topic_id: uuid.UUID) -> str:
    """Kafka's Uuid.toString(): URL-safe base64 without padding (what the coordinator key is made of)."""
    import base64

    return base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode()


def share_key(group: str, topic_id: uuid.UUID, partition: int) -> str:
    return f"{group}:{kafka_uuid(topic_id)}:{partition}"


def find_share_coordinator(bootstrap: str, key: str, version: int = 6) -> dict[str, Any]:
    (found,) = call(bootstrap, FIND_COORDINATOR, version, {"key_type": KEY_TYPE_SHARE, "coordinator_keys": [key]})[
        "coordinators"
    ]
    return found


def create_topic(bootstrap: str, admin: Any, partitions: int = 2) -> tuple[str, uuid.UUID]:
    name = f"share-state-{uuid.uuid4().hex[:8]}"
    admin.create_topic(bootstrap, name, partitions=partitions, replication_factor=1)
    return name, topic_id_of(bootstrap, name)


def one_result(answer: dict[str, Any]) -> dict[str, Any]:
    (topic,) = answer["results"]
    (partition,) = topic["partitions"]
    return {"topic_id": topic["topic_id"], **partition}


def initialize(bootstrap: str, group: str, topic_id: uuid.UUID, partition: int, state_epoch: int, start: int) -> dict:
    body = {
        "group_id": group,
        "topics": [
            {"topic_id": topic_id, "partitions": [{"partition": partition, "state_epoch": state_epoch, "start_offset": start}]}
        ],
    }
    return one_result(call(bootstrap, INITIALIZE, 0, body))


def write(
    bootstrap: str,
    group: str,
    topic_id: uuid.UUID,
    partition: int,
    *,
    state_epoch: int,
    leader_epoch: int,
    start: int,
    batches: list[tuple[int, int, int, int]],
    version: int = 1,
    delivery_complete_count: int = -1,
) -> dict:
    part = {
        "partition": partition,
        "state_epoch": state_epoch,
        "leader_epoch": leader_epoch,
        "start_offset": start,
        "delivery_complete_count": delivery_complete_count,
        "state_batches": [
            {"first_offset": f, "last_offset": last, "delivery_state": s, "delivery_count": c} for f, last, s, c in batches
        ],
    }
    body = {"group_id": group, "topics": [{"topic_id": topic_id, "partitions": [part]}]}
    return one_result(call(bootstrap, WRITE, version, body))


def read(bootstrap: str, group: str, topic_id: uuid.UUID, partition: int, leader_epoch: int) -> dict:
    body = {
        "group_id": group,
        "topics": [{"topic_id": topic_id, "partitions": [{"partition": partition, "leader_epoch": leader_epoch}]}],
    }
    return one_result(call(bootstrap, READ, 0, body))


def read_summary(bootstrap: str, group: str, topic_id: uuid.UUID, partition: int, version: int = 1) -> dict:
    body = {
        "group_id": group,
        "topics": [{"topic_id": topic_id, "partitions": [{"partition": partition, "leader_epoch": -1}]}],
    }
    return one_result(call(bootstrap, READ_SUMMARY, version, body))


def delete(bootstrap: str, group: str, topic_id: uuid.UUID, partition: int) -> dict:
    body = {"group_id": group, "topics": [{"topic_id": topic_id, "partitions": [{"partition": partition}]}]}
    return one_result(call(bootstrap, DELETE, 0, body))


def batches_of(result: dict[str, Any]) -> list[tuple[int, int, int, int]]:
    return [(b["first_offset"], b["last_offset"], b["delivery_state"], b["delivery_count"]) for b in result["state_batches"]]


def nodes_of(bootstrap: str) -> list[str]:
    """Every node's "host:port" (a fresh cluster's bootstrap lists them all; one broker: itself)."""
    return bootstrap.split(",")


def state_partition_leader(bootstrap: str, key: str) -> str:
    """The address of the leader of ``key``'s __share_group_state partition, as Metadata names it."""
    return partition_leader(bootstrap, STATE_TOPIC, partition_for(key, STATE_TOPIC_PARTITIONS))[1]


def coordinator_ready(bootstrap: str, group: str, topic_id: uuid.UUID, partition: int) -> str:
    """FindCoordinator (which creates __share_group_state on first use, on both brokers), then until a
    summary read is no longer refused while the coordinator loads the key's state partition; the
    coordinator's address."""
    deadline = time.monotonic() + 60
    while True:
        found = find_share_coordinator(bootstrap, share_key(group, topic_id, partition))
        if found["error_code"] == NONE:
            address = f"{found['host']}:{found['port']}"
            code = read_summary(address, group, topic_id, partition)["error_code"]
            if code not in (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE):
                return address
        assert time.monotonic() < deadline, f"no share coordinator: {found}"
        time.sleep(0.2)


def state_partition_log_start(bootstrap: str, key: SharePartitionKey) -> int:
    partition = partition_for(key.coordinator_key, STATE_TOPIC_PARTITIONS)
    body = {"replica_id": -1, "isolation_level": 0,
            "topics": [{"name": STATE_TOPIC, "partitions": [{"partition_index": partition, "current_leader_epoch": -1, "timestamp": -2}]}]}  # fmt: skip
    (topic,) = call(state_partition_leader(bootstrap, key.coordinator_key), LIST_OFFSETS, 7, body)["topics"]
    (part,) = topic["partitions"]
    assert part["error_code"] == NONE, part
    return int(part["offset"])


def state_records(bootstrap: str, key: SharePartitionKey) -> list[tuple[int, Any]]:
    """The records of ``key`` in its __share_group_state partition from its log start, decoded: (record
    type, value or None)."""
    partition = partition_for(share_key(key.group_id, key.topic_id, key.partition), STATE_TOPIC_PARTITIONS)
    answer = call(
        state_partition_leader(bootstrap, key.coordinator_key),
        FETCH,
        12,
        {
            "replica_id": -1,
            "max_wait_ms": 0,
            "min_bytes": 0,
            "max_bytes": 1 << 20,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {
                    "topic": STATE_TOPIC,
                    "partitions": [
                        {
                            "partition": partition,
                            "current_leader_epoch": -1,
                            "fetch_offset": state_partition_log_start(bootstrap, key),
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
    (topic,) = answer["responses"]
    (part,) = topic["partitions"]
    assert part["error_code"] == NONE, part
    out: list[tuple[int, Any]] = []
    for r in read_records(bytes(part["records"] or b"")):
        assert r.key is not None
        if decode_key(r.key) != key:
            continue
        record_type = decode_record_type(r.key)
        if r.value is None:
            out.append((record_type, None))
        elif record_type == SHARE_SNAPSHOT_RECORD_TYPE:
            out.append((record_type, decode_value(r.value)))
        else:
            out.append((record_type, decode_update_value(r.value)))
    return out


# -- FindCoordinator key type SHARE ----------------------------------------------------------------------


def test_find_coordinator_share_key_names_this_node_and_needs_v6(fresh_bootstrap: str, admin: Any) -> None:
    """Every node names the same coordinator for a key: the leader of the key's __share_group_state
    partition (on one broker, that broker itself)."""
    _, topic_id = create_topic(fresh_bootstrap, admin)
    key = share_key("g1", topic_id, 0)
    for node in nodes_of(fresh_bootstrap):
        below = call(node, FIND_COORDINATOR, 5, {"key_type": KEY_TYPE_SHARE, "coordinator_keys": [key]})
        (refused,) = below["coordinators"]
        assert (refused["error_code"], refused["node_id"]) == (INVALID_REQUEST, -1), node
        malformed = find_share_coordinator(node, "not-a-share-key")
        assert (malformed["error_code"], malformed["node_id"], malformed["error_message"]) == (INVALID_REQUEST, -1, ""), node
    deadline = time.monotonic() + 60
    named: dict[str, tuple[int, str]] = {}
    for node in nodes_of(fresh_bootstrap):
        while True:
            found = find_share_coordinator(node, key)
            if found["error_code"] == NONE or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert found["error_code"] == NONE, (node, found)
        named[node] = (found["node_id"], f"{found['host']}:{found['port']}")
    leader = partition_leader(fresh_bootstrap, STATE_TOPIC, partition_for(key, STATE_TOPIC_PARTITIONS))
    assert set(named.values()) == {leader}, (named, leader)
    if len(nodes_of(fresh_bootstrap)) == 1:
        assert leader[1] == fresh_bootstrap


# -- before the state topic exists -----------------------------------------------------------------------


def test_state_calls_before_the_state_topic_exists_are_not_coordinator(fresh_bootstrap: str, admin: Any) -> None:
    """No node coordinates anything yet (nothing to ask FindCoordinator of, which would create the topic):
    every node refuses every state call."""
    _, topic_id = create_topic(fresh_bootstrap, admin)
    for node in nodes_of(fresh_bootstrap):
        answers = {
            "initialize": initialize(node, "g", topic_id, 0, 0, 0),
            "write": write(node, "g", topic_id, 0, state_epoch=0, leader_epoch=0, start=0, batches=[]),
            "read": read(node, "g", topic_id, 0, 0),
            "read share group state summary": read_summary(node, "g", topic_id, 0),
            "delete": delete(node, "g", topic_id, 0),
        }
        for op, answer in answers.items():
            what = op if op.startswith("read share") else f"{op} share group state"
            assert (answer["error_code"], answer["error_message"]) == (
                NOT_COORDINATOR,
                f"Unable to {what}: This is not the correct coordinator.",
            ), (node, op)
        assert (answers["read"]["state_epoch"], answers["read"]["start_offset"], answers["read"]["state_batches"]) == (0, 0, [])
        summary = answers["read share group state summary"]
        assert (summary["state_epoch"], summary["leader_epoch"], summary["start_offset"], summary["delivery_complete_count"]) == (
            0, 0, 0, -1
        )  # fmt: skip


# -- Initialize -> Write -> Read -> ReadSummary -> Delete ------------------------------------------------

ACKED, ARCHIVED, AVAILABLE = 2, 4, 0


def summary_of(result: dict[str, Any]) -> tuple[int, int, int, int, int]:
    return (result["error_code"], result["state_epoch"], result["leader_epoch"], result["start_offset"],
            result.get("delivery_complete_count", -1))  # fmt: skip


def test_initialize_write_read_summary_delete(fresh_bootstrap: str, admin: Any) -> None:
    b = fresh_bootstrap
    _, topic_id = create_topic(b, admin)
    group = f"sg-{uuid.uuid4().hex[:6]}"
    key = SharePartitionKey(group, topic_id, 0)
    c = coordinator_ready(b, group, topic_id, 0)
    # No state yet: the summary says so (start offset -1), a read or write is refused.
    assert summary_of(read_summary(c, group, topic_id, 0)) == (NONE, 0, 0, -1, -1)
    unread = read(c, group, topic_id, 0, 0)
    assert (unread["error_code"], unread["error_message"]) == (INVALID_REQUEST, "Read operation on uninitialized share partition not allowed.")
    unwritten = write(c, group, topic_id, 0, state_epoch=0, leader_epoch=0, start=0, batches=[])
    assert (unwritten["error_code"], unwritten["error_message"]) == (INVALID_REQUEST, "Write operation on uninitialized share partition not allowed.")

    assert initialize(c, group, topic_id, 0, 0, 10)["error_code"] == NONE
    assert summary_of(read_summary(c, group, topic_id, 0)) == (NONE, 0, 0, 10, 0)
    fresh = read(c, group, topic_id, 0, -1)
    assert (fresh["error_code"], fresh["state_epoch"], fresh["start_offset"], fresh["state_batches"]) == (NONE, 0, 10, [])

    first = [(10, 14, ACKED, 1), (15, 15, ARCHIVED, 3), (16, 19, AVAILABLE, 1)]
    assert write(c, group, topic_id, 0, state_epoch=0, leader_epoch=1, start=10, batches=first, delivery_complete_count=6)["error_code"] == NONE
    state = read(c, group, topic_id, 0, 1)  # the leader's read records its epoch (a write does not)
    assert (state["error_code"], state["start_offset"], batches_of(state)) == (NONE, 10, first)
    # A second write moves the start offset and acknowledges 16-17 at a higher delivery count: merged.
    assert write(c, group, topic_id, 0, state_epoch=0, leader_epoch=1, start=12, batches=[(16, 17, ACKED, 2)])["error_code"] == NONE
    state = read(c, group, topic_id, 0, 1)
    assert (state["start_offset"], batches_of(state)) == (
        12, [(12, 14, ACKED, 1), (15, 15, ARCHIVED, 3), (16, 17, ACKED, 2), (18, 19, AVAILABLE, 1)]
    )  # fmt: skip
    assert summary_of(read_summary(c, group, topic_id, 0)) == (NONE, 0, 1, 12, -1)
    v0 = read_summary(c, group, topic_id, 0, version=0)
    assert (v0["error_code"], v0["leader_epoch"], v0["start_offset"]) == (NONE, 1, 12)

    records = state_records(b, key)
    assert [t for t, _ in records] == [SHARE_SNAPSHOT_RECORD_TYPE] + [SHARE_UPDATE_RECORD_TYPE] * 3
    snap = records[0][1]
    assert (snap.snapshot_epoch, snap.state_epoch, snap.leader_epoch, snap.start_offset, snap.state_batches) == (0, 0, 0, 10, ())
    assert snap.delivery_complete_count == 0 and snap.create_timestamp == snap.write_timestamp > 0
    updates = [(u.snapshot_epoch, u.leader_epoch, u.start_offset, len(u.state_batches), u.delivery_complete_count) for _, u in records[1:]]
    assert updates == [(0, 0, 10, 3, 6), (0, 1, 10, 0, 6), (0, 1, 12, 1, -1)]

    assert delete(c, group, topic_id, 0)["error_code"] == NONE
    assert delete(c, group, topic_id, 0)["error_code"] == NONE  # nothing left: no second tombstone
    assert summary_of(read_summary(c, group, topic_id, 0)) == (NONE, 0, 0, -1, -1)
    assert state_records(b, key)[-2:] == [(SHARE_UPDATE_RECORD_TYPE, records[-1][1]), (SHARE_SNAPSHOT_RECORD_TYPE, None)]


# -- fencing ---------------------------------------------------------------------------------------------


def test_state_and_leader_epochs_fence(fresh_bootstrap: str, admin: Any) -> None:
    b = fresh_bootstrap
    _, topic_id = create_topic(b, admin)
    group = f"sg-{uuid.uuid4().hex[:6]}"
    c = coordinator_ready(b, group, topic_id, 0)
    assert initialize(c, group, topic_id, 0, 0, 0)["error_code"] == NONE
    assert read(c, group, topic_id, 0, 3)["error_code"] == NONE  # leader epoch 3 recorded
    stale_read = read(c, group, topic_id, 0, 2)
    assert (stale_read["error_code"], stale_read["error_message"]) == (FENCED_LEADER_EPOCH, "The leader epoch in the request is older than the epoch on the broker.")
    assert (stale_read["state_epoch"], stale_read["start_offset"], stale_read["state_batches"]) == (0, 0, [])
    stale_write = write(c, group, topic_id, 0, state_epoch=0, leader_epoch=2, start=0, batches=[])
    assert stale_write["error_code"] == FENCED_LEADER_EPOCH
    assert write(c, group, topic_id, 0, state_epoch=0, leader_epoch=3, start=0, batches=[(0, 1, ACKED, 1)])["error_code"] == NONE

    # A new state epoch (Kafka's AlterShareGroupOffsets re-initializes): a fresh snapshot, older epochs fenced.
    assert initialize(c, group, topic_id, 0, 3, 20)["error_code"] == NONE
    assert summary_of(read_summary(c, group, topic_id, 0)) == (NONE, 3, 0, 20, 0)
    fenced = "The share coordinator rejected the request because the share-group state epoch did not match."
    stale_init = initialize(c, group, topic_id, 0, 2, 20)
    assert (stale_init["error_code"], stale_init["error_message"]) == (FENCED_STATE_EPOCH, fenced)
    stale_state = write(c, group, topic_id, 0, state_epoch=2, leader_epoch=3, start=20, batches=[])
    assert (stale_state["error_code"], stale_state["error_message"]) == (FENCED_STATE_EPOCH, fenced)
    # -1 is "no epoch": neither checked; a -1 start offset keeps the start offset.
    assert write(c, group, topic_id, 0, state_epoch=-1, leader_epoch=-1, start=-1, batches=[(30, 31, ACKED, 1)])["error_code"] == NONE
    state = read(c, group, topic_id, 0, -1)
    assert (state["state_epoch"], state["start_offset"], batches_of(state)) == (3, 20, [(30, 31, ACKED, 1)])


def test_unknown_topics_partitions_and_empty_requests(fresh_bootstrap: str, admin: Any) -> None:
    b = fresh_bootstrap
    _, topic_id = create_topic(b, admin)  # 2 partitions
    group = f"sg-{uuid.uuid4().hex[:6]}"
    c = coordinator_ready(b, group, topic_id, 0)
    unknown = uuid.uuid4()
    # Each key's calls go to its own coordinator (another state partition: on a cluster, maybe another node).
    c7, c_unknown = coordinator_ready(b, group, topic_id, 7), coordinator_ready(b, group, unknown, 0)
    not_hosted = "This server does not host this topic-partition."
    assert (initialize(c7, group, topic_id, 7, 0, 0)["error_code"], initialize(c_unknown, group, unknown, 0, 0, 0)["error_code"]) == (
        UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_OR_PARTITION
    )  # fmt: skip
    negative = initialize(coordinator_ready(b, group, topic_id, -1), group, topic_id, -1, 0, 0)
    assert (negative["error_code"], negative["error_message"]) == (INVALID_REQUEST, "The partition id cannot be a negative number.")
    # Write and Read check for state first: an unknown topic has none.
    assert write(c_unknown, group, unknown, 0, state_epoch=0, leader_epoch=0, start=0, batches=[])["error_code"] == INVALID_REQUEST
    assert read(c_unknown, group, unknown, 0, 0)["error_code"] == INVALID_REQUEST
    deleted = delete(c_unknown, group, unknown, 0)
    assert (deleted["error_code"], deleted["error_message"]) == (UNKNOWN_TOPIC_OR_PARTITION, not_hosted)
    summary = read_summary(c_unknown, group, unknown, 0)
    assert summary_of(summary) == (UNKNOWN_TOPIC_OR_PARTITION, 0, 0, 0, -1)
    # No group id, no topics, a topic without partitions: an empty response.
    empty_group = {"group_id": "", "topics": [{"topic_id": topic_id, "partitions": [{"partition": 0, "leader_epoch": 0}]}]}
    assert call(c, READ, 0, empty_group) == {"results": []}
    assert call(c, READ, 0, {"group_id": group, "topics": []}) == {"results": []}
    assert call(c, DELETE, 0, {"group_id": group, "topics": [{"topic_id": topic_id, "partitions": []}]}) == {"results": []}


# -- pruning: records older than every live share partition's last snapshot are deleted ----------------


def test_records_before_the_last_snapshot_are_pruned(pruning_bootstrap: str, admin: Any) -> None:
    b = pruning_bootstrap
    _, topic_id = create_topic(b, admin)
    group = f"sg-{uuid.uuid4().hex[:6]}"
    key = SharePartitionKey(group, topic_id, 0)
    c = coordinator_ready(b, group, topic_id, 0)
    assert initialize(c, group, topic_id, 0, 0, 0)["error_code"] == NONE
    for i in range(3):
        assert write(c, group, topic_id, 0, state_epoch=0, leader_epoch=0, start=0, batches=[(i, i, ACKED, 1)])["error_code"] == NONE
    time.sleep(3 * PRUNE_INTERVAL_S)
    assert state_partition_log_start(b, key) == 0  # the only snapshot is the first record: nothing to prune
    assert initialize(c, group, topic_id, 0, 1, 3)["error_code"] == NONE  # a new snapshot at offset 4
    deadline = time.monotonic() + 30
    while state_partition_log_start(b, key) != 4 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert state_partition_log_start(b, key) == 4
    assert [t for t, _ in state_records(b, key)] == [SHARE_SNAPSHOT_RECORD_TYPE]
    assert summary_of(read_summary(c, group, topic_id, 0)) == (NONE, 1, 0, 3, 0)


# -- a cluster: only the leader of the key's state partition coordinates it ------------------------------


@pytest.fixture
def cluster_bootstrap(request: pytest.FixtureRequest, bootstrap: str) -> str:
    if request.config.getoption("--broker") not in ("kafka-cluster", "pybroker-cluster"):
        pytest.skip("a cluster scenario (--broker kafka-cluster / pybroker-cluster)")
    return bootstrap


def test_only_the_state_partition_leader_coordinates_a_share_partition(cluster_bootstrap: str, make_topic: Any) -> None:
    b = cluster_bootstrap
    topic_id = topic_id_of(b, make_topic(partitions=1))
    group = f"sg-{uuid.uuid4().hex[:6]}"
    coordinator = coordinator_ready(b, group, topic_id, 0)
    brokers = call(b, METADATA, 12, {"topics": [], "allow_auto_topic_creation": False})["brokers"]
    others = [f"{n['host']}:{n['port']}" for n in brokers if f"{n['host']}:{n['port']}" != coordinator]
    assert len(others) == len(brokers) - 1 >= 1
    for other in others:
        refused = initialize(other, group, topic_id, 0, 0, 5)
        assert (refused["error_code"], refused["error_message"]) == (
            NOT_COORDINATOR, "Unable to initialize share group state: This is not the correct coordinator."
        )  # fmt: skip
        assert read_summary(other, group, topic_id, 0)["error_code"] == NOT_COORDINATOR
    assert initialize(coordinator, group, topic_id, 0, 0, 5)["error_code"] == NONE
    state = read(coordinator, group, topic_id, 0, 1)
    assert (state["error_code"], state["state_epoch"], state["start_offset"]) == (NONE, 0, 5)
