"""KIP-848 consumer groups without a broker: assignors, reconciliation, heartbeat errors, session and
rebalance timeouts on a fake clock, and replay of the records written to __consumer_offsets."""

from __future__ import annotations

import asyncio
import json
import uuid
from itertools import combinations
from pathlib import Path
from typing import Any

import pytest

from pybroker.coordinator import consumer_records as cr
from pybroker.coordinator import records
from pybroker.coordinator.assignors import MemberSpec, range_, uniform
from pybroker.coordinator.clock import FakeClock
from pybroker.coordinator.consumer_coordinator import ConsumerGroupConfig, HeartbeatRequest
from pybroker.coordinator.consumer_group import ConsumerGroupState, TopicMetadata
from pybroker.coordinator.coordinator import CoordinatorConfig, GroupCoordinator, MemoryStore
from pybroker.coordinator.reconciliation import MemberAssignmentState, MemberState, next_state
from pybroker.protocol.errors import ErrorCode

SESSION = 45_000
HEARTBEAT = 5_000
REBALANCE = 30_000
T1, T2 = uuid.UUID(int=1), uuid.UUID(int=2)


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


def make(**partitions: int) -> tuple[GroupCoordinator, FakeClock, MemoryStore, Topics]:
    clock, store, topics = FakeClock(), MemoryStore(), Topics(**(partitions or {"t": 6}))
    cfg = CoordinatorConfig(
        consumer=ConsumerGroupConfig(heartbeat_interval_ms=HEARTBEAT, session_timeout_ms=SESSION)
    )
    return GroupCoordinator(clock=clock, store=store, config=cfg, topics=topics), clock, store, topics


def hb(c: GroupCoordinator, member_id: str, epoch: int, **kw: Any) -> dict[str, Any]:
    defaults: dict[str, Any] = {"group_id": "g", "version": 1}
    if epoch == 0:
        defaults.update(rebalance_timeout_ms=REBALANCE, subscribed_topic_names=["t"], owned={})
    defaults.update(kw)
    response, _ = c.consumer.heartbeat(HeartbeatRequest(member_id=member_id, member_epoch=epoch, **defaults))
    return response


def owned(response: dict[str, Any]) -> cr.Assignment:
    return cr.assignment_from_wire(response["assignment"]["topic_partitions"])


def flat(a: cr.Assignment) -> set[tuple[uuid.UUID, int]]:
    return {(t, p) for t, ps in a.items() for p in ps}


# -- assignors --------------------------------------------------------------------------------------
def test_uniform_balances_and_is_sticky() -> None:
    specs = {m: MemberSpec(frozenset({T1, T2})) for m in "abc"}
    first = uniform(specs, {T1: 4, T2: 3})
    sizes = sorted(len(flat(a)) for a in first.values())
    assert sizes == [2, 2, 3]
    assert set().union(*(flat(a) for a in first.values())) == {(T1, p) for p in range(4)} | {
        (T2, p) for p in range(3)
    }
    # A fourth member joins: it takes partitions, and nobody else loses more than balance requires.
    specs2 = {m: MemberSpec(frozenset({T1, T2}), first.get(m, {})) for m in "abcd"}
    second = uniform(specs2, {T1: 4, T2: 3})
    assert sorted(len(flat(a)) for a in second.values()) == [1, 2, 2, 2]
    for m in "abc":
        assert len(flat(first[m]) - flat(second[m])) <= 1, "more partitions moved than needed"
    # Nothing changes: nothing moves.
    specs3 = {m: MemberSpec(frozenset({T1, T2}), second[m]) for m in "abcd"}
    assert uniform(specs3, {T1: 4, T2: 3}) == second


def test_uniform_with_different_subscriptions_only_gives_subscribed_topics() -> None:
    specs = {
        "a": MemberSpec(frozenset({T1})),
        "b": MemberSpec(frozenset({T1, T2})),
        "c": MemberSpec(frozenset({T2})),
    }
    out = uniform(specs, {T1: 4, T2: 4})
    assert all(t == T1 for t, _ in flat(out["a"]))
    assert all(t == T2 for t, _ in flat(out["c"]))
    sizes = [len(flat(a)) for a in out.values()]
    assert max(sizes) - min(sizes) <= 1, sizes
    assert len(set().union(*(flat(a) for a in out.values()))) == 8


