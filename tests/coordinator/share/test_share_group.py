"""Share-group membership: join, epochs, fencing, leave, session timeout, the simple assignor."""

from __future__ import annotations

import uuid

from pybroker.coordinator.clock import FakeClock
from pybroker.coordinator.share.share_group import ShareGroup, ShareGroupState, simple_assign
from pybroker.protocol.errors import ErrorCode

T1 = uuid.UUID(int=1)
T2 = uuid.UUID(int=2)
TOPICS = {"one": (T1, 1), "three": (T2, 3)}


def test_simple_assignor_shares_a_partition_between_members() -> None:
    a = simple_assign({"a": frozenset({T1}), "b": frozenset({T1}), "c": frozenset({T1})}, {T1: 1})
    assert a == {"a": {T1: (0,)}, "b": {T1: (0,)}, "c": {T1: (0,)}}


def test_simple_assignor_deals_partitions_when_fewer_members() -> None:
    a = simple_assign({"a": frozenset({T2}), "b": frozenset({T2})}, {T2: 3})
    assert a == {"a": {T2: (0, 2)}, "b": {T2: (1,)}}
    # every partition assigned, and to a subscriber only
    b = simple_assign({"a": frozenset({T1}), "b": frozenset({T2})}, {T1: 1, T2: 3})
    assert b == {"a": {T1: (0,)}, "b": {T2: (0, 1, 2)}}


def test_join_epochs_and_assignment() -> None:
    clock = FakeClock()
    g = ShareGroup("g", clock)
    assert g.state is ShareGroupState.EMPTY
    r = g.heartbeat("m1", 0, ["one"], TOPICS)
    assert (r.error, r.member_epoch, r.assignment) == (ErrorCode.NONE, 1, {T1: (0,)})
    assert g.state is ShareGroupState.STABLE
    # steady heartbeat: assignment unchanged → null
    r = g.heartbeat("m1", 1, None, TOPICS)
    assert (r.error, r.member_epoch, r.assignment) == (ErrorCode.NONE, 1, None)
    r2 = g.heartbeat("m2", 0, ["one"], TOPICS)
    assert (r2.member_epoch, r2.assignment) == (2, {T1: (0,)})
    # m1 moves to the new epoch with no revocation step; a new epoch comes with its assignment (as Kafka)
    r = g.heartbeat("m1", 1, None, TOPICS)
    assert (r.error, r.member_epoch, r.assignment) == (ErrorCode.NONE, 2, {T1: (0,)})
    assert g.heartbeat("m1", 2, None, TOPICS).assignment is None


def test_fencing_and_unknown_members() -> None:
    g = ShareGroup("g", FakeClock())
    g.heartbeat("m1", 0, ["one"], TOPICS)
    assert g.heartbeat("m1", 7, None, TOPICS).error == ErrorCode.FENCED_MEMBER_EPOCH
    assert g.heartbeat("nobody", 3, None, TOPICS).error == ErrorCode.UNKNOWN_MEMBER_ID
    assert g.heartbeat("m9", 0, None, TOPICS).error == ErrorCode.INVALID_REQUEST
    assert g.heartbeat("", 0, ["one"], TOPICS).error == ErrorCode.INVALID_REQUEST


def test_leave_and_session_timeout_remove_members() -> None:
    clock = FakeClock()
    removed: list[str] = []
    g = ShareGroup("g", clock, session_timeout_ms=45_000, on_member_removed=lambda _g, m: removed.append(m.member_id))
    g.heartbeat("m1", 0, ["three"], TOPICS)
    g.heartbeat("m2", 0, ["three"], TOPICS)
    r = g.heartbeat("m1", g.members["m1"].member_epoch, None, TOPICS)
    r = g.heartbeat("m1", -1, None, TOPICS)
    assert (r.error, r.member_epoch) == (ErrorCode.NONE, -1)
    assert removed == ["m1"]
    clock.advance(44_999)
    assert "m2" in g.members
    clock.advance(1)
    assert removed == ["m1", "m2"]
    assert g.state is ShareGroupState.EMPTY


def test_remaining_member_gets_every_partition_after_a_leave() -> None:
    g = ShareGroup("g", FakeClock())
    g.heartbeat("a", 0, ["three"], TOPICS)
    g.heartbeat("b", 0, ["three"], TOPICS)
    ra = g.heartbeat("a", g.members["a"].member_epoch, None, TOPICS)
    assert ra.assignment == {T2: (0, 2)}
    g.heartbeat("b", -1, None, TOPICS)
    ra = g.heartbeat("a", g.members["a"].member_epoch, None, TOPICS)
    assert ra.assignment == {T2: (0, 1, 2)}
