"""The codec decodes Produce requests (the server's hottest decode, compiled from the declaration
per version) into what was encoded, at every version: records as zero-copy views of the frame, tagged
fields kept, malformed and truncated bodies refused."""

from __future__ import annotations

import random
import uuid

import pytest

from pybroker.protocol import codec
from pybroker.protocol.api import REQUESTS

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
def test_decodes_what_was_encoded(version):
    rng = random.Random(version)
    for _ in range(200):
        request = _request(rng, version)
        body = codec.encode(REQUESTS[PRODUCE], version, request)
        frame = bytearray(b"\x00" * 5 + body + b"trailing")  # at an offset, with bytes after it
        decoded, end = codec.decode(REQUESTS[PRODUCE], version, frame, 5)
        assert end == 5 + len(body)
        assert _normalise(decoded) == request
        # records are views of the frame itself (the produce path stamps offsets into them)
        for t in decoded["topic_data"]:
            for p in t["partition_data"]:
                if p["records"] is not None:
                    assert p["records"].obj is frame


def test_tagged_fields_kept_and_malformed_bodies_refused():
    rng = random.Random(7)
    request = _request(rng, 11)
    request["_unknown_tags"] = {5: b"xyz"}
    body = codec.encode(REQUESTS[PRODUCE], 11, request)
    assert codec.decode(REQUESTS[PRODUCE], 11, body, 0)[0]["_unknown_tags"] == {5: b"xyz"}
    for version in (8, 11):
        whole = codec.encode(
            REQUESTS[PRODUCE],
            version,
            {**_request(rng, version), "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": b"abc"}]}]},
        )
        for cut in range(len(whole)):
            with pytest.raises(codec.DecodeError):
                codec.decode(REQUESTS[PRODUCE], version, whole[:cut], 0)
    with pytest.raises(codec.UnsupportedVersionError):
        codec.decode(REQUESTS[PRODUCE], 2, whole, 0)
