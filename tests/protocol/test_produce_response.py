"""protocol/produce_response.py writes exactly the bytes the generic codec writes, at every
Produce version, and declines the shapes it does not cover."""

from __future__ import annotations

import random
import struct
import uuid

import pytest

from pybroker.protocol import codec
from pybroker.protocol.api import RESPONSES
from pybroker.protocol.produce_response import encode_produce_response

PRODUCE = 0


def _generic(version: int, correlation_id: int, response: dict) -> bytes:
    head = codec.encode_response_header(PRODUCE, version, correlation_id)
    body = codec.encode(RESPONSES[PRODUCE], version, response)
    return struct.pack(">i", len(head) + len(body)) + head + body


def _response(rng: random.Random, version: int) -> dict:
    topics = []
    for _ in range(rng.randint(0, 3)):
        topic = {
            "name": rng.choice(["t", "orders", "ünïcødé-topic", "x" * 200]),
            "partition_responses": [
                {
                    "index": rng.randint(0, 2**31 - 1),
                    "error_code": rng.choice([0, 0, 0, 6, 56, 87]),
                    "base_offset": rng.choice([-1, 0, rng.randint(0, 2**62)]),
                    "log_append_time_ms": rng.choice([-1, 1_795_000_000_000]),
                    "log_start_offset": rng.choice([-1, 0, 12345]),
                    "record_errors": [],
                    "error_message": None,
                }
                for _ in range(rng.randint(0, 3))
            ],
        }
        if version >= 13:
            topic["topic_id"] = uuid.UUID(int=rng.getrandbits(128))
        topics.append(topic)
    return {"responses": topics, "throttle_time_ms": rng.choice([0, 0, 1500])}


@pytest.mark.parametrize("version", range(3, 14))
def test_same_bytes_as_the_codec(version):
    rng = random.Random(version)
    for _ in range(200):
        response = _response(rng, version)
        correlation_id = rng.randint(-(2**31), 2**31 - 1)
        assert encode_produce_response(version, correlation_id, response) == _generic(
            version, correlation_id, response
        )


@pytest.mark.parametrize(
    "partition_extra",
    [
        {"record_errors": [{"batch_index": 0, "batch_index_error_message": "bad"}]},
        {"error_message": "One or more records have been rejected"},
        {"current_leader": {"leader_id": 2, "leader_epoch": 5}},
    ],
)
def test_other_shapes_are_left_to_the_codec(partition_extra):
    response = _response(random.Random(1), 12)
    response["responses"] = [
        {"name": "t", "partition_responses": [{**_response_partition(), **partition_extra}]}
    ]
    assert encode_produce_response(12, 7, response) is None
    with_endpoints = {**_response(random.Random(2), 12), "node_endpoints": [{"node_id": 1, "host": "h", "port": 1}]}
    assert encode_produce_response(12, 7, with_endpoints) is None


def _response_partition() -> dict:
    return {
        "index": 0,
        "error_code": 0,
        "base_offset": 5,
        "log_append_time_ms": -1,
        "log_start_offset": 0,
        "record_errors": [],
        "error_message": None,
    }


@pytest.mark.parametrize("version", [3, 8, 9, 13])
def test_a_misspelt_name_is_refused_as_by_the_codec(version: int) -> None:
    """The one-pass writer reads the names it knows (a missing log_append_time_ms is -1): under the
    tests' strict codec (PYBROKER_STRICT_CODEC=1) a misspelt one fails here as it would in the codec,
    instead of being encoded as the default."""
    assert codec.strict_field_names(), "the test suites run the codec strictly (tests/conftest.py)"
    topic = {"name": "t", "topic_id": uuid.uuid4()}
    good = {"index": 0, "error_code": 0, "base_offset": 5, "log_append_time_ms": 7, "log_start_offset": 0}
    assert encode_produce_response(version, 1, {"responses": [{**topic, "partition_responses": [good]}]})
    misspelt = {**good, "log_apend_time_ms": good.pop("log_append_time_ms")}
    with pytest.raises(codec.UnknownFieldError, match="log_apend_time_ms"):
        encode_produce_response(version, 1, {"responses": [{**topic, "partition_responses": [misspelt]}]})
    with pytest.raises(codec.UnknownFieldError, match="throttle_time"):
        encode_produce_response(version, 1, {"responses": [], "throttle_time": 100})
