"""Control batches: the transaction markers (COMMIT / ABORT) a transaction coordinator writes.

Kafka's layout (ControlRecordType, EndTransactionMarker): one record whose key is
``int16 version (0), int16 type`` (0 = ABORT, 1 = COMMIT) and whose value is
``int16 version (0), int32 coordinator epoch``, in a batch with the transactional and control
attribute bits set and no sequence.
"""

from __future__ import annotations

import struct

from pybroker.records.builder import SimpleRecord, build_batch
from pybroker.records.errors import CorruptRecordError
from pybroker.records.varint import read_varint

ABORT = 0
COMMIT = 1
_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")
_RECORDS_OFFSET = 61


def build_marker_batch(
    producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int, now_ms: int
) -> bytes:
    record = SimpleRecord(
        _KEY.pack(0, COMMIT if commit else ABORT), _VALUE.pack(0, coordinator_epoch), timestamp_ms=now_ms
    )
    return build_batch(
        [record],
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
    )


def control_type(batch: bytes | bytearray | memoryview) -> int | None:
    """ABORT / COMMIT of an uncompressed control batch (its first record's key); None if unreadable."""
    marker = parse_marker(batch)
    return None if marker is None else marker[0]


def parse_marker(batch: bytes | bytearray | memoryview) -> tuple[int, int] | None:
    """(ABORT/COMMIT, coordinator epoch) of a control batch; None if unreadable."""
    try:
        pos = _RECORDS_OFFSET
        _, pos = read_varint(batch, pos)  # record length
        pos += 1  # attributes
        _, pos = read_varint(batch, pos)  # timestamp delta
        _, pos = read_varint(batch, pos)  # offset delta
        key_len, pos = read_varint(batch, pos)
        if key_len < 4:
            return None
        _, kind = _KEY.unpack_from(batch, pos)
        pos += key_len
        value_len, pos = read_varint(batch, pos)
        coordinator_epoch = _VALUE.unpack_from(batch, pos)[1] if value_len >= _VALUE.size else -1
        return kind, coordinator_epoch
    except (IndexError, struct.error, ValueError, CorruptRecordError):
        return None
