"""Consumer groups with stock clients: partitions shared without overlap, rebalances when a member
leaves or is killed, committed offsets that survive consumer restarts and a kill -9 of the broker,
static members that come back without a rebalance, and the admin views of groups.

Group members run as separate processes (``python -m compat_tests.scenarios.test_groups member ...``)
so one can be killed with SIGKILL, exactly like a crashed application: no LeaveGroup is sent.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from compat_tests.clients.base import ClientError, NotSupportedByClient, Record
from compat_tests.clients.errors import kafka_error_name
from compat_tests.clients.registry import make_client

from .support import (
    broker_launcher,
    coordinator_node,
    expressible,
    is_cluster,
    kill9_and_start,
    kill_coordinator,
    restart_every_node,
    wait_for,
)

log = logging.getLogger(__name__)

SESSION_MS = 6000  # Kafka's group.min.session.timeout.ms: the shortest a broker accepts by default
NON_EMPTY_GROUP = 68
GROUP_ID_NOT_FOUND = 69
REPO_ROOT = Path(__file__).resolve().parents[2]


def require_groups(client: Any, client_name: str) -> None:
    if not hasattr(client, "group_consume"):
        raise NotSupportedByClient(f"the {client_name} adapter has no subscribe()/commit group consumer")


def produce_spread(admin: Any, bootstrap: str, topic: str, partitions: int, per_partition: int) -> None:
    records = [
        Record(f"k{p}-{i}".encode(), f"p{p}-v{i}".encode(), partition=p)
        for p in range(partitions)
        for i in range(per_partition)
    ]
    admin.produce(bootstrap, topic, records)


class MemberProcess:
    """One group member in its own process; its events (assignments, records) are collected here."""

    def __init__(
        self,
        client_name: str,
        bootstrap: str,
        topic: str,
        group: str,
        *,
        session_ms: int = SESSION_MS,
        instance_id: str | None = None,
        assignor: str | None = None,
        process_ms: int = 0,
    ) -> None:
        self.name = instance_id or f"member-{uuid.uuid4().hex[:6]}"
        self.client_name = client_name
        args = [
            sys.executable,
            "-m",
            "compat_tests.scenarios.test_groups",
            "member",
            "--client", client_name,
            "--bootstrap", bootstrap,
            "--topic", topic,
            "--group", group,
            "--session-ms", str(session_ms),
        ]  # fmt: skip
        if instance_id:
            args += ["--instance-id", instance_id]
        if assignor:
            args += ["--assignor", assignor]
        if process_ms:
            args += ["--process-ms", str(process_ms)]
        env = dict(
            os.environ,
            PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
        )
        self.started = time.monotonic()
        self.process = subprocess.Popen(
            args,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=REPO_ROOT,
        )
        self.assignments: list[tuple[float, list[int]]] = []
        self.records: list[tuple[int, int]] = []
        # Rebalance callbacks (members started with an assignor): {"event", "partitions", "assignment"}.
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._stderr: list[bytes] = []
        threading.Thread(target=lambda: self._stderr.extend(self.process.stderr), daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            with self._lock:
                if event["event"] == "assigned":
                    self.assignments.append((time.monotonic(), event["partitions"]))
                elif event["event"] == "record":
                    self.records.append((event["partition"], event["offset"]))
                elif event["event"] == "rebalance":
                    self.events.append(event["detail"])

    @property
    def current(self) -> list[int] | None:
        with self._lock:
            return self.assignments[-1][1] if self.assignments else None

    def snapshot(self) -> tuple[list[tuple[int, int]], list[dict[str, Any]]]:
        with self._lock:
            return list(self.records), list(self.events)

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout_s: float = 30) -> None:
        """Graceful: the consumer closes (LeaveGroup for dynamic members)."""
        if self.alive():
            try:
                assert self.process.stdin is not None
                self.process.stdin.write(b"stop\n")
                self.process.stdin.flush()
            except BrokenPipeError:
                pass
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()

    def kill(self) -> None:
        """A crash: SIGKILL, so no LeaveGroup."""
        if self.alive():
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def stderr_tail(self) -> str:
        return b"".join(self._stderr[-20:]).decode(errors="replace")


def partitions_shared(members: list[MemberProcess], partitions: int) -> bool:
    """Every member has a non-empty assignment, and together they hold each partition exactly once."""
    current = [m.current for m in members]
    if any(not c for c in current):
        return False
    flat = [p for c in current for p in c]  # type: ignore[union-attr]
    return sorted(flat) == list(range(partitions))


def stop_all(members: list[MemberProcess]) -> None:
    for m in members:
        m.kill()


@pytest.fixture
def members() -> Any:
    started: list[MemberProcess] = []
    yield started
    stop_all(started)


def test_three_members_share_six_partitions_and_rebalance_on_leave_and_crash(
    client, client_name, bootstrap, admin, make_topic, members
) -> None:
    with expressible(client_name):
        require_groups(client, client_name)
    topic = make_topic(partitions=6)
    group = f"{topic}-group"
    produce_spread(admin, bootstrap, topic, 6, 5)
    t0 = time.monotonic()
    members.extend(MemberProcess(client_name, bootstrap, topic, group) for _ in range(3))
    wait_for(lambda: partitions_shared(members, 6), 60, "3 members to share 6 partitions")
    log.info("%s: 3 members assigned %.2fs after their processes started", client_name, time.monotonic() - t0)
    wait_for(lambda: len({r for m in members for r in m.records}) == 30, 30, "every record consumed once")

    # Crash: no LeaveGroup, so the coordinator notices only when the session times out.
    crashed, rest = members[0], members[1:]
    crashed.kill()
    t_crash = time.monotonic()
    wait_for(
        lambda: partitions_shared(rest, 6), SESSION_MS / 1000 + 15, "survivors to take over every partition"
    )
    took = time.monotonic() - t_crash
    log.info("%s: crash to full reassignment took %.2fs", client_name, took)
    assert took < SESSION_MS / 1000 + 10

    # Graceful leave: LeaveGroup starts the rebalance at once.
    leaving, last = rest
    leaving.stop()
    assert leaving.process.returncode == 0, leaving.stderr_tail()
    wait_for(lambda: last.current == list(range(6)), 20, "the last member to own all 6 partitions")


def _consume_committing(client: Any, bootstrap: str, topic: str, group: str, stop_after: int) -> list[int]:
    seen: list[int] = []

    def on_record(partition: int, offset: int, value: bytes | None) -> bool:
        seen.append(offset)
        return len(seen) >= stop_after

    deadline = time.monotonic() + 60
    client.group_consume(
        bootstrap,
        topic,
        group,
        on_assign=lambda partitions: None,
        on_record=on_record,
        should_stop=lambda: time.monotonic() > deadline,
    )
    return seen


def test_commit_then_restart_resumes_exactly_after_last_commit(
    client, client_name, bootstrap, admin, make_topic
) -> None:
    with expressible(client_name):
        require_groups(client, client_name)
    topic = make_topic()
    group = f"{topic}-group"
    produce_spread(admin, bootstrap, topic, 1, 20)
    first = _consume_committing(client, bootstrap, topic, group, 8)
    assert first == list(range(8))
    assert admin.committed_offsets(bootstrap, group) == {(topic, 0): 8}
    second = _consume_committing(client, bootstrap, topic, group, 12)
    assert second == list(range(8, 20))
    assert admin.committed_offsets(bootstrap, group) == {(topic, 0): 20}


def test_committed_offsets_survive_broker_kill9(request, client, client_name, tmp_path, admin) -> None:
    """Committed offsets survive a kill -9 of the broker and a clean restart. On a 3-node cluster the kill
    is of the group's coordinator (the group resumes, served by another node, while it is down), and the
    clean restart is of every node, one after the other."""
    with expressible(client_name):
        require_groups(client, client_name)
    if request.config.getoption("--bootstrap"):
        pytest.skip("needs a broker this test starts and kills (not an external --bootstrap)")
    broker = broker_launcher(
        request.config.getoption("--broker"),
        tmp_path / "kill9",
        {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "3"},
    )
    bootstrap = broker.start()
    try:
        topic, group = "kill9-topic", f"kill9-group-{client_name}"
        cluster = is_cluster(broker)
        # On a cluster, the brokers' default replication factor (3): the topic outlives the killed node.
        admin.create_topic(bootstrap, topic, partitions=1, replication_factor=-1 if cluster else 1)
        produce_spread(admin, bootstrap, topic, 1, 20)
        assert _consume_committing(client, bootstrap, topic, group, 8) == list(range(8))
        if cluster:
            killed = kill_coordinator(broker, group)
            assert coordinator_node(broker, group) != killed
        else:
            bootstrap = kill9_and_start(broker)
        assert admin.committed_offsets(bootstrap, group) == {(topic, 0): 8}
        assert _consume_committing(client, bootstrap, topic, group, 12) == list(range(8, 20))
        # And once more after a graceful restart.
        if cluster:
            broker.restart(killed)
            restart_every_node(broker, [topic])
        else:
            broker.stop()
            bootstrap = broker.start()
        assert admin.committed_offsets(bootstrap, group) == {(topic, 0): 20}
    finally:
        broker.stop()


HEARTBEAT, DESCRIBE_GROUPS, ILLEGAL_GENERATION = 12, 15, 22


def _static_members(bootstrap: str, group: str) -> tuple[str, dict[str, str]]:
    """DescribeGroups at the coordinator: the group's state and {group instance id: member id}."""
    from .test_newest_versions import call, coordinator_ready

    (described,) = call(coordinator_ready(bootstrap, group), DESCRIBE_GROUPS, 5, {"groups": [group]})["groups"]
    assert described["error_code"] == 0, described
    return described["group_state"], {m["group_instance_id"]: m["member_id"] for m in described["members"]}


