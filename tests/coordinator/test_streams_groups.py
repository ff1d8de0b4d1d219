"""KIP-1071 streams groups in the coordinator, on a fake clock and an in-memory store: the sticky task
assignor (active and standby tasks), the replay of the streams-group records of __consumer_offsets,
session timeouts, and the records' layout.  The wire behaviour against Apache Kafka is checked by
compat_tests/scenarios/test_streams_groups.py and test_kafka_streams.py."""

from __future__ import annotations

import uuid
from typing import Any

from pybroker.coordinator.clock import FakeClock
from pybroker.coordinator.consumer_group import TopicMetadata
from pybroker.coordinator.coordinator import CoordinatorConfig, GroupCoordinator, MemoryStore
from pybroker.coordinator.streams import records as sr
from pybroker.coordinator.streams.assignor import AssignorMember, assign
from pybroker.coordinator.streams.manager import StreamsGroupConfig
from pybroker.coordinator.streams.topology import java_hash_map_order, java_string_hash
from pybroker.protocol.errors import ErrorCode

SESSION = 45_000


class Topics:
    def __init__(self, **partitions: int) -> None:
        self.meta = {
            name: TopicMetadata(uuid.UUID(int=i + 1), name, n)
            for i, (name, n) in enumerate(partitions.items())
        }

    def topic(self, name: str) -> TopicMetadata | None:
        return self.meta.get(name)

    def names(self) -> list[str]:
        return list(self.meta)


def make(
    topics: Topics, store: MemoryStore | None = None, standbys: int = 0
) -> tuple[GroupCoordinator, FakeClock]:
    clock = FakeClock()
    cfg = CoordinatorConfig(
        streams=StreamsGroupConfig(
            session_timeout_ms=SESSION,
            num_standby_replicas=standbys,
            initial_rebalance_delay_ms=0,
            assignment_interval_ms=0,
        )
    )
    return GroupCoordinator(clock=clock, store=store or MemoryStore(), config=cfg, topics=topics), clock


def topology() -> dict[str, Any]:
    info = {"name": "app-counts-changelog", "partitions": 0, "replication_factor": 0, "topic_configs": []}
    rep = {"name": "app-words-repartition", "partitions": 0, "replication_factor": 0, "topic_configs": []}
    sub = {"source_topic_regex": [], "copartition_groups": []}
    return {
        "epoch": 0,
        "subtopologies": [
            {**sub, "subtopology_id": "0", "source_topics": ["in"], "state_changelog_topics": [],
             "repartition_sink_topics": ["app-words-repartition"], "repartition_source_topics": []},
            {**sub, "subtopology_id": "1", "source_topics": [], "state_changelog_topics": [info],
             "repartition_sink_topics": [], "repartition_source_topics": [rep]},
        ],
    }  # fmt: skip


def hb(
    c: GroupCoordinator, member: str, epoch: int, owned: set | None = None, process: str | None = None
) -> dict:
    req: dict[str, Any] = {
        "group_id": "app",
        "member_id": member,
        "member_epoch": epoch,
        "endpoint_information_epoch": 0,
    }
    if epoch == 0:
        req.update(rebalance_timeout_ms=30_000, topology=topology(), process_id=process or member)
        req.update(active_tasks=[], standby_tasks=[], warmup_tasks=[])
    elif owned is not None:
        req.update(active_tasks=_wire(owned), standby_tasks=[], warmup_tasks=[])
    response, _, _ = c.streams.heartbeat(req, "client", "/127.0.0.1")
    assert response["error_code"] == ErrorCode.NONE, response
    return response


def _wire(tasks: set[tuple[str, int]]) -> list[dict[str, Any]]:
    by: dict[str, list[int]] = {}
    for s, p in sorted(tasks):
        by.setdefault(s, []).append(p)
    return [{"subtopology_id": s, "partitions": ps} for s, ps in by.items()]


def tasks(entries: list[dict] | None) -> set[tuple[str, int]]:
    return {(t["subtopology_id"], p) for t in entries or () for p in t["partitions"]}


EVERY = {(s, p) for s in ("0", "1") for p in range(4)}
ALL_TOPICS = {"in": 4, "app-words-repartition": 4, "app-counts-changelog": 4}


def settle(c: GroupCoordinator, epochs: dict[str, int], owned: dict[str, set]) -> None:
    """Heartbeats from every member, each reporting what it owns, until nothing changes."""
    for _ in range(10):
        changed = False
        for m in list(epochs):
            r = hb(c, m, epochs[m], owned[m])
            if r["member_epoch"] != epochs[m] or (
                r.get("active_tasks") is not None and tasks(r["active_tasks"]) != owned[m]
            ):
                changed = True
            epochs[m] = r["member_epoch"]
            if r.get("active_tasks") is not None:
                owned[m] = tasks(r["active_tasks"])
        if not changed:
            return
    raise AssertionError("no stable assignment")


# -- the assignor ------------------------------------------------------------------------------------
def test_sticky_assignor_balances_and_keeps_previous_owners() -> None:
    members = [
        AssignorMember("a", "p1", frozenset({("0", 0), ("0", 1), ("0", 2), ("0", 3)})),
        AssignorMember("b", "p2"),
    ]
    out = assign(members, {"0": 4}, set(), 0)
    assert len(out["a"].active) == len(out["b"].active) == 2
    assert out["a"].active <= {("0", 0), ("0", 1), ("0", 2), ("0", 3)}  # a keeps half of what it had


