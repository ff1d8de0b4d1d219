"""Two classic-protocol members (librdkafka, confluent-kafka) that start together on a 4-partition
topic, on a broker of the kind under test started here with ``group.initial.rebalance.delay.ms``
set alike on pybroker and on Apache Kafka 4.3.1.

Kafka's classic group (GroupMetadataManager, 4.3.1): the first member's JoinGroup moves an Empty
group to PreparingRebalance and starts the initial delay; every member added meanwhile extends it
by another delay (bounded by the rebalance timeout); when it ends, the generation holds whoever has
joined, without waiting for members that were only handed an id (KIP-394 MEMBER_ID_REQUIRED). So:

- with a delay, two members starting together are both in the first generation: 2 partitions each;
- with delay 0 the first generation holds whoever joined before the (immediate) timer: measured on
  Kafka 4.3.1, 8 runs in 10 both members, 2 in 10 the first member alone (4 partitions) and the
  second one joining ~3 s later, at the first member's next heartbeat — librdkafka itself postpones
  the second member's JoinGroup until it has a connection for its metadata refresh. What holds on
  both brokers every time is that the second member's JoinGroup is answered, and both members own 2
  partitions, within one heartbeat interval of joining.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer

from compat_tests.brokers import PyBroker

from .support import CLUSTER_BROKERS, cluster_launcher, wait_for

LEDGER_COLUMN = "confluent"
PARTITIONS = 4
HEARTBEAT_S = 3.0  # librdkafka's heartbeat.interval.ms default


@pytest.fixture(scope="module", params=[0, 2000], ids=lambda d: f"delay-{d}ms")
def delayed_bootstrap(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    if request.config.getoption("--bootstrap"):
        pytest.skip("needs a broker started with a given group.initial.rebalance.delay.ms")
    delay_ms = request.param
    settings = {"group.initial.rebalance.delay.ms": str(delay_ms), "offsets.topic.num.partitions": "1"}
    workdir: Path = tmp_path_factory.mktemp(f"join-together-{delay_ms}")
    launcher: Any
    kind = request.config.getoption("--broker")
    if kind in CLUSTER_BROKERS:
        launcher = cluster_launcher(kind, workdir, settings)
    elif kind == "kafka":
        from compat_tests.reference.apache_kafka import ApacheKafka

        launcher = ApacheKafka(workdir, overrides=settings)
    else:
        launcher = PyBroker(workdir, overrides=settings)
    launcher.start()
    try:
        yield launcher.bootstrap, delay_ms
    finally:
        launcher.stop()


class Member:
    """A subscribed confluent-kafka consumer polling in a thread; records every assignment."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self.assignments: list[tuple[float, list[int]]] = []
        self._stop = threading.Event()
        self._consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
        )
        self._consumer.subscribe(
            [topic],
            on_assign=lambda _c, parts: self.assignments.append(
                (time.monotonic(), sorted(p.partition for p in parts))
            ),
        )
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._stop.is_set():
            self._consumer.poll(0.05)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self._consumer.close()

    @property
    def current(self) -> list[int] | None:
        return self.assignments[-1][1] if self.assignments else None


def _start_two(bootstrap: str, admin: Any) -> tuple[list[Member], float]:
    topic = f"compat-join-together-{uuid.uuid4().hex[:8]}"
    admin.create_topic(bootstrap, topic, partitions=PARTITIONS)
    group = f"{topic}-group"
    members = [Member(bootstrap, group, topic) for _ in range(2)]
    started = time.monotonic()
    for m in members:
        m.start()
    return members, started


def _shared(members: list[Member]) -> bool:
    current = [m.current for m in members]
    return all(current) and sorted(p for c in current for p in c) == list(range(PARTITIONS))  # type: ignore[union-attr]


def test_two_members_starting_together(delayed_bootstrap, admin) -> None:
    bootstrap, delay_ms = delayed_bootstrap
    members, started = _start_two(bootstrap, admin)
    try:
        wait_for(lambda: _shared(members), 30, "both members to share the 4 partitions")
        # Neither member is left out for long, and the final split is 2 + 2.
        assert sorted(len(m.current or []) for m in members) == [2, 2]
        last_first_assignment = max(m.assignments[0][0] for m in members)
        settled = min(t for t, parts in members[0].assignments if len(parts) == 2)
        assert last_first_assignment - started < delay_ms / 1000 + HEARTBEAT_S + 5
        assert settled - started < delay_ms / 1000 + HEARTBEAT_S + 5
        if delay_ms > 0:
            # The initial delay covered both arrivals: one generation, 2 partitions each, no revocation.
            assert [[len(parts) for _, parts in m.assignments] for m in members] == [[2], [2]]
    finally:
        for m in members:
            m.close()
