"""Produce latency of one client while another connection writes large batches.

    python -m bench.produce_isolation                        # pybroker (this tree) and stock Kafka
    python -m bench.produce_isolation --systems pybroker --runs 3
    PYBROKER_LOG_WRITER_THREADS=0 python -m bench.produce_isolation --systems pybroker   # writes on the loop

A "bulk" producer (confluent-kafka in its own process: 16 KiB records, 1 MiB batches, acks=1, as fast
as it can) writes to one topic while a "probe" producer in this process sends one 1 KiB record at a
time to another topic (acks=1, linger.ms=0) and times each send to its acknowledgement.  A broker
that writes the bulk batches on its event loop makes the probe wait for them; one that writes them
on other threads does not.  Prints the probe's p50/p99/p99.9/max and the bulk producer's MB/s.  A
benchmark: it prints, it never asserts a time.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench import pinning, processes
from bench.stats import median, percentile
from bench.systems import make_broker

BULK = """
import sys, time
from confluent_kafka import Producer
p = Producer({"bootstrap.servers": sys.argv[1], "acks": "1", "linger.ms": 20, "batch.size": 1048576,
              "queue.buffering.max.kbytes": 1048576, "compression.type": "none", "enable.idempotence": False})
value = b"x" * 16384
end = time.time() + float(sys.argv[3])
sent = 0
while time.time() < end:
    try:
        p.produce(sys.argv[2], value)
        sent += 1
    except BufferError:
        p.poll(0.01)
    p.poll(0)
p.flush(60)
print(sent * len(value))
"""


def _probe(bootstrap: str, topic: str, count: int) -> list[float]:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 0, "enable.idempotence": False}
    )
    value = b"p" * 1024
    latencies: list[float] = []
    done: list[float] = []

    def acknowledged(err: object, msg: object) -> None:
        done.append(time.perf_counter())

    for _ in range(count):
        done.clear()
        started = time.perf_counter()
        producer.produce(topic, value, on_delivery=acknowledged)
        while not done:
            producer.poll(0.0005)
        latencies.append((done[0] - started) * 1000)
    producer.flush(10)
    return latencies


def run_once(system: str, probes: int, seconds: float, pins: pinning.Pinning) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix=f"isolation-{system}-") as tmp:
        broker = make_broker(system, Path(tmp), command_prefix=pins.broker_prefix())
        bootstrap = broker.start()
        try:
            admin = AdminClient({"bootstrap.servers": bootstrap})
            bulk_topic, probe_topic = f"bulk-{uuid.uuid4().hex[:8]}", f"probe-{uuid.uuid4().hex[:8]}"
            for t in admin.create_topics([NewTopic(bulk_topic, 1, 1), NewTopic(probe_topic, 1, 1)]).values():
                t.result(60)
            _probe(bootstrap, probe_topic, 200)  # connections and metadata warm
            baseline = _probe(bootstrap, probe_topic, probes)
            bulk = processes.start([sys.executable, "-c", BULK, bootstrap, bulk_topic, str(seconds)])
            time.sleep(min(2.0, seconds / 4))  # the bulk producer at full speed
            loaded = _probe(bootstrap, probe_topic, probes)
            output = processes.wait_output(bulk, seconds + 120, "bulk producer")
            bulk_bytes = int(output.strip().splitlines()[-1])
            ordered, idle = sorted(loaded), sorted(baseline)
            return {
                "idle p99": percentile(idle, 0.99),
                "p50": percentile(ordered, 0.50),
                "p99": percentile(ordered, 0.99),
                "p99.9": percentile(ordered, 0.999),
                "max": ordered[-1],
                "bulk MB/s": bulk_bytes / seconds / 1e6,
            }
        finally:
            processes.stop_all()
            broker.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.produce_isolation", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--systems", default="pybroker,kafka")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--probes", type=int, default=3000, help="probe sends per phase")
    parser.add_argument("--seconds", type=float, default=30.0, help="how long the bulk producer writes")
    parser.add_argument("--no-pin", action="store_true")
    args = parser.parse_args(argv)
    pins = pinning.plan(not args.no_pin)
    pins.pin_loaders()
    results: dict[str, list[dict[str, float]]] = {}
    for run in range(args.runs):
        for system in [s.strip() for s in args.systems.split(",") if s.strip()]:
            r = run_once(system, args.probes, args.seconds, pins)
            results.setdefault(system, []).append(r)
            print(f"run {run + 1} {system:8} " + "  ".join(f"{k} {v:.2f}" for k, v in r.items()), flush=True)
    keys = ["idle p99", "p50", "p99", "p99.9", "max", "bulk MB/s"]
    print("\n| system | runs | probe " + " | probe ".join(keys[:-1]) + " (ms) | bulk MB/s |")
    print("|---|---|" + "---|" * len(keys))
    for system, rs in results.items():
        print(f"| {system} | {len(rs)} | " + " | ".join(f"{median([r[k] for r in rs]):.2f}" for k in keys) + " |")


if __name__ == "__main__":
    main()