def test_range_co_partitions_topics() -> None:
    specs = {m: MemberSpec(frozenset({T1, T2})) for m in ("m1", "m2", "m3")}
    out = range_(specs, {T1: 7, T2: 7})
    assert out["m1"] == {T1: (0, 1, 2), T2: (0, 1, 2)}
    assert out["m2"] == {T1: (3, 4), T2: (3, 4)}
    assert out["m3"] == {T1: (5, 6), T2: (5, 6)}


# -- reconciliation ---------------------------------------------------------------------------------
def test_reconciliation_revokes_before_assigning() -> None:
    epochs: dict[tuple[uuid.UUID, int], int] = {(T1, 0): 1, (T1, 1): 1}
    a = MemberAssignmentState(MemberState.STABLE, 1, 0, {T1: (0, 1)})
    # New target at epoch 2 moves partition 1 away from a.
    a2 = next_state(a, 2, {T1: (0,)}, lambda t, p: epochs.get((t, p), -1), {T1: (0, 1)})
    assert a2.state is MemberState.UNREVOKED_PARTITIONS and a2.member_epoch == 1
    assert a2.assigned == {T1: (0,)} and a2.pending_revocation == {T1: (1,)}
    # The client still reports partition 1: nothing moves.
    assert next_state(a2, 2, {T1: (0,)}, lambda t, p: epochs.get((t, p), -1), {T1: (0, 1)}) == a2
    # The new owner cannot have it while a still owns it: unreleased.
    b = MemberAssignmentState(MemberState.STABLE, 1, 0, {})
    b2 = next_state(b, 2, {T1: (1,)}, lambda t, p: epochs.get((t, p), -1), {})
    assert b2.state is MemberState.UNRELEASED_PARTITIONS and b2.assigned == {} and b2.member_epoch == 2
    # a acknowledges: it moves to epoch 2, and then b gets the partition.
    a3 = next_state(a2, 2, {T1: (0,)}, lambda t, p: epochs.get((t, p), -1), {T1: (0,)})
    assert a3 == MemberAssignmentState(MemberState.STABLE, 2, 1, {T1: (0,)})
    del epochs[(T1, 1)]
    b3 = next_state(b2, 2, {T1: (1,)}, lambda t, p: epochs.get((t, p), -1), {})
    assert b3.state is MemberState.STABLE and b3.assigned == {T1: (1,)}


def test_three_members_never_own_a_partition_twice() -> None:
    c, _, _, _ = make(t=6)
    ids = ["m1", "m2", "m3"]
    state: dict[str, tuple[int, cr.Assignment]] = {}
    for m in ids:
        r = hb(c, m, 0)
        assert r["error_code"] == ErrorCode.NONE
        state[m] = (r["member_epoch"], owned(r))
    for _ in range(6):  # every member heartbeats, reporting what it owns, until all are stable
        for m in ids:
            epoch, mine = state[m]
            r = hb(c, m, epoch, owned=mine)
            assert r["error_code"] == ErrorCode.NONE, r
            if r["assignment"] is not None:
                mine = owned(r)
            state[m] = (r["member_epoch"], mine)
            for x, y in combinations(ids, 2):
                assert not flat(state[x][1]) & flat(state[y][1]), "a partition owned by two members"
    group = c.consumer.groups["g"]
    assert group.state is ConsumerGroupState.STABLE
    assert sorted(len(flat(a)) for _, a in state.values()) == [2, 2, 2]
    assert {e for e, _ in state.values()} == {group.group_epoch} == {3}


