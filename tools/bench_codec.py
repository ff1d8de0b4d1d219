#!/usr/bin/env python3
"""Micro-benchmark of the protocol codec: prints µs per operation (never asserts a time).

Usage: python tools/bench_codec.py [--seconds 1.0]
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pybroker.protocol import codec  # noqa: E402
from pybroker.protocol.api import REQUESTS, RESPONSES  # noqa: E402


def produce_v9_request_frame() -> bytes:
    header = bytes.fromhex("0000 0009 00000001 0008") + b"producer" + b"\x00"
    body = codec.encode(
        REQUESTS[0],
        9,
        {
            "transactional_id": None,
            "acks": -1,
            "timeout_ms": 30000,
            "topic_data": [{"name": "events", "partition_data": [{"index": 0, "records": bytes(16 * 1024)}]}],
        },
    )
    return header + body


def fetch_v12_response() -> dict:
    partitions = [
        {
            "partition_index": index,
            "error_code": 0,
            "high_watermark": 1000 + index,
            "last_stable_offset": 1000 + index,
            "log_start_offset": 0,
            "aborted_transactions": None,
            "preferred_read_replica": -1,
            "records": bytes(1024),
        }
        for index in range(8)
    ]
    return {
        "throttle_time_ms": 0,
        "error_code": 0,
        "session_id": 0,
        "responses": [{"topic": "events", "partitions": partitions}],
    }


def metadata_v12_response() -> dict:
    topics = [
        {
            "error_code": 0,
            "name": f"topic-{index}",
            "topic_id": uuid.UUID(int=index + 1),
            "is_internal": False,
            "partitions": [
                {
                    "error_code": 0,
                    "partition_index": partition,
                    "leader_id": 1,
                    "leader_epoch": 0,
                    "replica_nodes": [1],
                    "isr_nodes": [1],
                    "offline_replicas": [],
                }
                for partition in range(3)
            ],
            "topic_authorized_operations": -2147483648,
        }
        for index in range(100)
    ]
    return {
        "throttle_time_ms": 0,
        "brokers": [{"node_id": 1, "host": "127.0.0.1", "port": 9092, "rack": None}],
        "cluster_id": "pybroker",
        "controller_id": 1,
        "topics": topics,
    }


def measure(operation: Callable[[], object], seconds: float) -> float:
    """Median of five timed batches, in µs per call."""
    operation()
    calls = 1
    while True:
        start = time.perf_counter()
        for _ in range(calls):
            operation()
        elapsed = time.perf_counter() - start
        if elapsed > seconds / 10:
            break
        calls *= 2
    samples = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            operation()
        samples.append((time.perf_counter() - start) / calls * 1e6)
    return sorted(samples)[2]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="rough time budget per case")
    args = parser.parse_args()

    frame = produce_v9_request_frame()
    fetch = fetch_v12_response()
    metadata = metadata_v12_response()
    metadata_bytes = codec.encode(RESPONSES[3], 12, metadata)

    def decode_produce() -> object:
        header = codec.decode_request_header(frame)
        return codec.decode(REQUESTS[0], header.api_version, frame, header.body_offset)

    cases = [
        ("decode Produce v9 request (header + body, 16 KiB records)", decode_produce),
        (
            "encode Fetch v12 response (8 partitions, 1 KiB records each)",
            lambda: codec.encode(RESPONSES[1], 12, fetch),
        ),
        (
            "encode Metadata v12 response (100 topics x 3 partitions)",
            lambda: codec.encode(RESPONSES[3], 12, metadata),
        ),
        (
            "decode Metadata v12 response (100 topics x 3 partitions)",
            lambda: codec.decode(RESPONSES[3], 12, metadata_bytes),
        ),
        ("encode response header v1", lambda: codec.encode_response_header(1, 12, 7)),
    ]
    width = max(len(name) for name, _ in cases)
    print(f"{'case':<{width}}  µs/op")
    for name, operation in cases:
        print(f"{name:<{width}}  {measure(operation, args.seconds):8.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
