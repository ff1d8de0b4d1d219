"""`pybroker produce TOPIC`: a console producer. One record per line of stdin."""

from __future__ import annotations

import argparse
import random
import sys
import time

from pybroker.cli.client import PRODUCE, BrokerError, CliError, KafkaClient, check
from pybroker.cli.common import Progress, connect, emit_json, out, parse_pairs
from pybroker.records.builder import SimpleRecord, build_batch
from pybroker.records.compression import CompressionType

FORMATTER = argparse.RawDescriptionHelpFormatter
EPILOG = """\
Each line of stdin is one record's value. With --key-separator, a line is KEY<SEP>VALUE. Records
with a key go to the partition Kafka's default partitioner picks (murmur2 of the key); records
without a key go to one partition per batch, as Kafka's sticky partitioner does.

examples:
  echo hello | pybroker produce orders
  printf 'k1:v1\\nk2:v2\\n' | pybroker produce orders --key-separator :
  pybroker produce orders -k user-7 -H trace=abc -H source=cli -p 2 < values.txt
"""
BATCH_RECORDS = 500
BATCH_BYTES = 512 * 1024
COMPRESSIONS = {
    "none": CompressionType.NONE,
    "gzip": CompressionType.GZIP,
    "snappy": CompressionType.SNAPPY,
    "lz4": CompressionType.LZ4,
    "zstd": CompressionType.ZSTD,
}


def add_parser(commands: argparse._SubParsersAction, parent: argparse.ArgumentParser) -> None:
    produce = commands.add_parser(
        "produce",
        parents=[parent],
        help="produce records from stdin, one per line",
        description="Produce records read from stdin, one per line.",
        epilog=EPILOG,
        formatter_class=FORMATTER,
    )
    produce.add_argument("topic", metavar="TOPIC")
    produce.add_argument("-k", "--key", help="the key of every record")
    produce.add_argument(
        "-H", "--header", action="append", default=[], metavar="KEY=VALUE", help="a header (repeatable)"
    )
    produce.add_argument("-p", "--partition", type=int, help="produce to this partition")
    produce.add_argument("--key-separator", metavar="SEP", help="split each line into KEY SEP VALUE")
    produce.add_argument(
        "--acks", type=int, choices=(-1, 0, 1), default=-1, help="required acks (default -1: all)"
    )
    produce.add_argument(
        "-z", "--compression", choices=sorted(COMPRESSIONS), default="none", help="batch compression"
    )
    produce.add_argument("-q", "--quiet", action="store_true", help="do not print where each record went")
    produce.set_defaults(run=run_produce)


def murmur2(data: bytes) -> int:
    """Kafka's Utils.murmur2 (seed 0x9747b28c), as a signed 32-bit int."""
    m, r = 0x5BD1E995, 24
    length = len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    tail = length % 4
    base = length - tail
    if tail == 3:
        h ^= data[base + 2] << 16
    if tail >= 2:
        h ^= data[base + 1] << 8
    if tail >= 1:
        h ^= data[base]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, partitions: int) -> int:
    return (murmur2(key) & 0x7FFFFFFF) % partitions


class Producer:
    """Batches records per partition and sends each full batch to the partition's leader."""

    def __init__(self, client: KafkaClient, topic: str, acks: int, compression: int, timeout_ms: int) -> None:
        self.client = client
        self.topic = topic
        self.acks = acks
        self.compression = compression
        self.timeout_ms = timeout_ms
        self.leaders = client.leaders(topic)
        self.pending: dict[int, list[SimpleRecord]] = {}
        self.pending_bytes: dict[int, int] = {}
        self.sticky = random.randrange(len(self.leaders))
        self.results: list[tuple[int, int, SimpleRecord]] = []  # (partition, offset, record)

    def partition_of(self, record: SimpleRecord, explicit: int | None) -> int:
        if explicit is not None:
            if explicit not in self.leaders:
                raise BrokerError(3, f"partition {self.topic}-{explicit}")
            return explicit
        if record.key is not None:
            return partition_for_key(record.key, len(self.leaders))
        return sorted(self.leaders)[self.sticky]

    def add(self, record: SimpleRecord, partition: int) -> None:
        batch = self.pending.setdefault(partition, [])
        batch.append(record)
        size = self.pending_bytes.get(partition, 0) + len(record.value or b"") + len(record.key or b"") + 32
        self.pending_bytes[partition] = size
        if len(batch) >= BATCH_RECORDS or size >= BATCH_BYTES:
            self.send(partition)
            self.sticky = (self.sticky + 1) % len(self.leaders)

    def flush(self) -> None:
        for partition in sorted(self.pending):
            self.send(partition)

    def send(self, partition: int) -> None:
        records = self.pending.pop(partition, [])
        self.pending_bytes.pop(partition, None)
        if not records:
            return
        batch = build_batch(records, compression=self.compression)
        body = {
            "transactional_id": None,
            "acks": self.acks,
            "timeout_ms": self.timeout_ms,
            "topic_data": [{"name": self.topic, "partition_data": [{"index": partition, "records": batch}]}],
        }
        response = self.client.send(PRODUCE, body, node=self.leaders[partition])
        if self.acks == 0:
            self.results.extend((partition, -1, r) for r in records)
            return
        result = response["responses"][0]["partition_responses"][0]
        check(result["error_code"], f"Produce to {self.topic}-{partition}", result.get("error_message"))
        base = result["base_offset"]
        self.results.extend((partition, base + i, r) for i, r in enumerate(records))


def _records(args: argparse.Namespace, headers: tuple[tuple[str, bytes | None], ...]):
    key = args.key.encode() if args.key is not None else None
    separator = args.key_separator.encode() if args.key_separator else None
    for raw in sys.stdin.buffer:
        line = raw[:-1] if raw.endswith(b"\n") else raw
        if line.endswith(b"\r"):
            line = line[:-1]
        record_key = key
        if separator is not None:
            if separator not in line:
                raise CliError(f"line without the key separator {args.key_separator!r}: {line[:80]!r}")
            record_key, line = line.split(separator, 1)
        yield SimpleRecord(record_key, line, headers, int(time.time() * 1000))


def run_produce(args: argparse.Namespace) -> int:
    headers = tuple((k, v.encode()) for k, v in parse_pairs(args.header, "--header").items())
    progress = Progress(f"producing to {args.topic}")
    with connect(args) as client:
        producer = Producer(
            client, args.topic, args.acks, COMPRESSIONS[args.compression], int(args.timeout * 1000)
        )
        count = 0
        for record in _records(args, headers):
            producer.add(record, producer.partition_of(record, args.partition))
            count += 1
            progress.update(count)
            _report(args, producer)
        producer.flush()
        _report(args, producer)
    progress.finish(count)
    return 0


def _report(args: argparse.Namespace, producer: Producer) -> None:
    """Print where the records sent so far went, and forget them (stdin may be endless)."""
    results, producer.results = producer.results, []
    if args.quiet:
        return
    for partition, offset, record in results:
        if args.format == "json":
            emit_json(
                {
                    "topic": producer.topic,
                    "partition": partition,
                    "offset": offset,
                    "timestamp": record.timestamp_ms,
                }
            )
        else:
            out(f"Produced to partition {partition} at offset {offset}")
