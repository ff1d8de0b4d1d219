"""Malformed input raises DecodeError: never IndexError, struct.error or a giant allocation."""

from __future__ import annotations

import pytest
from protocol_samples import MessageFactory

from pybroker.protocol import codec
from pybroker.protocol.api import ALL_MESSAGES, REQUESTS, RESPONSES


def h(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", ""))


SAMPLED = [
    pytest.param(spec, version, id=f"{spec.name}-v{version}")
    for spec in ALL_MESSAGES
    if spec.api_key in (0, 1, 2, 3, 18, 75) or spec.kind == "header"
    for version in (spec.valid_versions.low, spec.valid_versions.high)
]


@pytest.mark.parametrize(("spec", "version"), SAMPLED)
def test_every_truncation_raises_decode_error(spec, version) -> None:
    encoded = codec.encode(spec, version, MessageFactory(seed=version).message(spec, version))
    for cut in range(len(encoded)):
        with pytest.raises(codec.DecodeError):
            codec.decode(spec, version, encoded[:cut])


def test_negative_string_length_other_than_null() -> None:
    # Metadata v1 request: one topic whose name has length -2.
    with pytest.raises(codec.DecodeError):
        codec.decode(REQUESTS[3], 1, h("00000001 fffe"))


def test_non_nullable_string_sent_as_null() -> None:
    with pytest.raises(codec.DecodeError):
        codec.decode(REQUESTS[3], 1, h("00000001 ffff"))


def test_length_past_the_end() -> None:
    with pytest.raises(codec.DecodeError):
        codec.decode(REQUESTS[3], 1, h("00000001 0005 6162"))


def test_huge_array_count_fails_before_allocating() -> None:
    with pytest.raises(codec.DecodeError, match="remain"):
        codec.decode(REQUESTS[3], 1, h("7fffffff 0001 61"))
    with pytest.raises(codec.DecodeError):
        codec.decode(RESPONSES[18], 0, h("0000 7fffffff"))  # fixed-size elements


def test_negative_array_count() -> None:
    with pytest.raises(codec.DecodeError):
        codec.decode(REQUESTS[3], 1, h("fffffffe"))


def test_varint_too_long() -> None:
    with pytest.raises(codec.DecodeError, match="too long"):
        codec.decode(REQUESTS[18], 3, h("ffffffffff01"))
    with pytest.raises(codec.DecodeError):
        codec.decode_uvarint(h("ffffffffff01"), 0)


def test_tagged_field_size_past_the_end() -> None:
    # ApiVersions v3 request body: two compact strings, then one tagged field claiming 9 bytes.
    with pytest.raises(codec.DecodeError):
        codec.decode(REQUESTS[18], 3, h("01 01 01 05 09 00"))


def test_tagged_field_cannot_read_past_its_size() -> None:
    # ApiVersions v3 response tag 1 (an int64) declared with size 2: its reader must not run past.
    wire = h("0000 01 00000000 01 01 02 0000 00000000000000")
    with pytest.raises(codec.DecodeError):
        codec.decode(RESPONSES[18], 3, wire)


def test_invalid_utf8() -> None:
    with pytest.raises(codec.DecodeError):
        codec.decode(REQUESTS[3], 1, h("00000001 0002 ff fe"))


def test_malformed_header() -> None:
    with pytest.raises(codec.DecodeError):
        codec.decode_request_header(h("0003 0001"))
    with pytest.raises(codec.DecodeError):
        codec.decode_request_header(h("0003 0001 00000001 0009 61"))  # client id past the end


def test_decode_error_is_a_value_error() -> None:
    assert issubclass(codec.DecodeError, ValueError)
