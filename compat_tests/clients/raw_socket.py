"""The raw-socket "client": bytes written to a TCP connection by hand, no client library.

It is what the bad-input scenarios speak (compat_tests/scenarios/test_bad_input.py): a library
never sends a negative length prefix or half a frame, so those cases need a client that can.
It is not one of the library adapters in registry.py and has no produce/consume; it only sends
bytes and reports what the broker did about them, as an ``Observation``.
"""

from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass
from typing import Literal

from compat_tests.brokers import encode_request, parse_api_versions_v0, split_bootstrap
from compat_tests.reference.kafka_probe import leader_endpoint

API_VERSIONS_KEY = 18
UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER = 3, 6
RETRIED = (UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER)
_SIZE = struct.Struct(">i")


@dataclass(frozen=True)
class Observation:
    """What the broker did after the bytes were sent: closed the connection, answered one frame
    (``frame``: the response without its size prefix), or neither before the wait ran out."""

    kind: Literal["closed", "answered", "silent"]
    frame: bytes = b""

    def describe(self) -> str:
        if self.kind != "answered":
            return {"closed": "connection closed", "silent": "no answer, connection open"}[self.kind]
        (correlation_id,) = struct.unpack_from(">i", self.frame, 0)
        return f"answered (correlation id {correlation_id}, {len(self.frame)} bytes)"


class RawConnection:
    """One TCP connection to the broker, written to byte by byte."""

    def __init__(self, bootstrap: str, timeout_s: float = 10.0) -> None:
        self.sock = socket.create_connection(split_bootstrap(bootstrap.split(",")[0]), timeout=timeout_s)
        self._buffer = b""
        self._correlation_id = 1000

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def observe(self, wait_s: float = 10.0) -> Observation:
        """Read until one whole response frame, the end of the stream, or ``wait_s`` of quiet."""
        self.sock.settimeout(wait_s)
        while True:
            if len(self._buffer) >= 4:
                (size,) = _SIZE.unpack_from(self._buffer, 0)
                if len(self._buffer) >= 4 + size:
                    frame, self._buffer = self._buffer[4 : 4 + size], self._buffer[4 + size :]
                    return Observation("answered", frame)
            try:
                chunk = self.sock.recv(65536)
            except (ConnectionResetError, BrokenPipeError):
                return Observation("closed")
            except TimeoutError:
                return Observation("silent")
            if not chunk:
                return Observation("closed")
            self._buffer += chunk

    def api_versions(self) -> tuple[int, dict[int, tuple[int, int]]]:
        """ApiVersions v0 on this connection: (error code, {api key: (min, max)}); raises if not answered."""
        self._correlation_id += 1
        self.send(encode_request(API_VERSIONS_KEY, 0, self._correlation_id, client_id=b"compat-raw-socket"))
        seen = self.observe()
        if seen.kind != "answered":
            raise ConnectionError(f"ApiVersions v0 not answered: {seen.describe()}")
        correlation_id, error_code, ranges = parse_api_versions_v0(seen.frame)
        if correlation_id != self._correlation_id:
            raise ConnectionError(f"ApiVersions answered correlation id {correlation_id}")
        return error_code, ranges

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---- Produce by hand: record batches a client library would never send ------------------------------

PRODUCE_KEY = 0
CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
_BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")


def zigzag_varint(value: int) -> bytes:
    """A zig-zag varint as inside v2 records."""
    encoded = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while encoded >= 0x80:
        out.append((encoded & 0x7F) | 0x80)
        encoded >>= 7
    out.append(encoded)
    return bytes(out)


def encode_record(
    key: bytes | None, value: bytes | None, offset_delta: int, timestamp_delta: int = 0
) -> bytes:
    """One v2 record (length-prefixed), no headers."""
    body = b"\x00" + zigzag_varint(timestamp_delta) + zigzag_varint(offset_delta)
    for field in (key, value):
        body += zigzag_varint(-1) if field is None else zigzag_varint(len(field)) + field
    body += zigzag_varint(0)
    return zigzag_varint(len(body)) + body


