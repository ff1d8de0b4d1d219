"""What TLS costs the fetch path: one broker with a PLAINTEXT and an SSL listener, the same topic
read from offset 0 by a confluent-kafka consumer over each, interleaved; the broker's MB/s and
CPU seconds per GB for each, and the SSL/PLAINTEXT ratios.

    python -m bench.tls_fetch                  # 128 MiB of 1 KiB records, 3 interleaved runs each
    python -m bench.tls_fetch --mib 512 --runs 5

Plaintext fetches go out with sendfile (zero copy); under TLS every byte is read into Python,
encrypted by OpenSSL and written, so the difference is the whole price of encryption on this path.
A benchmark, not a test: it prints medians and never asserts a time.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from bench.sysstat import cpu_seconds
from compat_tests.brokers import PyBroker, free_port
from pybroker.testing.certs import STORE_PASSWORD, CertificateAuthority

TOPIC = "tls-fetch"


def _fill(bootstrap: str, mib: int, record_size: int) -> int:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000, "acks": "1"})
    value = b"x" * record_size
    count = mib * 1024 * 1024 // record_size
    for _ in range(count):
        while True:
            try:
                producer.produce(TOPIC, value)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0
    return count


def _consume_all(conf: dict, count: int) -> float:
    consumer = Consumer({**conf, "group.id": f"bench-{time.monotonic_ns()}", "enable.auto.commit": False})
    consumer.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
    seen = 0
    started = time.perf_counter()
    while seen < count:
        for m in consumer.consume(10_000, 1.0):
            if m.error() is None:
                seen += 1
    elapsed = time.perf_counter() - started
    consumer.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=128)
    parser.add_argument("--record-size", type=int, default=1024)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pybroker-tls-bench-") as tmp:
        d = Path(tmp)
        ca = CertificateAuthority()
        ca_pem = ca.write_pem(d)
        p12 = ca.issue("localhost", server=True).write_pkcs12(d, "server")
        port, ssl_port = free_port(), free_port()
        broker = PyBroker(
            d / "broker",
            port=port,
            overrides={
                "listeners": f"PLAINTEXT://127.0.0.1:{port},SSL://127.0.0.1:{ssl_port}",
                "ssl.keystore.type": "PKCS12",
                "ssl.keystore.location": str(p12),
                "ssl.keystore.password": STORE_PASSWORD,
            },
        )
        broker.start()
        try:
            count = _fill(broker.bootstrap, args.mib, args.record_size)
            confs = {
                "PLAINTEXT": {"bootstrap.servers": broker.bootstrap},
                "SSL": {
                    "bootstrap.servers": f"127.0.0.1:{ssl_port}",
                    "security.protocol": "SSL",
                    "ssl.ca.location": str(ca_pem),
                },
            }
            results: dict[str, list[tuple[float, float]]] = {name: [] for name in confs}
            _consume_all(confs["PLAINTEXT"], count)  # warm the page cache and the broker
            for _ in range(args.runs):
                for name, conf in confs.items():
                    cpu0 = cpu_seconds(broker.pid)
                    elapsed = _consume_all(conf, count)
                    cpu = cpu_seconds(broker.pid) - cpu0
                    gb = args.mib / 1024
                    results[name].append((args.mib / elapsed, cpu / gb))
        finally:
            broker.stop()
    print(f"fetch of {args.mib} MiB in {args.record_size}-byte records, median of {args.runs} interleaved runs")
    print(f"{'listener':<10} {'MB/s':>8} {'broker CPU-s/GB':>16}")
    medians = {}
    for name, rows in results.items():
        mbs = statistics.median(r[0] for r in rows)
        cpu = statistics.median(r[1] for r in rows)
        medians[name] = (mbs, cpu)
        print(f"{name:<10} {mbs:>8.1f} {cpu:>16.2f}")
    (p_mbs, p_cpu), (s_mbs, s_cpu) = medians["PLAINTEXT"], medians["SSL"]
    print(f"SSL/PLAINTEXT: {s_mbs / p_mbs:.2f}x MB/s, {s_cpu / p_cpu:.2f}x CPU-s/GB")


if __name__ == "__main__":
    main()
