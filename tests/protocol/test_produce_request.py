"""protocol/produce_request.py decodes Produce requests exactly as the generic codec does, at every
version, and leaves to the codec whatever it does not expect (tagged fields, malformed bodies)."""

from __future__ import annotations

import random
import uuid

import pytest

from pybroker.protocol import codec
from pybroker.protocol.api import REQUESTS
from pybroker.protocol.produce_request import decode_produce_request

PRODUCE = 0


def _request(rng: random.Random, version: int) -> dict:
    topics = []
    for _ in range(rng.randint(0, 3)):
        topic: dict = {
            "partition_data": [
                {"index": rng.randint(0, 2**31 - 1), "records": rng.choice([None, b"", rng.randbytes(rng.randint(1, 3000))])}
                for _ in range(rng.randint(0, 3))
            ]
        }
        if version >= 13:
            topic["topic_id"] = uuid.UUID(int=rng.getrandbits(128))
        else:
            topic["name"] = rng.choice(["t", "orders", "ünïcødé", "y" * 300])
        topics.append(topic)
    return {
        "transactional_id": rng.choice([None, "", "txn-1", "z" * 200]),
        "acks": rng.choice([-1, 0, 1]),
        "timeout_ms": rng.randint(0, 2**31 - 1),
        "topic_data": topics,
    }


def _normalise(decoded: dict) -> dict:
    return {
        **decoded,
        "topic_data": [
            {
                **t,
                "partition_data": [
                    {**p, "records": None if p["records"] is None else bytes(p["records"])} for p in t["partition_data"]
                ],
            }
            for t in decoded["topic_data"]
        ],
    }


@pytest.mark.parametrize("version", range(3, 14))
def test_same_result_as_the_codec(version):
    rng = random.Random(version)
    for _ in range(200):
        body = codec.encode(REQUESTS[PRODUCE], version, _request(rng, version))
        frame = bytearray(b"\x00" * 5 + body + b"trailing")  # at an offset, with bytes after it
        fast = decode_produce_request(version, memoryview(frame), 5)
        assert fast is not None
        generic = codec.decode(REQUESTS[PRODUCE], version, frame, 5)
        assert fast[1] == generic[1] == 5 + len(body)
        assert _normalise(fast[0]) == _normalise(generic[0])
        # records are views of the frame itself (the produce path stamps offsets into them)
        for t in fast[0]["topic_data"]:
            for p in t["partition_data"]:
                if p["records"] is not None:
                    assert p["records"].obj is frame


def test_tagged_fields_and_malformed_bodies_are_left_to_the_codec():
    rng = random.Random(7)
    request = _request(rng, 11)
    request["_unknown_tags"] = {5: b"xyz"}
    body = codec.encode(REQUESTS[PRODUCE], 11, request)
    assert decode_produce_request(11, memoryview(body), 0) is None
    assert codec.decode(REQUESTS[PRODUCE], 11, body, 0)[0]["_unknown_tags"] == {5: b"xyz"}
    whole = codec.encode(REQUESTS[PRODUCE], 8, {**_request(rng, 8), "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": b"abc"}]}]})
    for cut in range(len(whole)):
        assert decode_produce_request(8, memoryview(whole[:cut]), 0) is None  # truncated: the codec raises
    assert decode_produce_request(2, memoryview(whole), 0) is None  # not a version it knows
