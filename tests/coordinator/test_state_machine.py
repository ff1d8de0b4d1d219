"""The classic group state machine driven by a fake clock (no broker, no sockets, no sleeps)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from pybroker.coordinator import records
from pybroker.coordinator.clock import FakeClock
from pybroker.coordinator.coordinator import CoordinatorConfig, GroupCoordinator, MemoryStore
from pybroker.coordinator.group import GroupState
from pybroker.protocol.errors import ErrorCode

DELAY = 3000
SESSION = 10_000
REBALANCE = 30_000


def run(test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(test())


async def settle() -> None:
    # Futures' callbacks run on the loop; yield a few times so held answers are delivered.
    for _ in range(3):
        await asyncio.sleep(0)


def make(
    delay: int = DELAY, retention_ms: int = 7 * 24 * 3600 * 1000
) -> tuple[GroupCoordinator, FakeClock, MemoryStore]:
    clock = FakeClock()
    store = MemoryStore()
    cfg = CoordinatorConfig(initial_rebalance_delay_ms=delay, offsets_retention_ms=retention_ms)
    return GroupCoordinator(clock=clock, store=store, config=cfg), clock, store


def join(
    c: GroupCoordinator,
    member_id: str = "",
    *,
    group: str = "g",
    instance: str | None = None,
    protocols: list[tuple[str, bytes]] | None = None,
    session: int = SESSION,
    rebalance: int = REBALANCE,
    require_known: bool = True,
    client_id: str = "client",
) -> asyncio.Future:
    return c.join_group(
        group_id=group,
        member_id=member_id,
        group_instance_id=instance,
        client_id=client_id,
        client_host="/127.0.0.1",
        session_timeout_ms=session,
        rebalance_timeout_ms=rebalance,
        protocol_type="consumer",
        protocols=protocols or [("range", b"meta-" + client_id.encode())],
        require_known_member_id=require_known and instance is None,
    )


async def until_done(clock: FakeClock, futs: list[asyncio.Future], step: int = DELAY) -> None:
    """Advance the clock a delay at a time (the initial delay extends while members arrive)."""
    for _ in range(REBALANCE // step + 1):
        await settle()
        if all(f.done() for f in futs):
            return
        clock.advance(step)
    await settle()
    assert all(f.done() for f in futs), "joins still held after the rebalance timeout"


async def first_join(c: GroupCoordinator, **kw: Any) -> asyncio.Future:
    """MEMBER_ID_REQUIRED round trip, then the real (held) join."""
    first = join(c, **kw)
    assert first.done()
    r = first.result()
    assert r["error_code"] == ErrorCode.MEMBER_ID_REQUIRED
    assert r["member_id"].startswith(kw.get("client_id", "client") + "-")
    return join(c, r["member_id"], **kw)


def sync(
    c: GroupCoordinator,
    member_id: str,
    generation: int,
    assignments: dict[str, bytes] | None = None,
    **kw: Any,
):
    return c.sync_group(
        group_id=kw.get("group", "g"),
        generation_id=generation,
        member_id=member_id,
        group_instance_id=kw.get("instance"),
        protocol_type=kw.get("protocol_type"),
        protocol_name=kw.get("protocol_name"),
        assignments=assignments or {},
    )


def hb(c: GroupCoordinator, member_id: str, generation: int, instance: str | None = None) -> ErrorCode:
    return c.heartbeat(
        group_id="g", generation_id=generation, member_id=member_id, group_instance_id=instance
    )


async def stable_group(c: GroupCoordinator, clock: FakeClock, n: int) -> list[dict[str, Any]]:
    """n members joined and synced; returns their JoinGroup results (leader first)."""
    futs = [await first_join(c, client_id=f"c{i}") for i in range(n)]
    await until_done(clock, futs)
    results = [f.result() for f in futs]
    leader = next(r for r in results if r["member_id"] == r["leader"])
    followers = [r for r in results if r is not leader]
    syncs = [sync(c, r["member_id"], r["generation_id"]) for r in followers]
    assignments = {r["member_id"]: f"assigned-{r['member_id']}".encode() for r in results}
    lead_sync = sync(c, leader["member_id"], leader["generation_id"], assignments)
    await settle()
    for r, f in zip([*followers, leader], [*syncs, lead_sync], strict=True):
        assert f.result()["error_code"] == ErrorCode.NONE
        assert f.result()["assignment"] == assignments[r["member_id"]]
    return [leader, *followers]


def test_member_id_required_then_initial_delay_holds_the_join() -> None:
    async def t() -> None:
        c, clock, _ = make()
        fut = await first_join(c)
        assert not fut.done()
        assert c.groups["g"].state is GroupState.PREPARING_REBALANCE
        clock.advance(DELAY - 1)
        await settle()
        assert not fut.done()
        clock.advance(1)
        await settle()
        r = fut.result()
        assert r["error_code"] == ErrorCode.NONE
        assert r["generation_id"] == 1
        assert r["leader"] == r["member_id"]
        assert r["protocol_type"] == "consumer" and r["protocol_name"] == "range"
        assert [m["member_id"] for m in r["members"]] == [r["member_id"]]
        assert c.groups["g"].state is GroupState.COMPLETING_REBALANCE

    run(t)


def test_three_members_one_generation_leader_gets_all_metadata_followers_wait_for_leader_sync() -> None:
    async def t() -> None:
        c, clock, store = make()
        futs = [await first_join(c, client_id=f"c{i}") for i in range(3)]
        clock.advance(DELAY)
        await settle()
        # Members kept arriving during the first delay: it is extended once more, then completes.
        assert not any(f.done() for f in futs)
        clock.advance(DELAY)
        await settle()
        results = [f.result() for f in futs]
        assert {r["generation_id"] for r in results} == {1}
        leader_id = results[0]["leader"]
        assert all(r["leader"] == leader_id for r in results)
        for r in results:
            if r["member_id"] == leader_id:
                assert sorted(m["metadata"] for m in r["members"]) == [b"meta-c0", b"meta-c1", b"meta-c2"]
            else:
                assert r["members"] == []
        followers = [r["member_id"] for r in results if r["member_id"] != leader_id]
        held = [sync(c, m, 1) for m in followers]
        await settle()
        assert not any(f.done() for f in held)
        # The leader leaves one follower out: it must get an empty assignment, not an error.
        lead = sync(c, leader_id, 1, {leader_id: b"A", followers[0]: b"B"})
        await settle()
        assert lead.result()["assignment"] == b"A"
        assert held[0].result()["assignment"] == b"B"
        assert held[1].result() == {
            "error_code": ErrorCode.NONE,
            "protocol_type": "consumer",
            "protocol_name": "range",
            "assignment": b"",
        }
        assert c.groups["g"].state is GroupState.STABLE
        # The assignment was written before anyone was answered.
        assert records.decode_key(store.entries[-1][0]) == records.GroupKey("g")

    run(t)


def test_heartbeat_errors_where_kafka_returns_them() -> None:
    async def t() -> None:
        c, clock, _ = make()
        leader, follower = await stable_group(c, clock, 2)
        gen = leader["generation_id"]
        assert hb(c, leader["member_id"], gen) == ErrorCode.NONE
        assert hb(c, leader["member_id"], gen + 1) == ErrorCode.ILLEGAL_GENERATION
        assert hb(c, "nobody", gen) == ErrorCode.UNKNOWN_MEMBER_ID
        assert c.heartbeat(group_id="other", generation_id=1, member_id="x", group_instance_id=None) == (
            ErrorCode.UNKNOWN_MEMBER_ID
        )
        # A new member starts a rebalance: existing members learn it from their heartbeat.
        newcomer = await first_join(c, client_id="c9")
        assert c.groups["g"].state is GroupState.PREPARING_REBALANCE
        assert hb(c, follower["member_id"], gen) == ErrorCode.REBALANCE_IN_PROGRESS
        assert sync(c, follower["member_id"], gen).result()["error_code"] == ErrorCode.REBALANCE_IN_PROGRESS
        # Everyone rejoins: the join completes at once (no initial delay for an existing group).
        f1 = join(c, leader["member_id"], client_id="c0")
        f2 = join(c, follower["member_id"], client_id="c1")
        await settle()
        assert all(f.done() for f in (newcomer, f1, f2))
        assert {f.result()["generation_id"] for f in (newcomer, f1, f2)} == {gen + 1}
        # A commit from the right generation while the assignment is pending: REBALANCE_IN_PROGRESS.
        errors, _ = c.commit_offsets(
            group_id="g",
            generation_id=gen + 1,
            member_id=follower["member_id"],
            group_instance_id=None,
            retention_time_ms=-1,
            offsets=[("t", 0, 5, -1, "")],
        )
        assert errors == {("t", 0): ErrorCode.REBALANCE_IN_PROGRESS}

    run(t)


def test_session_timeout_evicts_a_silent_member_and_the_others_rebalance() -> None:
    async def t() -> None:
        c, clock, _ = make()
        leader, follower = await stable_group(c, clock, 2)
        gen = leader["generation_id"]
        for _ in range(4):
            clock.advance(SESSION // 2)
            assert hb(c, leader["member_id"], gen) in (ErrorCode.NONE, ErrorCode.REBALANCE_IN_PROGRESS)
        group = c.groups["g"]
        assert follower["member_id"] not in group.members
        assert group.state is GroupState.PREPARING_REBALANCE
        fut = join(c, leader["member_id"], client_id="c0")
        await settle()
        r = fut.result()
        assert r["generation_id"] == gen + 1 and [m["member_id"] for m in r["members"]] == [
            leader["member_id"]
        ]

    run(t)


def test_member_that_does_not_rejoin_is_dropped_at_the_rebalance_timeout() -> None:
    async def t() -> None:
        c, clock, _ = make()
        leader, follower = await stable_group(c, clock, 2)
        fut = join(c, leader["member_id"], protocols=[("range", b"changed")], client_id="c0")
        await settle()
        assert not fut.done()
        # The follower keeps heartbeating but never rejoins.
        for _ in range(REBALANCE // 5000):
            clock.advance(5000)
            hb(c, follower["member_id"], leader["generation_id"])
        await settle()
        r = fut.result()
        assert r["error_code"] == ErrorCode.NONE
        assert [m["member_id"] for m in r["members"]] == [leader["member_id"]]
        assert hb(c, follower["member_id"], r["generation_id"]) == ErrorCode.UNKNOWN_MEMBER_ID

    run(t)


def test_static_member_rejoins_without_rebalance_and_old_id_is_fenced() -> None:
    async def t() -> None:
        c, clock, _ = make()
        a = join(c, instance="inst-a", client_id="a")
        b = join(c, instance="inst-b", client_id="b")
        await until_done(clock, [a, b])
        ra, rb = a.result(), b.result()
        gen = ra["generation_id"]
        leader = ra if ra["member_id"] == ra["leader"] else rb
        other = rb if leader is ra else ra
        assignments = {ra["member_id"]: b"for-a", rb["member_id"]: b"for-b"}
        fo = sync(c, other["member_id"], gen)
        fl = sync(c, leader["member_id"], gen, assignments)
        await settle()
        assert fo.result()["error_code"] == fl.result()["error_code"] == ErrorCode.NONE
        # inst-b restarts (no LeaveGroup) and joins with no member id.
        again = join(c, instance="inst-b", client_id="b")
        await settle()
        r = again.result()
        assert r["error_code"] == ErrorCode.NONE
        assert r["generation_id"] == gen  # no new generation
        assert r["member_id"] != rb["member_id"]
        assert r["leader"] == leader["member_id"] or rb is leader
        assert c.groups["g"].state is GroupState.STABLE
        s = sync(c, r["member_id"], gen, instance="inst-b")
        await settle()
        assert s.result()["assignment"] == b"for-b"
        assert hb(c, rb["member_id"], gen, "inst-b") == ErrorCode.FENCED_INSTANCE_ID
        assert hb(c, r["member_id"], gen, "inst-b") == ErrorCode.NONE

    run(t)


def test_protocol_vote_and_inconsistent_protocol() -> None:
    async def t() -> None:
        c, clock, _ = make(delay=0)
        f1 = join(c, protocols=[("roundrobin", b"1"), ("range", b"1")], require_known=False, client_id="a")
        f2 = join(c, protocols=[("range", b"2"), ("roundrobin", b"2")], require_known=False, client_id="b")
        f3 = join(c, protocols=[("range", b"3")], require_known=False, client_id="c")
        clock.advance(0)
        await settle()
        assert {f.result()["protocol_name"] for f in (f1, f2, f3)} == {"range"}
        bad = join(c, protocols=[("sticky", b"x")], require_known=False, client_id="d")
        assert bad.result()["error_code"] == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        other_type = c.join_group(
            group_id="g",
            member_id="",
            group_instance_id=None,
            client_id="e",
            client_host="/h",
            session_timeout_ms=SESSION,
            rebalance_timeout_ms=REBALANCE,
            protocol_type="connect",
            protocols=[("range", b"")],
            require_known_member_id=False,
        )
        assert other_type.result()["error_code"] == ErrorCode.INCONSISTENT_GROUP_PROTOCOL

    run(t)


def test_invalid_session_timeout_and_unknown_member_join() -> None:
    async def t() -> None:
        c, _, _ = make()
        assert join(c, session=10).result()["error_code"] == ErrorCode.INVALID_SESSION_TIMEOUT
        assert join(c, "made-up").result()["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID
        assert join(c, group="").result()["error_code"] == ErrorCode.INVALID_GROUP_ID

    run(t)


def test_leave_group_rebalances_and_last_member_leaving_empties_the_group() -> None:
    async def t() -> None:
        c, clock, _ = make()
        leader, follower = await stable_group(c, clock, 2)
        top, results = c.leave_group("g", [(follower["member_id"], None), ("ghost", None)])
        assert top == ErrorCode.NONE
        assert [e for *_, e in results] == [ErrorCode.NONE, ErrorCode.UNKNOWN_MEMBER_ID]
        assert c.groups["g"].state is GroupState.PREPARING_REBALANCE
        c.leave_group("g", [(leader["member_id"], None)])
        assert c.groups["g"].state is GroupState.EMPTY
        assert c.groups["g"].generation_id == leader["generation_id"] + 1

    run(t)


def test_member_that_never_syncs_is_removed_after_the_rebalance_timeout() -> None:
    async def t() -> None:
        c, clock, _ = make()
        futs = [await first_join(c, client_id=f"c{i}") for i in range(2)]
        await until_done(clock, futs)
        results = [f.result() for f in futs]
        leader = next(r for r in results if r["member_id"] == r["leader"])
        follower = next(r for r in results if r is not leader)
        gen = leader["generation_id"]
        sync(c, leader["member_id"], gen, {leader["member_id"]: b"x"})
        await settle()
        group = c.groups["g"]
        # Both keep heartbeating, but the follower never sends its SyncGroup.
        for _ in range(REBALANCE // 5000 - 1):
            clock.advance(5000)
            assert hb(c, leader["member_id"], gen) == ErrorCode.NONE
            assert hb(c, follower["member_id"], gen) == ErrorCode.NONE
        assert follower["member_id"] in group.members
        clock.advance(5000)
        assert follower["member_id"] not in group.members
        assert group.state is GroupState.PREPARING_REBALANCE
        assert hb(c, leader["member_id"], gen) == ErrorCode.REBALANCE_IN_PROGRESS

    run(t)


def test_offsets_commit_fetch_delete_and_replay_from_the_store() -> None:
    async def t() -> None:
        c, clock, store = make()
        leader, follower = await stable_group(c, clock, 2)
        gen = leader["generation_id"]
        ok, wait = c.commit_offsets(
            group_id="g",
            generation_id=gen,
            member_id=follower["member_id"],
            group_instance_id=None,
            retention_time_ms=-1,
            offsets=[("t", 0, 42, 3, "meta"), ("t", 1, 7, -1, None)],
        )
        assert wait is None and set(ok.values()) == {ErrorCode.NONE}
        stale, _ = c.commit_offsets(
            group_id="g",
            generation_id=gen - 1,
            member_id=follower["member_id"],
            group_instance_id=None,
            retention_time_ms=-1,
            offsets=[("t", 0, 1, -1, "")],
        )
        assert stale == {("t", 0): ErrorCode.ILLEGAL_GENERATION}
        unknown, _ = c.commit_offsets(
            group_id="g",
            generation_id=gen,
            member_id="nobody",
            group_instance_id=None,
            retention_time_ms=-1,
            offsets=[("t", 0, 1, -1, "")],
        )
        assert unknown == {("t", 0): ErrorCode.UNKNOWN_MEMBER_ID}
        _, found = c.fetch_offsets("g", [("t", [0, 1, 2])])
        ((topic, parts),) = found
        assert [(p, om.offset if om else -1) for p, om in parts] == [(0, 42), (1, 7), (2, -1)]
        assert parts[0][1].metadata == "meta" and parts[0][1].leader_epoch == 3
        # A subscribed topic's offsets cannot be deleted while the group is active... ("t" is not subscribed here).
        top, errs, _ = c.delete_offsets("g", [("t", 1)])
        assert top == ErrorCode.NON_EMPTY_GROUP or errs == {("t", 1): ErrorCode.NONE}
        # Replay everything written into a fresh coordinator: offsets and members come back.
        c2, clock2, _ = make()
        c2.load(store.entries)
        g2 = c2.groups["g"]
        assert g2.state is GroupState.STABLE
        assert g2.generation_id == gen
        assert g2.offsets[("t", 0)].offset == 42 and g2.offsets[("t", 0)].metadata == "meta"
        assert set(g2.members) == {leader["member_id"], follower["member_id"]}
        assert g2.members[follower["member_id"]].assignment == f"assigned-{follower['member_id']}".encode()
        assert (
            c2.heartbeat(
                group_id="g", generation_id=gen, member_id=follower["member_id"], group_instance_id=None
            )
            == ErrorCode.NONE
        )

    run(t)


def test_standalone_commits_delete_groups_and_tombstones() -> None:
    async def t() -> None:
        c, clock, store = make()
        errors, _ = c.commit_offsets(
            group_id="solo",
            generation_id=-1,
            member_id="",
            group_instance_id=None,
            retention_time_ms=-1,
            offsets=[("t", 0, 5, -1, "")],
        )
        assert errors == {("t", 0): ErrorCode.NONE}
        assert [g["group_id"] for g in c.list_groups(["Empty"])] == ["solo"]
        assert c.list_groups(["Stable"]) == []
        await stable_group(c, clock, 1)
        results, _ = c.delete_groups(["solo", "g", "nope"])
        assert results == [
            ("solo", ErrorCode.NONE),
            ("g", ErrorCode.NON_EMPTY_GROUP),
            ("nope", ErrorCode.GROUP_ID_NOT_FOUND),
        ]
        assert "solo" not in c.groups
        tail = store.entries[-2:]
        assert tail[0] == (records.offset_key("solo", "t", 0), None)
        assert tail[1] == (records.group_key("solo"), None)
        c2, _, _ = make()
        c2.load(store.entries)
        assert "solo" not in c2.groups
        assert c.describe_group("solo")["group_state"] == "Dead"

    run(t)


@pytest.mark.parametrize("protocol_type", ["consumer", None])
def test_offsets_of_an_empty_group_expire_after_retention(protocol_type: str | None) -> None:
    async def t() -> None:
        retention = 60_000
        c, clock, store = make(retention_ms=retention)
        if protocol_type:
            leader, _ = await stable_group(c, clock, 2)
            c.commit_offsets(
                group_id="g",
                generation_id=leader["generation_id"],
                member_id=leader["member_id"],
                group_instance_id=None,
                retention_time_ms=-1,
                offsets=[("t", 0, 5, -1, "")],
            )
            c.leave_group("g", [(m, None) for m in list(c.groups["g"].members)])
        else:
            c.commit_offsets(
                group_id="g",
                generation_id=-1,
                member_id="",
                group_instance_id=None,
                retention_time_ms=-1,
                offsets=[("t", 0, 5, -1, "")],
            )
        assert c.groups["g"].state is GroupState.EMPTY
        clock.advance(retention - 1)
        assert c.expire_offsets() == 0
        clock.advance(1)
        assert c.expire_offsets() == 1
        assert "g" not in c.groups
        assert store.entries[-1] == (records.group_key("g"), None)

    run(t)


def test_describe_shows_metadata_only_when_stable() -> None:
    async def t() -> None:
        c, clock, _ = make()
        leader, _follower = await stable_group(c, clock, 2)
        d = c.describe_group("g")
        assert (d["group_state"], d["protocol_type"], d["protocol_data"]) == ("Stable", "consumer", "range")
        mine = next(m for m in d["members"] if m["member_id"] == leader["member_id"])
        assert mine["member_metadata"] == b"meta-c0"
        assert mine["member_assignment"] == f"assigned-{leader['member_id']}".encode()
        assert mine["client_host"] == "/127.0.0.1"
        await first_join(c, client_id="c9")
        d = c.describe_group("g")
        assert (d["group_state"], d["protocol_data"]) == ("PreparingRebalance", "")
        assert all(m["member_metadata"] == b"" and m["member_assignment"] == b"" for m in d["members"])

    run(t)


def test_deleting_consumer_offsets_unloads_groups_and_new_ones_work() -> None:
    """As Kafka's coordinator unloading a partition: held answers learn NOT_COORDINATOR, the groups
    and their offsets are forgotten, stale timers write nothing, and the same group id starts anew."""

    async def t() -> None:
        c, clock, store = make()
        leader, *_ = await stable_group(c, clock, 2)
        c.commit_offsets(
            group_id="g", generation_id=leader["generation_id"], member_id=leader["member_id"],
            group_instance_id=None, retention_time_ms=-1, offsets=[("t", 0, 5, -1, "")],
        )  # fmt: skip
        held = await first_join(c, group="other")  # held by the initial delay
        pending = join(c, group="other", client_id="late")  # MEMBER_ID_REQUIRED: a pending member
        assert pending.result()["error_code"] == ErrorCode.MEMBER_ID_REQUIRED
        written = len(store.entries)

        c.on_topics_deleted(["__consumer_offsets"])
        await settle()
        assert held.result()["error_code"] == ErrorCode.NOT_COORDINATOR
        assert c.groups == {}
        assert c.fetch_offsets("g", [("t", [0])])[1] == [("t", [(0, None)])]
        clock.advance(REBALANCE * 2)  # every timer of the old groups would have fired by now
        await settle()
        assert len(store.entries) == written
        assert hb(c, leader["member_id"], leader["generation_id"]) == ErrorCode.UNKNOWN_MEMBER_ID
        # The group id starts over from generation 1.
        again = await first_join(c)
        await until_done(clock, [again])
        assert again.result()["generation_id"] == 1

    run(t)
