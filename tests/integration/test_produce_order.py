"""Produce requests of one connection are appended in the order they were sent, whatever each one needs
first. Found by the compat suite (confluent-kafka, lz4): with pipelined produce requests, a compressed
batch walked off the event loop was overtaken by the connection's next, uncompressed request, and the
records of one producer landed out of order. Kafka handles a connection's requests one at a time; here a
produce request may be followed by the next only once its batches are in the log."""

from __future__ import annotations

import struct
from pathlib import Path

from compat_tests.brokers import PyBroker, read_response
from pybroker.protocol import codec
from pybroker.protocol.api import RESPONSES
from pybroker.records.builder import SimpleRecord, build_batch
from pybroker.records.compression import CompressionType
from tests.wire import WireClient

PRODUCE = 0


def produce_body(topic: str, records: bytes) -> dict:
    return {"acks": 1, "timeout_ms": 10000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": records}]}]}  # fmt: skip


def test_a_compressed_request_is_not_overtaken_by_the_next(tmp_path: Path) -> None:
    broker = PyBroker(tmp_path)
    bootstrap = broker.start()
    try:
        with WireClient(bootstrap) as w:
            w.request(3, 12, {"topics": [{"name": "order"}], "allow_auto_topic_creation": True})
            # A batch whose walk takes a while off the loop (4 MiB of lz4), then small uncompressed ones.
            big = build_batch([SimpleRecord(None, b"z" * 65536) for _ in range(64)], compression=CompressionType.LZ4)
            small = build_batch([SimpleRecord(None, b"s")])
            for attempt in range(5):
                w.send(PRODUCE, 9, produce_body("order", big))
                first_id = w.correlation_id
                for _ in range(3):
                    w.send(PRODUCE, 9, produce_body("order", small))
                offsets = []
                for expected_id in range(first_id, first_id + 4):
                    frame = read_response(w.sock)
                    assert struct.unpack_from(">i", frame, 0)[0] == expected_id  # answered in order
                    response, _ = codec.decode(RESPONSES[PRODUCE], 9, frame, 5)  # v9: a flexible header
                    part = response["responses"][0]["partition_responses"][0]
                    assert part["error_code"] == 0, part
                    offsets.append(part["base_offset"])
                assert offsets == sorted(offsets), f"attempt {attempt}: base offsets {offsets} not in request order"
                assert offsets[1] == offsets[0] + 64, offsets
    finally:
        broker.stop()
