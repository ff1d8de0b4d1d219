"""The C record walk (records/_walk.c) answers exactly as the Python walk of records/validator.py:
the same result, or the same exception with the same message and record errors, for valid batches
and for mutated ones (flipped, inserted and removed bytes, wrong counts), uncompressed and streamed
through a codec, under every combination of rules.

``PYBROKER_WALK_FUZZ_CASES`` raises the number of cases (default 3,000: about a second)."""

from __future__ import annotations

import os
import random
import time

import pytest

from pybroker.records import CompressionType, SimpleRecord, build_batch, iter_batch_headers, validator
from pybroker.records.batch import (
    HEADER_STRUCT,
    LOG_OVERHEAD,
    RECORDS_OFFSET,
    rewrite_crc,
    validate_produce_batches,
)
from pybroker.records.errors import RecordFormatError
from pybroker.records.validator import ValidationRules, validate_batch

NOW = int(time.time() * 1000)
CASES = int(os.environ.get("PYBROKER_WALK_FUZZ_CASES", "3000"))


@pytest.fixture(autouse=True)
def native():
    if validator._native_walk is None:
        if os.environ.get("CI"):
            pytest.fail("the C record walk (pybroker.records._walk) is not built: pip install -e . needs a C compiler")
        pytest.skip("the C record walk is not built here (no C compiler when pybroker was installed)")


def _value(rng: random.Random) -> bytes | None:
    kind = rng.random()
    if kind < 0.1:
        return None
    size = rng.choice([0, 1, 5, 63, 64, 100, 1000, 8191, 8192, 20000])
    return rng.randbytes(size)


def _records(rng: random.Random) -> list[SimpleRecord]:
    out = []
    for _ in range(rng.randint(1, 12)):
        headers = tuple(
            (rng.choice(["a", "trace-id", "x" * 70]), _value(rng)) for _ in range(rng.choice([0, 0, 0, 1, 3]))
        )
        ts = rng.choice([NOW, NOW, NOW - 10, NOW + 5000, NOW - 10**9, NOW + 10**10, -1, 0, 2**62])
        out.append(SimpleRecord(_value(rng), _value(rng), headers, ts))
    return out


def _mutate(rng: random.Random, batch: bytearray) -> bytearray:
    body = bytearray(batch[RECORDS_OFFSET:])
    for _ in range(rng.randint(1, 4)):
        if not body:
            break
        op = rng.random()
        at = rng.randrange(len(body))
        if op < 0.5:
            body[at] = rng.choice([0x00, 0x01, 0x7F, 0x80, 0xFF, rng.randrange(256)])
        elif op < 0.7:
            body[at:at] = bytes([rng.choice([0x80, 0x01, 0x00, 0xFF])] * rng.randint(1, 11))
        elif op < 0.9:
            del body[at : at + rng.randint(1, 3)]
        else:
            del body[at:]
    out = bytearray(batch[:RECORDS_OFFSET]) + body
    fields = list(HEADER_STRUCT.unpack_from(out, 0))
    fields[1] = len(out) - LOG_OVERHEAD
    if rng.random() < 0.2:
        fields[12] = max(1, fields[12] + rng.choice([-1, 1]))  # recordsCount
        fields[6] = fields[12] - 1
    HEADER_STRUCT.pack_into(out, 0, *fields)
    rewrite_crc(out, 0)
    return out


def _outcome(batch: bytearray, rules: ValidationRules) -> tuple:
    header = next(iter_batch_headers(batch, verify_crc=False))
    try:
        result = validate_batch(batch, header, rules, NOW)
    except Exception as e:  # noqa: BLE001 - the outcome compared is the exception itself
        return (type(e).__name__, str(e), getattr(e, "record_errors", None))
    return ("ok", result.recompressed)


def _rules(rng: random.Random) -> ValidationRules:
    return ValidationRules(
        compacted=rng.random() < 0.3,
        log_append_time=rng.random() < 0.2,
        timestamp_before_max_ms=rng.choice([validator.LONG_MAX, 1000, 3_600_000]),
        timestamp_after_max_ms=rng.choice([3_600_000, 0, validator.LONG_MAX]),
    )


def test_c_walk_matches_python_walk(monkeypatch):
    rng = random.Random(20261124)
    native_walk = validator._native_walk
    for case in range(CASES):
        codec = CompressionType.NONE if rng.random() < 0.8 else rng.choice([CompressionType.GZIP, CompressionType.LZ4])
        attrs_lat = rng.random() < 0.05
        batch = bytearray(build_batch(_records(rng), compression=codec, timestamp_type=1 if attrs_lat else 0))
        if rng.random() < 0.7 and codec == CompressionType.NONE:
            batch = _mutate(rng, batch)
        rules = _rules(rng)
        monkeypatch.setattr(validator, "_native_walk", native_walk)
        by_c = _outcome(batch, rules)
        monkeypatch.setattr(validator, "_native_walk", None)
        by_python = _outcome(batch, rules)
        assert by_c == by_python, f"case {case}: C {by_c!r} != Python {by_python!r}"


