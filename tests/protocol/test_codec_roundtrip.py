"""Every declared message at every valid version: encode → decode → compare → re-encode byte-exact."""

from __future__ import annotations

from typing import Any

import pytest
from protocol_samples import MessageFactory

from pybroker.protocol import codec
from pybroker.protocol.api import ALL_MESSAGES
from pybroker.protocol.schema import MessageSpec

CASES = [
    pytest.param(spec, version, id=f"{spec.name}-v{version}")
    for spec in ALL_MESSAGES
    for version in range(spec.valid_versions.low, spec.valid_versions.high + 1)
]


def _plain(value: Any) -> Any:
    """Decoded values with zero-copy views turned into bytes, for comparison."""
    if isinstance(value, memoryview):
        return bytes(value)
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


@pytest.mark.parametrize(("spec", "version"), CASES)
def test_round_trip(spec: MessageSpec, version: int) -> None:
    factory = MessageFactory(seed=hash((spec.name, version)) & 0xFFFF)
    for _ in range(2):
        message = factory.message(spec, version)
        encoded = codec.encode(spec, version, message)
        decoded, end = codec.decode(spec, version, encoded)
        assert end == len(encoded)
        assert _plain(decoded) == message
        assert codec.encode(spec, version, decoded) == encoded
        assert b"".join(codec.encode_parts(spec, version, message)) == encoded


@pytest.mark.parametrize(("spec", "version"), CASES)
def test_empty_message_encodes_defaults_and_decodes_every_field(spec: MessageSpec, version: int) -> None:
    encoded = codec.encode(spec, version, {})
    decoded, end = codec.decode(spec, version, encoded)
    assert end == len(encoded)
    present = {f.name for f in spec.fields if version in f.versions}
    assert set(decoded) == present
    assert codec.encode(spec, version, decoded) == encoded


def test_decode_at_an_offset_reads_from_there() -> None:
    spec = next(s for s in ALL_MESSAGES if s.name == "MetadataRequest")
    body = codec.encode(spec, 1, {"topics": [{"name": "a"}]})
    decoded, end = codec.decode(spec, 1, b"junk" + body, 4)
    assert decoded == {"topics": [{"name": "a"}]}
    assert end == 4 + len(body)


def test_unknown_tags_survive_a_round_trip_in_nested_structs() -> None:
    spec = next(s for s in ALL_MESSAGES if s.name == "MetadataResponse")
    message = {
        "brokers": [{"node_id": 1, "host": "h", "port": 9092, "_unknown_tags": {7: b"\x01\x02"}}],
        "_unknown_tags": {3: b"", 30: b"xyz"},
    }
    encoded = codec.encode(spec, 12, message)
    decoded, _ = codec.decode(spec, 12, encoded)
    assert decoded["brokers"][0]["_unknown_tags"] == {7: b"\x01\x02"}
    assert decoded["_unknown_tags"] == {3: b"", 30: b"xyz"}
    assert codec.encode(spec, 12, decoded) == encoded


@pytest.mark.parametrize("version", [1, 12])
def test_long_values_use_multi_byte_lengths(version: int) -> None:
    # Lengths ≥ 127 need two-byte varints in flexible versions, and > 64 int32s bypass the packer cache.
    spec = next(s for s in ALL_MESSAGES if s.name == "MetadataResponse")
    partition = {
        "partition_index": 1,
        "leader_id": 2,
        "replica_nodes": list(range(200)),
        "isr_nodes": [1] * 127,
    }
    message = {
        "brokers": [{"node_id": n, "host": "h" * 300, "port": n} for n in range(150)],
        "topics": [{"name": "t" * 200, "partitions": [partition] * 3}],
    }
    encoded = codec.encode(spec, version, message)
    decoded, end = codec.decode(spec, version, encoded)
    assert end == len(encoded)
    assert decoded["brokers"][149]["host"] == "h" * 300
    assert decoded["topics"][0]["partitions"][2]["replica_nodes"] == list(range(200))
    assert decoded["topics"][0]["partitions"][2]["isr_nodes"] == [1] * 127
    assert codec.encode(spec, version, decoded) == encoded
