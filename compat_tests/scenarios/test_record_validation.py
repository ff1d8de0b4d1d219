"""Kafka's LogValidator on Produce, through a raw socket: batches no client library would send.

Apache Kafka walks the records of every produced batch: a compressed payload must decompress, the
records inside must parse and number exactly recordsCount, a compacted topic refuses keyless records,
and CreateTime timestamps must lie within message.timestamp.before/after.max.ms of the broker's clock.
Refused records come back one by one in ``record_errors`` (Produce v8+) and the whole batch fails.
Each expectation was measured against Apache Kafka 4.3.1 (``--broker kafka``) and holds unchanged on
pybroker.
"""

from __future__ import annotations

import gzip
import time

import pytest
import zstandard

from compat_tests.clients.raw_socket import (
    CODEC_IDS,
    encode_record,
    produce_raw,
    record_batch,
    zigzag_varint,
)

# The ledger column of every row of this module (ledger_plugin.scenario_and_client reads it).
LEDGER_COLUMN = "raw-socket"

NONE, UNKNOWN_SERVER_ERROR, INVALID_TIMESTAMP, UNSUPPORTED_COMPRESSION_TYPE, INVALID_RECORD = (
    0,
    -1,
    32,
    76,
    87,
)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _records(keys: list[bytes | None], timestamp_deltas: list[int] | None = None) -> bytes:
    deltas = timestamp_deltas or [0] * len(keys)
    return b"".join(encode_record(key, b"value-%d" % i, i, deltas[i]) for i, key in enumerate(keys))


def _zstd(data: bytes) -> bytes:
    return zstandard.ZstdCompressor(level=3).compress(data)


def test_valid_zstd_batch_is_accepted(bootstrap: str, make_topic) -> None:
    # The control case of this module: the same path, well-formed, is stored.
    topic = make_topic()
    batch = record_batch(
        _zstd(_records([b"k1", b"k2", b"k3"])), count=3, codec=CODEC_IDS["zstd"], base_timestamp=_now_ms()
    )
    answer = produce_raw(bootstrap, 8, topic, batch)
    assert (answer.error_code, answer.base_offset) == (NONE, 0)


def test_junk_zstd_payload_is_refused(bootstrap: str, make_topic) -> None:
    topic = make_topic(configs={"compression.type": "producer"})
    batch = record_batch(
        b"this is not a zstd frame at all" * 4, count=1, codec=CODEC_IDS["zstd"], base_timestamp=_now_ms()
    )
    answer = produce_raw(bootstrap, 8, topic, batch)
    # Kafka: its decompressing iterator throws a KafkaException ("Failed to decompress record stream").
    assert answer.error_code == UNKNOWN_SERVER_ERROR
    assert answer.record_errors == ()


def test_junk_gzip_payload_is_refused(bootstrap: str, make_topic) -> None:
    topic = make_topic(configs={"compression.type": "producer"})
    batch = record_batch(
        b"\x1f\x8b\x08\x00" + b"\xff" * 64, count=1, codec=CODEC_IDS["gzip"], base_timestamp=_now_ms()
    )
    answer = produce_raw(bootstrap, 8, topic, batch)
    assert answer.error_code == UNKNOWN_SERVER_ERROR


INVALID_RECORD_PAYLOADS = {
    # Three records declared, two inside: the stream ends early.
    "fewer-records-than-declared": (_records([b"a", b"b"]), 3),
    # Two declared, three inside: bytes remain after the last one.
    "more-records-than-declared": (_records([b"a", b"b", b"c"]), 2),
    # A record whose length covers 8 bytes more than its fields take.
    "record-length-mismatch": (zigzag_varint(14 + 8) + _records([b"a"])[1:] + b"\x00" * 8, 1),
    # A negative header count.
    "negative-header-count": (_records([b"a"])[:-1] + zigzag_varint(-3), 1),
}


@pytest.mark.parametrize("case", sorted(INVALID_RECORD_PAYLOADS))
def test_invalid_records_inside_valid_zstd_are_refused(bootstrap: str, make_topic, case: str) -> None:
    payload, count = INVALID_RECORD_PAYLOADS[case]
    topic = make_topic(configs={"compression.type": "producer"})
    batch = record_batch(_zstd(payload), count=count, codec=CODEC_IDS["zstd"], base_timestamp=_now_ms())
    answer = produce_raw(bootstrap, 8, topic, batch)
    assert answer.error_code == INVALID_RECORD


