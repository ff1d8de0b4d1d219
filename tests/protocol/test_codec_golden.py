"""Hand-verified byte fixtures (layouts checked against Kafka's protocol guide and generated classes)."""

from __future__ import annotations

import uuid

import pytest

from pybroker.protocol import codec
from pybroker.protocol.api import REQUESTS, RESPONSES

API_VERSIONS_REQUEST = REQUESTS[18]
API_VERSIONS_RESPONSE = RESPONSES[18]


def h(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", ""))


def assert_codes(spec, version, message, wire: bytes) -> None:
    assert codec.encode(spec, version, message) == wire
    decoded, end = codec.decode(spec, version, wire)
    assert end == len(wire)
    assert codec.encode(spec, version, decoded) == wire


def test_api_versions_v0_request_is_empty() -> None:
    assert_codes(API_VERSIONS_REQUEST, 0, {}, b"")


def test_api_versions_v0_response() -> None:
    message = {"error_code": 0, "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 3}]}
    # error_code | int32 count | key min max
    wire = h("0000 00000001 0012 0000 0003")
    assert_codes(API_VERSIONS_RESPONSE, 0, message, wire)
    assert codec.decode(API_VERSIONS_RESPONSE, 0, wire)[0] == message


def test_api_versions_v3_request_uses_compact_strings_and_tags() -> None:
    message = {"client_software_name": "a", "client_software_version": "1"}
    wire = h("02 61 02 31 00")  # compact "a", compact "1", no tagged fields
    assert_codes(API_VERSIONS_REQUEST, 3, message, wire)


def test_api_versions_v3_response_with_and_without_tagged_fields() -> None:
    base = {
        "error_code": 0,
        "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 3}],
        "throttle_time_ms": 0,
    }
    # error | compact count 1+1 | key min max | entry tags | throttle | body tags
    plain = h("0000 02 0012 0000 0003 00 00000000 00")
    assert_codes(API_VERSIONS_RESPONSE, 3, base, plain)
    # FinalizedFeaturesEpoch (tag 1, default -1) is written only when it differs from the default.
    assert codec.encode(API_VERSIONS_RESPONSE, 3, {**base, "finalized_features_epoch": -1}) == plain
    tagged = h("0000 02 0012 0000 0003 00 00000000 01 01 08 0000000000000005")
    assert_codes(API_VERSIONS_RESPONSE, 3, {**base, "finalized_features_epoch": 5}, tagged)
    decoded = codec.decode(API_VERSIONS_RESPONSE, 3, plain)[0]
    assert decoded["finalized_features_epoch"] == -1  # absent tagged field decodes to its default
    assert decoded["supported_features"] == []
    assert decoded["zk_migration_ready"] is False


def test_metadata_v1_request_null_versus_empty_topics() -> None:
    spec = REQUESTS[3]
    assert_codes(spec, 1, {"topics": None}, h("ffffffff"))  # null = all topics
    assert_codes(spec, 1, {"topics": []}, h("00000000"))  # empty = no topics
    assert codec.decode(spec, 1, h("ffffffff"))[0] == {"topics": None}
    assert codec.decode(spec, 1, h("00000000"))[0] == {"topics": []}


def test_metadata_v0_request_topics_are_not_nullable() -> None:
    with pytest.raises(codec.DecodeError):
        codec.decode(REQUESTS[3], 0, h("ffffffff"))
    with pytest.raises(codec.EncodeError):
        codec.encode(REQUESTS[3], 0, {"topics": None})


def test_produce_v3_request_with_header_v1() -> None:
    frame = h("0000 0003 00000007 0001 63")  # api 0, version 3, correlation 7, client "c"
    body = h("ffff ffff 000003e8 00000001 0001 74 00000001 00000000 00000003 616263")
    header = codec.decode_request_header(frame + body)
    assert header == codec.RequestHeader(0, 3, 7, "c", len(frame))
    message, end = codec.decode(REQUESTS[0], 3, frame + body, header.body_offset)
    assert end == len(frame) + len(body)
    assert message["transactional_id"] is None
    assert message["acks"] == -1
    records = message["topic_data"][0]["partition_data"][0]["records"]
    assert isinstance(records, memoryview) and bytes(records) == b"abc"
    assert codec.encode(REQUESTS[0], 3, message) == body


def test_flexible_request_header_v2() -> None:
    # Metadata v12 is flexible: header v2 = v1 + tagged fields; client_id stays an int16-length string.
    frame = h("0003 000c 0000002a 0002 6964 00")
    header = codec.decode_request_header(frame)
    assert header == codec.RequestHeader(3, 12, 42, "id", len(frame))
    with_tag = h("0003 000c 0000002a ffff 01 00 01 ff")  # null client id, one tagged field
    assert codec.decode_request_header(with_tag) == codec.RequestHeader(3, 12, 42, None, len(with_tag))


def test_uuid_fields() -> None:
    spec = RESPONSES[3]
    topic_id = uuid.UUID("01234567-89ab-cdef-0123-456789abcdef")
    message = {"topics": [{"name": "t", "topic_id": topic_id}]}
    encoded = codec.encode(spec, 12, message)
    assert topic_id.bytes in encoded
    decoded = codec.decode(spec, 12, encoded)[0]
    assert decoded["topics"][0]["topic_id"] == topic_id
    zero = codec.decode(spec, 12, codec.encode(spec, 12, {"topics": [{"name": "t"}]}))[0]
    assert zero["topics"][0]["topic_id"] == uuid.UUID(int=0)


def test_nullable_struct_prefix() -> None:
    # DescribeTopicPartitions v0 request: Cursor is a nullable struct (int8 -1 null / 1 present).
    spec = REQUESTS[75]
    null_cursor = codec.encode(spec, 0, {"topics": [], "response_partition_limit": 5, "cursor": None})
    assert null_cursor == h("01 00000005 ff 00")
    with_cursor = codec.encode(
        spec,
        0,
        {"topics": [], "response_partition_limit": 5, "cursor": {"topic_name": "t", "partition_index": 2}},
    )
    assert with_cursor == h("01 00000005 01 0274 00000002 00 00")
    assert codec.decode(spec, 0, with_cursor)[0]["cursor"] == {"topic_name": "t", "partition_index": 2}


class FakeFileSlice:
    def __init__(self, size: int) -> None:
        self.size = size


def test_encode_parts_keeps_file_slices_separate() -> None:
    spec = RESPONSES[1]
    chunk = FakeFileSlice(10)
    message = {
        "responses": [
            {"topic": "t", "partitions": [{"partition_index": 0, "high_watermark": 5, "records": chunk}]},
        ]
    }
    parts = codec.encode_parts(spec, 4, message)
    assert len(parts) == 2  # records are the last field in v4
    assert parts[1] is chunk
    assert parts[0].endswith(h("0000000a"))  # int32 length prefix, then the slice itself
    with pytest.raises(codec.EncodeError):
        codec.encode(spec, 4, message)
    flexible_parts = codec.encode_parts(spec, 12, message)
    assert len(flexible_parts) == 3  # the tagged-field sections follow the slice
    assert flexible_parts[1] is chunk and flexible_parts[0].endswith(b"\x0b")  # compact length 10+1
    assert flexible_parts[2] == b"\x00\x00\x00"  # partition, topic and response tag sections


def test_non_default_value_for_a_missing_field_is_refused() -> None:
    with pytest.raises(codec.UnsupportedFieldError):
        codec.encode(REQUESTS[3], 3, {"topics": None, "allow_auto_topic_creation": False})
    # The default value of a missing field is fine, and so is anything for an ignorable one.
    codec.encode(REQUESTS[3], 3, {"topics": None, "allow_auto_topic_creation": True})
    assert codec.encode(RESPONSES[18], 0, {"throttle_time_ms": 100}) == codec.encode(RESPONSES[18], 0, {})


def test_unknown_field_name_is_refused() -> None:
    """A misspelt name would otherwise be written as the field's default without a word."""
    with pytest.raises(codec.UnknownFieldError, match="error_cod"):
        codec.encode(RESPONSES[18], 3, {"error_cod": 35, "api_keys": []})
    # Also inside nested structs, and for a name declared only at other versions it is fine.
    with pytest.raises(codec.UnknownFieldError, match="partiton_index"):
        codec.encode(
            RESPONSES[2], 11, {"topics": [{"name": "t", "partitions": [{"partiton_index": 0}]}]}
        )
    codec.encode(RESPONSES[0], 13, {"responses": [{"name": "ignored from v13", "partition_responses": []}]})
    codec.encode(RESPONSES[18], 3, {"_unknown_tags": {9: b"x"}})


def test_unsupported_version() -> None:
    with pytest.raises(codec.UnsupportedVersionError):
        codec.decode(REQUESTS[18], 99, b"")
