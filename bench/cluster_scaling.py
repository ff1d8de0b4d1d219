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
import statistics
import tempfile
from pathlib import Path

from bench.cluster_load import Running, add_arguments, interleaved, measure
from bench.sysstat import machine_description
from bench.systems import make_broker
from compat_tests.pybroker_cluster import PyBrokerCluster

SETUPS = ("pybroker-1", "pybroker-2", "kafka-1")


def start(setup: str, workdir: Path) -> Running:
    if setup == "pybroker-2":
        cluster = PyBrokerCluster(workdir, nodes=2, overrides={"default.replication.factor": "1",
                                                                "offsets.topic.replication.factor": "1"})
        bootstrap = cluster.start()
        return Running(bootstrap, [cluster.pid(n) for n in cluster.node_ids()], cluster.zookeeper.pid, cluster.stop)
    broker = make_broker("kafka" if setup == "kafka-1" else "pybroker", workdir)
    bootstrap = broker.start()
    assert broker.pid is not None
    return Running(bootstrap, [broker.pid], None, broker.stop)


def run_one(setup: str, gib: float, partitions: int, producers: int, warmup_gib: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix=f"scaling-{setup}-") as tmp:
        running = start(setup, Path(tmp))
        try:
            return measure(
                running, partitions=partitions, replication_factor=1, producers=producers, gib=gib,
                warmup_gib=warmup_gib, acks="1",
            )  # fmt: skip
        finally:
            running.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.cluster_scaling", description=__doc__.split("\n\n")[0])
    add_arguments(parser, SETUPS)
    args = parser.parse_args(argv)
    results = interleaved(args, SETUPS, run_one)
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
