"""One pybroker broker, two pybroker brokers (a ZooKeeper cluster, RF 1, leaders spread) and one stock
Apache Kafka broker under the same produce load: MB/s and the brokers' CPU-seconds per GB (issue 17's
"every core of a machine"). A benchmark: it prints, it never asserts a time.

    python -m bench.cluster_scaling                    # 3 interleaved runs, 1 GiB each, 8 partitions
    python -m bench.cluster_scaling --gib 0.25 --runs 1 --warmup-gib 0

pybroker runs one event loop per process, so one broker uses at most one core for its request path;
the production layout on an N-core machine is N brokers, each its own node with its own port, with
partition leadership spread by the controller. The load: ``--producers`` confluent-kafka producer
processes (1 KiB records, acks=1, round-robin over the partitions), all started together; MB/s is the
payload over the wall time of the slowest; CPU-s/GB sums every broker process (ZooKeeper is reported
apart: it is idle under produce). On a machine whose loaders share the brokers' cores, the CPU-s/GB
column is the broker's cost and the basis of the projection printed at the end: how many GB/s each
setup reaches per core it is given.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

from bench.confluent_load import produce
from bench.sysstat import cpu_seconds, machine_description
from bench.systems import make_broker
from compat_tests.pybroker_cluster import PyBrokerCluster

SETUPS = ("pybroker-1", "pybroker-2", "kafka-1")
RECORD = 1024


def _produce_worker(bootstrap: str, topic: str, records: int, out: Any) -> None:
    result = produce(bootstrap, topic, records, RECORD, "1")
    out.put(result.records)


def start(setup: str, workdir: Path) -> tuple[Any, str, list[int], int | None]:
    """(handle, bootstrap, broker pids, ZooKeeper pid)."""
    if setup == "pybroker-2":
        cluster = PyBrokerCluster(workdir, nodes=2, overrides={"default.replication.factor": "1",
                                                                "offsets.topic.replication.factor": "1"})
        bootstrap = cluster.start()
        return cluster, bootstrap, [cluster.pid(n) for n in cluster.node_ids()], cluster.zookeeper.pid
    broker = make_broker("kafka" if setup == "kafka-1" else "pybroker", workdir)
    bootstrap = broker.start()
    assert broker.pid is not None
    return broker, bootstrap, [broker.pid], None


def _load(bootstrap: str, partitions: int, producers: int, gib: float) -> tuple[int, float]:
    """(records written, wall seconds) of ``producers`` processes writing ``gib`` to a new topic."""
    topic = f"scaling-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(timeout=60)
    time.sleep(2)  # leaders elected and known to every broker
    records = int(gib * 2**30 / RECORD) // producers
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    workers = [ctx.Process(target=_produce_worker, args=(bootstrap, topic, records, out)) for _ in range(producers)]
    started = time.perf_counter()
    for w in workers:
        w.start()
    done = sum(out.get(timeout=1800) for _ in workers)
    elapsed = time.perf_counter() - started
    for w in workers:
        w.join(60)
    return done, elapsed


def run_one(setup: str, gib: float, partitions: int, producers: int, warmup_gib: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix=f"scaling-{setup}-") as tmp:
        handle, bootstrap, pids, zk_pid = start(setup, Path(tmp))
        try:
            if warmup_gib > 0:  # untimed: Kafka's JIT compiles its hot paths, page cache and sockets warm
                _load(bootstrap, partitions, producers, warmup_gib)
            cpu0 = [cpu_seconds(p) for p in pids]
            zk0 = cpu_seconds(zk_pid) if zk_pid else 0.0
            done, elapsed = _load(bootstrap, partitions, producers, gib)
            cpu = sum(cpu_seconds(p) for p in pids) - sum(cpu0)
            zk_cpu = (cpu_seconds(zk_pid) - zk0) if zk_pid else 0.0
        finally:
            handle.stop()
    gb = done * RECORD / 1e9
    return {"mb_s": gb * 1000 / elapsed, "cpu_s_per_gb": cpu / gb, "zk_cpu_s": zk_cpu}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.cluster_scaling", description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--producers", type=int, default=2)
    parser.add_argument("--warmup-gib", type=float, default=0.25, help="untimed load first (default 0.25 GiB)")
    parser.add_argument("--setups", default=",".join(SETUPS))
    args = parser.parse_args(argv)
    setups = [s for s in args.setups.split(",") if s]
    results: dict[str, list[dict[str, float]]] = {s: [] for s in setups}
    for run in range(1, args.runs + 1):
        for setup in setups:  # interleaved: drift hits every setup alike
            r = run_one(setup, args.gib, args.partitions, args.producers, args.warmup_gib)
            results[setup].append(r)
            print(f"run {run}: {setup:10} {r['mb_s']:8.1f} MB/s  {r['cpu_s_per_gb']:5.2f} CPU s/GB"
                  f"  (ZooKeeper {r['zk_cpu_s']:.1f} CPU s)", flush=True)  # fmt: skip
    print(f"\n{machine_description()}; {args.gib:g} GiB of 1 KiB records per run, {args.partitions} partitions, "
          f"{args.producers} confluent-kafka producer processes, acks=1; medians of {args.runs} interleaved runs\n")  # fmt: skip
    print("| setup | MB/s | broker CPU s/GB | GB/s per broker core (1 / CPU s/GB) |")
    print("|---|---|---|---|")
    for setup, rs in results.items():
        mb = statistics.median(r["mb_s"] for r in rs)
        cpu = statistics.median(r["cpu_s_per_gb"] for r in rs)
        print(f"| {setup} | {mb:,.1f} | {cpu:.2f} | {1 / cpu:.2f} |")


if __name__ == "__main__":
    main()
