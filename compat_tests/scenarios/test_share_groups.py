"""Share groups (KIP-932, "queues for Kafka") with Kafka's own ``KafkaShareConsumer`` (kafka-clients 4.3.1).

Every case runs against a broker started here with short share-group timings (``SHARE_SETTINGS``, given
alike to pybroker and to Apache Kafka with ``--broker kafka``): a 3 s acquisition lock, a delivery
limit of 3, a 15 s session (so a hung member's records go back when their locks run out, well before
the member is dropped). Apache Kafka 4.3.1 needs no switch for share groups: a freshly formatted
4.3.1 cluster has ``share.version=1``. Each group starts from the earliest offset
(``share.auto.offset.reset=earliest``, a group config set through IncrementalAlterConfigs).

Consumers are separate ``share-consume`` JVMs so one can be SIGKILLed like a crashed application; the
``control`` mode makes the consumer wait after each record for our accept/release/reject, so every
assertion is record by record: (offset, delivery count) in delivery order. ``test_share_consumer_confluent``
runs these cases again with confluent-kafka's (librdkafka's) share consumer.
"""

from __future__ import annotations

import base64
import json
import queue
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from compat_tests.clients.java43 import java43_command
from compat_tests.clients.share_consume import REPO_ROOT, share_consume_command
from compat_tests.scenarios.support import broker_launcher, is_cluster, restart_every_node, started_bootstrap

SHARE_SETTINGS = {
    "group.share.record.lock.duration.ms": "3000",
    "group.share.min.record.lock.duration.ms": "1000",
    "group.share.delivery.count.limit": "3",
    "group.share.heartbeat.interval.ms": "1000",
    "group.share.min.heartbeat.interval.ms": "1000",
    "group.share.session.timeout.ms": "15000",
    "group.share.min.session.timeout.ms": "6000",
    "offsets.topic.num.partitions": "1",
}
LOCK_S = 3.0
SESSION_S = 15.0  # group.share.session.timeout.ms
EVENT_TIMEOUT_S = 60.0


def _launcher(kind: str, workdir: Path) -> Any:
    return broker_launcher(kind, workdir, SHARE_SETTINGS)