def test_standby_tasks_go_to_another_process_than_the_active() -> None:
    members = [AssignorMember("a", "p1"), AssignorMember("b", "p2"), AssignorMember("c", "p2")]
    out = assign(members, {"0": 3, "1": 3}, {"1"}, 1)
    active_process = {t: {"a": "p1", "b": "p2", "c": "p2"}[m] for m, a in out.items() for t in a.active}
    standbys = [(t, {"a": "p1", "b": "p2", "c": "p2"}[m]) for m, a in out.items() for t in a.standby]
    # One standby per stateful task (subtopology 1 only), never in the process running it actively.
    assert sorted(t for t, _ in standbys) == [("1", 0), ("1", 1), ("1", 2)]
    assert all(active_process[t] != p for t, p in standbys)
    # With a single process there is nowhere to put a standby.
    lone = assign([AssignorMember("a", "p1"), AssignorMember("b", "p1")], {"1": 2}, {"1"}, 1)
    assert all(not a.standby for a in lone.values())


def test_standbys_reach_the_members_through_heartbeats() -> None:
    c, _ = make(Topics(**ALL_TOPICS), standbys=1)
    a = hb(c, "a", 0)
    b = hb(c, "b", 0)
    epochs, owned = {"a": a["member_epoch"], "b": b["member_epoch"]}, {"a": set(), "b": set()}
    settle(c, epochs, owned)
    described = c.streams.describe("app", False, 0)
    standby = {m["member_id"]: tasks(m["assignment"]["standby_tasks"]) for m in described["members"]}
    active = {m["member_id"]: tasks(m["assignment"]["active_tasks"]) for m in described["members"]}
    assert active["a"] | active["b"] == EVERY and not active["a"] & active["b"]
    assert standby["a"] | standby["b"] == {("1", p) for p in range(4)}
    assert not standby["a"] & active["a"] and not standby["b"] & active["b"]


# -- records and replay --------------------------------------------------------------------------------
def test_a_restarted_coordinator_rebuilds_the_group_from_its_records() -> None:
    store = MemoryStore()
    topics = Topics(**ALL_TOPICS)
    c, _ = make(topics, store)
    a, b = hb(c, "a", 0), hb(c, "b", 0)
    epochs, owned = {"a": a["member_epoch"], "b": b["member_epoch"]}, {"a": set(), "b": set()}
    settle(c, epochs, owned)
    before = c.streams.describe("app", False, 0)
    assert before["group_state"] == "Stable"

    again, _ = make(topics, store)
    again.load(store.entries)
    after = again.streams.describe("app", False, 0)
    # As Kafka: until a heartbeat configures it again, the topology is described as sent.
    assert after["topology"] == c.streams.groups["app"].topology.described()
    assert {**after, "topology": None} == {**before, "topology": None}
    # The members carry on at their epochs; a stranger is still unknown.
    r = hb(again, "a", epochs["a"], owned["a"])
    assert r["member_epoch"] == epochs["a"]
    # Kafka configures the topology again only when its topics change.
    assert again.streams.describe("app", False, 0) == after
    stranger, _, _ = again.streams.heartbeat(
        {"group_id": "app", "member_id": "x", "member_epoch": 3, "endpoint_information_epoch": 0}, "c", "/h"
    )
    assert stranger["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID

    # A member leaves, the group is deleted: replay finds nothing.
    hb(again, "a", -1)
    hb(again, "b", -1)
    results, _ = again.delete_groups(["app"])
    assert results == [("app", ErrorCode.NONE)]
    third, _ = make(topics)
    third.load(store.entries)
    assert "app" not in third.streams.groups and "app" not in third.groups


def test_a_silent_member_is_fenced_after_the_session_timeout() -> None:
    c, clock = make(Topics(**ALL_TOPICS))
    a, b = hb(c, "a", 0), hb(c, "b", 0)
    epochs, owned = {"a": a["member_epoch"], "b": b["member_epoch"]}, {"a": set(), "b": set()}
    settle(c, epochs, owned)
    for _ in range(10):  # b keeps heartbeating, a is silent
        clock.advance(SESSION // 9)
        r = hb(c, "b", epochs["b"], owned["b"])
        epochs["b"] = r["member_epoch"]
        if r.get("active_tasks") is not None:
            owned["b"] = tasks(r["active_tasks"])
    assert set(c.streams.groups["app"].members) == {"b"}
    assert owned["b"] == EVERY


def test_member_record_layout_is_kafkas() -> None:
    # StreamsGroupMemberMetadataKey: record type 19, then group id and member id as int16-prefixed strings.
    assert sr.encode_key(sr.MEMBER_METADATA, "g", "m") == bytes.fromhex("001300016700016d")
    value = sr.encode_value(sr.TARGET_ASSIGNMENT_METADATA, {"assignment_epoch": 3, "assignment_timestamp": 7})
    # The timestamp is tagged field 0 (as Kafka 4.3.1 writes it: one tagged field, tag 0, 8 bytes).
    assert value == bytes.fromhex("0000000000030100080000000000000007")


def test_java_hash_map_order() -> None:
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -(2**31)
    # Two names in one bucket keep their insertion order; the table grows past 12 entries.
    names = [f"t{i}" for i in range(20)]
    assert sorted(java_hash_map_order(names)) == sorted(names)
