"""KIP-848 consumer groups (``group.protocol=consumer``) with stock clients: the Java client (4.4.0,
and 3.9.1's preview) and librdkafka (confluent-kafka).

The broker owns the session timeout and heartbeat interval of these groups, so every scenario runs
against a broker started here with short ones (``KIP848_SETTINGS``, given alike to pybroker and to
Apache Kafka with ``--broker kafka``): a SIGKILLed member is evicted 6 s after its last heartbeat.
Members run as separate processes (``python -m compat_tests.scenarios.test_consumer_protocol member``)
reusing test_groups' ``MemberProcess`` machinery, so one can be killed like a crashed application.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from compat_tests.clients.base import ClientError
from compat_tests.clients.errors import kafka_error_name
from compat_tests.clients.registry import make_client

from .support import (
    CLUSTER_BROKERS,
    broker_launcher,
    coordinator_node,
    is_cluster,
    kill9_and_start,
    kill_coordinator,
    started_bootstrap,
    wait_for,
)
from .test_groups import GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP, MemberProcess, partitions_shared, produce_spread

log = logging.getLogger(__name__)
REPO_ROOT = Path(__file__).resolve().parents[2]
SESSION_MS = 6000
# Kafka's defaults are 45 s / 5 s with the same minimums; both brokers get these instead.
KIP848_SETTINGS = {
    "group.consumer.session.timeout.ms": str(SESSION_MS),
    "group.consumer.min.session.timeout.ms": str(SESSION_MS),
    "group.consumer.heartbeat.interval.ms": "1000",
    "group.consumer.min.heartbeat.interval.ms": "1000",
    "offsets.topic.num.partitions": "1",
    "group.initial.rebalance.delay.ms": "0",
}
MEMBER_CLIENTS = ["java4", "confluent", "java"]  # java: kafka-clients 3.9.1, where KIP-848 is a preview


def _launcher(kind: str, workdir: Path) -> Any:
    return broker_launcher(kind, workdir, KIP848_SETTINGS)


@pytest.fixture(scope="module")
def kip848_bootstrap(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A broker of the kind under test with KIP848_SETTINGS (an external --bootstrap is used as is)."""
    yield from started_bootstrap(request, tmp_path_factory.mktemp("kip848"), _launcher)


@pytest.fixture
def topic_on(request: pytest.FixtureRequest, admin: Any, kip848_bootstrap: str, unique_topic: str) -> Any:
    # On a cluster, the brokers' default replication factor (3), as the session's make_topic does: an RF 1
    # topic would refuse acks=all writes there (min.insync.replicas=2).
    replication = -1 if request.config.getoption("--broker") in CLUSTER_BROKERS else 1

    def create(partitions: int) -> str:
        admin.create_topic(kip848_bootstrap, unique_topic, partitions=partitions, replication_factor=replication)
        return unique_topic

    return create


class ConsumerProtocolMember(MemberProcess):
    """test_groups' MemberProcess, running this module's member (``group.protocol=consumer``)."""

    def __init__(  # noqa: PLR0913 - the member's command line
        self,
        client_name: str,
        bootstrap: str,
        topic: str,
        group: str,
        *,
        remote_assignor: str | None = None,
        instance_id: str | None = None,
    ) -> None:
        self.name = instance_id or f"member-{uuid.uuid4().hex[:6]}"
        self.client_name = client_name
        args = [
            sys.executable, "-m", "compat_tests.scenarios.test_consumer_protocol", "member",
            "--client", client_name, "--bootstrap", bootstrap, "--topic", topic, "--group", group,
        ]  # fmt: skip
        if remote_assignor:
            args += ["--remote-assignor", remote_assignor]
        if instance_id:
            args += ["--instance-id", instance_id]
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
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._stderr: list[bytes] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        threading.Thread(target=lambda: self._stderr.extend(self.process.stderr), daemon=True).start()


@pytest.fixture
def members() -> Iterator[list[ConsumerProtocolMember]]:
    started: list[ConsumerProtocolMember] = []
    yield started
    for m in started:
        m.kill()


