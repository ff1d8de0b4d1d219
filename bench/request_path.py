"""CPU time per Produce request through a connection's whole input path, in-process: framing
(``FrameReader``), the request memory pool (``queued.max.request.bytes``), dispatch, the handler and
the append — what ``bench.metrics_overhead`` measures from ``_handle`` on, plus what comes before.

    python -m bench.request_path                      # this tree, one partition per request
    python -m bench.request_path --shape java-p8      # eight partitions per request
    PYTHONPATH=<other checkout> python -m bench.request_path   # e.g. a tree from before a change

The same Produce request (acks=1) is read into the buffers the connection offers
(``get_buffer``/``buffer_updated``, as the transport does) one per read and eight per read; process
CPU time per request (robust on a loaded machine) and wall time per request, medians of ``--rounds``.
Shapes: ``p1`` is one partition entry holding one batch of 16 x 1 KiB records; ``java-p8`` is what the
Java producer (batch.size 16 KiB, linger 5 ms) sends to an 8-partition topic: eight partition entries of
one such ~16 KB batch each.
``--java acks1|acksall`` sends what Kafka's Java producer (4.x) sends instead of Produce v9 acks=1:
Produce v13 naming the topic by id, and for ``acksall`` acks=-1 from an idempotent producer (the
default with acks=all: a producer id, each batch the next sequence number), whose frames differ per
request: they are built between the timed reads (one request per read only).
A benchmark: it prints, it never asserts a time.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import struct
import sys
import time
import uuid

from bench.metrics_overhead import PRODUCE, RECORDS_PER_BATCH, _NullTransport, produce_frame, started_broker
from pybroker.broker import Broker
from pybroker.protocol import codec
from pybroker.protocol.api import REQUESTS
from pybroker.records.builder import SimpleRecord, build_batch
from pybroker.server import KafkaConnection


class _Transport(_NullTransport):
    """Also muted and unmuted, as the memory pool does to a connection whose requests wait."""

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def settle(conn: KafkaConnection) -> bool:
    """Let the loop finish what waits: appends the log directory's writer threads make (after a
    write that stalled in the kernel, LogDirWriter sends writes there for a while) are answered on
    the loop, which the synchronous feeding never runs; their CPU time is counted like the rest.
    Returns whether anything waited."""
    waited = False
    while conn.request_in_flight or conn.queued_requests:
        waited = True
        await asyncio.sleep(0.001)
    return waited


def feed(conn: KafkaConnection, data: bytes) -> None:
    """What the transport does with one read: fill the offered buffer, say how much."""
    view = memoryview(data)
    while view:
        buf = conn.get_buffer(-1)
        n = min(len(buf), len(view))
        buf[:n] = view[:n]
        view = view[n:]
        conn.buffer_updated(n)


SHAPES = {"p1": 1, "java-p8": 8}  # partition entries (one batch each) per request
JAVA_PRODUCE_VERSION = 13  # what a Kafka 4.x Java producer sends to a 4.x broker
JAVA_PRODUCER_ID = 4000  # an idempotent producer's id (the broker does not check who allocated it)


def java_frame(topic_id: uuid.UUID, partitions: int, acks: int, sequence: int, correlation_id: int) -> bytes:
    """A framed Produce v13 as the Java producer sends it: one batch of RECORDS_PER_BATCH 1 KiB records
    per partition, from an idempotent producer (sequence ``sequence``) when acks=-1."""
    idempotent = acks == -1
    partition_data = [
        {
            "index": i,
            "records": build_batch(
                [SimpleRecord(b"key", b"v" * 1024) for _ in range(RECORDS_PER_BATCH)],
                producer_id=JAVA_PRODUCER_ID if idempotent else -1,
                producer_epoch=0 if idempotent else -1,
                base_sequence=sequence if idempotent else -1,
            ),
        }
        for i in range(partitions)
    ]
    body = codec.encode(
        REQUESTS[PRODUCE],
        JAVA_PRODUCE_VERSION,
        {
            "transactional_id": None,
            "acks": acks,
            "timeout_ms": 30000,
            "topic_data": [{"topic_id": topic_id, "partition_data": partition_data}],
        },
    )
    client_id = b"producer-1"
    header = (
        struct.pack(">hhih", PRODUCE, JAVA_PRODUCE_VERSION, correlation_id, len(client_id))
        + client_id
        + b"\x00"
    )
    frame = header + body
    return struct.pack(">i", len(frame)) + frame


def check_appended(broker: Broker, partitions: int, sent: int) -> None:
    """Every request must have been appended: a request path that errors out is fast and wrong."""
    for index in range(partitions):
        partition = broker.partition("bench", index)
        appended = partition.log_end_offset if partition is not None else 0
        if appended != sent:
            raise RuntimeError(
                f"partition {index}: {appended} of {sent} records appended: the produce requests failed"
            )


async def measure_java(
    requests: int, rounds: int, partitions: int, acks: int
) -> dict[str, tuple[float, float]]:
    """``--java``: CPU and wall seconds per request, one request per read, medians of rounds."""
    async with started_broker("request-path-") as broker:
        topic_id = broker.create_topic("bench", partitions, {}).topic_id
        conn = KafkaConnection(broker)
        conn.connection_made(_Transport())  # type: ignore[arg-type]  # as the server does
        sequence = 0
        samples, walls = [], []
        chunk = 250  # frames built between timed stretches
        for _ in range(rounds):
            cpu = wall = 0.0
            done = 0
            while done < requests:
                n = min(chunk, requests - done)
                frames = [
                    java_frame(topic_id, partitions, acks, sequence + k * RECORDS_PER_BATCH, done + k)
                    for k in range(n)
                ]
                sequence += n * RECORDS_PER_BATCH
                gc.collect()  # building the frames' garbage is not the broker's to collect
                w0, c0 = time.perf_counter(), time.process_time()
                for frame in frames:
                    feed(conn, frame)
                    if conn.request_in_flight:
                        await settle(conn)
                await settle(conn)
                cpu += time.process_time() - c0
                wall += time.perf_counter() - w0
                done += n
            samples.append(cpu / requests)
            walls.append(wall / requests)
        check_appended(broker, partitions, rounds * requests * RECORDS_PER_BATCH)
        return {"1 request per read": (statistics.median(samples), statistics.median(walls))}


async def measure(requests: int, rounds: int, partitions: int = 1) -> dict[str, tuple[float, float]]:
    """Per case: (CPU seconds, wall seconds) per request, medians over rounds."""
    async with started_broker("request-path-") as broker:
        broker.create_topic("bench", partitions, {})
        conn = KafkaConnection(broker)
        conn.connection_made(_Transport())  # type: ignore[arg-type]  # as the server does, so the connection has its security context
        frame = produce_frame("bench", partitions)
        framed = struct.pack(">i", len(frame)) + frame
        results: dict[str, tuple[float, float]] = {}
        diverted = 0  # reads whose appends went to the writer threads
        for name, per_read in (("1 request per read", 1), ("8 requests per read", 8)):
            chunk = framed * per_read
            reads = max(1, requests // per_read)
            samples = []
            walls = []
            for _ in range(rounds):
                wall = time.perf_counter()
                start = time.process_time()
                for _ in range(reads):
                    feed(conn, chunk)
                    if conn.request_in_flight and await settle(conn):
                        diverted += 1
                if await settle(conn):
                    diverted += 1
                samples.append((time.process_time() - start) / (reads * per_read))
                walls.append((time.perf_counter() - wall) / (reads * per_read))
            results[name] = (statistics.median(samples), statistics.median(walls))
        sent = sum(rounds * max(1, requests // n) * n for n in (1, 8)) * RECORDS_PER_BATCH
        check_appended(broker, partitions, sent)
        if diverted:
            print(
                f"note: {diverted} reads waited for the log directory's writer threads (a write stalled"
                " in the kernel and writes were diverted for a while): not the inline path; run again",
                file=sys.stderr,
            )
        return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="p1")
    parser.add_argument(
        "--java", choices=("acks1", "acksall"), help="Produce v13 as the Java producer sends it"
    )
    args = parser.parse_args(argv)
    partitions = SHAPES[args.shape]
    print(f"shape {args.shape}: {partitions} partition entr{'y' if partitions == 1 else 'ies'} x 1 batch of {RECORDS_PER_BATCH} x 1 KiB per request")
    if args.java:
        print(
            f"Java producer: Produce v{JAVA_PRODUCE_VERSION} by topic id, {args.java}"
            + (" (idempotent)" if args.java == "acksall" else "")
        )
        measured = asyncio.run(
            measure_java(args.requests, args.rounds, partitions, -1 if args.java == "acksall" else 1)
        )
    else:
        measured = asyncio.run(measure(args.requests, args.rounds, partitions))
    for name, (cpu, wall) in measured.items():
        print(f"{name:22s} {cpu * 1e6:8.2f} us CPU {wall * 1e6:8.2f} us wall per produce request")
    return 0


if __name__ == "__main__":
    sys.exit(main())
