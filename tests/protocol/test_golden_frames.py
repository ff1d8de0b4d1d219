"""Request frames captured from stock clients (tests/protocol/golden/, see tools/capture_frames.py).

Every captured request must decode completely with pybroker's declarations at its version and
re-encode byte for byte; Produce frames must carry valid record batches. pybroker's own responses to
kafka-python must decode with kafka-python's protocol classes to the same values pybroker encoded.
"""

from __future__ import annotations

import io
import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from pybroker.protocol.api import REQUEST_HEADER, REQUESTS, RESPONSE_HEADER, RESPONSES
from pybroker.protocol.codec import (
    decode,
    decode_request_header,
    encode,
    request_header_version,
    response_header_version,
)
from pybroker.records.batch import validate_produce_batches

GOLDEN_DIR = Path(__file__).resolve().parent / "golden"
INDEX = json.loads((GOLDEN_DIR / "index.json").read_text())
PRODUCE = 0
# The clients the capture covers; a capture that silently lost one should fail here, not shrink.
EXPECTED_CLIENTS = {"kafka-python", "confluent", "aiokafka", "kcat", "java"}


def _entry_id(entry: dict) -> str:
    return entry["file"].removesuffix(".bin")


def test_capture_covers_every_client_and_stays_small() -> None:
    clients = {entry["client"] for entry in INDEX["requests"]}
    assert clients == EXPECTED_CLIENTS
    for client in EXPECTED_CLIENTS:
        apis = {entry["api_name"] for entry in INDEX["requests"] if entry["client"] == client}
        assert {"ApiVersions", "Metadata", "Produce", "Fetch"} <= apis, client
    total = sum(path.stat().st_size for path in GOLDEN_DIR.rglob("*") if path.is_file())
    assert total < 2_000_000
    indexed = {entry["file"] for entry in INDEX["requests"] + INDEX["responses"]}
    on_disk = {str(path.relative_to(GOLDEN_DIR)) for path in GOLDEN_DIR.rglob("*.bin")}
    assert indexed == on_disk


@pytest.mark.parametrize("entry", INDEX["requests"], ids=_entry_id)
def test_captured_request_decodes_completely_and_reencodes_byte_exact(entry: dict) -> None:
    frame = (GOLDEN_DIR / entry["file"]).read_bytes()
    assert len(frame) == entry["size"]

    header = decode_request_header(frame)
    assert (header.api_key, header.api_version, header.correlation_id) == (
        entry["api_key"],
        entry["api_version"],
        entry["correlation_id"],
    )
    header_version = request_header_version(header.api_key, header.api_version)
    header_fields, header_end = decode(REQUEST_HEADER, header_version, frame)
    assert header_end == header.body_offset
    assert header_fields["client_id"] == header.client_id

    spec = REQUESTS[header.api_key]
    assert spec.supports(header.api_version)
    body, end = decode(spec, header.api_version, frame, header.body_offset)
    assert end == len(frame), f"{len(frame) - end} bytes left after the {spec.name} body"

    reencoded = encode(REQUEST_HEADER, header_version, header_fields) + encode(spec, header.api_version, body)
    assert reencoded == frame


PRODUCE_ENTRIES = [entry for entry in INDEX["requests"] if entry["api_key"] == PRODUCE]


@pytest.mark.parametrize("entry", PRODUCE_ENTRIES, ids=_entry_id)
def test_captured_produce_carries_valid_record_batches(entry: dict) -> None:
    frame = (GOLDEN_DIR / entry["file"]).read_bytes()
    header = decode_request_header(frame)
    body, _ = decode(REQUESTS[PRODUCE], header.api_version, frame, header.body_offset)
    partitions = [partition for topic in body["topic_data"] for partition in topic["partition_data"]]
    assert partitions
    for partition in partitions:
        batches = validate_produce_batches(partition["records"])  # raises on a bad CRC or offset range
        assert batches and all(batch.records_count > 0 for batch in batches)


def test_produce_captured_from_every_client() -> None:
    assert {entry["client"] for entry in PRODUCE_ENTRIES} == EXPECTED_CLIENTS


# --------------------------------------------------------------------------------------------------
# pybroker's responses, read by kafka-python's own protocol classes.


_MISSING = object()


def _assert_same_values(ours: Any, theirs: Any, path: str) -> int:
    """Walk pybroker's decoded dict and kafka-python's decoded object side by side, comparing every
    field kafka-python also has; returns how many leaf values were compared."""
    if isinstance(ours, dict):
        if theirs is None:
            # An absent tagged struct: kafka-python leaves it None, pybroker fills in its defaults.
            assert all(not isinstance(v, list) or not v for v in ours.values()), path
            return 0
        compared = 0
        for key, value in ours.items():
            their_value = getattr(theirs, key, _MISSING)
            if key != "_unknown_tags" and their_value is not _MISSING:
                compared += _assert_same_values(value, their_value, f"{path}.{key}")
        return compared
    if isinstance(ours, list):
        assert isinstance(theirs, list) and len(ours) == len(theirs), path
        return sum(
            _assert_same_values(a, b, f"{path}[{i}]")
            for i, (a, b) in enumerate(zip(ours, theirs, strict=True))
        )
    if isinstance(ours, uuid.UUID):
        # kafka-python has its own Uuid type; compare the 16 bytes.
        their_bytes = theirs.bytes if hasattr(theirs, "bytes") else uuid.UUID(str(theirs)).bytes
        assert ours.bytes == their_bytes, path
        return 1
    if isinstance(ours, memoryview | bytes | bytearray):
        assert bytes(ours) == bytes(theirs), path
        return 1
    assert ours == theirs, f"{path}: pybroker {ours!r} != kafka-python {theirs!r}"
    return 1


@pytest.mark.parametrize("entry", INDEX["responses"], ids=_entry_id)
def test_pybroker_response_decodes_with_kafka_python(entry: dict) -> None:
    from kafka.protocol.api_header import RequestHeader as KafkaPythonRequestHeader

    frame = (GOLDEN_DIR / entry["file"]).read_bytes()
    api_key, api_version = entry["api_key"], entry["api_version"]

    header_fields, body_offset = decode(RESPONSE_HEADER, response_header_version(api_key, api_version), frame)
    assert header_fields["correlation_id"] == entry["correlation_id"]
    ours, end = decode(RESPONSES[api_key], api_version, frame, body_offset)
    assert end == len(frame)

    request_header = KafkaPythonRequestHeader(
        request_api_key=api_key, request_api_version=api_version, correlation_id=0, client_id="golden"
    )
    response_class = request_header.get_response_class()
    assert response_class is not None, f"kafka-python has no response class for {entry['api_name']}"
    buf = io.BytesIO(frame)
    their_header = response_class.parse_header(buf, version=api_version)
    assert their_header.correlation_id == entry["correlation_id"]
    assert buf.tell() == body_offset
    theirs = response_class.decode(frame[body_offset:], version=api_version)
    compared = _assert_same_values(ours, theirs, entry["api_name"])
    assert compared > 0