def record_batch(
    payload: bytes, *, count: int, codec: int = 0, base_timestamp: int = 0, max_timestamp: int | None = None
) -> bytes:
    """A v2 batch around an already encoded (and, for ``codec``, already compressed) records section,
    with a valid CRC-32C: the bytes inside are whatever the caller made them."""
    from crc32c import crc32c

    max_ts = base_timestamp if max_timestamp is None else max_timestamp
    batch = bytearray(_BATCH_HEADER.size) + payload
    _BATCH_HEADER.pack_into(
        batch, 0, 0, len(batch) - 12, -1, 2, 0, codec, count - 1, base_timestamp, max_ts, -1, -1, -1, count
    )
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    return bytes(batch)


def _string(value: str) -> bytes:
    raw = value.encode()
    return struct.pack(">h", len(raw)) + raw


def produce_request(version: int, correlation_id: int, topic: str, records: bytes, acks: int = -1) -> bytes:
    """A size-prefixed Produce request (v3-v8, the non-flexible versions) for partition 0 of ``topic``."""
    if not 3 <= version <= 8:
        raise ValueError("raw Produce is encoded for v3-v8 only")
    body = struct.pack(">hhi", -1, acks, 30_000)  # null transactional id, acks, timeout
    body += struct.pack(">i", 1) + _string(topic) + struct.pack(">i", 1)
    body += struct.pack(">ii", 0, len(records)) + records
    return encode_request(PRODUCE_KEY, version, correlation_id, body, client_id=b"compat-raw-socket")


@dataclass(frozen=True)
class PartitionProduceResponse:
    error_code: int
    base_offset: int
    record_errors: tuple[tuple[int, str | None], ...]  # (batch index, message), Produce v8+
    error_message: str | None  # Produce v8+


def parse_produce_response(frame: bytes, version: int) -> PartitionProduceResponse:
    """The one partition's answer in a Produce v3-v8 response frame (without its size prefix)."""
    position = 4  # correlation id
    (topics,) = struct.unpack_from(">i", frame, position)
    position += 4
    if topics != 1:
        raise ValueError(f"{topics} topics in the response")
    (name_length,) = struct.unpack_from(">h", frame, position)
    position += 2 + name_length + 4
    _index, error_code, base_offset, _append_time = struct.unpack_from(">ihqq", frame, position)
    position += 22
    if version >= 5:
        position += 8  # log start offset
    record_errors: list[tuple[int, str | None]] = []
    error_message = None
    if version >= 8:
        (count,) = struct.unpack_from(">i", frame, position)
        position += 4
        for _ in range(max(count, 0)):
            (batch_index,) = struct.unpack_from(">i", frame, position)
            message, position = _nullable_string(frame, position + 4)
            record_errors.append((batch_index, message))
        error_message, position = _nullable_string(frame, position)
    return PartitionProduceResponse(error_code, base_offset, tuple(record_errors), error_message)


def _nullable_string(frame: bytes, position: int) -> tuple[str | None, int]:
    (length,) = struct.unpack_from(">h", frame, position)
    position += 2
    if length < 0:
        return None, position
    return frame[position : position + length].decode(errors="replace"), position + length


def produce_raw(bootstrap: str, version: int, topic: str, records: bytes, timeout_s: float = 60.0):
    """Send one Produce for partition 0 on a fresh connection to its leader (found through Metadata, as
    a client does: any other broker of a cluster answers NOT_LEADER_OR_FOLLOWER); the partition's answer,
    or raise if none came.  NOT_LEADER_OR_FOLLOWER and UNKNOWN_TOPIC_OR_PARTITION (a topic just created,
    which a broker Metadata already names its leader does not host yet) are sent again, as a client
    retries them."""
    deadline = time.monotonic() + 30
    while True:
        host, port = leader_endpoint(bootstrap, topic, 0)
        with RawConnection(f"{host}:{port}", timeout_s=timeout_s) as conn:
            conn.send(produce_request(version, 77, topic, records))
            seen = conn.observe(wait_s=timeout_s)
        if seen.kind != "answered":
            raise ConnectionError(f"Produce v{version} not answered: {seen.describe()}")
        answer = parse_produce_response(seen.frame, version)
        if answer.error_code not in RETRIED or time.monotonic() > deadline:
            return answer
        time.sleep(0.1)