def _generation(bootstrap: str, group: str, instance_id: str, member_id: str) -> int:
    """The group's generation, read through the protocol alike on any broker: a Heartbeat (v4) on behalf
    of a member of a Stable group is answered NONE at the current generation only, ILLEGAL_GENERATION at
    any other (and only refreshes that member's session)."""
    from .test_newest_versions import call, coordinator_ready

    coordinator = coordinator_ready(bootstrap, group)
    for generation in range(1, 100):
        body = {"group_id": group, "generation_id": generation, "member_id": member_id, "group_instance_id": instance_id}
        code = call(coordinator, HEARTBEAT, 4, body)["error_code"]
        if code == 0:
            return generation
        assert code == ILLEGAL_GENERATION, (generation, code)
    raise AssertionError(f"no generation of {group} in 1..99 accepts {instance_id}'s heartbeat")


def test_static_member_restart_does_not_rebalance(
    request, client, client_name, admin, tmp_path, members
) -> None:
    """A static member killed and restarted within its session gets its partitions back without a
    rebalance: the group's generation stays, the other member keeps its member id and its partitions,
    and the restarted instance's member id is replaced (KIP-345). A broker of its own with a short
    initial rebalance delay; on a cluster, three nodes with it."""
    with expressible(client_name):
        require_groups(client, client_name)
    if request.config.getoption("--bootstrap"):
        pytest.skip("needs a broker this test starts (group.initial.rebalance.delay.ms=500)")
    broker = broker_launcher(
        request.config.getoption("--broker"), tmp_path / "static", {"group.initial.rebalance.delay.ms": "500"}
    )
    bootstrap = broker.start()
    try:
        topic, group = "static-topic", f"static-group-{client_name}"
        admin.create_topic(bootstrap, topic, partitions=4, replication_factor=-1 if is_cluster(broker) else 1)
        session_ms = 20_000  # long enough for the restarted process to come back in time
        members.extend(
            MemberProcess(
                client_name, bootstrap, topic, group, session_ms=session_ms, instance_id=f"static-{i}"
            )
            for i in range(2)
        )
        wait_for(lambda: partitions_shared(members, 4), 60, "2 static members to share 4 partitions")
        wait_for(lambda: _static_members(bootstrap, group)[0] == "Stable", 30, "the group to be Stable")
        state, ids_before = _static_members(bootstrap, group)
        assert sorted(ids_before) == ["static-0", "static-1"], ids_before
        generation_before = _generation(bootstrap, group, "static-0", ids_before["static-0"])
        before, other = members[1].current, members[0].current
        members[1].kill()
        members[1] = MemberProcess(
            client_name, bootstrap, topic, group, session_ms=session_ms, instance_id="static-1"
        )
        wait_for(lambda: members[1].current, 60, "the restarted static member to get its assignment")
        assert members[1].current == before
        # The other member never lost its partitions (an eager rebalance would have revoked them).
        assert [a for _, a in members[0].assignments if a] == [other]
        assert members[0].current == other
        # The coordinator replaced the instance's member id and started no new generation.
        state, ids_after = _static_members(bootstrap, group)
        assert state == "Stable"
        assert ids_after["static-0"] == ids_before["static-0"]
        assert sorted(ids_after) == ["static-0", "static-1"] and ids_after["static-1"] != ids_before["static-1"]
        assert _generation(bootstrap, group, "static-0", ids_after["static-0"]) == generation_before
    finally:
        stop_all(members)
        broker.stop()


