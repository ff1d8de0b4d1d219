"""The failure run: writers, a nemesis schedule, recovery, and the checker (see __main__ for the CLI).

One run: create the topic (``partitions`` partitions, RF = cluster size, min.insync.replicas 2), start
the writers, play the faults one after another at evenly spaced times over ``duration`` (a fault that
overruns its slot delays the next; none starts after ``deadline_s``, 3 x duration by default), let the
writers run on for a cool-down, stop them, heal and restart everything, wait for full ISRs, read every partition, check.
"""

from __future__ import annotations

import logging
import random
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any, Protocol

from compat_tests.reference.kafka_probe import ProbeError, partition_states
from tools.chaos.checker import CheckResult, acks_in_window, check, produce_stall, read_partitions
from tools.chaos.probe import DeposedLeaderProbe
from tools.chaos.replicas import Fingerprint, read_fingerprints, wait_replicas_agree
from tools.chaos.workload import WRITERS, Writer, WriterLog

logger = logging.getLogger(__name__)

FAULT_KINDS = ("kill", "bounce", "controller-kill", "freeze", "cut")


class Cluster(Protocol):
    """What ApacheKafkaCluster and PyBrokerCluster both offer."""

    bootstrap: str
    kind: str
    # How long a dead or silent broker keeps its leadership: pybroker's ZooKeeper session
    # (zookeeper.session.timeout.ms), Kafka's broker.session.timeout.ms.
    session_timeout_s: float

    def node_ids(self) -> list[int]: ...
    def is_running(self, node_id: int) -> bool: ...
    def kill(self, node_id: int) -> None: ...
    def terminate(self, node_id: int) -> None: ...
    def freeze(self, node_id: int) -> None: ...
    def thaw(self, node_id: int) -> None: ...
    def restart(self, node_id: int, timeout_s: float = 120) -> None: ...
    def isolate(self, node_id: int) -> None: ...
    def heal(self, node_id: int) -> None: ...
    def active_controller(self) -> tuple[int, int]: ...
    def is_frozen(self, node_id: int) -> bool: ...
    def observer_port(self, node_id: int) -> int: ...
    def data_dir(self, node_id: int) -> Path: ...


@dataclass
class Options:
    topic: str = "chaos"
    partitions: int = 8
    duration: float = 300.0
    kills: int = 20
    bounces: int = 5
    controller_kills: int = 10
    freeze: int = 1
    partition_cut: int = 1
    acks: str = "all"
    unclean: bool = False
    writers: tuple[str, ...] = ("confluent", "aiokafka")
    rate: float = 200.0  # records/s per writer
    down_s: float = 2.0  # how long a killed or stopped node stays down
    freeze_s: float | None = None  # default: the cluster's session timeout + 7 s (past it, with a margin)
    cut_s: float = 30.0
    # Produce stall limits (issue 11): a kill or controller kill may stall the partitions the node led
    # until its session expires, plus this much; a clean bounce only ``bounce_stall_limit_s``. A frozen
    # or cut-off leader must be replaced within the same limit; the clients' own stall there also
    # depends on their request timeouts (a request to a silent broker is not answered), so it is
    # measured, not bounded.
    stall_margin_s: float = 5.0
    bounce_stall_limit_s: float = 3.0
    probe: bool = True  # send a write straight to a frozen / cut-off leader once it was deposed
    warmup_s: float = 5.0
    cooldown_s: float = 10.0
    recover_timeout_s: float = 90.0
    seed: int = 1
    # No fault starts after this many seconds (default: 3 x duration); faults that overrun their
    # slots on a loaded machine push the rest later rather than being dropped.
    deadline_s: float | None = None

    def max_duration(self) -> float:
        return self.deadline_s if self.deadline_s is not None else 3 * self.duration

    def freeze_seconds(self, session_timeout_s: float) -> float:
        return self.freeze_s if self.freeze_s is not None else session_timeout_s + 7.0

    def stall_limit(self, kind: str, session_timeout_s: float) -> float:
        """The bound of a fault's stall (kill, controller kill, bounce) or of its election (freeze, cut)."""
        return self.bounce_stall_limit_s if kind == "bounce" else session_timeout_s + self.stall_margin_s


