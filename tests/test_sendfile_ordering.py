"""Large fetch responses go out by sendfile; pipelined requests must still be answered whole and in
order, also when the client reads slowly so the socket fills up mid-slice."""

from __future__ import annotations

import os
import socket
import struct
import time

import pytest

from compat_tests.brokers import PyBroker, read_response
from pybroker.protocol import codec
from pybroker.protocol.api import REQUESTS, RESPONSES
from pybroker.records import SimpleRecord, build_batch, read_records
from tests.wire import WireClient

PRODUCE, FETCH, CREATE_TOPICS = 0, 1, 19
BATCHES = 40
VALUE_SIZE = 50_000  # random bytes: every batch is ~50 KB, a fetch of several spans > 64 KiB


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    with PyBroker(tmp_path_factory.mktemp("sendfile")) as broker:
        values = []
        with WireClient(broker.bootstrap) as c:
            r = c.request(
                CREATE_TOPICS,
                7,
                {
                    "topics": [{"name": "big", "num_partitions": 1, "replication_factor": 1}],
                    "timeout_ms": 10000,
                },
            )
            assert r["topics"][0]["error_code"] == 0
            for i in range(BATCHES):
                value = os.urandom(VALUE_SIZE)
                values.append(value)
                batch = build_batch([SimpleRecord(str(i).encode(), value, (), int(time.time() * 1000))])
                r = c.request(
                    PRODUCE,
                    9,
                    {
                        "acks": 1,
                        "timeout_ms": 5000,
                        "topic_data": [{"name": "big", "partition_data": [{"index": 0, "records": batch}]}],
                    },
                )
                assert r["responses"][0]["partition_responses"][0]["base_offset"] == i
        yield broker, values


def complete_batches(blob: bytes) -> bytes:
    """The whole batches at the front: a fetch may end with a partial batch (KIP-74), as in Kafka."""
    pos = 0
    while pos + 12 <= len(blob):
        (length,) = struct.unpack_from(">i", blob, pos + 8)
        if pos + 12 + length > len(blob):
            break
        pos += 12 + length
    return blob[:pos]


def _fetch_frame(correlation_id: int, offset: int) -> bytes:
    body = codec.encode(
        REQUESTS[FETCH],
        12,
        {
            "replica_id": -1,
            "max_wait_ms": 0,
            "min_bytes": 0,
            "max_bytes": 1 << 22,
            "isolation_level": 0,
            "topics": [
                {
                    "topic": "big",
                    "partitions": [{"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20}],
                }
            ],
        },
    )
    head = struct.pack(">hhih", FETCH, 12, correlation_id, 4) + b"test" + b"\x00"
    return struct.pack(">i", len(head) + len(body)) + head + body


def test_pipelined_large_fetches_arrive_whole_and_in_order(loaded):
    broker, values = loaded
    host, port = broker.bootstrap.split(":")
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # make the broker's sends block often
        s.settimeout(30)
        s.connect((host, int(port)))
        offsets = [0, 5, 10, 20, 30, 35]
        s.sendall(b"".join(_fetch_frame(100 + i, off) for i, off in enumerate(offsets)))
        time.sleep(0.5)  # let the broker fill the socket and park mid-slice before we read
        for i, off in enumerate(offsets):
            frame = read_response(s)
            (correlation_id,) = struct.unpack_from(">i", frame, 0)
            assert correlation_id == 100 + i
            body, end = codec.decode(RESPONSES[FETCH], 12, frame, 5)
            assert end == len(frame)
            records_blob = bytes(body["responses"][0]["partitions"][0]["records"])
            assert len(records_blob) > 64 * 1024, "the test must exercise the sendfile path"
            records = read_records(complete_batches(records_blob))
            assert records[0].offset == off
            for rec in records:
                assert rec.value == values[rec.offset]
