"""The same loads as Kafka's tools, driven from Python through confluent-kafka (librdkafka).

- ``produce``: as fast as the client goes; the latency is librdkafka's own per-message
  produce-to-acknowledgement time (``Message.latency()``).
- ``consume``: every partition from offset 0 (the data was just written, so it is in page cache).

Each produce and consume runs in a fresh Python process (as each Kafka tool run is a fresh JVM), so no
measurement inherits the heap of the ones before it: run in the benchmark's own long-lived process,
after a 1 GiB produce queue had come and gone, the single-partition consume read at ~420 MB/s or at
~650 MB/s from one run to the next, the same on both brokers, and the benchmark runs Kafka first.
- ``end_to_end_at_rate``: a producer paced to a fixed rate and a consumer in another process; the
  send time travels inside each record, so the latency is produce → broker → fetch → consumer.

    python -m bench.confluent_load e2e-consumer ...   # the consumer half (started by the benchmark)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import struct
import sys
import time
from array import array

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from bench import processes
from bench.load_result import LoadResult
from bench.stats import percentile

# Latency records carry a flag byte and the send time (ns since the epoch; the consumer runs on
# the same machine, so both processes read the same clock).
_STAMP = struct.Struct(">BQ")
WARMUP, MEASURED = 0, 1


def _producer(bootstrap: str, acks: str, linger_ms: int, **extra: object) -> Producer:
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": acks,
            "linger.ms": linger_ms,
            "queue.buffering.max.kbytes": 1_048_576,
            "queue.buffering.max.messages": 1_000_000,
            "enable.idempotence": False,
            "compression.type": "none",
            **extra,
        }
    )


def _latency_summary(latencies_ms: array) -> tuple[float, float, float]:
    ordered = sorted(latencies_ms)
    return percentile(ordered, 0.50), percentile(ordered, 0.99), percentile(ordered, 0.999)


def produce(bootstrap: str, topic: str, records: int, record_size: int, acks: str) -> LoadResult:
    """``produce_here`` in a fresh process."""
    return _in_fresh_process(
        ["produce", "--bootstrap", bootstrap, "--topic", topic, "--records", str(records),
         "--record-size", str(record_size), "--acks", acks],
        timeout_s=max(600.0, records * record_size / 2e6),
    )  # fmt: skip


def consume(
    bootstrap: str, topic: str, records: int, record_size: int, partitions: int, timeout_s: float = 600
) -> LoadResult:
    """``consume_here`` in a fresh process."""
    return _in_fresh_process(
        ["consume", "--bootstrap", bootstrap, "--topic", topic, "--records", str(records),
         "--record-size", str(record_size), "--partitions", str(partitions), "--timeout", str(timeout_s)],
        timeout_s=timeout_s + 60,
    )  # fmt: skip


def _in_fresh_process(args: list[str], timeout_s: float) -> LoadResult:
    """Run one load in ``python -m bench.confluent_load`` (it inherits this process's CPU affinity) and
    read its LoadResult from the last line it prints."""
    child = processes.start([sys.executable, "-m", "bench.confluent_load", *args])
    try:
        out = processes.wait_output(child, timeout_s, f"confluent {args[0]}")
    finally:
        processes.stop(child)
    return LoadResult(**json.loads(out.strip().splitlines()[-1]))


def produce_here(bootstrap: str, topic: str, records: int, record_size: int, acks: str) -> LoadResult:
    elapsed, latencies_ms = produce_timed(bootstrap, topic, records, record_size, acks)
    p50, p99, p999 = _latency_summary(latencies_ms)
    return LoadResult(records, records / elapsed, record_size, p50, p99, p999)


def produce_timed(
    bootstrap: str, topic: str, records: int, record_size: int, acks: str, producer: Producer | None = None
) -> tuple[float, array]:
    """(seconds, every record's produce-to-acknowledgement latency in ms): for callers that merge the
    latencies of several producer processes before taking percentiles.  ``producer``: one made by
    ``_producer`` with extra settings (bench.loader_cost's statistics), else the benchmark's own."""
    if producer is None:  # (not ``or``: a Producer's truth is its queue length)
        producer = _producer(bootstrap, acks, linger_ms=5)
    latencies_ms = array("d")
    errors: list[object] = []

    def on_delivery(err: object, msg: object) -> None:
        if err is not None:
            errors.append(err)
        else:
            latencies_ms.append(msg.latency() * 1000)  # type: ignore[attr-defined]

    value = b"x" * record_size
    producer.produce(topic, value, on_delivery=on_delivery)  # connection and metadata, untimed
    producer.flush(30)
    del latencies_ms[:]  # the warm-up record's latency includes connecting
    started = time.perf_counter()
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, value, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.005)
    remaining = producer.flush(600)
    elapsed = time.perf_counter() - started
    if errors or remaining:
        raise processes.ToolError(f"confluent produce failed: {errors[:3]} (unsent {remaining})")
    return elapsed, latencies_ms


def _consumer(bootstrap: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-unused",  # assign(), not subscribe(): no group traffic
            "enable.auto.commit": False,
            "fetch.max.bytes": 52_428_800,
            "max.partition.fetch.bytes": 10_485_760,
            "queued.max.messages.kbytes": 1_048_576,
        }
    )


def consume_here(
    bootstrap: str, topic: str, records: int, record_size: int, partitions: int, timeout_s: float = 600
) -> LoadResult:
    consumer = _consumer(bootstrap)
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    got = 0
    started = time.perf_counter()
    deadline = started + timeout_s
    try:
        while got < records and time.perf_counter() < deadline:
            # Never ask for more than is left: consume() waits its whole timeout for a full batch.
            for message in consumer.consume(num_messages=min(10_000, records - got), timeout=1.0):
                if message.error():
                    raise processes.ToolError(f"confluent consume error: {message.error()}")
                got += 1
        elapsed = time.perf_counter() - started
    finally:
        consumer.close()
    if got < records:
        raise processes.ToolError(f"confluent consume got {got} of {records} records")
    return LoadResult(got, got / elapsed, record_size)


def end_to_end_at_rate(
    bootstrap: str,
    topic: str,
    records: int,
    record_size: int,
    rate: float,
    acks: str,
    partitions: int,
    warmup_records: int = 1000,
) -> LoadResult:
    """Produce ``records`` at ``rate`` records/s while another process consumes them."""
    consumer = processes.start(
        [
            sys.executable, "-m", "bench.confluent_load", "e2e-consumer",
            "--bootstrap", bootstrap, "--topic", topic, "--partitions", str(partitions),
            "--records", str(warmup_records + records),
        ]
    )  # fmt: skip
    try:
        assert consumer.stdout is not None
        if consumer.stdout.readline().strip() != "ready":
            raise processes.ToolError("the end-to-end consumer did not start")
        producer = _producer(bootstrap, acks, linger_ms=1)
        padding = b"x" * max(0, record_size - _STAMP.size)
        for _ in range(warmup_records):
            producer.produce(topic, _STAMP.pack(WARMUP, time.time_ns()) + padding)
        producer.flush(60)
        started = time.perf_counter()
        sent = 0
        while sent < records:
            due = min(records, int((time.perf_counter() - started) * rate) + 1)
            while sent < due:
                try:
                    producer.produce(topic, _STAMP.pack(MEASURED, time.time_ns()) + padding)
                    sent += 1
                except BufferError:
                    producer.poll(0.001)
            producer.poll(0)
            ahead = sent / rate - (time.perf_counter() - started)
            if ahead > 0.0005:
                time.sleep(ahead)
        elapsed = time.perf_counter() - started
        if producer.flush(120):
            raise processes.ToolError("end-to-end producer could not deliver every record")
        summary = json.loads(processes.wait_output(consumer, 180, "end-to-end consumer").splitlines()[-1])
    finally:
        processes.stop(consumer)
    return LoadResult(
        summary["measured"],
        records / elapsed,
        record_size,
        summary["p50_ms"],
        summary["p99_ms"],
        summary["p999_ms"],
    )


def _e2e_consumer(bootstrap: str, topic: str, partitions: int, records: int) -> None:
    consumer = _consumer(bootstrap)
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    consumer.consume(num_messages=1, timeout=0.5)  # connected and fetching before the producer starts
    print("ready", flush=True)
    latencies_ms = array("d")
    got = 0
    deadline = time.monotonic() + 600
    while got < records and time.monotonic() < deadline:
        batch = consumer.consume(num_messages=min(10_000, records - got), timeout=1.0)
        now = time.time_ns()
        for message in batch:
            if message.error():
                raise SystemExit(f"consume error: {message.error()}")
            got += 1
            value = message.value()
            if value is None:
                raise SystemExit(f"a record without a value at offset {message.offset()}")
            flag, sent_ns = _STAMP.unpack_from(value)
            if flag == MEASURED:
                latencies_ms.append((now - sent_ns) / 1e6)
    consumer.close()
    p50, p99, p999 = _latency_summary(latencies_ms)
    print(json.dumps({"measured": len(latencies_ms), "p50_ms": p50, "p99_ms": p99, "p999_ms": p999}))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.confluent_load")
    commands = parser.add_subparsers(dest="command", required=True)
    e2e = commands.add_parser("e2e-consumer", help="consume and print end-to-end latency percentiles")
    e2e.add_argument("--bootstrap", required=True)
    e2e.add_argument("--topic", required=True)
    e2e.add_argument("--partitions", type=int, default=1)
    e2e.add_argument("--records", type=int, required=True)
    produce_cmd = commands.add_parser("produce", help="one produce load; prints its LoadResult as JSON")
    consume_cmd = commands.add_parser("consume", help="one consume load; prints its LoadResult as JSON")
    for command in (produce_cmd, consume_cmd):
        command.add_argument("--bootstrap", required=True)
        command.add_argument("--topic", required=True)
        command.add_argument("--records", type=int, required=True)
        command.add_argument("--record-size", type=int, required=True)
    produce_cmd.add_argument("--acks", required=True)
    consume_cmd.add_argument("--partitions", type=int, default=1)
    consume_cmd.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args(argv)
    if args.command == "e2e-consumer":
        _e2e_consumer(args.bootstrap, args.topic, args.partitions, args.records)
        return
    if args.command == "produce":
        result = produce_here(args.bootstrap, args.topic, args.records, args.record_size, args.acks)
    else:
        result = consume_here(args.bootstrap, args.topic, args.records, args.record_size, args.partitions, args.timeout)
    print(json.dumps(dataclasses.asdict(result)), flush=True)


if __name__ == "__main__":
    main()