# -- heartbeat errors -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("member_id", "epoch", "extra", "error"),
    [
        ("", 0, {}, ErrorCode.INVALID_REQUEST),  # v1: the client generates its member id
        ("m", 0, {"rebalance_timeout_ms": -1}, ErrorCode.INVALID_REQUEST),
        ("m", 0, {"owned": {T1: (0,)}}, ErrorCode.INVALID_REQUEST),
        ("m", 0, {"subscribed_topic_names": None}, ErrorCode.INVALID_REQUEST),
        ("m", -2, {}, ErrorCode.INVALID_REQUEST),  # a temporary leave needs an instance id
        ("m", -3, {}, ErrorCode.INVALID_REQUEST),
        ("m", 0, {"group_id": ""}, ErrorCode.INVALID_REQUEST),
        ("m", 0, {"server_assignor": "sticky"}, ErrorCode.UNSUPPORTED_ASSIGNOR),
        (
            "m",
            0,
            {"subscribed_topic_regex": "(", "subscribed_topic_names": None},
            ErrorCode.INVALID_REGULAR_EXPRESSION,
        ),
        ("m", 1, {}, ErrorCode.GROUP_ID_NOT_FOUND),
        ("m", -1, {}, ErrorCode.GROUP_ID_NOT_FOUND),
    ],
)
def test_invalid_heartbeats(member_id: str, epoch: int, extra: dict[str, Any], error: ErrorCode) -> None:
    c, *_ = make()
    assert hb(c, member_id, epoch, **extra)["error_code"] == error


def test_v0_member_gets_a_generated_id() -> None:
    c, *_ = make()
    r = hb(c, "", 0, version=0)
    assert r["error_code"] == ErrorCode.NONE and len(r["member_id"]) == 22