@pytest.fixture(scope="module")
def share_bootstrap(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from started_bootstrap(request, tmp_path_factory.mktemp("share"), _launcher)


def _java(*args: str, stdin: str = "") -> list[dict[str, Any]]:
    result = subprocess.run(java43_command(*args), input=stdin, capture_output=True, text=True, timeout=120)
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    if result.returncode != 0:
        raise AssertionError(f"{args[0]} failed ({result.returncode}): {lines} {result.stderr[-2000:]}")
    return lines


@pytest.fixture
def share_topic(request: pytest.FixtureRequest, share_bootstrap: str) -> tuple[str, str]:
    """A fresh one-partition topic (RF 3 on a 3-node cluster) and a share group reading it from the earliest offset."""
    topic = f"share-{uuid.uuid4().hex[:8]}"
    group = f"sg-{uuid.uuid4().hex[:8]}"
    rf = "3" if request.config.getoption("--broker") in ("kafka-cluster", "pybroker-cluster") else "1"
    _java("create-topic", "--bootstrap", share_bootstrap, "--topic", topic, "--partitions", "1", "--replication-factor", rf)
    _java("alter-configs", "--bootstrap", share_bootstrap, "--group", group, "--set", "share.auto.offset.reset=earliest")
    return topic, group


def produce(bootstrap: str, topic: str, values: list[str]) -> list[int]:
    lines = "".join(json.dumps({"value": base64.b64encode(v.encode()).decode()}) + "\n" for v in values)
    return [d["offset"] for d in _java("produce", "--bootstrap", bootstrap, "--topic", topic, stdin=lines)]


class ShareConsumer:
    """One ``share-consume`` process: its JSON events on a queue, our acknowledgements on its stdin."""

    def __init__(
        self, bootstrap: str, topic: str, group: str, ack: str = "control", deadline_ms: int = 90_000,
        client: str = "java",
    ) -> None:  # fmt: skip
        argv = share_consume_command(
            client, "--bootstrap", bootstrap, "--topic", topic, "--group", group,
            "--ack", ack, "--deadline-ms", str(deadline_ms),
        )  # fmt: skip
        self.process = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            cwd=REPO_ROOT,
        )  # fmt: skip
        self.events: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.stderr: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()
        threading.Thread(target=lambda: self.stderr.extend(self.process.stderr), daemon=True).start()  # type: ignore[arg-type]

    def _pump(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.strip():
                self.events.put(json.loads(line))
        self.events.put(None)

    def next_event(self, timeout: float = EVENT_TIMEOUT_S) -> dict[str, Any] | None:
        try:
            event = self.events.get(timeout=timeout)
        except queue.Empty:
            return None
        if event is not None and "error" in event and "event" not in event:
            raise AssertionError(f"share consumer failed: {event} {''.join(self.stderr)[-2000:]}")
        return event

    def next_record(self, timeout: float = EVENT_TIMEOUT_S) -> tuple[int, int, str]:
        """(offset, delivery count, value) of the next delivered record."""
        deadline = time.monotonic() + timeout
        while True:
            event = self.next_event(max(deadline - time.monotonic(), 0.01))
            if event is None:
                raise AssertionError(f"no record within {timeout} s; stderr: {''.join(self.stderr)[-2000:]}")
            if event.get("event") == "record":
                return event["offset"], event["delivery_count"], base64.b64decode(event["value"]).decode()

    def no_record_for(self, seconds: float) -> bool:
        event = self.next_event(seconds)
        return event is None or event.get("event") != "record"

    def send(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def acknowledge(self, kind: str) -> None:
        self.send(kind)
        event = self.next_event()
        assert event is not None and event.get("event") == "acked" and event["type"] == kind, event

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(30)

    def stop(self) -> None:
        if self.process.poll() is None:
            try:
                self.send("stop")
                self.process.wait(30)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait(30)


@pytest.fixture
def share_client() -> str:
    """Which client's share consumer the cases run: Kafka's Java one here; ``test_share_consumer_confluent``
    runs these same cases with confluent-kafka's by overriding this fixture."""
    return "java"


@pytest.fixture
def consumers() -> Iterator[list[ShareConsumer]]:
    started: list[ShareConsumer] = []
    yield started
    for c in started:
        c.stop()


def test_explicit_accept_reject_release(share_bootstrap: str, share_topic: tuple[str, str], consumers: list[ShareConsumer], share_client: str) -> None:
    topic, group = share_topic
    assert produce(share_bootstrap, topic, ["a", "b", "c"]) == [0, 1, 2]
    c = ShareConsumer(share_bootstrap, topic, group, client=share_client)
    consumers.append(c)
    assert c.next_record() == (0, 1, "a")
    c.acknowledge("accept")
    assert c.next_record() == (1, 1, "b")
    c.acknowledge("reject")
    assert c.next_record() == (2, 1, "c")
    c.acknowledge("release")
    # the released record comes back with its delivery count raised; the rejected one never does
    assert c.next_record() == (2, 2, "c")
    c.acknowledge("accept")
    produce(share_bootstrap, topic, ["d"])
    assert c.next_record() == (3, 1, "d")
    c.acknowledge("accept")
    assert c.no_record_for(LOCK_S + 2)


def test_delivery_limit_archives(share_bootstrap: str, share_topic: tuple[str, str], consumers: list[ShareConsumer], share_client: str) -> None:
    topic, group = share_topic
    produce(share_bootstrap, topic, ["x"])
    c = ShareConsumer(share_bootstrap, topic, group, client=share_client)
    consumers.append(c)
    for attempt in (1, 2, 3):  # group.share.delivery.count.limit = 3
        assert c.next_record() == (0, attempt, "x")
        c.acknowledge("release")
    produce(share_bootstrap, topic, ["y"])
    # the third release reached the limit: offset 0 is archived, the next record is offset 1
    assert c.next_record() == (1, 1, "y")
    c.acknowledge("accept")
    assert c.no_record_for(LOCK_S + 2)


def _redelivery_case(
    bootstrap: str, topic: str, group: str, consumers: list[ShareConsumer], crash: str, share_client: str
) -> float:
    """A first consumer accepts r0, holds r1 and r2 (acquired in one fetch) and crashes; a second
    consumer gets r1 and r2 on their second delivery. Returns the seconds from the crash to r1."""
    produce(bootstrap, topic, ["r0", "r1", "r2"])
    first = ShareConsumer(bootstrap, topic, group, client=share_client)
    consumers.append(first)
    assert first.next_record() == (0, 1, "r0")
    first.acknowledge("accept")
    assert first.next_record() == (1, 1, "r1")
    second = ShareConsumer(bootstrap, topic, group, client=share_client)
    consumers.append(second)
    if crash == "kill":
        first.kill()
    else:
        first.process.send_signal(signal.SIGSTOP)
    crashed_at = time.monotonic()
    got = [second.next_record()]
    waited = time.monotonic() - crashed_at
    second.acknowledge("accept")
    got.append(second.next_record())
    second.acknowledge("accept")
    assert got == [(1, 2, "r1"), (2, 2, "r2")]
    assert second.no_record_for(LOCK_S + 2)
    if crash != "kill":
        first.kill()  # SIGKILL ends a stopped process too
    return waited


def test_killed_consumer_records_redelivered(
    share_bootstrap: str, share_topic: tuple[str, str], consumers: list[ShareConsumer], share_client: str
) -> None:
    """SIGKILL closes the consumer's connection: its acquired records are released (as Kafka's
    SharePartitionManager does when a share session's connection closes) and go to the other member."""
    _redelivery_case(share_bootstrap, *share_topic, consumers, "kill", share_client)


def test_hung_consumer_records_redelivered_after_lock(
    share_bootstrap: str, share_topic: tuple[str, str], consumers: list[ShareConsumer], share_client: str
) -> None:
    """SIGSTOP freezes the consumer with its connection open: only the acquisition lock running out
    (3 s, long before the 15 s session timeout drops the member) releases its records."""
    waited = _redelivery_case(share_bootstrap, *share_topic, consumers, "stop", share_client)
    # the locks were taken before the freeze; the frozen member's last heartbeat was at most 1 s before
    # it, so the session timeout would drop it (and release its records) only about 14 s on
    assert LOCK_S * 0.8 <= waited < SESSION_S - 3, waited


def test_several_consumers_share_one_partition(
    share_bootstrap: str, share_topic: tuple[str, str], consumers: list[ShareConsumer], share_client: str
) -> None:
    topic, group = share_topic
    members = [ShareConsumer(share_bootstrap, topic, group, ack="accept", client=share_client) for _ in range(3)]
    consumers.extend(members)
    values = [f"m{i}" for i in range(60)]
    produce(share_bootstrap, topic, values)
    seen: dict[int, list[tuple[int, int, str]]] = {i: [] for i in range(3)}
    deadline = time.monotonic() + EVENT_TIMEOUT_S
    while sum(len(s) for s in seen.values()) < len(values) and time.monotonic() < deadline:
        for i, m in enumerate(members):
            event = m.next_event(0.05)
            if event is not None and event.get("event") == "record":
                seen[i].append((event["offset"], event["delivery_count"], base64.b64decode(event["value"]).decode()))
    delivered = sorted(r for s in seen.values() for r in s)
    # every record exactly once, to one consumer, on its first delivery
    assert delivered == [(i, 1, f"m{i}") for i in range(60)]


def test_implicit_acknowledgement(share_bootstrap: str, share_topic: tuple[str, str], consumers: list[ShareConsumer], share_client: str) -> None:
    topic, group = share_topic
    produce(share_bootstrap, topic, ["i0", "i1", "i2"])
    c = ShareConsumer(share_bootstrap, topic, group, ack="implicit", client=share_client)
    consumers.append(c)
    assert [c.next_record() for _ in range(3)] == [(0, 1, "i0"), (1, 1, "i1"), (2, 1, "i2")]
    c.stop()  # commitSync + close: the records of the last poll are accepted
    later = ShareConsumer(share_bootstrap, topic, group, client=share_client)
    consumers.append(later)
    produce(share_bootstrap, topic, ["i3"])
    assert later.next_record() == (3, 1, "i3")
    later.acknowledge("accept")
    assert later.no_record_for(LOCK_S + 2)


def test_batches_larger_than_a_fetch_are_all_delivered(
    share_bootstrap: str, share_topic: tuple[str, str], consumers: list[ShareConsumer], share_client: str
) -> None:
    """About 12 MB in batches of about 1 MB: a ShareFetch reads at most its byte limit of the log, which
    ends inside a batch; every record must still be delivered, once (pybroker once failed the fetch)."""
    from confluent_kafka import Producer

    topic, group = share_topic
    count = 12_000
    producer = Producer(
        {"bootstrap.servers": share_bootstrap, "linger.ms": 200, "batch.size": 1 << 20, "message.max.bytes": 2 << 20}
    )
    for i in range(count):
        while True:
            try:
                producer.produce(topic, f"{i:08d}".encode() * 128)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0
    c = ShareConsumer(share_bootstrap, topic, group, ack="implicit", client=share_client)
    consumers.append(c)
    delivered = [c.next_record()[0] for _ in range(count)]
    assert sorted(delivered) == list(range(count))


def _restart(launcher: Any, topic: str) -> None:
    """Stop and start the broker; a 3-node cluster's nodes one after another (its state survives every
    share-partition leader and share coordinator moving)."""
    if not is_cluster(launcher):
        launcher.stop()
        launcher.start()
        return
    restart_every_node(launcher, [topic, "__share_group_state"])


def test_share_state_survives_a_broker_restart(request: pytest.FixtureRequest, tmp_path: Path, share_client: str) -> None:
    """Accepted and rejected records stay done and a released record keeps its delivery count across a
    broker restart: the share-partition state is durable (``__share_group_state``)."""
    if request.config.getoption("--bootstrap"):
        pytest.skip("restarts a broker of its own; an external --bootstrap cannot be restarted")
    launcher = _launcher(request.config.getoption("--broker"), tmp_path)
    launcher.start()
    consumers: list[ShareConsumer] = []
    try:
        bootstrap = launcher.bootstrap
        topic, group = f"share-{uuid.uuid4().hex[:8]}", f"sg-{uuid.uuid4().hex[:8]}"
        rf = "3" if request.config.getoption("--broker") in ("kafka-cluster", "pybroker-cluster") else "1"
        _java("create-topic", "--bootstrap", bootstrap, "--topic", topic, "--partitions", "1", "--replication-factor", rf)
        _java("alter-configs", "--bootstrap", bootstrap, "--group", group, "--set", "share.auto.offset.reset=earliest")
        produce(bootstrap, topic, ["s0", "s1", "s2", "s3"])
        c = ShareConsumer(bootstrap, topic, group, client=share_client)
        consumers.append(c)
        for expected, answer in [((0, 1, "s0"), "accept"), ((1, 1, "s1"), "reject"), ((2, 1, "s2"), "release"),
                                 ((3, 1, "s3"), "accept")]:
            assert c.next_record() == expected
            c.acknowledge(answer)
        assert c.next_record() == (2, 2, "s2")
        c.stop()  # releases s2 (its second delivery ends unaccepted)
        assert c.process.returncode == 0, "".join(c.stderr)[-2000:]
        _restart(launcher, topic)
        bootstrap = launcher.bootstrap
        again = ShareConsumer(bootstrap, topic, group, client=share_client)
        consumers.append(again)
        # only s2 is left, on its third delivery; s0 and s3 were accepted, s1 rejected
        assert again.next_record() == (2, 3, "s2")
        again.acknowledge("accept")
        assert again.no_record_for(LOCK_S + 2)
    finally:
        for consumer in consumers:
            consumer.stop()
        launcher.stop()
