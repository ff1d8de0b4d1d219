"""Request/response latency of small fetches, one in flight, uvloop against asyncio's own loop.

    python -m bench.fetch_latency                 # 3 interleaved runs of each loop, 5 s each
    python -m bench.fetch_latency --runs 5 --seconds 10

Each fetch asks for one ~1 KiB batch at the next offset (max_wait_ms=0), so the figure is the
broker's per-request cost plus loopback, the part of the fetch path where the event loop matters.
A benchmark, not a test: it prints medians and never asserts a time.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from compat_tests.brokers import PyBroker
from pybroker.records import SimpleRecord, build_batch
from tests.wire import WireClient

PRODUCE, FETCH, CREATE_TOPICS = 0, 1, 19


def one_run(loop: str, seconds: float, batches: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="pybroker-bench-") as tmp:
        broker = PyBroker(tmp, extra_args=["--event-loop", loop])
        bootstrap = broker.start()
        try:
            with WireClient(bootstrap) as c:
                c.request(
                    CREATE_TOPICS,
                    7,
                    {
                        "topics": [{"name": "lat", "num_partitions": 1, "replication_factor": 1}],
                        "timeout_ms": 10000,
                    },
                )
                record = SimpleRecord(b"k", b"v" * 1000, (), int(time.time() * 1000))
                for _ in range(batches):
                    c.request(
                        PRODUCE,
                        9,
                        {
                            "acks": 1,
                            "timeout_ms": 5000,
                            "topic_data": [
                                {
                                    "name": "lat",
                                    "partition_data": [{"index": 0, "records": build_batch([record])}],
                                }
                            ],
                        },
                    )
                latencies = []
                offset = 0
                deadline = time.perf_counter() + seconds
                while time.perf_counter() < deadline:
                    t0 = time.perf_counter()
                    r = c.request(
                        FETCH,
                        12,
                        {
                            "replica_id": -1,
                            "max_wait_ms": 0,
                            "min_bytes": 0,
                            "max_bytes": 1 << 20,
                            "isolation_level": 0,
                            "topics": [
                                {
                                    "topic": "lat",
                                    "partitions": [
                                        {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 2048}
                                    ],
                                }
                            ],
                        },
                    )
                    latencies.append(time.perf_counter() - t0)
                    assert r["responses"][0]["partitions"][0]["records"], "fetch returned no records"
                    offset = (offset + 1) % batches
        finally:
            broker.stop()
    latencies.sort()
    return {
        "loop": loop,
        "req_per_s": len(latencies) / sum(latencies),
        "p50_us": latencies[len(latencies) // 2] * 1e6,
        "p99_us": latencies[int(len(latencies) * 0.99)] * 1e6,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--batches", type=int, default=2000)
    args = ap.parse_args()
    rows = []
    for _ in range(args.runs):
        for loop in ("uvloop", "asyncio"):  # interleaved, so machine drift hits both alike
            row = one_run(loop, args.seconds, args.batches)
            rows.append(row)
            print(
                f"{loop:8} {row['req_per_s']:9.0f} req/s  p50 {row['p50_us']:6.0f} us  p99 {row['p99_us']:6.0f} us",
                flush=True,
            )
    print(f"\nmedians of {args.runs} runs (one fetch in flight, the client in Python on the same two cores):")
    med = {}
    for loop in ("uvloop", "asyncio"):
        rs = [r for r in rows if r["loop"] == loop]
        med[loop] = {k: statistics.median(r[k] for r in rs) for k in ("req_per_s", "p50_us", "p99_us")}
        print(
            f"{loop:8} {med[loop]['req_per_s']:9.0f} req/s  p50 {med[loop]['p50_us']:6.0f} us  "
            f"p99 {med[loop]['p99_us']:6.0f} us"
        )
    print(f"uvloop/asyncio request rate: {med['uvloop']['req_per_s'] / med['asyncio']['req_per_s']:.2f}")


if __name__ == "__main__":
    main()