def _distinct(members: list[ConsumerProtocolMember]) -> set[tuple[int, int]]:
    return {r for m in members for r in m.snapshot()[0]}


@pytest.mark.parametrize("member_client", MEMBER_CLIENTS)
def test_three_members_share_six_partitions_then_a_crash_and_a_leave_hand_theirs_over(
    member_client, kip848_bootstrap, admin, topic_on, members
) -> None:
    bootstrap = kip848_bootstrap
    topic = topic_on(6)
    group = f"{topic}-group"
    produce_spread(admin, bootstrap, topic, 6, 5)
    members.extend(ConsumerProtocolMember(member_client, bootstrap, topic, group) for _ in range(3))
    wait_for(lambda: partitions_shared(members, 6), 90, "3 members to share 6 partitions without overlap")
    wait_for(lambda: len(_distinct(members)) == 30, 30, "every record consumed")
    assert all(len(m.current or []) == 2 for m in members), [m.current for m in members]

    crashed, rest = members[0], members[1:]
    crashed.kill()  # SIGKILL: no leave heartbeat, the session timeout must evict it
    t_crash = time.monotonic()
    wait_for(
        lambda: partitions_shared(rest, 6), SESSION_MS / 1000 + 20, "survivors to take over every partition"
    )
    took = time.monotonic() - t_crash
    log.info("%s: SIGKILL to full reassignment took %.2fs", member_client, took)
    # Not before the session expired (the broker cannot know earlier), and not much later either.
    assert SESSION_MS / 1000 - 1.5 <= took < SESSION_MS / 1000 + 15, took

    leaving, last = rest
    leaving.stop()  # a leave heartbeat (member epoch -1): its partitions move at once
    assert leaving.process.returncode == 0, leaving.stderr_tail()
    t_leave = time.monotonic()
    wait_for(lambda: last.current == list(range(6)), 20, "the last member to own all 6 partitions")
    took = time.monotonic() - t_leave
    log.info("%s: leave to full reassignment took %.2fs", member_client, took)
    assert took < SESSION_MS / 1000, "a graceful leave must not wait for the session timeout"


def _consume_committing(
    client_name: str, bootstrap: str, topic: str, group: str, stop_after: int
) -> list[int]:
    seen: list[int] = []

    def on_record(partition: int, offset: int, value: bytes | None) -> bool:
        seen.append(offset)
        return len(seen) >= stop_after

    deadline = time.monotonic() + 90
    make_client(client_name).group_consume(
        bootstrap,
        topic,
        group,
        on_assign=lambda partitions: None,
        on_record=on_record,
        should_stop=lambda: time.monotonic() > deadline,
        group_protocol="consumer",
    )
    return seen


@pytest.mark.parametrize("member_client", MEMBER_CLIENTS)
def test_commit_then_restart_resumes_exactly_after_last_commit(
    member_client, kip848_bootstrap, admin, topic_on
) -> None:
    topic = topic_on(1)
    group = f"{topic}-group"
    produce_spread(admin, kip848_bootstrap, topic, 1, 20)
    assert _consume_committing(member_client, kip848_bootstrap, topic, group, 8) == list(range(8))
    assert admin.committed_offsets(kip848_bootstrap, group) == {(topic, 0): 8}
    assert _consume_committing(member_client, kip848_bootstrap, topic, group, 12) == list(range(8, 20))
    assert admin.committed_offsets(kip848_bootstrap, group) == {(topic, 0): 20}


