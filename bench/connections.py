"""Many concurrent client connections, each alternating a small Produce and a Fetch of what it wrote.

Raw Kafka requests over asyncio sockets (Produce v7, Fetch v11, encoded with pybroker's own codec
— the bytes are Kafka's wire format, so the same client drives Apache Kafka), one request in flight
per connection, so the figures are request rate and per-request latency under connection count.
"""

from __future__ import annotations

import asyncio
import struct
import time
from dataclasses import dataclass

from bench.stats import percentile
from compat_tests.brokers import encode_request, split_bootstrap
from pybroker.protocol.api import REQUESTS, RESPONSES
from pybroker.protocol.codec import decode, encode
from pybroker.records.builder import SimpleRecord, build_batch

PRODUCE, FETCH = 0, 1
PRODUCE_VERSION, FETCH_VERSION = 7, 11


@dataclass(frozen=True)
class ConnectionsResult:
    connections: int
    requests: int
    seconds: float
    produce_p50_ms: float
    produce_p99_ms: float
    fetch_p50_ms: float
    fetch_p99_ms: float
    errors: int

    @property
    def requests_per_s(self) -> float:
        return self.requests / self.seconds


async def _roundtrip(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, frame: bytes) -> bytes:
    writer.write(frame)
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    return await reader.readexactly(size)


async def _client(
    bootstrap: str, topic: str, partition: int, seconds: float, produce_ms: list, fetch_ms: list
) -> int:
    """One connection; returns the number of error codes it got back."""
    host, port = split_bootstrap(bootstrap)
    reader, writer = await asyncio.open_connection(host, port)
    batch = build_batch([SimpleRecord(None, b"x" * 1024)])
    produce = encode(
        REQUESTS[PRODUCE],
        PRODUCE_VERSION,
        {
            "acks": 1,
            "timeout_ms": 30000,
            "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": batch}]}],
        },
    )
    errors = 0
    correlation = 0
    deadline = time.perf_counter() + seconds
    try:
        while time.perf_counter() < deadline:
            correlation += 1
            started = time.perf_counter()
            body = await _roundtrip(
                reader, writer, encode_request(PRODUCE, PRODUCE_VERSION, correlation, produce)
            )
            produce_ms.append((time.perf_counter() - started) * 1000)
            answer, _ = decode(RESPONSES[PRODUCE], PRODUCE_VERSION, body, 4)
            part = answer["responses"][0]["partition_responses"][0]
            errors += part["error_code"] != 0
            fetch = encode(
                REQUESTS[FETCH],
                FETCH_VERSION,
                {
                    "replica_id": -1,
                    "max_wait_ms": 0,
                    "min_bytes": 1,
                    "max_bytes": 65536,
                    "topics": [
                        {
                            "topic": topic,
                            "partitions": [
                                {
                                    "partition": partition,
                                    "fetch_offset": max(0, part["base_offset"]),
                                    "partition_max_bytes": 65536,
                                }
                            ],
                        }
                    ],
                },
            )
            correlation += 1
            started = time.perf_counter()
            body = await _roundtrip(reader, writer, encode_request(FETCH, FETCH_VERSION, correlation, fetch))
            fetch_ms.append((time.perf_counter() - started) * 1000)
            answer, _ = decode(RESPONSES[FETCH], FETCH_VERSION, body, 4)
            errors += answer["error_code"] != 0 or answer["responses"][0]["partitions"][0]["error_code"] != 0
    finally:
        writer.close()
    return errors


async def _run(
    bootstrap: str, topic: str, partitions: int, connections: int, seconds: float
) -> ConnectionsResult:
    produce_ms: list[float] = []
    fetch_ms: list[float] = []
    started = time.perf_counter()
    errors = await asyncio.gather(
        *(
            _client(bootstrap, topic, i % partitions, seconds, produce_ms, fetch_ms)
            for i in range(connections)
        )
    )
    elapsed = time.perf_counter() - started
    produce_ms.sort()
    fetch_ms.sort()
    return ConnectionsResult(
        connections=connections,
        requests=len(produce_ms) + len(fetch_ms),
        seconds=elapsed,
        produce_p50_ms=percentile(produce_ms, 0.5),
        produce_p99_ms=percentile(produce_ms, 0.99),
        fetch_p50_ms=percentile(fetch_ms, 0.5),
        fetch_p99_ms=percentile(fetch_ms, 0.99),
        errors=sum(errors),
    )


def run(
    bootstrap: str, topic: str, partitions: int, connections: int = 100, seconds: float = 10
) -> ConnectionsResult:
    return asyncio.run(_run(bootstrap, topic, partitions, connections, seconds))