@dataclass
class FaultEvent:
    kind: str
    node: int
    at: float  # monotonic time the fault was injected
    partitions: list[int]  # partitions the node led when the fault started
    started_s: float = 0.0  # seconds into the run
    held_s: float = 0.0  # how long the fault lasted (down, frozen or cut)
    recovered_s: float | None = None  # fault start -> all nodes serving and every ISR full again
    stall_s: float | None = None  # fault start -> a write sent after it acknowledged on every led partition
    stall_any_s: float | None = None  # fault start -> a write sent after it acknowledged on any partition
    deposed_at: float | None = None  # freeze / cut: monotonic time every partition it led had a new leader
    ended_at: float | None = None  # monotonic time the fault was lifted (restart, thaw, heal)
    probe: DeposedLeaderProbe | None = None
    # freeze / cut: the node's own log of each partition it led, read from its data directory just
    # before it was thawed or healed (nothing can write to it then); compared with the final log.
    held_log: dict[int, list[Fingerprint]] = field(default_factory=dict)
    notes: dict[str, Any] = field(default_factory=dict)


class Metadata:
    """Leaders and ISRs as the nodes themselves report them (Metadata v7 straight to each node's real
    port, past the fault proxies: the harness observes, it is not a client), merged by leader epoch.

    Asking one broker is not enough: a node just back from a freeze or a cut answers from a stale
    metadata cache (it still names itself leader), so every reachable node is asked, the newest
    leader epoch of each partition wins, and the cluster is "settled" only when all nodes agree."""

    def __init__(self, cluster: Cluster, topic: str) -> None:
        from confluent_kafka.admin import AdminClient

        self.cluster = cluster
        self.admin = AdminClient(
            {"bootstrap.servers": cluster.bootstrap, "logger": logging.getLogger("librdkafka.meta")}
        )
        self.topic = topic

    def views(self) -> dict[int, dict[int, dict[str, Any]]]:
        """{node: {partition: state}} of every node that is running, not frozen, and answers."""
        views = {}
        for node in self.cluster.node_ids():
            if not self.cluster.is_running(node) or self.cluster.is_frozen(node):
                continue
            try:
                views[node] = partition_states("127.0.0.1", self.cluster.observer_port(node), self.topic, 1.0)
            except (OSError, ProbeError, struct.error):
                continue
        return views

    def partitions(self, views: dict[int, dict[int, dict[str, Any]]] | None = None) -> dict[int, dict[str, Any]]:
        merged: dict[int, dict[str, Any]] = {}
        for view in (self.views() if views is None else views).values():
            for partition, state in view.items():
                if partition not in merged or state["leader_epoch"] > merged[partition]["leader_epoch"]:
                    merged[partition] = state
        return merged

    def leaders(self) -> dict[int, int]:
        return {p: int(state["leader"]) for p, state in self.partitions().items()}

    def settled(self, replication: int) -> bool:
        """Every node up and answering the same leader epochs, every partition led with its full ISR."""
        views = self.views()
        if set(views) != set(self.cluster.node_ids()):
            return False
        merged = self.partitions(views)
        if not merged:
            return False
        def summary(states: dict[int, dict[str, Any]]) -> dict[int, tuple[Any, ...]]:
            return {p: (s["leader_epoch"], s["leader"], sorted(s["isr"])) for p, s in states.items()}

        if any(summary(view) != summary(merged) for view in views.values()):
            return False
        return all(s["leader"] >= 0 and len(s["isr"]) >= replication for s in merged.values())

    def create_topic(self, partitions: int, replication: int, configs: dict[str, str]) -> None:
        from confluent_kafka.admin import NewTopic

        futures = self.admin.create_topics(
            [NewTopic(self.topic, num_partitions=partitions, replication_factor=replication, config=configs)],
            operation_timeout=30,
        )
        futures[self.topic].result(60)