@pytest.mark.parametrize("member_client", ["java4", "confluent"])
def test_group_and_offsets_survive_broker_kill9(member_client, request, tmp_path) -> None:
    """A consumer group (its records, not only its offsets) survives a kill -9 of the broker. On a 3-node
    cluster the kill is of the group's coordinator: another node serves the group, from its replica of
    the __consumer_offsets partition, while the killed one is down."""
    if request.config.getoption("--bootstrap"):
        pytest.skip("needs a broker this test starts and kills (not an external --bootstrap)")
    broker = _launcher(request.config.getoption("--broker"), tmp_path / "kill9")
    bootstrap = broker.start()
    admin, viewer = make_client("confluent"), make_client("java4")
    try:
        topic, group = "kip848-kill9", f"kip848-kill9-{member_client}"
        cluster = is_cluster(broker)
        # On a cluster, the brokers' default replication factor (3): the topic outlives the killed node.
        admin.create_topic(bootstrap, topic, partitions=1, replication_factor=-1 if cluster else 1)
        produce_spread(admin, bootstrap, topic, 1, 20)
        assert _consume_committing(member_client, bootstrap, topic, group, 8) == list(range(8))
        if cluster:
            killed = kill_coordinator(broker, group)
            assert coordinator_node(broker, group) != killed
        else:
            bootstrap = kill9_and_start(broker)
        # The consumer group itself (its records, not only its offsets) came back.
        assert admin.list_group_types(bootstrap).get(group) == "CONSUMER"
        assert viewer.describe_group(bootstrap, group)["state"] == "EMPTY"
        assert admin.committed_offsets(bootstrap, group) == {(topic, 0): 8}
        assert _consume_committing(member_client, bootstrap, topic, group, 12) == list(range(8, 20))
        assert admin.committed_offsets(bootstrap, group) == {(topic, 0): 20}
    finally:
        broker.stop()


def test_mixed_java_and_librdkafka_members_share_partitions(
    kip848_bootstrap, admin, topic_on, members
) -> None:
    bootstrap = kip848_bootstrap
    topic = topic_on(4)
    group = f"{topic}-group"
    members.append(ConsumerProtocolMember("java4", bootstrap, topic, group))
    members.append(ConsumerProtocolMember("confluent", bootstrap, topic, group))
    wait_for(
        lambda: partitions_shared(members, 4), 90, "a Java and a librdkafka member to share 4 partitions"
    )
    # Produced once the group is stable: each record must go to the one member owning its partition.
    produce_spread(admin, bootstrap, topic, 4, 3)
    wait_for(lambda: len(_distinct(members)) == 12, 30, "every record consumed")
    seen = [r for m in members for r in m.snapshot()[0]]
    assert sorted(seen) == [(p, o) for p in range(4) for o in range(3)], (
        "a record was lost or processed twice"
    )
    for m in members:
        consumed = {p for p, _ in m.snapshot()[0]}
        assert consumed <= set(m.current or []), f"{m.client_name} consumed a partition it does not own"
    described = admin.describe_group(bootstrap, group)
    assert described["type"] == "CONSUMER"
    assert described["protocol"] == "uniform"
    assert {m["client_id"] for m in described["members"].values()} >= {"pybroker-compat-java"}


@pytest.mark.parametrize("member_client", ["java4", "confluent"])
def test_static_member_closed_and_restarted_gets_its_partitions_back_without_a_rebalance(
    member_client, request, tmp_path, members
) -> None:
    if request.config.getoption("--bootstrap"):
        pytest.skip("needs a broker this test starts with a longer session timeout")
    # A session long enough for a JVM to restart within it: the instance keeps its partitions meanwhile
    # (on a cluster, every node has it).
    broker = _launcher(request.config.getoption("--broker"), tmp_path / "static")
    broker.overrides["group.consumer.session.timeout.ms"] = "30000"
    bootstrap = broker.start()
    admin = make_client("confluent")
    try:
        topic = "kip848-static"
        group = f"kip848-static-{member_client}"
        admin.create_topic(bootstrap, topic, partitions=4)
        members.extend(
            ConsumerProtocolMember(member_client, bootstrap, topic, group, instance_id=f"static-{i}")
            for i in range(2)
        )
        wait_for(lambda: partitions_shared(members, 4), 90, "2 static members to share 4 partitions")
        before, other = members[1].current, members[0].current
        mark = len(members[0].assignments)
        members[1].stop()  # a static member's close leaves temporarily (member epoch -2)
        assert members[1].process.returncode == 0, members[1].stderr_tail()
        members[1] = ConsumerProtocolMember(member_client, bootstrap, topic, group, instance_id="static-1")
        wait_for(lambda: members[1].current, 60, "the restarted static member to get its assignment")
        assert members[1].current == before
        # The other member never lost nor gained a partition meanwhile.
        assert members[0].assignments[mark:] == []
        assert members[0].current == other
        described = admin.describe_group(bootstrap, group)
        assert sorted(m["instance_id"] for m in described["members"].values()) == ["static-0", "static-1"]
    finally:
        for m in members:
            m.kill()
        broker.stop()


