"""The response frame the server writes (``codec.encode_response_frame``: size, header and body in one
bytes) is the response header and the codec's encoding of the body, at every Produce version and for
every shape a Produce response takes; and a misspelt field name is refused."""

from __future__ import annotations

import random
import struct
import uuid

import pytest

from pybroker.protocol import codec
from pybroker.protocol.api import RESPONSES

PRODUCE = 0


def encode_produce_response(version: int, correlation_id: int, response: dict) -> bytes:
    """What the server writes for a Produce response."""
    parts = codec.encode_response_frame(PRODUCE, version, correlation_id, response)
    assert len(parts) == 1
    return parts[0]


def _decoded(version: int, response: dict) -> dict:
    """``response`` as the codec reads it back: the fields of ``version``, with their defaults."""
    fields = {f.name: f for f in RESPONSES[PRODUCE].fields}
    partition_fields = {f.name: f for f in fields["responses"].fields}["partition_responses"].fields
    topic_keys = {"name"} if version < 13 else {"topic_id"}

    def partition(p: dict) -> dict:
        present = {f.name for f in partition_fields if version in f.versions}
        out = {k: v for k, v in p.items() if k in present}
        if version >= 10:
            out.setdefault("current_leader", {"leader_id": -1, "leader_epoch": -1})
        return out

    decoded = {
        "responses": [
            {**{k: t[k] for k in topic_keys}, "partition_responses": [partition(p) for p in t["partition_responses"]]}
            for t in response["responses"]
        ],
        "throttle_time_ms": response["throttle_time_ms"],
    }
    if version >= 10:
        decoded["node_endpoints"] = response.get("node_endpoints", [])
    return decoded


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
def test_frame_is_header_and_body(version):
    rng = random.Random(version)
    for _ in range(200):
        response = _response(rng, version)
        correlation_id = rng.randint(-(2**31), 2**31 - 1)
        frame = encode_produce_response(version, correlation_id, response)
        assert frame == _generic(version, correlation_id, response)
        assert codec.decode_response(PRODUCE, version, frame[4:]) == (correlation_id, _decoded(version, response))


@pytest.mark.parametrize(
    "partition_extra",
    [
        {"record_errors": [{"batch_index": 0, "batch_index_error_message": "bad"}]},
        {"error_message": "One or more records have been rejected"},
        {"current_leader": {"leader_id": 2, "leader_epoch": 5}},
    ],
)
def test_other_shapes(partition_extra):
    response = _response(random.Random(1), 12)
    response["responses"] = [
        {"name": "t", "partition_responses": [{**_response_partition(), **partition_extra}]}
    ]
    frame = encode_produce_response(12, 7, response)
    assert frame == _generic(12, 7, response)
    assert codec.decode_response(PRODUCE, 12, frame[4:]) == (7, _decoded(12, response))
    endpoints = [{"node_id": 1, "host": "h", "port": 1, "rack": None}]
    with_endpoints = {**_response(random.Random(2), 12), "node_endpoints": endpoints}
    frame = encode_produce_response(12, 7, with_endpoints)
    assert frame == _generic(12, 7, with_endpoints)
    assert codec.decode_response(PRODUCE, 12, frame[4:])[1]["node_endpoints"] == endpoints


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
    """The writer compiled for each struct reads the names it knows (a missing log_append_time_ms is
    -1): under the tests' strict codec (PYBROKER_STRICT_CODEC=1) a misspelt one fails, at any depth,
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