def wait_healthy(cluster: Cluster, metadata: Metadata, replication: int, timeout_s: float) -> bool:
    """Every node running and caught up, every partition with a leader and its full ISR (bounded)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if metadata.settled(replication):
            return True
        time.sleep(0.5)  # poll interval of the health check
    return False


class Nemesis:
    def __init__(
        self, cluster: Cluster, metadata: Metadata, options: Options, replication: int,
        writer_logs: Callable[[], list[WriterLog]] = list,
    ) -> None:
        self.writer_logs = writer_logs
        self.cluster = cluster
        self.metadata = metadata
        self.options = options
        self.replication = replication
        self.random = random.Random(options.seed)
        self.events: list[FaultEvent] = []
        self.controller_epochs: list[tuple[int, int]] = []
        self.probe_readers: list[threading.Thread] = []

    def schedule(self) -> list[str]:
        o = self.options
        faults = (
            ["kill"] * o.kills + ["bounce"] * o.bounces + ["controller-kill"] * o.controller_kills
            + ["freeze"] * o.freeze + ["cut"] * o.partition_cut
        )  # fmt: skip
        self.random.shuffle(faults)
        return faults

    def _leader_target(self) -> tuple[int, list[int]]:
        """A random partition's leader and every partition it leads."""
        deadline = time.monotonic() + 30
        while True:
            leaders = {p: n for p, n in self.metadata.leaders().items() if n >= 0}
            if leaders or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        if not leaders:
            node = self.random.choice(self.cluster.node_ids())
            return node, []
        node = leaders[self.random.choice(sorted(leaders))]
        return node, sorted(p for p, n in leaders.items() if n == node)

    def run(self, started: float, end: float, deadline: float) -> int:
        """Play the schedule, spread over [start + warm-up, ``end``); a fault that overruns its slot
        delays the next; none starts after ``deadline``. Returns how many were skipped for time."""
        faults = self.schedule()
        if not faults:
            return 0
        span = max(0.0, end - started - self.options.warmup_s)
        for index, kind in enumerate(faults):
            due = started + self.options.warmup_s + span * index / len(faults)
            now = time.monotonic()
            if now >= deadline:
                return len(faults) - index
            if due > now:
                time.sleep(due - now)
            self.inject(kind, started)
        return 0

    def inject(self, kind: str, started: float) -> FaultEvent:
        o = self.options
        cluster = self.cluster
        if kind == "controller-kill":
            node, epoch = cluster.active_controller()
            partitions = sorted(p for p, n in self.metadata.leaders().items() if n == node)
            self.controller_epochs.append((node, epoch))
        else:
            node, partitions = self._leader_target()
        event = FaultEvent(kind, node, time.monotonic(), partitions, started_s=time.monotonic() - started)
        logger.info("fault %s on node %d (leads %s) at %.1fs", kind, node, partitions, event.started_s)
        if kind in ("kill", "controller-kill"):
            cluster.kill(node)
            if kind == "controller-kill":
                event.notes["controller_before"] = [node, epoch]
                event.notes["controller_after"] = self._next_controller(epoch)
            time.sleep(max(0.0, event.at + o.down_s - time.monotonic()))
            event.held_s = time.monotonic() - event.at
            event.ended_at = time.monotonic()
            cluster.restart(node)
        elif kind == "bounce":
            cluster.terminate(node)
            event.notes["stop_took_s"] = round(time.monotonic() - event.at, 2)
            time.sleep(o.down_s)
            event.held_s = time.monotonic() - event.at
            event.ended_at = time.monotonic()
            cluster.restart(node)
        elif kind in ("freeze", "cut"):
            hold = o.freeze_seconds(cluster.session_timeout_s) if kind == "freeze" else o.cut_s
            probe = None
            if o.probe and partitions:
                probe = DeposedLeaderProbe(node, cluster.observer_port(node), o.topic, partitions)
                probe.connect()  # while the node runs: after SIGSTOP the kernel still queues the request
            if kind == "freeze":
                cluster.freeze(node)
            else:
                cluster.isolate(node)
            # Held at least until new leaders exist (bounded by the election's limit), so the probe
            # always meets a deposed leader, even with a short --cut-seconds on a slow machine.
            elect_by = event.at + max(hold, o.stall_limit(kind, cluster.session_timeout_s))
            event.deposed_at = self._wait_deposed(node, partitions, elect_by)
            if event.deposed_at is not None:
                event.notes["new_leaders_after_s"] = round(event.deposed_at - event.at, 2)
                if probe is not None:
                    probe.send()
                    event.probe = probe
            time.sleep(max(0.0, event.at + hold - time.monotonic()))
            leaders = self.metadata.leaders()
            event.notes[f"leaders_while_{'frozen' if kind == 'freeze' else 'cut'}"] = {
                str(p): leaders.get(p) for p in partitions
            }
            event.held_log = {
                p: read_fingerprints(cluster.data_dir(node) / f"{o.topic}-{p}") for p in partitions
            }
            event.held_s = time.monotonic() - event.at
            event.ended_at = time.monotonic()
            if kind == "freeze":
                cluster.thaw(node)
            else:
                cluster.heal(node)
            if event.probe is not None:  # answered after SIGCONT (freeze) or by the request timeout (cut)
                reader = threading.Thread(target=event.probe.result, name=f"probe-{node}", daemon=True)
                reader.start()
                self.probe_readers.append(reader)
            elif probe is not None and probe.sock is not None:
                probe.sock.close()
        else:
            raise ValueError(f"unknown fault {kind!r}")
        if wait_healthy(cluster, self.metadata, self.replication, o.recover_timeout_s):
            event.recovered_s = time.monotonic() - event.at
        # The next fault waits until the writers are through this one too: a write sent after it was
        # acknowledged on every partition it hit (else the next fault's outage would add to its stall).
        deadline = time.monotonic() + o.recover_timeout_s
        while event.partitions and time.monotonic() < deadline:
            if produce_stall(self.writer_logs(), event.at, set(event.partitions)) is not None:
                event.notes["writes_resumed_s"] = round(time.monotonic() - event.at, 2)
                break
            time.sleep(0.5)  # poll interval: the writers acknowledge hundreds of records a second
        self.events.append(event)
        return event

    def _wait_deposed(self, node: int, partitions: list[int], until: float) -> float | None:
        """While ``node`` is frozen or cut off: the time every partition it led had another leader (as
        the nodes that still answer report it), or None if that did not happen before ``until``."""
        while time.monotonic() < until:
            leaders = self.metadata.leaders()
            if all(leaders.get(p, -1) not in (-1, node) for p in partitions):
                return time.monotonic()
            time.sleep(0.2)  # poll interval while the cluster elects
        return None

    def _next_controller(self, epoch: int, timeout_s: float = 30) -> list[int] | None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            node, new_epoch = self.cluster.active_controller()
            if new_epoch > epoch:
                self.controller_epochs.append((node, new_epoch))
                return [node, new_epoch]
            time.sleep(0.2)  # poll interval while the quorum elects
        return None