@pytest.mark.parametrize("admin_client", ["confluent", "java4"])
def test_admin_lists_describes_and_deletes_a_consumer_group(
    admin_client, kip848_bootstrap, topic_on, members
) -> None:
    bootstrap = kip848_bootstrap
    viewer = make_client(admin_client)
    topic = topic_on(4)
    group = f"{topic}-group"
    produce_spread(viewer, bootstrap, topic, 4, 3)
    members.extend(
        ConsumerProtocolMember("confluent", bootstrap, topic, group, remote_assignor="range")
        for _ in range(2)
    )
    wait_for(lambda: partitions_shared(members, 4), 90, "2 members to share 4 partitions")
    wait_for(
        lambda: viewer.committed_offsets(bootstrap, group) == {(topic, p): 3 for p in range(4)}, 30, "commits"
    )
    wait_for(
        lambda: viewer.list_groups(bootstrap).get(group) == "STABLE", 20, "the group to be listed Stable"
    )
    assert group in viewer.list_groups(bootstrap, ["stable"])
    assert group not in viewer.list_groups(bootstrap, ["empty"])
    described = viewer.describe_group(bootstrap, group)  # ConsumerGroupDescribe
    assert described["type"] == "CONSUMER"
    assert described["state"] == "STABLE"
    assert described["protocol"] == "range"
    assert len(described["members"]) == 2
    owned = sorted(tp for m in described["members"].values() for tp in m["partitions"])
    assert owned == [(topic, p) for p in range(4)]
    # Range over sorted member ids: each member holds a contiguous pair.
    assert sorted(m["partitions"] for m in described["members"].values()) == [
        [(topic, 0), (topic, 1)],
        [(topic, 2), (topic, 3)],
    ]
    assert all(m["host"] == "/127.0.0.1" for m in described["members"].values())

    with pytest.raises(ClientError) as refused:
        viewer.delete_group(bootstrap, group)
    assert refused.value.error in {kafka_error_name(NON_EMPTY_GROUP), "NON_EMPTY_GROUP"}

    for m in members:
        m.stop()
    wait_for(lambda: viewer.list_groups(bootstrap).get(group) == "EMPTY", 30, "the group to become empty")
    assert viewer.describe_group(bootstrap, group)["members"] == {}
    viewer.delete_group(bootstrap, group)
    assert group not in viewer.list_groups(bootstrap)
    assert viewer.committed_offsets(bootstrap, group) == {}
    with pytest.raises(ClientError) as missing:
        viewer.delete_group(bootstrap, group)
    assert missing.value.error in {kafka_error_name(GROUP_ID_NOT_FOUND), "GROUP_ID_NOT_FOUND"}


# -- the member process -------------------------------------------------------------------------------
def _member_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="test_consumer_protocol member")
    parser.add_argument("--client", required=True)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--remote-assignor", default=None, help="group.remote.assignor (uniform, range)")
    parser.add_argument("--instance-id", default=None, help="group.instance.id (a static member)")
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
        emit({"event": "record", "partition": partition, "offset": offset})
        return False

    make_client(args.client).group_consume(
        args.bootstrap,
        args.topic,
        args.group,
        on_assign=lambda partitions: emit({"event": "assigned", "partitions": partitions}),
        on_record=on_record,
        should_stop=stop.is_set,
        instance_id=args.instance_id,
        group_protocol="consumer",
        remote_assignor=args.remote_assignor,
    )
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "member":
        sys.exit(_member_main(sys.argv[2:]))
    sys.exit("usage: python -m compat_tests.scenarios.test_consumer_protocol member --client NAME ...")
