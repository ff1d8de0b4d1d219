"""The produce load and the measurement the cluster benchmarks share (bench.cluster_scaling,
bench.cluster_replicated): a fresh topic, ``producers`` confluent-kafka producer processes started
together, MB/s over the wall time of the slowest, and the CPU seconds every broker process spent,
read from /proc (ZooKeeper's apart).

A running setup is described by ``Running``, whatever started it (one broker, a pybroker cluster
with ZooKeeper, an Apache Kafka KRaft cluster).
"""

from __future__ import annotations

import argparse
import multiprocessing
import queue
import time
import uuid
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

from bench.confluent_load import produce_timed
from bench.stats import percentile
from bench.sysstat import cpu_seconds, load_average

RECORD = 1024


@dataclass
class Running:
    """A started setup: where clients connect, the pids to measure, and how to stop it."""

    bootstrap: str
    broker_pids: list[int]
    zookeeper_pid: int | None
    stop: Callable[[], object]


def _produce_worker(bootstrap: str, topic: str, records: int, acks: str, out: Any) -> None:
    _elapsed, latencies_ms = produce_timed(bootstrap, topic, records, RECORD, acks)
    out.put((records, latencies_ms.tobytes()))


def create_topic(
    bootstrap: str, partitions: int, replication_factor: int, config: dict[str, str] | None = None,
    timeout_s: float = 60,
) -> str:  # fmt: skip
    """A new topic, returned once every partition has a leader and all its replicas in the ISR
    (as every broker in the bootstrap list sees it), so the timed load never waits on elections."""
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, replication_factor, config=config or {})])[topic].result(
        timeout=timeout_s
    )
    deadline = time.monotonic() + timeout_s
    for server in bootstrap.split(","):
        one = AdminClient({"bootstrap.servers": server})
        while True:
            if _fully_replicated(one.list_topics(topic, timeout=10).topics.get(topic), partitions, replication_factor):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"topic {topic} not fully replicated on {server} within {timeout_s} s")
            time.sleep(0.2)  # poll interval while the controller elects and followers join the ISR
    return topic


def _fully_replicated(described: Any, partitions: int, replication_factor: int) -> bool:
    """Every partition of the topic's metadata has a leader and ``replication_factor`` in-sync replicas."""
    if described is None or described.error is not None or len(described.partitions) != partitions:
        return False
    return all(p.leader >= 0 and len(p.isrs) == replication_factor for p in described.partitions.values())


@dataclass(frozen=True)
class ParallelLoad:
    records: int
    elapsed_s: float
    p50_ms: float
    p99_ms: float


def produce_parallel(bootstrap: str, topic: str, producers: int, gib: float, acks: str) -> ParallelLoad:
    """``producers`` processes write ``gib`` GiB of 1 KiB records between them; the latency
    percentiles are over every record of every producer (librdkafka's produce() to acknowledgement,
    so at saturation they include the time a record queued in the client)."""
    if producers < 1:
        raise ValueError(f"need at least one producer, got {producers}")
    records = int(gib * 2**30 / RECORD) // producers
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    args = (bootstrap, topic, records, acks, out)
    workers = [ctx.Process(target=_produce_worker, args=args) for _ in range(producers)]
    started = time.perf_counter()
    for w in workers:
        w.start()
    done = 0
    latencies = array("d")
    answers = 0
    deadline = started + 1800
    try:
        while answers < producers:
            try:
                count, raw = out.get(timeout=1.0)
            except queue.Empty:
                # A producer that died (an error, a refused setting) never answers: fail, do not wait.
                failed = [w.exitcode for w in workers if w.exitcode not in (None, 0)]
                if failed or time.perf_counter() > deadline:
                    raise RuntimeError(f"producer processes failed (exit codes {failed}) or timed out") from None
                continue
            answers += 1
            done += count
            latencies.frombytes(raw)
    except BaseException:
        for w in workers:
            if w.is_alive():
                w.terminate()
        raise
    elapsed = time.perf_counter() - started
    for w in workers:
        w.join(60)
    ordered = sorted(latencies)
    return ParallelLoad(done, elapsed, percentile(ordered, 0.50), percentile(ordered, 0.99))


def measure(
    running: Running, *, partitions: int, replication_factor: int, producers: int, gib: float,
    warmup_gib: float, acks: str, topic_config: dict[str, str] | None = None,
) -> dict[str, float]:  # fmt: skip
    """Warm up (untimed, its own topic: Kafka's JIT compiles its hot paths, page cache and sockets warm),
    then one measured load into a fresh topic: MB/s, broker CPU-s/GB, ZooKeeper CPU-s, p50/p99 ms."""
    if warmup_gib > 0:
        warm = create_topic(running.bootstrap, partitions, replication_factor, topic_config)
        produce_parallel(running.bootstrap, warm, producers, warmup_gib, acks)
    topic = create_topic(running.bootstrap, partitions, replication_factor, topic_config)
    zk = running.zookeeper_pid
    cpu0 = sum(cpu_seconds(p) for p in running.broker_pids)
    zk0 = cpu_seconds(zk) if zk else 0.0
    load = produce_parallel(running.bootstrap, topic, producers, gib, acks)
    cpu = sum(cpu_seconds(p) for p in running.broker_pids) - cpu0
    zk_cpu = (cpu_seconds(zk) - zk0) if zk else 0.0
    gb = load.records * RECORD / 1e9
    return {
        "mb_s": gb * 1000 / load.elapsed_s,
        "cpu_s_per_gb": cpu / gb,
        "zk_cpu_s": zk_cpu,
        "p50_ms": load.p50_ms,
        "p99_ms": load.p99_ms,
    }


def add_arguments(parser: argparse.ArgumentParser, setups: Sequence[str]) -> None:
    """The options every cluster benchmark takes (defaults: 3 runs of 1 GiB after 0.25 GiB of warm-up)."""
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--gib", type=float, default=1.0, help="GiB of 1 KiB records per measured run")
    parser.add_argument("--warmup-gib", type=float, default=0.25, help="untimed load after each start")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--producers", type=int, default=2)
    parser.add_argument("--setups", default=",".join(setups), help=f"of {', '.join(setups)}")


RunOne = Callable[[str, float, int, int, float], dict[str, float]]


def interleaved(args: argparse.Namespace, known: Sequence[str], run_one: RunOne) -> dict[str, list[dict[str, float]]]:
    """``args.runs`` rounds of every setup in turn (drift of the machine hits every setup alike),
    each printed as it ends; setup -> its runs' measurements."""
    setups = [s for s in args.setups.split(",") if s]
    unknown = [s for s in setups if s not in known]
    if unknown:
        raise SystemExit(f"unknown setups {unknown}; expected some of {', '.join(known)}")
    results: dict[str, list[dict[str, float]]] = {s: [] for s in setups}
    for run in range(1, args.runs + 1):
        for setup in setups:
            r = run_one(setup, args.gib, args.partitions, args.producers, args.warmup_gib)
            results[setup].append(r)
            print(f"run {run}: {setup:10} {r['mb_s']:8.1f} MB/s  {r['cpu_s_per_gb']:5.2f} broker CPU-s/GB  "
                  f"p50 {r['p50_ms']:.1f} ms  p99 {r['p99_ms']:.1f} ms  (ZooKeeper {r['zk_cpu_s']:.1f} CPU-s)  "
                  f"load average {load_average()}", flush=True)  # fmt: skip
    return results
