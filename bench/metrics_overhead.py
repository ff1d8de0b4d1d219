"""What the metrics cost on the produce path, in CPU time per request, in-process.

    python -m bench.metrics_overhead                 # 20,000 produce requests per mode, 5 rounds
    python -m bench.metrics_overhead --requests 2000 --rounds 1

A broker runs in this process on a temporary directory; the same Produce request (one 1 KiB-record
batch of 16 records, acks=1) is handed to a connection's dispatch ``--requests`` times, first with
request timing off (no metrics.listener: only the byte/record totals are counted), then on (what
``metrics.listener`` adds: two clock reads and a histogram bucket per request).  Rounds alternate
the two modes.  It reports process CPU time (less disturbed by other load on the machine than wall
time) per request: the median over rounds.  A benchmark: it prints, it never asserts a time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import struct
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from typing import Any

from compat_tests.brokers import free_port
from pybroker.broker import Broker
from pybroker.config import BrokerConfig
from pybroker.protocol import codec
from pybroker.protocol.api import REQUESTS
from pybroker.records.builder import SimpleRecord, build_batch
from pybroker.server import KafkaConnection

PRODUCE, VERSION = 0, 9
RECORDS_PER_BATCH = 16


class _NullTransport:
    """Takes the responses and drops them."""

    def write(self, data: Any) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def close(self) -> None:
        pass


def produce_frame(topic: str, partitions: int = 1) -> bytes:
    """A Produce request carrying one batch of RECORDS_PER_BATCH 1 KiB records to each of ``partitions``."""
    batch = build_batch([SimpleRecord(b"key", b"v" * 1024) for _ in range(RECORDS_PER_BATCH)])
    body = codec.encode(
        REQUESTS[PRODUCE],
        VERSION,
        {
            "transactional_id": None,
            "acks": 1,
            "timeout_ms": 30000,
            "topic_data": [{"name": topic, "partition_data": [{"index": i, "records": batch} for i in range(partitions)]}],
        },
    )
    client_id = b"bench"
    header = struct.pack(">hhih", PRODUCE, VERSION, 1, len(client_id)) + client_id + b"\x00"
    return header + body


@contextlib.asynccontextmanager
async def started_broker(prefix: str) -> AsyncIterator[Broker]:
    """An in-process broker on a fresh temporary log dir (one offsets partition), stopped on exit:
    the request-path benchmarks drive its KafkaConnection directly, without a socket."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        config = BrokerConfig(
            {
                "listeners": f"PLAINTEXT://127.0.0.1:{free_port()}",
                "log.dirs": tmp,
                "offsets.topic.num.partitions": "1",
            }
        )
        broker = Broker(config)
        await broker.start()
        try:
            yield broker
        finally:
            await broker.stop()


async def measure(requests: int, rounds: int) -> dict[str, list[float]]:
    async with started_broker("metrics-overhead-") as broker:
        broker.create_topic("bench", 1, {})
        conn = KafkaConnection(broker)
        conn.connection_made(_NullTransport())  # type: ignore[arg-type]  # as the server does, so the connection has its security context
        frame = memoryview(produce_frame("bench"))
        # Run against a tree from before the metrics (PYTHONPATH=<old checkout>) for the baseline.
        modes = (
            (("timing off", False), ("timing on", True))
            if hasattr(broker, "metrics")
            else (("no metrics", False),)
        )
        results: dict[str, list[float]] = {mode: [] for mode, _ in modes}
        for _ in range(rounds):
            for mode, timed in modes:
                if hasattr(broker, "metrics"):
                    broker.metrics.timed = timed
                start = time.process_time()
                for _ in range(requests):
                    parts = conn._handle(frame)
                    assert parts
                results[mode].append((time.process_time() - start) / requests)
        return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    results = asyncio.run(measure(args.requests, args.rounds))
    off = statistics.median(next(iter(results.values())))
    print(
        f"produce requests (1 batch of {RECORDS_PER_BATCH} x 1 KiB, acks=1), CPU us per request, median of {args.rounds}:"
    )
    for mode, values in results.items():
        med = statistics.median(values)
        print(f"  {mode:10s} {med * 1e6:8.2f} us   ({(med - off) / off * 100:+.1f}% vs the first)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