def restore(cluster: Cluster) -> None:
    """Whatever state a fault left: heal every cut, thaw every freeze, start every stopped node."""
    for node in cluster.node_ids():
        if getattr(cluster, "proxies", None) is not None:
            cluster.heal(node)
        cluster.thaw(node)
        if not cluster.is_running(node):
            cluster.restart(node)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def run(cluster: Cluster, options: Options) -> dict[str, Any]:
    replication = len(cluster.node_ids())
    metadata = Metadata(cluster, options.topic)
    configs = {"min.insync.replicas": "2", "unclean.leader.election.enable": str(options.unclean).lower()}
    metadata.create_topic(options.partitions, replication, configs)
    if not wait_healthy(cluster, metadata, replication, 60):
        raise RuntimeError("the topic never had a leader and a full ISR on every partition")
    writers: list[Writer] = [
        WRITERS[name](cluster.bootstrap, options.topic, options.partitions, options.acks, options.rate, i)
        for i, name in enumerate(options.writers)
    ]
    nemesis = Nemesis(
        cluster, metadata, options, replication, lambda: [log for writer in writers for log in writer.logs]
    )
    started = time.monotonic()
    for writer in writers:
        writer.start()
    skipped = 0
    try:
        skipped = nemesis.run(started, started + options.duration, started + options.max_duration())
        time.sleep(max(0.0, started + options.duration - time.monotonic()))
        time.sleep(options.cooldown_s)  # writes after the last fault: its stall needs them
    finally:
        for writer in writers:
            writer.stop()
        for writer in writers:
            writer.join(120)
        restore(cluster)
        for reader in nemesis.probe_readers:
            reader.join(90)
    elapsed = time.monotonic() - started
    healthy = wait_healthy(cluster, metadata, replication, options.recover_timeout_s)
    probes = [e.probe for e in nemesis.events if e.probe is not None]
    logs: list[WriterLog] = [log for writer in writers for log in writer.logs] + [p.log for p in probes]
    records = read_partitions(cluster.bootstrap, options.topic, options.partitions)
    result: CheckResult = check(logs, records)
    replicas = wait_replicas_agree(cluster, options.topic, options.partitions)
    final_logs = None
    if replicas["agree"]:  # then any node's log is the final log
        some = cluster.node_ids()[0]
        final_logs = {
            p: set(read_fingerprints(cluster.data_dir(some) / f"{options.topic}-{p}")) for p in range(options.partitions)
        }
    session = cluster.session_timeout_s
    for event in nemesis.events:
        event.stall_s = produce_stall(logs, event.at, set(event.partitions))
        event.stall_any_s = produce_stall(logs, event.at, None)
        limit = options.stall_limit(event.kind, session)
        event.notes["stall_limit_s"] = limit
        # What the limit bounds: the produce stall, or (freeze, cut) the time until new leaders.
        bounded = (
            (None if event.deposed_at is None else event.deposed_at - event.at)
            if event.kind in ("freeze", "cut") else event.stall_s
        )  # fmt: skip
        event.notes["stall_ok"] = bounded is not None and bounded <= limit if event.partitions else True
        if event.kind in ("freeze", "cut"):
            event.notes["deposed"] = deposed_verdict(event, logs, records, final_logs)
    # Per controller kill: the epoch of the controller killed, then of the one elected after it. Each
    # election must raise the epoch, and the series as a whole must never go back.
    epochs = [epoch for _, epoch in nemesis.controller_epochs]
    kills = [e.notes for e in nemesis.events if e.kind == "controller-kill"]
    elections_raise = all(n.get("controller_after") and n["controller_after"][1] > n["controller_before"][1] for n in kills)
    epochs_ok = elections_raise and all(a <= b for a, b in pairwise(epochs))
    deposed_acks = sum(len(e.notes["deposed"]["probe_acknowledged"]) for e in nemesis.events if "deposed" in e.notes)
    deposed_lost = sum(e.notes["deposed"]["lost"] for e in nemesis.events if "deposed" in e.notes)
    stalls_over = [
        {"kind": e.kind, "node": e.node, "stall_s": _round(e.stall_s), "limit_s": e.notes["stall_limit_s"],
         "new_leaders_after_s": e.notes.get("new_leaders_after_s")}
        for e in nemesis.events if not e.notes["stall_ok"]
    ]  # fmt: skip
    safety_ok = (
        result.ok() and not any(w.error for w in writers) and replicas["agree"] and epochs_ok
        and deposed_acks == 0 and deposed_lost == 0
    )  # fmt: skip
    return {
        "cluster": cluster.kind,
        "session_timeout_s": session,
        "options": {k: v for k, v in options.__dict__.items()},
        "elapsed_s": round(elapsed, 1),
        "healthy_at_end": healthy,
        "writer_errors": [repr(w.error) for w in writers if w.error is not None],
        "faults_requested": len(nemesis.schedule()),
        "faults_done": {kind: sum(e.kind == kind for e in nemesis.events) for kind in FAULT_KINDS},
        "faults_skipped_for_time": skipped,
        "controller_epochs": epochs,
        "controller_epochs_strictly_increasing": epochs_ok,
        "events": [
            {
                "kind": e.kind, "node": e.node, "started_s": round(e.started_s, 1), "partitions": e.partitions,
                "held_s": _round(e.held_s), "recovered_s": _round(e.recovered_s), "stall_s": _round(e.stall_s),
                "stall_any_s": _round(e.stall_any_s), **e.notes,
            }  # fmt: skip
            for e in nemesis.events
        ],
        "stalls": stall_table(nemesis.events),
        "stalls_over_limit": stalls_over,
        "check": result.as_dict(),
        "replicas": replicas,
        "deposed_leader_acks": deposed_acks,
        "safety_ok": safety_ok,
        "stalls_ok": not stalls_over and skipped == 0,
        "ok": safety_ok and not stalls_over and skipped == 0,
    }


