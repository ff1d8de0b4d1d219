"""OffsetForLeaderEpoch over the wire against a real broker process."""

from __future__ import annotations

import time

import pytest

from compat_tests.brokers import PyBroker
from pybroker.protocol.errors import ErrorCode
from pybroker.records import SimpleRecord, build_batch
from tests.wire import WireClient

PRODUCE, CREATE_TOPICS, OFFSET_FOR_LEADER_EPOCH = 0, 19, 23


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory):
    with PyBroker(tmp_path_factory.mktemp("ofle")) as broker:
        yield broker.bootstrap


def ask(c: WireClient, version: int, topic: str, epoch: int, current: int = -1) -> dict:
    r = c.request(
        OFFSET_FOR_LEADER_EPOCH,
        version,
        {
            "replica_id": -1,
            "topics": [
                {
                    "topic": topic,
                    "partitions": [{"partition": 0, "current_leader_epoch": current, "leader_epoch": epoch}],
                }
            ],
        },
    )
    return r["topics"][0]["partitions"][0]


@pytest.mark.parametrize("version", [2, 3, 4])
def test_end_offsets_by_epoch(bootstrap, version):
    topic = f"ofle-{version}"
    with WireClient(bootstrap) as c:
        r = c.request(
            CREATE_TOPICS,
            7,
            {"topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1}], "timeout_ms": 10000},
        )
        assert r["topics"][0]["error_code"] == 0
        assert ask(c, version, topic, 0)["end_offset"] == -1  # nothing written yet: no epoch known
        for _ in range(3):
            batch = build_batch([SimpleRecord(b"k", b"v", (), int(time.time() * 1000))] * 2)
            c.request(
                PRODUCE,
                9,
                {
                    "acks": 1,
                    "timeout_ms": 5000,
                    "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}],
                },
            )
        got = ask(c, version, topic, 0)
        assert (got["error_code"], got["leader_epoch"], got["end_offset"]) == (0, 0, 6)
        assert ask(c, version, topic, 1)["end_offset"] == -1
        assert ask(c, version, topic, 0, current=1)["error_code"] == ErrorCode.UNKNOWN_LEADER_EPOCH
        assert ask(c, version, "no-such-topic", 0)["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
