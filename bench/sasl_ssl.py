"""Produce and consume over SASL_SSL (SCRAM-SHA-256 over TLS), pybroker beside Apache Kafka 4.3.1 with
the same TLS key store and SASL settings, in the same run (issue 14's security bench).

    python -m bench.sasl_ssl                               # 512 MiB of 1 KiB records, 3 interleaved runs
    python -m bench.sasl_ssl --mib 1024 --runs 5
    python -m bench.sasl_ssl --systems pybroker --mib 4 --runs 1 --warmup-mib 1   # the CI smoke size

Each broker gets a PLAINTEXT listener (set-up only) and a SASL_SSL listener; a confluent-kafka (librdkafka)
producer writes the records over SASL_SSL (acks=all, linger.ms=5), then a consumer reads them back from
offset 0 over SASL_SSL.  Apache Kafka runs with kafka-server-start.sh's JVM flags and is warmed up
first (as is pybroker) by the same load; runs are interleaved and the table gives medians of MB/s and of
the broker's CPU seconds per GB (its own process, read from /proc), and the ratio to Kafka.
The broker is pinned to one CPU and the loader to the others where the machine allows (bench.pinning).
A benchmark, not a test: it prints a table and never asserts a time.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from bench import pinning
from bench.stats import median, ratio
from bench.sysstat import cpu_seconds, load_average, machine_description
from bench.systems import broker_pid
from compat_tests.brokers import PyBroker, free_port
from pybroker.testing.certs import STORE_PASSWORD, CertificateAuthority

USER, PASSWORD = "bench", "bench-secret"
MECHANISM = "SCRAM-SHA-256"
RECORD_SIZE = 1024


def _settings(key_store: Path) -> dict[str, str]:
    return {
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(key_store),
        "ssl.keystore.password": STORE_PASSWORD,
        "sasl.enabled.mechanisms": MECHANISM,
        "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config": (
            "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        ),
        "offsets.topic.num.partitions": "1",
        "group.initial.rebalance.delay.ms": "0",
    }


def _start(system: str, workdir: Path, key_store: Path, sasl_port: int, plan: pinning.Pinning) -> Any:
    settings = _settings(key_store)
    if system == "kafka":
        from compat_tests.reference.apache_kafka import STOCK, ApacheKafka

        broker: Any = ApacheKafka(
            workdir, overrides=settings, jvm=STOCK, command_prefix=plan.broker_prefix(),
            extra_listeners={"SASL_SSL": ("SASL_SSL", sasl_port)},
        )
    else:
        port = free_port()
        listeners = f"PLAINTEXT://127.0.0.1:{port},SASL_SSL://127.0.0.1:{sasl_port}"
        broker = PyBroker(
            workdir, port=port, overrides={"listeners": listeners, **settings}, command_prefix=plan.broker_prefix()
        )
    broker.start()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    upsert = UserScramCredentialUpsertion(USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), PASSWORD.encode())
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(60)
    return broker


def _client_config(sasl_port: int, ca_pem: Path) -> dict[str, Any]:
    return {
        "bootstrap.servers": f"127.0.0.1:{sasl_port}",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": MECHANISM,
        "sasl.username": USER,
        "sasl.password": PASSWORD,
        "ssl.ca.location": str(ca_pem),
        "ssl.endpoint.identification.algorithm": "none",
    }


def _produce(config: dict[str, Any], topic: str, count: int) -> float:
    producer = Producer(
        {**config, "acks": "all", "linger.ms": 5, "queue.buffering.max.kbytes": 1_048_576,
         "queue.buffering.max.messages": 1_000_000}
    )
    failed: list[object] = []
    value = b"x" * RECORD_SIZE

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            failed.append(err)

    started = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, value, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(300) or failed:
        raise RuntimeError(f"produce over SASL_SSL failed: {failed[:3]}")
    return time.perf_counter() - started


def _consume(config: dict[str, Any], topic: str, count: int) -> float:
    consumer = Consumer({**config, "group.id": f"bench-{uuid.uuid4().hex}", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    seen = 0
    started = time.perf_counter()
    deadline = started + 600
    while seen < count:
        if time.perf_counter() > deadline:
            raise RuntimeError(f"consumed {seen} of {count} records over SASL_SSL in 600 s")
        for message in consumer.consume(10_000, 1.0):
            if message.error() is None:
                seen += 1
    elapsed = time.perf_counter() - started
    consumer.close()
    return elapsed


def _own_cpu() -> float:
    """CPU seconds of this process (the loader: librdkafka's threads and the Python calls)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _round(broker: Any, config: dict[str, Any], mib: int) -> dict[str, float]:
    """One produce then one consume of ``mib`` MiB into a fresh single-partition topic."""
    topic = f"sasl-ssl-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(60)
    count = mib * 1024 * 1024 // RECORD_SIZE
    gigabytes = count * RECORD_SIZE / 1e9
    pid = broker_pid(broker)
    cpu0, own0 = cpu_seconds(pid), _own_cpu()
    produce_s = _produce(config, topic, count)
    cpu1, own1 = cpu_seconds(pid), _own_cpu()
    consume_s = _consume(config, topic, count)
    cpu2, own2 = cpu_seconds(pid), _own_cpu()
    return {
        # The loader's share of its core: near 1.0 the client, not the broker, sets the pace.
        "produce_loader_busy": (own1 - own0) / produce_s,
        "consume_loader_busy": (own2 - own1) / consume_s,
        "produce_mb_s": count * RECORD_SIZE / 1e6 / produce_s,
        "produce_cpu_gb": (cpu1 - cpu0) / gigabytes,
        "consume_mb_s": count * RECORD_SIZE / 1e6 / consume_s,
        "consume_cpu_gb": (cpu2 - cpu1) / gigabytes,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--systems", default="pybroker,kafka")
    parser.add_argument("--mib", type=int, default=512, help="MiB of 1 KiB records per measured run")
    parser.add_argument("--warmup-mib", type=int, default=256, help="MiB moved once per system before measuring")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-pin", action="store_true")
    args = parser.parse_args(argv)
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    plan = pinning.plan(not args.no_pin)

    root = Path(tempfile.mkdtemp(prefix="bench-sasl-ssl-"))
    ca = CertificateAuthority()
    ca_pem = ca.write_pem(root)
    key_store = ca.issue("localhost", server=True).write_pkcs12(root, "server")
    brokers: dict[str, Any] = {}
    configs: dict[str, dict[str, Any]] = {}
    results: dict[str, list[dict[str, float]]] = {s: [] for s in systems}
    try:
        for system in systems:
            sasl_port = free_port()
            brokers[system] = _start(system, root / system, key_store, sasl_port, plan)
            configs[system] = _client_config(sasl_port, ca_pem)
        plan.pin_loaders()
        for system in systems:
            _round(brokers[system], configs[system], args.warmup_mib)
        for _ in range(args.runs):
            for system in systems:
                results[system].append(_round(brokers[system], configs[system], args.mib))
    finally:
        for broker in brokers.values():
            broker.stop()
        shutil.rmtree(root, ignore_errors=True)

    print(f"\n{machine_description()}; load average {load_average()}; {plan.describe()}")
    print(f"SASL_SSL ({MECHANISM}), 1 KiB records, {args.mib} MiB per run after {args.warmup_mib} MiB of warm-up, "
          f"medians of {args.runs} interleaved runs; CPU = the broker process's CPU seconds per GB\n")
    print("| system | produce MB/s | produce CPU-s/GB | consume MB/s | consume CPU-s/GB | loader busy (produce / consume) |")
    print("|---|---|---|---|---|---|")
    medians = {s: {k: median(r[k] for r in results[s]) for k in results[s][0]} for s in systems}
    for system in systems:
        m = medians[system]
        print(f"| {system} | {m['produce_mb_s']:.1f} | {m['produce_cpu_gb']:.2f} | {m['consume_mb_s']:.1f} | "
              f"{m['consume_cpu_gb']:.2f} | {m['produce_loader_busy']:.2f} / {m['consume_loader_busy']:.2f} |")
    if "kafka" in medians and "pybroker" in medians:
        p, k = medians["pybroker"], medians["kafka"]
        print(f"| pybroker / kafka | {ratio(p['produce_mb_s'], k['produce_mb_s']):.2f}× | "
              f"{ratio(p['produce_cpu_gb'], k['produce_cpu_gb']):.2f}× | {ratio(p['consume_mb_s'], k['consume_mb_s']):.2f}× | "
              f"{ratio(p['consume_cpu_gb'], k['consume_cpu_gb']):.2f}× | |")


if __name__ == "__main__":
    main()