def deposed_verdict(
    event: FaultEvent, logs: list[WriterLog], records: list[Any], final_logs: dict[int, set[Fingerprint]] | None
) -> dict[str, Any]:
    """A frozen or cut-off leader, once another leader was elected: what the probe sent straight to it
    got (must not be an acknowledgement), and every write the clients had acknowledged on its
    partitions from the election until the cluster settled again, checked against the final log (an
    ack from the deposed leader would be lost, or found at another offset, after it truncated)."""
    verdict: dict[str, Any] = {"new_leaders_elected": event.deposed_at is not None, "probe": None,
                               "probe_acknowledged": []}  # fmt: skip
    if event.probe is not None:
        verdict["probe"] = {str(p): answer for p, answer in event.probe.answers.items()}
        verdict["probe_acknowledged"] = event.probe.acknowledged
        if event.probe.answered_at is not None and event.ended_at is not None:
            # After SIGCONT a deposed leader that answers at once refused the write; one that
            # answers later appended it and waited for followers that no longer follow it.
            verdict["probe_answered_after_lifted_s"] = round(event.probe.answered_at - event.ended_at, 3)
        if event.probe.error:
            verdict["probe_error"] = event.probe.error
    since = event.deposed_at if event.deposed_at is not None else event.at
    until = event.at + (event.recovered_s if event.recovered_s is not None else event.held_s)
    verdict.update(acks_in_window(logs, records, set(event.partitions), since, until))
    # What the deposed node had that the final log does not (it must have truncated it: the replica
    # comparison shows its log now equals the others').
    if final_logs is not None:
        verdict["truncated_batches"] = {
            str(p): sum(1 for fp in held if fp not in final_logs.get(p, set()))
            for p, held in event.held_log.items()
        }
    return verdict