def test_invalid_records_inside_gzip_are_refused_when_recompressed(bootstrap: str, make_topic) -> None:
    # The recompressing path walks the records too.
    topic = make_topic(configs={"compression.type": "lz4"})
    batch = record_batch(
        gzip.compress(_records([b"a", b"b"])), count=3, codec=CODEC_IDS["gzip"], base_timestamp=_now_ms()
    )
    answer = produce_raw(bootstrap, 8, topic, batch)
    assert answer.error_code == INVALID_RECORD


@pytest.mark.parametrize("version", [3, 6])
def test_zstd_on_produce_before_v7_is_refused(bootstrap: str, make_topic, version: int) -> None:
    topic = make_topic()
    batch = record_batch(_zstd(_records([b"k"])), count=1, codec=CODEC_IDS["zstd"], base_timestamp=_now_ms())
    answer = produce_raw(bootstrap, version, topic, batch)
    assert answer.error_code == UNSUPPORTED_COMPRESSION_TYPE
    # v7 takes the very same batch.
    assert produce_raw(bootstrap, 7, topic, batch).error_code == NONE


KEYLESS = [3, 11, 19, 27, 35, 52, 64, 77, 88, 99]


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_keyless_records_on_a_compacted_topic(bootstrap: str, make_topic, codec: str) -> None:
    topic = make_topic(configs={"cleanup.policy": "compact"})
    keys = [None if i in KEYLESS else b"key-%d" % i for i in range(100)]
    payload = _records(keys)
    if codec == "zstd":
        payload = _zstd(payload)
    batch = record_batch(payload, count=100, codec=CODEC_IDS[codec], base_timestamp=_now_ms())
    answer = produce_raw(bootstrap, 8, topic, batch)
    assert answer.error_code == INVALID_RECORD
    assert [index for index, _message in answer.record_errors] == KEYLESS
    assert all("without key" in (message or "") for _index, message in answer.record_errors)
    # The batch failed as a whole: nothing was appended, the next batch starts at offset 0.
    keyed = record_batch(_records([b"k1", b"k2"]), count=2, base_timestamp=_now_ms())
    assert produce_raw(bootstrap, 8, topic, keyed).base_offset == 0


def test_timestamp_too_far_in_the_future(bootstrap: str, make_topic) -> None:
    # Kafka 4's default log.message.timestamp.after.max.ms is one hour.
    topic = make_topic()
    now = _now_ms()
    two_hours = 2 * 3600 * 1000
    batch = record_batch(
        _records([b"a", b"b", b"c"], [0, two_hours, 0]),
        count=3,
        base_timestamp=now,
        max_timestamp=now + two_hours,
    )
    answer = produce_raw(bootstrap, 8, topic, batch)
    assert answer.error_code == INVALID_TIMESTAMP
    assert [index for index, _message in answer.record_errors] == [1]


def test_timestamp_too_old_for_the_topic(bootstrap: str, make_topic) -> None:
    topic = make_topic(configs={"message.timestamp.before.max.ms": "60000"})
    now = _now_ms()
    ten_minutes = 600_000
    payload = _zstd(_records([b"a", b"b", b"c"], [0, ten_minutes, ten_minutes]))
    batch = record_batch(
        payload, count=3, codec=CODEC_IDS["zstd"], base_timestamp=now - ten_minutes, max_timestamp=now
    )
    answer = produce_raw(bootstrap, 8, topic, batch)
    assert answer.error_code == INVALID_TIMESTAMP
    assert [index for index, _message in answer.record_errors] == [0]
    # Within bounds, the topic accepts it.
    fresh = record_batch(_records([b"a"]), count=1, base_timestamp=now)
    assert produce_raw(bootstrap, 8, topic, fresh).error_code == NONE


def test_keyless_records_refused_once_cleanup_policy_becomes_compact(
    bootstrap: str, make_topic, admin
) -> None:
    # Case 10 as the client suites met it: the policy changes on a live topic (IncrementalAlterConfigs;
    # APPEND to the default "delete" gives "delete,compact").
    topic = make_topic()
    keys = [None if i in KEYLESS else b"key-%d" % i for i in range(100)]
    assert (
        produce_raw(
            bootstrap, 8, topic, record_batch(_records(keys), count=100, base_timestamp=_now_ms())
        ).error_code
        == NONE
    )
    admin.alter_configs(bootstrap, topic, {"cleanup.policy": "delete,compact"})
    deadline = time.monotonic() + 30
    while True:
        batch = record_batch(_records(keys), count=100, base_timestamp=_now_ms())
        answer = produce_raw(bootstrap, 8, topic, batch)
        if answer.error_code != NONE or time.monotonic() > deadline:
            break
        time.sleep(0.2)  # the broker applies the new config asynchronously (Kafka: via its metadata log)
    assert answer.error_code == INVALID_RECORD
    assert [index for index, _message in answer.record_errors] == KEYLESS