@pytest.mark.parametrize("admin_client", ["confluent", "java"])
def test_admin_lists_describes_and_deletes_groups(admin_client, bootstrap, make_topic, members) -> None:
    admin = make_client(admin_client)
    topic = make_topic(partitions=4)
    group = f"{topic}-group"
    produce_spread(admin, bootstrap, topic, 4, 3)
    members.extend(MemberProcess(admin_client, bootstrap, topic, group) for _ in range(2))
    wait_for(lambda: partitions_shared(members, 4), 60, "2 members to share 4 partitions")
    wait_for(
        lambda: admin.committed_offsets(bootstrap, group) == {(topic, p): 3 for p in range(4)}, 30, "commits"
    )

    assert admin.list_groups(bootstrap).get(group) == "STABLE"
    assert group in admin.list_groups(bootstrap, ["stable"])
    assert group not in admin.list_groups(bootstrap, ["empty"])
    described = admin.describe_group(bootstrap, group)
    assert described["state"] == "STABLE"
    assert described["protocol"] == "range"
    assert len(described["members"]) == 2
    owned = sorted(tp for m in described["members"].values() for tp in m["partitions"])
    assert owned == [(topic, p) for p in range(4)]
    assert all(m["host"] == "/127.0.0.1" for m in described["members"].values())

    with pytest.raises(ClientError) as refused:
        admin.delete_group(bootstrap, group)
    assert refused.value.error in {kafka_error_name(NON_EMPTY_GROUP), "NON_EMPTY_GROUP"}

    for m in members:
        m.stop()
    wait_for(lambda: admin.list_groups(bootstrap).get(group) == "EMPTY", 30, "the group to become empty")
    assert admin.describe_group(bootstrap, group)["members"] == {}
    admin.delete_group(bootstrap, group)
    assert group not in admin.list_groups(bootstrap)
    assert admin.committed_offsets(bootstrap, group) == {}
    with pytest.raises(ClientError) as missing:
        admin.delete_group(bootstrap, group)
    assert missing.value.error in {kafka_error_name(GROUP_ID_NOT_FOUND), "GROUP_ID_NOT_FOUND"}


