"""Pre-encoded array elements (codec.encode_element / Encoded): a message holding them encodes to
exactly the bytes of the same message holding the dicts, at every version, and an element encoded
for another layout is refused rather than written."""

from __future__ import annotations

import uuid

import pytest

from pybroker.protocol import codec
from pybroker.protocol.api import RESPONSES

METADATA = RESPONSES[3]
VERSIONS = range(METADATA.min_version, METADATA.max_version + 1)


def _topic(name: str, partitions: int, internal: bool = False) -> dict:
    return {
        "error_code": 0,
        "name": name,
        "topic_id": uuid.UUID(int=0x1234 + partitions),
        "is_internal": internal,
        "partitions": [
            {
                "error_code": 0,
                "partition_index": i,
                "leader_id": 1 + i % 3,
                "leader_epoch": i % 5,
                "replica_nodes": (1, 2, 3)[: 1 + i % 3],
                "isr_nodes": (1, 2)[: 1 + i % 2],
                "offline_replicas": (),
            }
            for i in range(partitions)
        ],
    }


def _response(topics: list) -> dict:
    return {
        "throttle_time_ms": 0,
        "brokers": [{"node_id": 1, "host": "127.0.0.1", "port": 9092, "rack": None}],
        "cluster_id": "abc",
        "controller_id": 1,
        "topics": topics,
    }


TOPICS = [_topic("a", 3), _topic("big", 300), _topic("__consumer_offsets", 1, internal=True)]
ERROR_TOPIC = {"error_code": 3, "name": "missing", "is_internal": False, "partitions": []}


@pytest.mark.parametrize("version", VERSIONS)
def test_cached_elements_encode_exactly_like_dicts_at_every_version(version: int) -> None:
    plain = codec.encode(METADATA, version, _response([*TOPICS, ERROR_TOPIC]))
    # Encoded by any version that shares this version's layout key, mixed with a plain dict.
    key = codec.element_encoding_key(METADATA, version, ("topics",))
    sharing = [v for v in VERSIONS if codec.element_encoding_key(METADATA, v, ("topics",)) is key]
    assert version in sharing
    for other in sharing:
        cached = [codec.encode_element(METADATA, other, ("topics",), t) for t in TOPICS]
        assert codec.encode(METADATA, version, _response([*cached, ERROR_TOPIC])) == plain
        assert b"".join(codec.encode_parts(METADATA, version, _response([*cached, ERROR_TOPIC]))) == plain


def test_layout_keys_group_only_versions_that_encode_a_topic_identically() -> None:
    groups: dict[int, list[int]] = {}
    for v in VERSIONS:
        groups.setdefault(id(codec.element_encoding_key(METADATA, v, ("topics",))), []).append(v)
    # The topic struct of MetadataResponse.json: is_internal from v1, offline replicas v5, leader
    # epoch v7, authorized operations v8, flexible v9, topic id v10, nullable name v12 (v13 changes only
    # the top level: its error code).
    assert sorted(groups.values()) == [[0], [1, 2, 3, 4], [5, 6], [7], [8], [9], [10, 11], [12, 13]]
    for versions in groups.values():
        encodings = {bytes(codec.encode_element(METADATA, v, ("topics",), TOPICS[1])) for v in versions}
        assert len(encodings) == 1


def test_an_element_encoded_for_another_layout_is_refused() -> None:
    v9 = codec.encode_element(METADATA, 9, ("topics",), TOPICS[0])
    with pytest.raises(codec.EncodeError):
        codec.encode(METADATA, 10, _response([v9]))
    with pytest.raises(ValueError):
        codec.element_encoding_key(METADATA, 12, ("brokers", "nothing"))
    with pytest.raises(ValueError):
        codec.element_encoding_key(METADATA, 12, ("cluster_id",))