def stall_table(events: list[FaultEvent]) -> dict[str, dict[str, Any]]:
    """Per fault kind: every stall (seconds, in order), median and max."""
    table: dict[str, dict[str, Any]] = {}
    for kind in FAULT_KINDS:
        stalls = [e.stall_s for e in events if e.kind == kind and e.partitions]
        if not stalls:
            continue
        measured = sorted(s for s in stalls if s is not None)
        table[kind] = {
            "stalls_s": [_round(s) for s in stalls],
            "median_s": _round(measured[len(measured) // 2]) if measured else None,
            "max_s": _round(measured[-1]) if measured else None,
            "never_resumed": sum(s is None for s in stalls),
        }
    return table


def human_summary(summary: dict[str, Any]) -> str:
    check_ = summary["check"]
    lines = [
        f"cluster {summary['cluster']}, {summary['elapsed_s']} s, acks={summary['options']['acks']}, "
        f"writers {','.join(summary['options']['writers'])}, unclean={summary['options']['unclean']}, "
        f"session timeout {summary['session_timeout_s']} s",
        f"faults done {summary['faults_done']} (skipped for time: {summary['faults_skipped_for_time']})",
    ]
    for event in summary["events"]:
        verdict = f"limit {event['stall_limit_s']}s{'' if event['stall_ok'] else ' EXCEEDED'}"
        if event["kind"] in ("freeze", "cut"):
            verdict = f"new leaders after {event.get('new_leaders_after_s')}s, {verdict}"
        line = (
            f"  {event['started_s']:7.1f}s {event['kind']:<16} node {event['node']} leads {event['partitions']}: "
            f"held {event['held_s']}s, stall {event['stall_s']}s ({verdict}; any partition "
            f"{event['stall_any_s']}s), recovered {event['recovered_s']}s"
        )
        deposed = event.get("deposed")
        if deposed is not None:
            line += (
                f"; deposed leader: probe {deposed['probe']} "
                f"(answered {deposed.get('probe_answered_after_lifted_s')}s after the fault was lifted), client acks on its partitions after the election "
                f"{deposed['acknowledged']} (lost {deposed['lost']}, offset mismatch {deposed['offset_mismatch']}), "
                f"batches it truncated on return {deposed.get('truncated_batches')}"
            )
        lines.append(line)
    for kind, row in summary["stalls"].items():
        lines.append(f"stall {kind}: median {row['median_s']}s, max {row['max_s']}s, all {row['stalls_s']}")
    if summary["controller_epochs"]:
        lines.append(
            f"controller epochs before/after each controller kill {summary['controller_epochs']} "
            f"(every election raised the epoch, never back: {summary['controller_epochs_strictly_increasing']})"
        )
    lines.append(
        f"acknowledged {check_['acknowledged']}, failed {check_['failed']}, in log {check_['in_log']}: "
        f"lost {check_['lost']}, duplicated {check_['duplicated']}, reordered {check_['reordered']}, "
        f"offset mismatch {check_['offset_mismatch']}, wrong partition {check_['wrong_partition']}, "
        f"unacknowledged but present {check_['unacknowledged_present']}"
    )
    replicas = summary["replicas"]
    lines.append(
        f"replica logs identical on every node: {replicas['agree']}"
        + (f" (divergent partitions {replicas['divergent']})" if replicas["divergent"] else "")
        + f"; deposed-leader acknowledgements: {summary['deposed_leader_acks']}"
    )
    for example in check_["lost_examples"]:
        lines.append(f"  lost: {example}")
    if summary["writer_errors"]:
        lines.append(f"writer errors: {summary['writer_errors']}")
    if summary["stalls_over_limit"]:
        lines.append(f"stalls over their limit: {summary['stalls_over_limit']}")
    lines.append(
        "RESULT: "
        + ("OK" if summary["ok"] else "ANOMALIES FOUND")
        + f" (safety {'ok' if summary['safety_ok'] else 'VIOLATED'}, "
        + f"stalls {'within limits' if summary['stalls_ok'] else 'OVER LIMIT or faults skipped'})"
    )
    return "\n".join(lines)