def _revoked_after(events: list[dict[str, Any]], start: int) -> set[int]:
    return {p for e in events[start:] if e["event"] in ("revoked", "lost") for p in e["partitions"]}


@pytest.mark.parametrize("member_client", ["java", "confluent", "franz-go", "sarama"])
def test_cooperative_sticky_revokes_only_moved_partitions(
    member_client, bootstrap, admin, make_topic, members
) -> None:
    topic = make_topic(partitions=6)
    group = f"{topic}-group"
    produce_spread(admin, bootstrap, topic, 6, 2)
    first = MemberProcess(member_client, bootstrap, topic, group, assignor="cooperative-sticky")
    members.append(first)
    wait_for(lambda: first.current == list(range(6)), 60, "the first member to own all 6 partitions")
    wait_for(lambda: len(set(first.snapshot()[0])) == 12, 30, "the first member to consume every record")
    mark = len(first.snapshot()[1])

    second = MemberProcess(member_client, bootstrap, topic, group, assignor="cooperative-sticky")
    members.append(second)
    wait_for(lambda: partitions_shared(members, 6), 60, "2 cooperative members to share 6 partitions")
    _, events = first.snapshot()
    moved = set(second.current or [])
    kept = set(first.current or [])
    assert len(moved) == 3 and len(kept) == 3
    # Only the partitions that moved were revoked; the kept ones were never taken away, and the
    # first member's assignment never dropped to nothing (an eager rebalance revokes everything).
    assert _revoked_after(events, mark) == moved
    assert all(set(e["assignment"]) >= kept for e in events[mark:])
    second_revoked = _revoked_after(second.snapshot()[1], 0)
    assert second_revoked == set(), second_revoked

    # The second member leaves: its partitions come back to the first without revoking any.
    mark = len(first.snapshot()[1])
    second.stop()
    assert second.process.returncode == 0, second.stderr_tail()
    wait_for(lambda: first.current == list(range(6)), 30, "the first member to get all 6 back")
    assert _revoked_after(first.snapshot()[1], mark) == set()


