"""Long-poll Fetch against a real broker process: woken by an append (not by the timeout), held for
max_wait_ms when nothing arrives, and answered promptly when its partition is deleted meanwhile."""

from __future__ import annotations

import threading
import time

import pytest

from compat_tests.brokers import PyBroker
from pybroker.protocol.errors import ErrorCode
from pybroker.records import SimpleRecord, build_batch
from tests.wire import WireClient

PRODUCE, FETCH, CREATE_TOPICS, DELETE_TOPICS = 0, 1, 19, 20


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory):
    with PyBroker(tmp_path_factory.mktemp("long-poll")) as broker:
        yield broker.bootstrap


def create(c: WireClient, name: str) -> None:
    r = c.request(
        CREATE_TOPICS,
        7,
        {"topics": [{"name": name, "num_partitions": 1, "replication_factor": 1}], "timeout_ms": 10000},
    )
    assert r["topics"][0]["error_code"] == 0


def fetch(c: WireClient, topic: str, offset: int, max_wait_ms: int) -> dict:
    r = c.request(
        FETCH,
        12,
        {
            "replica_id": -1,
            "max_wait_ms": max_wait_ms,
            "min_bytes": 1,
            "max_bytes": 1 << 20,
            "isolation_level": 0,
            "topics": [
                {
                    "topic": topic,
                    "partitions": [{"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20}],
                }
            ],
        },
    )
    return r["responses"][0]["partitions"][0]


def produce_later(bootstrap: str, topic: str, delay_s: float) -> threading.Thread:
    def run() -> None:
        time.sleep(delay_s)  # the fetch below must already be parked when this lands
        with WireClient(bootstrap) as c:
            batch = build_batch([SimpleRecord(b"k", b"wake up", (), int(time.time() * 1000))])
            c.request(
                PRODUCE,
                9,
                {
                    "acks": 1,
                    "timeout_ms": 5000,
                    "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}],
                },
            )

    t = threading.Thread(target=run)
    t.start()
    return t


def test_append_wakes_a_parked_fetch(bootstrap):
    with WireClient(bootstrap) as c:
        create(c, "lp-wake")
        t = produce_later(bootstrap, "lp-wake", 0.5)
        started = time.monotonic()
        part = fetch(c, "lp-wake", 0, 20_000)
        waited = time.monotonic() - started
        t.join()
    assert part["error_code"] == 0 and len(part["records"]) > 0
    assert part["high_watermark"] == 1
    assert waited < 10, f"the append did not wake the fetch (answered after {waited:.1f}s of a 20s wait)"


def test_fetch_waits_max_wait_when_nothing_arrives(bootstrap):
    with WireClient(bootstrap) as c:
        create(c, "lp-idle")
        started = time.monotonic()
        part = fetch(c, "lp-idle", 0, 800)
        waited = time.monotonic() - started
    assert part["error_code"] == 0 and len(part["records"]) == 0
    assert waited >= 0.7, f"answered after {waited:.2f}s, before max_wait_ms"


def test_deleting_the_topic_answers_a_parked_fetch(bootstrap):
    with WireClient(bootstrap) as c, WireClient(bootstrap) as admin:
        create(c, "lp-delete")
        c.send(
            FETCH,
            12,
            {
                "replica_id": -1,
                "max_wait_ms": 20_000,
                "min_bytes": 1,
                "max_bytes": 1 << 20,
                "isolation_level": 0,
                "topics": [
                    {
                        "topic": "lp-delete",
                        "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}],
                    }
                ],
            },
        )
        time.sleep(0.3)  # let the fetch park before the delete
        started = time.monotonic()
        r = admin.request(DELETE_TOPICS, 4, {"topic_names": ["lp-delete"], "timeout_ms": 5000})
        assert r["responses"][0]["error_code"] == 0
        from compat_tests.brokers import read_response
        from pybroker.protocol import codec
        from pybroker.protocol.api import RESPONSES

        frame = read_response(c.sock)
        waited = time.monotonic() - started
        body, _ = codec.decode(RESPONSES[FETCH], 12, frame, 5)
    assert body["responses"][0]["partitions"][0]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert waited < 10