def test_epoch_errors_and_lost_response() -> None:
    c, *_ = make(t=2, u=2)
    r = hb(c, "m", 0)
    assert r["member_epoch"] == 1
    assert hb(c, "x", 1)["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID
    assert hb(c, "m", 2, owned=owned(r))["error_code"] == ErrorCode.FENCED_MEMBER_EPOCH
    # n (another topic) bumps the group epoch; m moves to epoch 2 keeping its partitions.
    hb(c, "n", 0, subscribed_topic_names=["u"])
    r2 = hb(c, "m", 1, owned=owned(r))
    assert (r2["error_code"], r2["member_epoch"], r2["assignment"]) == (ErrorCode.NONE, 2, None)
    # m never got that answer and retries with epoch 1 and (a subset of) its partitions: accepted.
    assert hb(c, "m", 1, owned={T1: (0,)})["member_epoch"] == 2
    # With a partition it was never given, or an epoch older than the previous one: fenced.
    assert hb(c, "m", 1, owned={T2: (0,)})["error_code"] == ErrorCode.FENCED_MEMBER_EPOCH
    assert hb(c, "m", 1, owned=None)["error_code"] == ErrorCode.FENCED_MEMBER_EPOCH  # no partitions sent


def test_static_member_errors_and_temporary_leave() -> None:
    c, clock, _, _ = make(t=2)
    r = hb(c, "a", 0, instance_id="i1")
    assert hb(c, "b", 0, instance_id="i1")["error_code"] == ErrorCode.UNRELEASED_INSTANCE_ID
    assert hb(c, "b", 1, instance_id="i1")["error_code"] == ErrorCode.FENCED_INSTANCE_ID
    assert hb(c, "b", 1, instance_id="i9")["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID
    # -2: leaves for a while, keeps its partitions; a new process with the same instance id takes over.
    left = hb(c, "a", -2, instance_id="i1")
    assert left["error_code"] == ErrorCode.NONE and left["member_epoch"] == -2
    epoch_before = c.consumer.groups["g"].group_epoch
    back = hb(c, "a2", 0, instance_id="i1")
    assert back["error_code"] == ErrorCode.NONE
    assert owned(back) == owned(r) and back["member_epoch"] == r["member_epoch"]
    assert c.consumer.groups["g"].group_epoch == epoch_before, "a returning static member must not rebalance"
    assert set(c.consumer.groups["g"].members) == {"a2"}


def test_leave_removes_member_and_bumps_epoch() -> None:
    c, *_ = make(t=2)
    hb(c, "a", 0)
    hb(c, "b", 0)
    epoch = c.consumer.groups["g"].group_epoch
    r = hb(c, "a", -1)
    assert (r["error_code"], r["member_epoch"]) == (ErrorCode.NONE, -1)
    assert c.consumer.groups["g"].group_epoch == epoch + 1
    assert hb(c, "a", -1)["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID


# -- timeouts on the fake clock ---------------------------------------------------------------------
def test_session_timeout_evicts_silent_member() -> None:
    c, clock, _, _ = make(t=4)
    a = hb(c, "a", 0)
    b = hb(c, "b", 0)
    for _ in range(3):  # a keeps heartbeating, b goes silent
        clock.advance(HEARTBEAT)
        a = hb(c, "a", a["member_epoch"], owned=owned(a) if a["assignment"] else None)
    assert "b" in c.consumer.groups["g"].members
    clock.advance(SESSION - 3 * HEARTBEAT)
    assert "b" not in c.consumer.groups["g"].members, "b's session expired"
    assert "a" in c.consumer.groups["g"].members
    del b


def test_rebalance_timeout_fences_member_that_does_not_revoke() -> None:
    c, clock, _, _ = make(t=2)
    a = hb(c, "a", 0)
    assert len(flat(owned(a))) == 2
    hb(c, "b", 0)  # b's arrival means a must give one partition up
    a2 = hb(c, "a", a["member_epoch"], owned=owned(a))
    assert c.consumer.groups["g"].members["a"].state is MemberState.UNREVOKED_PARTITIONS
    assert len(flat(owned(a2))) == 1
    for _ in range(REBALANCE // HEARTBEAT - 1):  # a keeps heartbeating but never revokes
        clock.advance(HEARTBEAT)
        hb(c, "a", a2["member_epoch"], owned=owned(a))
        hb(c, "b", c.consumer.groups["g"].members["b"].member_epoch, owned={})
    assert "a" in c.consumer.groups["g"].members
    clock.advance(HEARTBEAT)
    assert "a" not in c.consumer.groups["g"].members, "fenced after its rebalance timeout"


# -- offsets ----------------------------------------------------------------------------------------
def test_offset_commit_and_fetch_check_member_epoch() -> None:
    c, *_ = make(t=1)
    r = hb(c, "m", 0)
    commit = dict(
        group_id="g",
        member_id="m",
        group_instance_id=None,
        retention_time_ms=-1,
        offsets=[("t", 0, 5, -1, "")],
    )
    errors, _ = c.commit_offsets(generation_id=r["member_epoch"] + 1, api_version=9, **commit)
    assert errors == {("t", 0): ErrorCode.STALE_MEMBER_EPOCH}
    errors, _ = c.commit_offsets(generation_id=r["member_epoch"], api_version=8, **commit)
    assert errors == {("t", 0): ErrorCode.UNSUPPORTED_VERSION}
    errors, _ = c.commit_offsets(generation_id=-1, api_version=9, **{**commit, "member_id": ""})
    assert errors == {("t", 0): ErrorCode.UNKNOWN_MEMBER_ID}, "a group with members refuses anonymous commits"
    errors, _ = c.commit_offsets(generation_id=r["member_epoch"], api_version=9, **commit)
    assert errors == {("t", 0): ErrorCode.NONE}
    assert c.fetch_offsets("g", [("t", [0])], "m", r["member_epoch"] + 1)[0] == ErrorCode.STALE_MEMBER_EPOCH
    assert c.fetch_offsets("g", [("t", [0])], "zz", 1)[0] == ErrorCode.UNKNOWN_MEMBER_ID
    error, found = c.fetch_offsets("g", [("t", [0])])
    assert error == ErrorCode.NONE and found[0][1][0][1].offset == 5


def test_offset_commit_with_an_older_epoch_is_checked_per_partition() -> None:
    """KIP-1251: an older epoch may still commit what the member was assigned at that epoch."""
    c, *_ = make(t=2, u=2)
    m = hb(c, "m", 0)  # epoch 1: t-0, t-1
    hb(c, "n", 0, subscribed_topic_names=["u"])  # the group moves to epoch 2
    r = hb(c, "m", 1, owned=owned(m), subscribed_topic_names=["t", "u"])  # m also wants u now
    assert r["member_epoch"] >= 2
    commit = dict(group_id="g", member_id="m", group_instance_id=None, retention_time_ms=-1, api_version=9)
    errors, _ = c.commit_offsets(
        generation_id=1, offsets=[("t", 0, 1, -1, ""), ("u", 0, 1, -1, "")], **commit
    )
    assert errors[("t", 0)] == ErrorCode.NONE, "assigned at epoch 1: an epoch-1 commit is accepted"
    assert errors[("u", 0)] == ErrorCode.STALE_MEMBER_EPOCH, "not assigned to m at epoch 1"
    errors, _ = c.commit_offsets(generation_id=r["member_epoch"] + 1, offsets=[("t", 0, 1, -1, "")], **commit)
    assert errors[("t", 0)] == ErrorCode.STALE_MEMBER_EPOCH


def test_group_types_do_not_mix() -> None:
    c, *_ = make(t=1)
    hb(c, "m", 0)
    fut = asyncio.run(_join(c))
    assert fut["error_code"] == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert c.list_groups(types=["consumer"])[0]["group_type"] == "consumer"
    assert c.list_groups(types=["classic"]) == []
    assert c.describe_group("g")["group_state"] == "Dead"  # DescribeGroups < v6 on a consumer group
    assert c.delete_groups(["g"])[0] == [("g", ErrorCode.NON_EMPTY_GROUP)]
    hb(c, "m", -1)
    assert c.delete_groups(["g"])[0] == [("g", ErrorCode.NONE)]
    assert "g" not in c.consumer.groups


async def _join(c: GroupCoordinator) -> dict[str, Any]:
    fut = c.join_group(
        group_id="g", member_id="", group_instance_id=None, client_id="c", client_host="/h",
        session_timeout_ms=10_000, rebalance_timeout_ms=10_000, protocol_type="consumer",
        protocols=[("range", b"")], require_known_member_id=True,
    )  # fmt: skip
    return await fut


# -- replay -----------------------------------------------------------------------------------------
def test_replay_restores_group_members_and_assignments() -> None:
    c, clock, store, topics = make(t=4)
    a = hb(c, "a", 0, instance_id="ia", client_id="ca")
    b = hb(c, "b", 0)
    a = hb(c, "a", a["member_epoch"], instance_id="ia", owned=owned(a))
    a = hb(c, "a", a["member_epoch"], instance_id="ia", owned=owned(a) if a["assignment"] else None)
    c.commit_offsets(
        group_id="g", generation_id=b["member_epoch"], member_id="b", group_instance_id=None,
        retention_time_ms=-1, offsets=[("t", 1, 7, -1, "x")], api_version=9,
    )  # fmt: skip
    hb(c, "gone", 0, group_id="g2")
    hb(c, "gone", -1, group_id="g2")
    c.delete_groups(["g2"])
    before = c.consumer.groups["g"]

    c2 = GroupCoordinator(clock=clock, store=MemoryStore(), topics=topics)
    c2.load(store.entries)
    assert set(c2.consumer.groups) == {"g"}, "g2 was deleted (tombstones)"
    after = c2.consumer.groups["g"]
    assert (after.group_epoch, after.assignment_epoch) == (before.group_epoch, before.assignment_epoch)
    assert after.target == before.target
    for member_id, m in before.members.items():
        m2 = after.members[member_id]
        assert (m2.member_epoch, m2.previous_member_epoch, m2.state, m2.assigned, m2.pending_revocation) == (
            m.member_epoch, m.previous_member_epoch, m.state, m.assigned, m.pending_revocation
        )  # fmt: skip
        assert (m2.instance_id, m2.subscribed_topic_names, m2.rebalance_timeout_ms) == (
            m.instance_id, m.subscribed_topic_names, m.rebalance_timeout_ms
        )  # fmt: skip
    assert after.static_members == {"ia": "a"}
    assert after.offsets[("t", 1)].offset == 7
    # Replayed members are on the clock too: silent ones leave after a session timeout.
    clock.advance(SESSION)
    assert after.members == {}


# -- regex subscriptions ----------------------------------------------------------------------------
def test_regex_subscription_assigns_matching_topics() -> None:
    c, *_ = make(**{"orders-eu": 1, "orders-us": 1, "payments": 1})
    r = hb(c, "m", 0, subscribed_topic_names=None, subscribed_topic_regex="orders-.*")
    assert r["error_code"] == ErrorCode.NONE
    ids = {t for t, _ in flat(owned(r))}
    assert ids == {uuid.UUID(int=1), uuid.UUID(int=2)}  # orders-eu, orders-us; not payments


@pytest.mark.parametrize("regex", [r"(a)\1", "(?=x).*", "(a+)+", "(?>a)", "a++", "("])
def test_regex_that_re2j_refuses_or_that_could_backtrack_forever_is_invalid(regex: str) -> None:
    c, *_ = make()
    r = hb(c, "m", 0, subscribed_topic_names=None, subscribed_topic_regex=regex)
    assert r["error_code"] == ErrorCode.INVALID_REGULAR_EXPRESSION


# -- records Apache Kafka wrote ----------------------------------------------------------------------
KAFKA_FIXTURE = Path(__file__).parent / "fixtures" / "kafka-4.3.1-consumer-group-records.json"


def _kafka_fixture() -> tuple[dict[str, Any], list[tuple[bytes, bytes | None]]]:
    doc = json.loads(KAFKA_FIXTURE.read_text())
    entries = [(bytes.fromhex(k), None if v is None else bytes.fromhex(v)) for k, v in doc["records"]]
    return doc["topic"], entries


def test_kafka_written_records_decode_and_reencode_byte_exact() -> None:
    _, entries = _kafka_fixture()
    seen = set()
    for key_bytes, value in entries:
        key = cr.decode_key(key_bytes)
        if key is None:
            continue  # an offset commit (covered by the classic records' tests)
        seen.add(key.record_type)
        assert cr.encode_key(key.record_type, key.group_id, key.member_id) == key_bytes
        if value is not None:
            # Tagged fields of later Kafka versions (MetadataHash, AssignmentTimestamp) are kept as is.
            assert cr.encode_value(key.record_type, cr.decode_value(key.record_type, value)) == value
    assert seen == {cr.METADATA, cr.MEMBER_METADATA, cr.TARGET_ASSIGNMENT_METADATA, cr.TARGET_ASSIGNMENT_MEMBER,
                    cr.CURRENT_MEMBER_ASSIGNMENT}  # fmt: skip


def test_kafka_written_group_is_replayed_and_keeps_working() -> None:
    topic, entries = _kafka_fixture()
    topics = Topics()
    topics.meta = {
        topic["name"]: TopicMetadata(uuid.UUID(topic["topic_id"]), topic["name"], topic["partitions"])
    }
    clock = FakeClock()
    c = GroupCoordinator(clock=clock, store=MemoryStore(), topics=topics)
    c.load(entries)
    group = c.consumer.groups["kafka-written"]
    assert (group.group_epoch, group.assignment_epoch, group.state) == (3, 3, ConsumerGroupState.STABLE)
    tid = uuid.UUID(topic["topic_id"])
    by_client = {m.client_id: m for m in group.members.values()}
    assert by_client["rdkafka"].instance_id == "static-a"
    assert by_client["rdkafka"].assigned == {tid: (0, 1)}
    assert by_client["pybroker-compat-java"].assigned == {tid: (2,)}
    assert by_client["pybroker-compat-java"].server_assignor == "range"
    # KIP-1251 assignment epochs: the librdkafka member kept 0 and 1 since epoch 2; 2 moved at epoch 3.
    assert by_client["rdkafka"].assignment_epochs == {(tid, 0): 2, (tid, 1): 2}
    assert by_client["pybroker-compat-java"].assignment_epochs == {(tid, 2): 3}
    assert {tp: om.offset for tp, om in group.offsets.items()} == {("orders", p): 2 for p in range(3)}
    # The replayed members heartbeat on as if nothing happened (the subscription metadata is
    # recomputed from the topics, since Kafka 4.3.1 keeps only a hash of it).
    java = by_client["pybroker-compat-java"]
    r = hb(c, java.member_id, 3, group_id="kafka-written", owned={tid: (2,)})
    assert (r["error_code"], r["member_epoch"]) == (ErrorCode.NONE, 3)
    assert c.fetch_offsets("kafka-written", None, java.member_id, 3)[0] == ErrorCode.NONE


def test_more_partitions_bump_the_group_epoch_and_get_assigned() -> None:
    c, _, _, topics = make(t=2)
    r = hb(c, "m", 0)
    assert flat(owned(r)) == {(T1, 0), (T1, 1)}
    epoch = c.consumer.groups["g"].group_epoch
    topics.meta["t"] = TopicMetadata(T1, "t", 4)  # CreatePartitions
    r = hb(c, "m", r["member_epoch"], owned=owned(r))
    assert c.consumer.groups["g"].group_epoch == epoch + 1
    assert flat(owned(r)) == {(T1, p) for p in range(4)}
    assert r["member_epoch"] == epoch + 1


def test_leave_group_removes_static_members_of_a_consumer_group_by_instance_id() -> None:
    c, *_ = make(t=2)
    a = hb(c, "a", 0, instance_id="ia")
    hb(c, "b", 0)
    top, results = c.leave_group("g", [("", "ia"), ("b", None), ("x", "ia2"), ("", "nope")])
    assert top == ErrorCode.NONE
    assert [e for *_, e in results] == [
        ErrorCode.NONE,  # admin removal by instance id (kafka-consumer-groups --delete-members)
        ErrorCode.UNKNOWN_MEMBER_ID,  # b uses the consumer protocol: LeaveGroup does not apply
        ErrorCode.UNKNOWN_MEMBER_ID,
        ErrorCode.UNKNOWN_MEMBER_ID,
    ]
    assert results[0][0] == a["member_id"]
    assert set(c.consumer.groups["g"].members) == {"b"}


def test_deleted_topic_offsets_go_from_every_group_and_the_assignment_follows() -> None:
    """Kafka's onTopicsDeleted: tombstones for the topic's offsets in every group (classic and
    KIP-848), replayed as gone; the consumer group's next heartbeat reassigns without the topic."""

    async def t() -> None:
        c, _, store, topics = make(t=2, u=1)
        r = hb(c, "m1", 0, subscribed_topic_names=["t", "u"])
        member, epoch = r["member_id"], r["member_epoch"]
        assert flat(owned(r)) == {(T1, 0), (T1, 1), (T2, 0)}
        commit = {"member_id": member, "group_instance_id": None, "retention_time_ms": -1}
        errors, _ = c.commit_offsets(
            group_id="g", generation_id=epoch, offsets=[("t", 0, 5, -1, ""), ("u", 0, 6, -1, "")], **commit
        )
        assert set(errors.values()) == {ErrorCode.NONE}
        errors, _ = c.commit_offsets(
            group_id="classic", generation_id=-1, member_id="", group_instance_id=None,
            retention_time_ms=-1, offsets=[("t", 1, 7, -1, ""), ("u", 0, 8, -1, "")],
        )  # fmt: skip
        assert set(errors.values()) == {ErrorCode.NONE}

        del topics.meta["t"]
        c.on_topics_deleted(["t"])
        assert c.fetch_offsets("classic", [("t", [1]), ("u", [0])])[1] == [
            ("t", [(1, None)]),
            ("u", [(0, c.groups["classic"].offsets[("u", 0)])]),
        ]
        assert set(c.consumer.groups["g"].offsets) == {("u", 0)}
        tombstones = {k for k, v in store.entries[-2:] if v is None}
        assert tombstones == {records.offset_key("g", "t", 0), records.offset_key("classic", "t", 1)}
        # The member's next heartbeat no longer carries the deleted topic's partitions.
        r = hb(c, member, epoch)
        assert flat(owned(r)) == {(T2, 0)}

        # Replaying the log gives the same picture (what a restart does).
        again, _, _, _ = make(u=1)
        again.load(store.entries)
        assert set(again.consumer.groups["g"].offsets) == {("u", 0)}
        assert set(again.groups["classic"].offsets) == {("u", 0)}

    asyncio.run(t())