@pytest.mark.parametrize("assignor", ["range", "cooperative-sticky"])
def test_mixed_java_and_librdkafka_group_shares_partitions(
    assignor, bootstrap, admin, make_topic, members
) -> None:
    topic = make_topic(partitions=4)
    group = f"{topic}-group"
    members.append(MemberProcess("java", bootstrap, topic, group, assignor=assignor))
    members.append(MemberProcess("confluent", bootstrap, topic, group, assignor=assignor))
    wait_for(
        lambda: partitions_shared(members, 4), 60, "a Java and a librdkafka member to share 4 partitions"
    )
    # Produced once the group is stable: each record must go to the one member owning its partition.
    produce_spread(admin, bootstrap, topic, 4, 3)
    wait_for(lambda: len({r for m in members for r in m.records}) == 12, 30, "every record consumed")
    seen = [r for m in members for r in m.snapshot()[0]]
    assert sorted(seen) == [(p, o) for p in range(4) for o in range(3)], (
        "a record was lost or processed twice"
    )
    for m in members:
        consumed = {p for p, _ in m.snapshot()[0]}
        assert consumed <= set(m.current or []), f"{m.client_name} consumed a partition it does not own"
    described = admin.describe_group(bootstrap, group)
    assert described["protocol"] == assignor
    assert {m["client_id"] for m in described["members"].values()} >= {"pybroker-compat-java"}


def test_commit_each_record_is_exactly_once_through_two_rebalances(
    client, client_name, bootstrap, admin, make_topic, members
) -> None:
    with expressible(client_name):
        require_groups(client, client_name)
        if client_name == "sarama":
            # Measured on Apache Kafka 4.3.1 as on pybroker: after the second rebalance the
            # adapter's synchronous per-record session.Commit() waits for sarama's Broker lock,
            # held by a long-poll Fetch on the same connection, and the member stops
            # (compat_tests/go/README.md has the goroutine dump's summary).
            raise NotSupportedByClient(
                "the sarama adapter's synchronous per-record commit stalls behind its own in-flight"
                " Fetch after a rebalance (on Apache Kafka too)"
            )
    partitions, wave = 6, 8  # records per partition per wave; three waves
    topic = make_topic(partitions=partitions)
    group = f"{topic}-group"

    def processed() -> list[tuple[int, int]]:
        return [r for m in members for r in m.snapshot()[0]]

    # 20 ms of "work" per record keeps records in flight while the group rebalances.
    produce_spread(admin, bootstrap, topic, partitions, wave)
    first = MemberProcess(client_name, bootstrap, topic, group, process_ms=20)
    members.append(first)
    wait_for(lambda: len(first.snapshot()[0]) >= 5, 60, "the first member to process records")
    second = MemberProcess(client_name, bootstrap, topic, group, process_ms=20)  # rebalance 1: a join
    members.append(second)
    wait_for(lambda: partitions_shared(members, partitions), 60, "2 members to share the partitions")
    produce_spread(admin, bootstrap, topic, partitions, wave)
    wait_for(lambda: len(second.snapshot()[0]) >= 1, 60, "the joined member to process records")
    first.stop()  # rebalance 2: a leave
    assert first.process.returncode == 0, first.stderr_tail()
    produce_spread(admin, bootstrap, topic, partitions, wave)
    total = 3 * wave * partitions
    try:
        wait_for(lambda: len(processed()) >= total, 60, f"{total} records processed in all")
    except AssertionError as e:
        state = [
            f"member {i}: {len(m.snapshot()[0])} records, assignment {m.current}, last events "
            f"{m.snapshot()[1][-3:]}, stderr: {m.stderr_tail()}"
            for i, m in enumerate(members)
        ]
        raise AssertionError(f"{e}; " + " | ".join(state)) from None
    done = processed()
    duplicates = sorted({r for r in done if done.count(r) > 1})
    assert not duplicates, f"processed more than once: {duplicates}"
    assert sorted(done) == [(p, o) for p in range(partitions) for o in range(3 * wave)]
    wait_for(
        lambda: (
            admin.committed_offsets(bootstrap, group) == {(topic, p): 3 * wave for p in range(partitions)}
        ),
        30,
        "committed offsets at the log end",
    )
    log.info(
        "%s: exactly once through join and leave: %d by the first member, %d by the second",
        client_name, len(first.records), len(second.records),
    )  # fmt: skip


