"""Streams groups (KIP-1071, the streams rebalance protocol): the broker takes the topology from the
first member's StreamsGroupHeartbeat, creates the repartition and changelog topics it lacks and
assigns the tasks.  Raw requests check the answers field by field (join, the statuses while internal
topics are missing, their creation, the assignment, the revocation handshake, StreamsGroupDescribe,
ListGroups, leaving, and Kafka's refusals of invalid requests).  Kafka Streams itself on the streams
protocol: test_kafka_streams.py."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from compat_tests.scenarios.support import broker_launcher, is_cluster, restart_every_node
from compat_tests.scenarios.test_newest_versions import FIND_COORDINATOR, call
from compat_tests.streams.wordcount import read_topic
from pybroker.coordinator.streams import records as sr

LEDGER_COLUMN = "raw-socket"

STREAMS_GROUP_HEARTBEAT, STREAMS_GROUP_DESCRIBE = 88, 89
LIST_GROUPS, DESCRIBE_CONFIGS, DELETE_GROUPS, DESCRIBE_GROUPS, OFFSET_COMMIT = 16, 32, 42, 15, 8
INCREMENTAL_ALTER_CONFIGS, GROUP_RESOURCE, INVALID_CONFIG = 44, 32, 40
CONSUMER_GROUP_HEARTBEAT, CONSUMER_GROUP_DESCRIBE, JOIN_GROUP = 68, 69, 11
INCONSISTENT_GROUP_PROTOCOL = 23
NON_EMPTY_GROUP = 68
NONE, INVALID_REQUEST, UNKNOWN_MEMBER_ID, GROUP_ID_NOT_FOUND = 0, 42, 25, 69
FENCED_MEMBER_EPOCH, STREAMS_INVALID_TOPOLOGY = 110, 130
MISSING_SOURCE_TOPICS, MISSING_INTERNAL_TOPICS, SHUTDOWN_APPLICATION, ASSIGNMENT_DELAYED = 1, 3, 4, 5
METADATA = 3
TOPIC_RESOURCE = 2


def topic_info(name: str, configs: dict[str, str], partitions: int = 0) -> dict[str, Any]:
    return {
        "name": name,
        "partitions": partitions,
        "replication_factor": 0,
        "topic_configs": [{"key": k, "value": v} for k, v in configs.items()],
    }


def word_count_topology(
    app: str, source: str, *, changelog_partitions: int = 0, epoch: int = 0
) -> dict[str, Any]:
    """The topology Kafka Streams sends for the word count: subtopology 0 reads the input and writes
    the repartition topic; subtopology 1 reads it and keeps the counts (a changelog)."""
    repartition = f"{app}-words-repartition"
    changelog = f"{app}-counts-changelog"
    return {
        "epoch": epoch,
        "subtopologies": [
            {
                "subtopology_id": "0",
                "source_topics": [source],
                "source_topic_regex": [],
                "state_changelog_topics": [],
                "repartition_sink_topics": [repartition],
                "repartition_source_topics": [],
                "copartition_groups": [],
            },
            {
                "subtopology_id": "1",
                "source_topics": [],
                "source_topic_regex": [],
                "state_changelog_topics": [
                    topic_info(changelog, {"cleanup.policy": "compact"}, changelog_partitions)
                ],
                "repartition_sink_topics": [],
                "repartition_source_topics": [
                    topic_info(repartition, {"cleanup.policy": "delete", "retention.ms": "-1"})
                ],
                "copartition_groups": [],
            },
        ],
    }


def heartbeat(bootstrap: str, group: str, member: str, epoch: int, **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "group_id": group,
        "member_id": member,
        "member_epoch": epoch,
        "endpoint_information_epoch": 0,
        "rebalance_timeout_ms": -1,
        "topology": None,
        "active_tasks": None,
        "standby_tasks": None,
        "warmup_tasks": None,
        "process_id": None,
        "user_endpoint": None,
    }
    if epoch == 0:
        body.update(
            rebalance_timeout_ms=30000,
            active_tasks=[],
            standby_tasks=[],
            warmup_tasks=[],
            process_id=str(uuid.uuid4()),
        )
    body.update(fields)
    return group_call(bootstrap, group, STREAMS_GROUP_HEARTBEAT, 0, body)


def join_once_source_is_seen(
    bootstrap: str, group: str, member: str, topology: dict[str, Any]
) -> dict[str, Any]:
    """Join (epoch 0), again while the coordinator does not see the just created source topic yet
    (Apache Kafka's group coordinator learns of it from its metadata image a moment later)."""
    deadline = time.monotonic() + 15
    while True:
        joined = heartbeat(bootstrap, group, member, 0, topology=topology)
        if joined["error_code"] != NONE or MISSING_SOURCE_TOPICS not in statuses(joined):
            return joined
        assert time.monotonic() < deadline, f"source topic never seen: {joined}"
        time.sleep(0.2)


def coordinator_of(bootstrap: str, group: str) -> str:
    """The group's coordinator (host:port): in a cluster, not necessarily the first bootstrap broker."""
    (found,) = call(bootstrap, FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": [group]})[
        "coordinators"
    ]
    return bootstrap if found["error_code"] != NONE else f"{found['host']}:{found['port']}"


def group_call(
    bootstrap: str, group: str, api_key: int, version: int, body: dict[str, Any]
) -> dict[str, Any]:
    """A group request, sent to the group's coordinator."""
    return call(coordinator_of(bootstrap, group), api_key, version, body)


def streams_coordinator_ready(bootstrap: str, group: str, deadline_s: float = 60) -> None:
    """Until the group's coordinator answers for it (Kafka creates __consumer_offsets on the first
    FindCoordinator, then loads it)."""
    deadline = time.monotonic() + deadline_s
    while True:
        (described,) = group_call(bootstrap, group, DESCRIBE_GROUPS, 5, {"groups": [group]})["groups"]
        if described["error_code"] not in (14, 15, 16):
            return
        assert time.monotonic() < deadline, f"no coordinator for {group}: {described}"
        time.sleep(0.2)


def describe(bootstrap: str, group: str) -> dict[str, Any]:
    (described,) = group_call(
        bootstrap,
        group,
        STREAMS_GROUP_DESCRIBE,
        0,
        {"group_ids": [group], "include_authorized_operations": False},
    )["groups"]
    return described


def partitions_of(bootstrap: str, topic: str) -> int | None:
    answer = call(bootstrap, METADATA, 12, {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
    (described,) = answer["topics"]
    return None if described["error_code"] != NONE else len(described["partitions"])


def topic_configs(bootstrap: str, topic: str) -> dict[str, str]:
    answer = call(
        bootstrap,
        DESCRIBE_CONFIGS,
        4,
        {
            "resources": [
                {"resource_type": TOPIC_RESOURCE, "resource_name": topic, "configuration_keys": None}
            ],
            "include_synonyms": False,
            "include_documentation": False,
        },
    )
    (result,) = answer["results"]
    return {c["name"]: c["value"] for c in result["configs"]}


def statuses(response: dict[str, Any]) -> set[int]:
    return {s["status_code"] for s in response["status"]}


def tasks(entries: list[dict[str, Any]] | None) -> set[tuple[str, int]]:
    return {(t["subtopology_id"], p) for t in entries or () for p in t["partitions"]}


@pytest.fixture
def group(bootstrap: str) -> str:
    name = f"streams-{uuid.uuid4().hex[:8]}"
    streams_coordinator_ready(bootstrap, name)
    return name


def test_join_creates_internal_topics_and_assigns_every_task(bootstrap: str, make_topic, group: str) -> None:
    source = make_topic("-in", partitions=3)
    topology = word_count_topology(group, source)
    member = str(uuid.uuid4())
    joined = join_once_source_is_seen(bootstrap, group, member, topology)
    assert joined["error_code"] == NONE, joined
    assert joined["error_message"] is None
    assert joined["member_id"] == member
    assert joined["heartbeat_interval_ms"] == 5000
    # The group waits for its internal topics (and for the initial rebalance delay): no tasks yet.
    assert MISSING_INTERNAL_TOPICS in statuses(joined), joined["status"]
    missing = next(s for s in joined["status"] if s["status_code"] == MISSING_INTERNAL_TOPICS)
    # Kafka lists them in its HashMap's order.
    prefix, _, names = missing["status_detail"].partition(": ")
    assert (prefix, set(names.split(", "))) == (
        "Internal topics are missing",
        {f"{group}-counts-changelog", f"{group}-words-repartition"},
    )
    assert (tasks(joined["active_tasks"]), tasks(joined["standby_tasks"]), tasks(joined["warmup_tasks"])) == (
        set(),
        set(),
        set(),
    )
    # The broker creates them with the source's partition count and the topology's configs.
    deadline = time.monotonic() + 30
    while (
        partitions_of(bootstrap, f"{group}-counts-changelog") is None
        or partitions_of(bootstrap, f"{group}-words-repartition") is None
    ):
        assert time.monotonic() < deadline, "internal topics not created"
        time.sleep(0.2)
    assert partitions_of(bootstrap, f"{group}-words-repartition") == 3
    assert partitions_of(bootstrap, f"{group}-counts-changelog") == 3
    assert topic_configs(bootstrap, f"{group}-counts-changelog")["cleanup.policy"] == "compact"
    repartition_configs = topic_configs(bootstrap, f"{group}-words-repartition")
    assert (repartition_configs["cleanup.policy"], repartition_configs["retention.ms"]) == ("delete", "-1")

    # Heartbeats until every task is assigned to the only member (after the initial rebalance delay).
    epoch, owned = joined["member_epoch"], set()
    deadline = time.monotonic() + 30
    while True:
        answer = heartbeat(
            bootstrap, group, member, epoch, active_tasks=wire(owned), standby_tasks=[], warmup_tasks=[]
        )
        assert answer["error_code"] == NONE, answer
        epoch = answer["member_epoch"]
        if answer["active_tasks"] is not None:
            owned = tasks(answer["active_tasks"])
        if owned == {(s, p) for s in ("0", "1") for p in range(3)}:
            assert answer["status"] == []
            break
        assert time.monotonic() < deadline, f"not assigned: {answer}"
        time.sleep(0.5)

    described = describe(bootstrap, group)
    assert (described["error_code"], described["group_state"]) == (NONE, "Stable"), described
    assert described["assignment_epoch"] == described["group_epoch"] == epoch
    (m,) = described["members"]
    assert (m["member_id"], m["member_epoch"], m["topology_epoch"]) == (member, epoch, 0)
    assert tasks(m["assignment"]["active_tasks"]) == owned == tasks(m["target_assignment"]["active_tasks"])
    topo = described["topology"]
    assert topo["epoch"] == 0
    assert [s["subtopology_id"] for s in topo["subtopologies"]] == ["0", "1"]
    sub0, sub1 = topo["subtopologies"]
    assert (sub0["source_topics"], sub0["repartition_sink_topics"]) == (
        [source],
        [f"{group}-words-repartition"],
    )
    assert [(t["name"], t["partitions"]) for t in sub1["repartition_source_topics"]] == [
        (f"{group}-words-repartition", 3)
    ]
    assert [(t["name"], t["partitions"]) for t in sub1["state_changelog_topics"]] == [
        (f"{group}-counts-changelog", 3)
    ]

    listed = group_call(bootstrap, group, LIST_GROUPS, 5, {"states_filter": [], "types_filter": ["streams"]})
    entry = next(g for g in listed["groups"] if g["group_id"] == group)
    assert (entry["protocol_type"], entry["group_state"], entry["group_type"]) == (
        "streams",
        "Stable",
        "streams",
    )
    classic_only = group_call(
        bootstrap, group, LIST_GROUPS, 5, {"states_filter": [], "types_filter": ["classic"]}
    )
    assert group not in {g["group_id"] for g in classic_only["groups"]}

    # The group's records in __consumer_offsets, in Kafka's layout (decoded by pybroker's schemas).
    records = group_records(bootstrap, group)
    assert records[(sr.TOPOLOGY, None)]["epoch"] == 0
    stored = records[(sr.TOPOLOGY, None)]["subtopologies"]
    assert [(s["subtopology_id"], s["source_topics"]) for s in stored] == [("0", [source]), ("1", [])]
    assert records[(sr.METADATA, None)]["epoch"] == epoch
    meta = records[(sr.MEMBER_METADATA, member)]
    assert (meta["client_id"], meta["client_host"]) == ("compat", "/127.0.0.1")
    assert meta["rebalance_timeout_ms"] == 30000
    current = records[(sr.CURRENT_MEMBER_ASSIGNMENT, member)]
    assert (current["member_epoch"], current["state"]) == (epoch, 1)  # MemberState.STABLE
    assert tasks(current["active_tasks"]) == owned
    assert tasks(records[(sr.TARGET_ASSIGNMENT_MEMBER, member)]["active_tasks"]) == owned
    assert records[(sr.TARGET_ASSIGNMENT_METADATA, None)]["assignment_epoch"] == epoch

    # A group with a member cannot be deleted.
    (refused,) = group_call(bootstrap, group, DELETE_GROUPS, 2, {"groups_names": [group]})["results"]
    assert refused["error_code"] == NON_EMPTY_GROUP

    # Leaving (-1) removes the member; the group stays, empty.
    left = heartbeat(bootstrap, group, member, -1)
    assert (left["error_code"], left["member_id"], left["member_epoch"]) == (NONE, member, -1)
    described = describe(bootstrap, group)
    assert (described["group_state"], described["members"]) == ("Empty", [])
    assert (sr.CURRENT_MEMBER_ASSIGNMENT, member) not in group_records(bootstrap, group)

    # An empty streams group is deleted, its records tombstoned.
    (deleted,) = group_call(bootstrap, group, DELETE_GROUPS, 2, {"groups_names": [group]})["results"]
    assert deleted["error_code"] == NONE
    described = describe(bootstrap, group)
    assert described["error_code"] == GROUP_ID_NOT_FOUND
    assert group_records(bootstrap, group) == {}


def group_records(bootstrap: str, group: str) -> dict[tuple[int, str | None], dict[str, Any]]:
    """The group's live streams-group records in __consumer_offsets (a tombstone removes its key)."""
    partitions = partitions_of(bootstrap, "__consumer_offsets")
    assert partitions is not None
    out: dict[tuple[int, str | None], dict[str, Any]] = {}
    for key, value in read_topic(bootstrap, "__consumer_offsets", partitions, settle_s=0.3):
        decoded = sr.decode_key(key)
        if decoded is None or decoded.group_id != group:
            continue
        if value is None:
            out.pop((decoded.record_type, decoded.member_id), None)
        else:
            fields = sr.decode_value(decoded.record_type, value)
            # pybroker's schema writes exactly the bytes the broker wrote.
            assert sr.encode_value(decoded.record_type, fields) == value, (decoded, fields)
            assert sr.encode_key(decoded.record_type, decoded.group_id, decoded.member_id) == key
            out[(decoded.record_type, decoded.member_id)] = fields
    return out


def wire(owned: set[tuple[str, int]]) -> list[dict[str, Any]]:
    by_sub: dict[str, list[int]] = {}
    for s, p in sorted(owned):
        by_sub.setdefault(s, []).append(p)
    return [{"subtopology_id": s, "partitions": ps} for s, ps in by_sub.items()]


def test_missing_source_topic_status(bootstrap: str, group: str) -> None:
    missing = f"absent-{uuid.uuid4().hex[:8]}"
    joined = heartbeat(bootstrap, group, str(uuid.uuid4()), 0, topology=word_count_topology(group, missing))
    assert joined["error_code"] == NONE, joined
    assert MISSING_SOURCE_TOPICS in statuses(joined)
    detail = next(s for s in joined["status"] if s["status_code"] == MISSING_SOURCE_TOPICS)["status_detail"]
    assert detail == f"Source topics {missing} are missing."
    assert partitions_of(bootstrap, f"{group}-words-repartition") is None  # nothing created
    assert describe(bootstrap, group)["group_state"] == "NotReady"


@pytest.mark.parametrize(
    ("case", "code", "message"),
    [
        pytest.param("changelog-partitions", STREAMS_INVALID_TOPOLOGY, None, id="changelog-partitions"),
        pytest.param(
            "no-topology", INVALID_REQUEST, "Topology must be non-null when (re-)joining.", id="no-topology"
        ),
        pytest.param(
            "no-rebalance-timeout",
            INVALID_REQUEST,
            "RebalanceTimeoutMs must be provided in first request.",
            id="no-rebalance-timeout",
        ),
        pytest.param(
            "tasks-on-join",
            INVALID_REQUEST,
            "ActiveTasks must be empty when (re-)joining.",
            id="tasks-on-join",
        ),
        pytest.param(
            "regex",
            INVALID_REQUEST,
            "Regular expressions for source topics are not supported yet.",
            id="regex",
        ),
        pytest.param("empty-member-id", INVALID_REQUEST, "MemberId can't be empty.", id="empty-member-id"),
        pytest.param(
            "bad-epoch",
            INVALID_REQUEST,
            "MemberEpoch is -3, but must be greater than or equal to -2.",
            id="bad-epoch",
        ),
        pytest.param(
            "topology-later",
            INVALID_REQUEST,
            "Topology can only be provided when (re-)joining.",
            id="topology-later",
        ),
        pytest.param(
            "partial-tasks",
            INVALID_REQUEST,
            "If one task-type is non-null, all must be non-null.",
            id="partial-tasks",
        ),
        pytest.param("unknown-group", GROUP_ID_NOT_FOUND, None, id="unknown-group"),
        pytest.param(
            "unsized-repartition",
            STREAMS_INVALID_TOPOLOGY,
            "Failed to compute number of partitions for all repartition topics, because a repartition source "
            "topic is never used as a sink topic.",
            id="unsized-repartition",
        ),
    ],
)
def test_invalid_heartbeats(
    bootstrap: str, make_topic, group: str, case: str, code: int, message: str | None
) -> None:
    source = make_topic("-in")
    topology = word_count_topology(group, source)
    member = str(uuid.uuid4())
    if case == "changelog-partitions":
        answer = heartbeat(
            bootstrap, group, member, 0, topology=word_count_topology(group, source, changelog_partitions=4)
        )
        message = f"Changelog topic {group}-counts-changelog must have an undefined partition count, but it is set to 4."
    elif case == "no-topology":
        answer = heartbeat(bootstrap, group, member, 0)
    elif case == "no-rebalance-timeout":
        answer = heartbeat(bootstrap, group, member, 0, topology=topology, rebalance_timeout_ms=-1)
    elif case == "tasks-on-join":
        answer = heartbeat(
            bootstrap,
            group,
            member,
            0,
            topology=topology,
            active_tasks=[{"subtopology_id": "0", "partitions": [0]}],
        )
    elif case == "regex":
        topology["subtopologies"][0]["source_topic_regex"] = ["in-.*"]
        answer = heartbeat(bootstrap, group, member, 0, topology=topology)
    elif case == "empty-member-id":
        answer = heartbeat(bootstrap, group, "", 0, topology=topology)
    elif case == "bad-epoch":
        answer = heartbeat(bootstrap, group, member, -3)
    elif case == "topology-later":
        answer = heartbeat(bootstrap, group, member, 3, topology=topology)
    elif case == "partial-tasks":
        answer = heartbeat(bootstrap, group, member, 3, active_tasks=[])
    elif case == "unsized-repartition":
        # Sized only once the coordinator sees the source topic: wait for that on another group.
        probe = f"{group}-probe"
        join_once_source_is_seen(bootstrap, probe, member, word_count_topology(probe, source))
        topology["subtopologies"][0]["repartition_sink_topics"] = []
        answer = heartbeat(bootstrap, group, member, 0, topology=topology)
    else:
        answer = heartbeat(bootstrap, group, member, 3)
        message = f"Streams group {group} not found."
    assert (answer["error_code"], answer["error_message"]) == (code, message), answer
    # The refused request leaves no group behind.
    assert describe(bootstrap, group)["error_code"] == GROUP_ID_NOT_FOUND
    assert (answer["member_id"], answer["member_epoch"], answer["heartbeat_interval_ms"]) == ("", 0, 0)


def test_member_errors_in_a_group(bootstrap: str, make_topic, group: str) -> None:
    source = make_topic("-in")
    member = str(uuid.uuid4())
    joined = join_once_source_is_seen(bootstrap, group, member, word_count_topology(group, source))
    assert joined["error_code"] == NONE, joined
    epoch = joined["member_epoch"]
    stranger = heartbeat(
        bootstrap, group, "stranger", epoch, active_tasks=[], standby_tasks=[], warmup_tasks=[]
    )
    assert (stranger["error_code"], stranger["error_message"]) == (
        UNKNOWN_MEMBER_ID,
        f"Member stranger is not a member of group {group}.",
    )
    ahead = heartbeat(bootstrap, group, member, epoch + 5, active_tasks=[], standby_tasks=[], warmup_tasks=[])
    assert (ahead["error_code"], ahead["error_message"]) == (
        FENCED_MEMBER_EPOCH,
        f"The streams group member has a greater member epoch ({epoch + 5}) than the one known by the group "
        f"coordinator ({epoch}). The member must abandon all its partitions and rejoin.",
    )
    newer = word_count_topology(group, source, epoch=1)
    second = heartbeat(bootstrap, group, str(uuid.uuid4()), 0, topology=newer)
    # Kafka 4.3 does not update a group's topology: another one, at any newer epoch, is refused.
    assert (second["error_code"], second["error_message"]) == (
        INVALID_REQUEST,
        "Topology updates are not supported yet.",
    )


def test_describe_unknown_group(bootstrap: str, group: str) -> None:
    described = describe(bootstrap, group)
    assert (described["error_code"], described["error_message"]) == (
        GROUP_ID_NOT_FOUND,
        f"Group {group} not found.",
    )
    assert (described["group_state"], described["members"], described["topology"]) == ("", [], None)


def test_a_task_moves_only_after_its_owner_revoked_it(bootstrap: str, make_topic, group: str) -> None:
    """The revocation handshake: a second member's tasks are withheld while the first still runs them;
    the first is told to give them up (keeping its epoch), and only once a heartbeat of the first no
    longer reports them (which moves it to a new epoch) does the second get them."""
    source = make_topic("-in", partitions=3)
    every = {(s, p) for s in ("0", "1") for p in range(3)}
    a, b = str(uuid.uuid4()), str(uuid.uuid4())
    joined = join_once_source_is_seen(bootstrap, group, a, word_count_topology(group, source))
    assert joined["error_code"] == NONE, joined
    a_epoch, a_owned = heartbeat_until(
        bootstrap, group, a, joined["member_epoch"], set(), lambda owned: owned == every
    )

    b_joined = heartbeat(bootstrap, group, b, 0)  # no topology: refused
    assert b_joined["error_code"] == INVALID_REQUEST
    b_joined = heartbeat(bootstrap, group, b, 0, topology=word_count_topology(group, source))
    assert b_joined["error_code"] == NONE, b_joined
    b_epoch = b_joined["member_epoch"]
    # B's target takes some of A's tasks, but A still runs them: B gets nothing yet.
    deadline = time.monotonic() + 30
    while True:
        target_b = next(m for m in describe(bootstrap, group)["members"] if m["member_id"] == b)[
            "target_assignment"
        ]
        answer = heartbeat(bootstrap, group, b, b_epoch, active_tasks=[], standby_tasks=[], warmup_tasks=[])
        assert answer["error_code"] == NONE, answer
        assert tasks(answer["active_tasks"]) == set(), answer
        b_epoch = answer["member_epoch"]
        if tasks(target_b["active_tasks"]):
            break
        assert time.monotonic() < deadline, "no target for the second member"
        time.sleep(0.3)
    moving = tasks(target_b["active_tasks"])
    assert moving < every
    # A heartbeats: told to keep only the rest, at the same epoch (it has not revoked yet).
    revoke = heartbeat(
        bootstrap, group, a, a_epoch, active_tasks=wire(a_owned), standby_tasks=[], warmup_tasks=[]
    )
    assert revoke["error_code"] == NONE, revoke
    assert revoke["member_epoch"] == a_epoch
    assert tasks(revoke["active_tasks"]) == every - moving
    a_member = next(m for m in describe(bootstrap, group)["members"] if m["member_id"] == a)
    assert tasks(a_member["assignment"]["active_tasks"]) == every - moving
    # B still gets nothing while A has not confirmed.
    waiting = heartbeat(bootstrap, group, b, b_epoch, active_tasks=[], standby_tasks=[], warmup_tasks=[])
    assert (waiting["error_code"], tasks(waiting["active_tasks"])) == (NONE, set()), waiting
    # A confirms (reports only what it keeps): a new epoch.
    confirmed = heartbeat(
        bootstrap, group, a, a_epoch, active_tasks=wire(every - moving), standby_tasks=[], warmup_tasks=[]
    )
    assert confirmed["error_code"] == NONE, confirmed
    assert confirmed["member_epoch"] > a_epoch
    # Now B gets them.
    got = heartbeat(
        bootstrap, group, b, waiting["member_epoch"], active_tasks=[], standby_tasks=[], warmup_tasks=[]
    )
    assert got["error_code"] == NONE, got
    assert tasks(got["active_tasks"]) == moving
    assert got["member_epoch"] == confirmed["member_epoch"]
    described = describe(bootstrap, group)
    assert described["group_state"] == "Stable", described


def heartbeat_until(
    bootstrap: str, group: str, member: str, epoch: int, owned: set[tuple[str, int]], done: Any
) -> tuple[int, set[tuple[str, int]]]:
    deadline = time.monotonic() + 30
    while True:
        answer = heartbeat(
            bootstrap, group, member, epoch, active_tasks=wire(owned), standby_tasks=[], warmup_tasks=[]
        )
        assert answer["error_code"] == NONE, answer
        epoch = answer["member_epoch"]
        if answer["active_tasks"] is not None:
            owned = tasks(answer["active_tasks"])
        if done(owned):
            return epoch, owned
        assert time.monotonic() < deadline, f"not there: {answer}"
        time.sleep(0.3)


def _launcher(kind: str, workdir: Path, **extra: str) -> Any:
    """A broker of the kind under test with settings of its own (on a cluster run, 3 nodes with them)."""
    return broker_launcher(kind, workdir, {"offsets.topic.num.partitions": "1", **extra})


def test_a_streams_group_survives_a_broker_restart(
    request: pytest.FixtureRequest, admin: Any, tmp_path: Path
) -> None:
    """The group, its topology, its members with their epochs and tasks come back from
    __consumer_offsets: after a restart the member carries on at its epoch with its tasks."""
    if request.config.getoption("--bootstrap"):
        pytest.skip("restarts a broker of its own; an external --bootstrap cannot be restarted")
    launcher = _launcher(request.config.getoption("--broker"), tmp_path)
    launcher.start()
    try:
        bootstrap = launcher.bootstrap
        group, source = f"streams-{uuid.uuid4().hex[:8]}", f"in-{uuid.uuid4().hex[:8]}"
        cluster = is_cluster(launcher)
        admin.create_topic(bootstrap, source, partitions=2, replication_factor=-1 if cluster else 1)
        streams_coordinator_ready(bootstrap, group)
        member = str(uuid.uuid4())
        joined = join_once_source_is_seen(bootstrap, group, member, word_count_topology(group, source))
        assert joined["error_code"] == NONE, joined
        every = {(s, p) for s in ("0", "1") for p in range(2)}
        epoch, owned = heartbeat_until(
            bootstrap, group, member, joined["member_epoch"], set(), lambda o: o == every
        )
        before = describe(bootstrap, group)
        assert before["group_state"] == "Stable"

        if cluster:  # every node, one after the other: the group's coordinator moves at least twice
            restart_every_node(launcher, [source])
        else:
            launcher.stop()
            launcher.start()
        bootstrap = launcher.bootstrap
        streams_coordinator_ready(bootstrap, group)
        after = describe(bootstrap, group)
        # Until a heartbeat configures it again, the topology is described as the member sent it.
        changelogs = [
            t["partitions"] for s in after["topology"]["subtopologies"] for t in s["state_changelog_topics"]
        ]
        assert changelogs == [0]
        assert {**after, "topology": None} == {**before, "topology": None}
        answer = heartbeat(
            bootstrap, group, member, epoch, active_tasks=wire(owned), standby_tasks=[], warmup_tasks=[]
        )
        assert (answer["error_code"], answer["member_epoch"], answer["active_tasks"]) == (
            NONE,
            epoch,
            None,
        ), answer
        # Kafka configures the topology again only when its topics change.
        assert describe(bootstrap, group) == after
    finally:
        launcher.stop()


def test_standby_tasks_with_group_streams_num_standby_replicas(
    request: pytest.FixtureRequest, admin: Any, tmp_path: Path
) -> None:
    """With group.streams.num.standby.replicas=1 every stateful task (subtopology 1, which has a
    changelog) gets one standby, in another process than the one running it; the stateless
    subtopology 0 gets none.  A member asking to shut the application down is reported to all."""
    if request.config.getoption("--bootstrap"):
        pytest.skip("needs a broker with group.streams.num.standby.replicas=1")
    launcher = _launcher(
        request.config.getoption("--broker"), tmp_path, **{"group.streams.num.standby.replicas": "1"}
    )
    launcher.start()
    try:
        bootstrap = launcher.bootstrap
        group = f"streams-{uuid.uuid4().hex[:8]}"
        streams_coordinator_ready(bootstrap, group)
        _standby_case(bootstrap, admin, group)
    finally:
        launcher.stop()


def test_standby_tasks_with_the_group_config(bootstrap: str, admin: Any, group: str) -> None:
    """The same with the group config streams.num.standby.replicas=1 (IncrementalAlterConfigs on the
    group), which Kafka checks against group.streams.max.standby.replicas; the group config
    streams.heartbeat.interval.ms is the interval the members are given."""
    too_many = alter_group_configs(bootstrap, group, {"streams.num.standby.replicas": "3"})
    assert too_many["error_code"] == INVALID_CONFIG, too_many
    bad_interval = alter_group_configs(bootstrap, group, {"streams.heartbeat.interval.ms": "1"})
    assert bad_interval["error_code"] == INVALID_CONFIG, bad_interval
    altered = alter_group_configs(
        bootstrap, group, {"streams.num.standby.replicas": "1", "streams.heartbeat.interval.ms": "6000"}
    )
    assert altered["error_code"] == NONE, altered
    _standby_case(bootstrap, admin, group, heartbeat_interval_ms=6000)


def alter_group_configs(bootstrap: str, group: str, configs: dict[str, str]) -> dict[str, Any]:
    answer = group_call(
        bootstrap,
        group,
        INCREMENTAL_ALTER_CONFIGS,
        1,
        {
            "resources": [
                {
                    "resource_type": GROUP_RESOURCE,
                    "resource_name": group,
                    "configs": [{"name": k, "config_operation": 0, "value": v} for k, v in configs.items()],
                }
            ],
            "validate_only": False,
        },
    )
    (result,) = answer["responses"]
    return result


def _standby_case(bootstrap: str, admin: Any, group: str, heartbeat_interval_ms: int = 5000) -> None:
    source = f"in-{uuid.uuid4().hex[:8]}"
    admin.create_topic(bootstrap, source, partitions=2, replication_factor=1)
    topology = word_count_topology(group, source)
    a, b = str(uuid.uuid4()), str(uuid.uuid4())
    joined_a = join_once_source_is_seen(bootstrap, group, a, topology)
    joined_b = heartbeat(bootstrap, group, b, 0, topology=topology)
    assert joined_a["error_code"] == joined_b["error_code"] == NONE
    epochs = {a: joined_a["member_epoch"], b: joined_b["member_epoch"]}
    owned: dict[str, tuple[set, set]] = {a: (set(), set()), b: (set(), set())}
    every = {(s, p) for s in ("0", "1") for p in range(2)}
    deadline = time.monotonic() + 60
    while True:
        for m in (a, b):
            active, standby = owned[m]
            answer = heartbeat(
                bootstrap, group, m, epochs[m], active_tasks=wire(active), standby_tasks=wire(standby),
                warmup_tasks=[],
            )  # fmt: skip
            assert answer["error_code"] == NONE, answer
            assert answer["heartbeat_interval_ms"] == heartbeat_interval_ms
            epochs[m] = answer["member_epoch"]
            if answer["active_tasks"] is not None:
                owned[m] = (tasks(answer["active_tasks"]), tasks(answer["standby_tasks"]))
        described = describe(bootstrap, group)
        if (
            described["group_state"] == "Stable"
            and owned[a][0] | owned[b][0] == every
            and owned[a][1] | owned[b][1]
        ):
            break
        assert time.monotonic() < deadline, f"no standbys: {described}"
        time.sleep(0.5)
    # One standby per stateful task, never where it runs actively; none for the stateless subtopology.
    assert sorted([*owned[a][1], *owned[b][1]]) == [("1", 0), ("1", 1)]
    assert not owned[a][0] & owned[a][1] and not owned[b][0] & owned[b][1]
    assert not owned[a][0] & owned[b][0]

    # A member asks for the application to shut down: every member hears of it.
    asked = heartbeat(
        bootstrap, group, a, epochs[a], active_tasks=wire(owned[a][0]), standby_tasks=wire(owned[a][1]),
        warmup_tasks=[], shutdown_application=True,
    )  # fmt: skip
    assert asked["error_code"] == NONE, asked
    other = heartbeat(
        bootstrap, group, b, epochs[b], active_tasks=wire(owned[b][0]), standby_tasks=wire(owned[b][1]),
        warmup_tasks=[],
    )  # fmt: skip
    shutdown = [s for s in other["status"] if s["status_code"] == SHUTDOWN_APPLICATION]
    assert [s["status_detail"] for s in shutdown] == [
        f"Streams group member {a} encountered a fatal error and requested a shutdown for the entire application."
    ]


def test_other_group_apis_on_a_streams_group(bootstrap: str, make_topic, group: str) -> None:
    """A streams group is not a classic or a consumer group: DescribeGroups, ConsumerGroupDescribe and
    ConsumerGroupHeartbeat say so, JoinGroup is refused, and OffsetCommit outside the group is refused
    while it has members."""
    source = make_topic("-in")
    member = str(uuid.uuid4())
    joined = join_once_source_is_seen(bootstrap, group, member, word_count_topology(group, source))
    assert joined["error_code"] == NONE, joined
    (classic,) = group_call(
        bootstrap, group, DESCRIBE_GROUPS, 6, {"groups": [group], "include_authorized_operations": False}
    )["groups"]
    assert (classic["error_code"], classic["error_message"]) == (
        GROUP_ID_NOT_FOUND,
        f"Group {group} is not a classic group.",
    )
    (consumer,) = group_call(
        bootstrap,
        group,
        CONSUMER_GROUP_DESCRIBE,
        1,
        {"group_ids": [group], "include_authorized_operations": False},
    )["groups"]
    assert (consumer["error_code"], consumer["error_message"]) == (
        GROUP_ID_NOT_FOUND,
        f"Group {group} is not a consumer group.",
    )
    joining = group_call(
        bootstrap,
        group,
        CONSUMER_GROUP_HEARTBEAT,
        1,
        {
            "group_id": group,
            "member_id": str(uuid.uuid4()),
            "member_epoch": 0,
            "instance_id": None,
            "rack_id": None,
            "rebalance_timeout_ms": 30000,
            "subscribed_topic_names": [source],
            "subscribed_topic_regex": None,
            "server_assignor": None,
            "topic_partitions": [],
        },
    )
    assert (joining["error_code"], joining["error_message"]) == (
        GROUP_ID_NOT_FOUND,
        f"Group {group} is not a consumer group.",
    )
    commit = group_call(
        bootstrap,
        group,
        OFFSET_COMMIT,
        9,
        {
            "group_id": group,
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "group_instance_id": None,
            "topics": [
                {
                    "name": source,
                    "partitions": [
                        {
                            "partition_index": 0,
                            "committed_offset": 1,
                            "committed_leader_epoch": -1,
                            "committed_metadata": "",
                        }
                    ],
                }
            ],
        },
    )
    assert commit["topics"][0]["partitions"][0]["error_code"] == UNKNOWN_MEMBER_ID
    joined_classic = group_call(
        bootstrap,
        group,
        JOIN_GROUP,
        9,
        {
            "group_id": group,
            "session_timeout_ms": 10000,
            "rebalance_timeout_ms": 10000,
            "member_id": "",
            "group_instance_id": None,
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b""}],
            "reason": None,
        },
    )
    assert joined_classic["error_code"] == INCONSISTENT_GROUP_PROTOCOL, joined_classic