def test_c_walk_takes_over_from_python_walk_at_an_anomaly():
    """A record the C walk stops at (a 10-byte varint, which it never decodes) is judged by the
    Python walk, and records after it are still checked."""
    ten_byte_delta = bytes([0x80] * 9 + [0x01])  # a valid varint of 10 bytes (2^63 before zig-zag)
    body = bytearray()
    record = bytearray([0]) + ten_byte_delta + bytes([0, 2]) + b"k" + bytes([2]) + b"v" + bytes([0])
    body += bytes([len(record) * 2]) + record
    plain = bytearray([0, 0, 0, 1, 2]) + b"w" + bytes([0])  # no key: length -1 = 0x01
    body += bytes([len(plain) * 2]) + plain
    batch = bytearray(HEADER_STRUCT.size) + body
    HEADER_STRUCT.pack_into(batch, 0, 0, len(batch) - LOG_OVERHEAD, -1, 2, 0, 0, 1, NOW, NOW, -1, -1, -1, 2)
    rewrite_crc(batch, 0)
    header = next(iter_batch_headers(batch))
    with pytest.raises(validator.InvalidTimestampError) as refused:
        validate_batch(batch, header, ValidationRules(compacted=True), NOW)
    # record 0: its timestamp (NOW + 2^62) is out of range; record 1 has no key (the compacted topic's rule)
    assert [i for i, _ in refused.value.record_errors] == [0, 1]
    with pytest.raises(validator.RecordValidationError) as refused:
        validate_batch(batch, header, ValidationRules(compacted=True, log_append_time=True), NOW)
    assert not isinstance(refused.value, validator.InvalidTimestampError)
    assert [i for i, _ in refused.value.record_errors] == [1]


def _python_checks(batch: bytearray, rules: ValidationRules) -> tuple:
    """What the produce path's Python checks make of one partition's records: ("refused",) or
    (header, walked clean)."""
    try:
        headers = validate_produce_batches(batch)
    except RecordFormatError:
        return ("refused",)
    if len(headers) != 1:
        return ("refused",)
    header = headers[0]
    if header.compression != CompressionType.NONE:
        return (header, False)
    try:
        validated = validate_batch(batch, header, rules, NOW)
    except RecordFormatError:
        return (header, False)
    return (header, not validated.recompressed)


def _mutate_header(rng: random.Random, batch: bytearray) -> bytearray:
    out = bytearray(batch)
    fields = list(HEADER_STRUCT.unpack_from(out, 0))
    op = rng.random()
    if op < 0.15:
        fields[4] ^= 1 << rng.randrange(32)  # crc
        HEADER_STRUCT.pack_into(out, 0, *fields)
        return out
    if op < 0.25:
        fields[3] = rng.choice([0, 1, 3])  # magic
    elif op < 0.35:
        fields[5] |= 0x20  # control
    elif op < 0.45:
        fields[9], fields[11] = 7, -1  # a producer id without a sequence
    elif op < 0.55:
        fields[12] = rng.choice([0, -1, fields[12] + 1])  # recordsCount
    elif op < 0.65:
        fields[6] = rng.choice([-1, fields[6] + 1])  # lastOffsetDelta
    elif op < 0.75:
        return out + out  # two batches
    elif op < 0.85:
        return out[: rng.randrange(len(out))]  # cut short
    else:
        fields[1] += rng.choice([-1, 1, 100])  # batchLength
    HEADER_STRUCT.pack_into(out, 0, *fields)
    if fields[1] + LOG_OVERHEAD <= len(out):  # the CRC stays right: what is tested is the change itself
        rewrite_crc(out, 0)
    return out


def test_produce_fast_check_accepts_only_what_the_python_checks_accept():
    """``check_produce_batch`` (one C call: header, CRC and walk) answers (header, walked) only for a
    batch the Python checks take as one sound batch, with the same header, and walked only when
    validate_batch would keep it as it is; anything else it leaves to them (None).  It must also be
    taken for ordinary batches, or the produce path would never use it."""
    rng = random.Random(20261128)
    taken = 0
    for case in range(CASES):
        codec = CompressionType.NONE if rng.random() < 0.8 else rng.choice([CompressionType.GZIP, CompressionType.LZ4])
        producer = rng.random() < 0.3
        batch = bytearray(
            build_batch(
                _records(rng),
                compression=codec,
                timestamp_type=1 if rng.random() < 0.05 else 0,
                producer_id=4000 if producer else -1,
                producer_epoch=0 if producer else -1,
                base_sequence=rng.randrange(1000) if producer else -1,
            )
        )
        op = rng.random()
        if op < 0.4 and codec == CompressionType.NONE:
            batch = _mutate(rng, batch)
        elif op < 0.7:
            batch = _mutate_header(rng, batch)
        rules = _rules(rng)
        expected = _python_checks(batch, rules)
        fast = validator.check_produce_batch(batch, rules, NOW)
        if fast is None:
            continue
        taken += 1
        header, walked = fast
        assert expected[0] != "refused", f"case {case}: the fast check accepted what Python refuses"
        assert header == expected[0], f"case {case}: {header} != {expected[0]}"
        assert not walked or expected[1], f"case {case}: walked clean, but validate_batch does not keep it"
        assert walked == (header.compression == CompressionType.NONE and expected[1])
    assert taken >= CASES // 10  # (many generated records have timestamps or keys a rule must look at)
    plain = bytearray(build_batch([SimpleRecord(b"k", b"v" * 1024)] * 16))
    header, walked = validator.check_produce_batch(plain, ValidationRules(), NOW)
    assert walked and header == next(iter_batch_headers(plain))