def test_lag_per_partition_through_confluent_and_java_admin(bootstrap, admin, make_topic) -> None:
    java = make_client("java")
    topic = make_topic(partitions=3)
    group = f"{topic}-group"
    first_wave = {0: 10, 1: 7, 2: 4}
    admin.produce(
        bootstrap,
        topic,
        [Record(None, f"a{p}-{i}".encode(), partition=p) for p, n in first_wave.items() for i in range(n)],
    )
    assert len(_consume_committing(java, bootstrap, topic, group, sum(first_wave.values()))) == 21
    second_wave = {0: 5, 2: 2}
    admin.produce(
        bootstrap,
        topic,
        [Record(None, f"b{p}-{i}".encode(), partition=p) for p, n in second_wave.items() for i in range(n)],
    )
    expected_committed = {(topic, p): n for p, n in first_wave.items()}
    expected_lag = {(topic, p): second_wave.get(p, 0) for p in first_wave}
    for viewer in (admin, java):
        committed = viewer.committed_offsets(bootstrap, group)
        assert committed == expected_committed, viewer.name
        end = {(topic, p): viewer.list_offsets(bootstrap, topic, p, "latest").offset for p in first_wave}
        assert end == {(topic, p): first_wave[p] + second_wave.get(p, 0) for p in first_wave}, viewer.name
        lag = {tp: end[tp] - committed[tp] for tp in end}
        assert lag == expected_lag, viewer.name


# -- the member process -------------------------------------------------------------------------------
def _member_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="test_groups member")
    parser.add_argument("--client", required=True)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--session-ms", type=int, default=SESSION_MS)
    parser.add_argument("--instance-id", default=None)
    parser.add_argument("--assignor", default=None, help="partition.assignment.strategy; reports callbacks")
    parser.add_argument("--process-ms", type=int, default=0, help="simulated processing time per record")
    args = parser.parse_args(argv)
    stop = threading.Event()

    def watch_stdin() -> None:
        for line in sys.stdin:
            if line.strip() == "stop":
                break
        stop.set()

    threading.Thread(target=watch_stdin, daemon=True).start()

    def emit(event: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(event) + "\n")
        sys.stdout.flush()

    def on_record(partition: int, offset: int, value: bytes | None) -> bool:
        if args.process_ms:
            # Simulated work per record (not synchronisation): keeps records in flight across rebalances.
            stop.wait(args.process_ms / 1000)
        emit({"event": "record", "partition": partition, "offset": offset})
        return False

    common: dict[str, Any] = dict(
        on_assign=lambda partitions: emit({"event": "assigned", "partitions": partitions}),
        on_record=on_record,
        should_stop=stop.is_set,
        session_timeout_ms=args.session_ms,
        instance_id=args.instance_id,
    )
    client = make_client(args.client)
    if args.assignor:
        client.group_consume_events(
            args.bootstrap,
            args.topic,
            args.group,
            on_event=lambda detail: emit({"event": "rebalance", "detail": detail}),
            assignor=args.assignor,
            **common,
        )
    else:
        client.group_consume(args.bootstrap, args.topic, args.group, **common)
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "member":
        sys.exit(_member_main(sys.argv[2:]))
    sys.exit("usage: python -m compat_tests.scenarios.test_groups member --client NAME ...")
