"""acks=all produce on 3 brokers with every partition replicated 3 times: a pybroker cluster (ZooKeeper +
3 ``pybroker serve``) beside a 3-node Apache Kafka 4.3.1 KRaft cluster in the same run (issue 11's
"acks=all produce MB/s on 3 brokers (RF 3)"). A benchmark: it prints, it never asserts a time.

    python -m bench.cluster_replicated                      # 3 interleaved runs of 1 GiB each
    python -m bench.cluster_replicated --setups pybroker-3 --gib 0.004 --warmup-gib 0.001 --runs 1  # CI smoke

Each setup: a topic of ``--partitions`` (8) partitions, replication factor 3, min.insync.replicas=2
(topic config, and the clusters' default), leaders spread by each controller; the load is
``--producers`` (2) confluent-kafka producer processes writing 1 KiB records with acks=all,
linger.ms=5, no compression, round-robin over the partitions, all started together; MB/s is the
payload over the wall time of the slowest. CPU-s/GB sums the CPU time of all three broker processes
(leader and follower work alike; ZooKeeper is reported apart). p50/p99 are librdkafka's per-record
produce()-to-acknowledgement latency over every record of every producer (at saturation, mostly time
queued in the client). Both get bench.systems' MATCHED_SETTINGS (1 GiB segments, no fsync per message).

Apache Kafka: 3 combined broker+controller nodes (compat_tests.reference.kafka_cluster), each JVM with
kafka-server-start.sh's stock flags unchanged, 1 GiB heap included (``STOCK``; printed in the output).

One cluster at a time: three 1 GiB JVMs idle beside a measured pybroker cluster still run KRaft
heartbeats, fetch sessions and GC, which on a small shared machine is CPU taken from the measured
setup, so a run starts a setup on fresh directories, warms it up (an untimed ``--warmup-gib`` load
into its own topic: Kafka's JIT, page cache, connections), measures, and stops it; the setups
alternate within every run so that drift of the machine hits both alike. The table gives medians.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from bench import processes
from bench.cluster_load import Running, add_arguments, interleaved, measure
from bench.stats import median, ratio
from bench.sysstat import load_average, machine_description
from bench.systems import MATCHED_SETTINGS
from compat_tests.pybroker_cluster import PyBrokerCluster

SETUPS = ("pybroker-3", "kafka-3")
NODES = 3
REPLICATION_FACTOR = 3
TOPIC_CONFIG = {"min.insync.replicas": "2"}
COLUMNS = ("mb_s", "cpu_s_per_gb", "p50_ms", "p99_ms")


def kafka_jvm_flags() -> str:
    from compat_tests.reference.apache_kafka import COMMON_JVM_OPTIONS, STOCK

    return f"{STOCK.describe()} {' '.join(COMMON_JVM_OPTIONS)}"


def start(setup: str, workdir: Path) -> Running:
    if setup == "pybroker-3":
        cluster = PyBrokerCluster(workdir, nodes=NODES, overrides=MATCHED_SETTINGS)
        bootstrap = cluster.start()
        return Running(bootstrap, [cluster.pid(n) for n in cluster.node_ids()], cluster.zookeeper.pid, cluster.stop)
    if setup == "kafka-3":
        from compat_tests.reference.apache_kafka import STOCK
        from compat_tests.reference.kafka_cluster import ApacheKafkaCluster

        kafka = ApacheKafkaCluster(workdir, nodes=NODES, overrides=MATCHED_SETTINGS, jvm=STOCK)
        bootstrap = kafka.start()
        return Running(bootstrap, [kafka.pid(n) for n in kafka.node_ids()], None, kafka.stop)
    raise ValueError(f"unknown setup {setup!r}; expected one of {', '.join(SETUPS)}")


def run_one(setup: str, gib: float, partitions: int, producers: int, warmup_gib: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix=f"replicated-{setup}-") as tmp:
        running = start(setup, Path(tmp))
        try:
            return measure(
                running, partitions=partitions, replication_factor=REPLICATION_FACTOR, producers=producers,
                gib=gib, warmup_gib=warmup_gib, acks="all", topic_config=TOPIC_CONFIG,
            )  # fmt: skip
        finally:
            running.stop()


def _cell(value: float, digits: int) -> str:
    return "–" if value != value else f"{value:,.{digits}f}"  # NaN: not measured


def table(results: dict[str, list[dict[str, float]]]) -> list[str]:
    """The markdown rows: one per setup (medians), then pybroker / Kafka."""
    lines = [
        "| system | MB/s | broker CPU-s/GB | p50 ack ms | p99 ack ms |",
        "|---|---|---|---|---|",
    ]
    medians = {s: {c: median(r[c] for r in rs) for c in COLUMNS} for s, rs in results.items()}
    names = {"pybroker-3": "pybroker, 3 brokers + ZooKeeper", "kafka-3": "Apache Kafka 4.3.1, 3 KRaft nodes"}
    for setup, m in medians.items():
        lines.append(f"| {names[setup]} | {_cell(m['mb_s'], 1)} | {_cell(m['cpu_s_per_gb'], 2)} | "
                     f"{_cell(m['p50_ms'], 1)} | {_cell(m['p99_ms'], 1)} |")  # fmt: skip
    if "pybroker-3" in medians and "kafka-3" in medians:
        p, k = medians["pybroker-3"], medians["kafka-3"]
        cells = " | ".join(_cell(ratio(p[c], k[c]), 2) + "×" for c in COLUMNS)
        lines.append(f"| pybroker / Kafka | {cells} |")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.cluster_replicated", description=__doc__.split("\n\n")[0])
    add_arguments(parser, SETUPS)
    args = parser.parse_args(argv)
    processes.sigterm_as_interrupt()  # a SIGTERM still runs the finally blocks that stop the clusters
    print(f"{machine_description()}; load average at start {load_average()}", flush=True)
    results = interleaved(args, SETUPS, run_one)
    print(f"\n{machine_description()}; load average at end {load_average()}")
    print(f"{args.gib:g} GiB of 1 KiB records per measured run after {args.warmup_gib:g} GiB of warm-up per start; "
          f"{args.partitions} partitions, RF {REPLICATION_FACTOR}, min.insync.replicas=2; {args.producers} "
          f"confluent-kafka producer processes, acks=all; one cluster up at a time; medians of {args.runs} "
          "interleaved runs")  # fmt: skip
    if "kafka-3" in results:
        print(f"Kafka JVM flags (each of the 3 nodes): {kafka_jvm_flags()}")
    print()
    print("\n".join(table(results)))


if __name__ == "__main__":
    main()
