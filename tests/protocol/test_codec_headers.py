"""Request/response header versions and their irregularities."""

from __future__ import annotations

from pybroker.protocol import codec
from pybroker.protocol.api import API_NAMES, RESPONSES


def h(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", ""))


def test_api_versions_response_header_is_always_v0() -> None:
    for version in range(RESPONSES[18].valid_versions.low, RESPONSES[18].valid_versions.high + 1):
        assert codec.encode_response_header(18, version, 5) == h("00000005")
    assert any(entry.api_key == 18 and entry.kind == "response" for entry in codec.HEADER_EXCEPTIONS)
    assert all("KIP" in entry.reason or "predates" in entry.reason for entry in codec.HEADER_EXCEPTIONS)


def test_response_header_follows_flexibility() -> None:
    assert codec.encode_response_header(3, 8, 5) == h("00000005")  # Metadata v8: not flexible
    assert codec.encode_response_header(3, 9, 5) == h("00000005 00")  # v9: flexible → header v1
    assert codec.encode_response_header(0, 9, 1) == h("00000001 00")
    assert codec.encode_response_header(0, 8, 1) == h("00000001")


def test_every_api_gets_a_response_header() -> None:
    for api_key, spec in RESPONSES.items():
        for version in range(spec.valid_versions.low, spec.valid_versions.high + 1):
            header = codec.encode_response_header(api_key, version, 1)
            expected_length = 5 if spec.is_flexible(version) and api_key != 18 else 4
            assert len(header) == expected_length, (API_NAMES[api_key], version)


def test_client_id_stays_int16_string_in_header_v2() -> None:
    # ApiVersions v3 uses header v2; the client id is not compact.
    frame = h("0012 0003 00000001 0003 6b6366 00") + h("02 61 02 31 00")
    header = codec.decode_request_header(frame)
    assert header.client_id == "kcf"
    assert header.body_offset == 14
    body, end = codec.decode(codec.REQUESTS[18], 3, frame, header.body_offset)
    assert body["client_software_name"] == "a" and end == len(frame)


def test_unknown_api_key_still_yields_key_version_and_correlation_id() -> None:
    header = codec.decode_request_header(h("03e7 0005 00000009 0001 63"))
    assert (header.api_key, header.api_version, header.correlation_id) == (999, 5, 9)
    garbage = codec.decode_request_header(h("03e7 0005 00000009 7fff"))
    assert (garbage.api_key, garbage.api_version, garbage.correlation_id) == (999, 5, 9)


def test_too_new_api_versions_request_header_is_parsed() -> None:
    # Kafka treats versions above the max as flexible when the flexible range is open-ended (3+).
    frame = h("0012 0063 00000004 0001 63 00")
    header = codec.decode_request_header(frame)
    assert header == codec.RequestHeader(18, 99, 4, "c", len(frame))
    assert header.complete
    # A v1-style header for an unknown version still names the request, marked incomplete: the
    # server then closes the connection, as Apache Kafka does.
    broken = codec.decode_request_header(h("0012 0063 00000004 0005"))
    assert (broken.api_key, broken.api_version, broken.correlation_id) == (18, 99, 4)
    assert not broken.complete


def test_controlled_shutdown_v0_uses_header_v0() -> None:
    assert codec.request_header_version(7, 0) == 0
    header = codec.decode_request_header(h("0007 0000 00000003 00000001"))
    assert header == codec.RequestHeader(7, 0, 3, None, 8)
