"""Keys and values of ``__transaction_state``, in Apache Kafka's layout.

Key: int16 version 0, then TransactionLogKey (the transactional id).  Value: int16 version, then
TransactionLogValue; this broker writes version 0 for clients of transaction version 1 and version 1
(with the tagged previous/next producer ids and client transaction version) for those of version 2,
as Kafka does, and reads both.  A null value is a tombstone.  Source of truth: apache/kafka
transaction-coordinator/src/main/resources/common/message/TransactionLog{Key,Value}.json.
"""

from __future__ import annotations

import struct
from typing import Any

from pybroker.protocol import codec
from pybroker.protocol.schema import NO_VERSIONS, MessageSpec
from pybroker.protocol.schema import FieldSpec as F
from pybroker.protocol.schema import VersionRange as V

KEY_VERSION = 0
VALUE_VERSION = 0
VALUE_VERSION_TV2 = 1
_VERSION = struct.Struct(">h")

TRANSACTION_LOG_KEY = MessageSpec(
    name="TransactionLogKey",
    api_key=None,
    kind="data",
    valid_versions=V(0, 0),
    flexible_versions=NO_VERSIONS,
    fields=(F("transactional_id", "TransactionalId", "string", V(0, None)),),
)

TRANSACTION_LOG_VALUE = MessageSpec(
    name="TransactionLogValue",
    api_key=None,
    kind="data",
    valid_versions=V(0, 1),
    flexible_versions=V(1, None),
    fields=(
        F("producer_id", "ProducerId", "int64", V(0, None)),
        F(
            "previous_producer_id",
            "PreviousProducerId",
            "int64",
            V(1, None),
            tagged_versions=V(1, None),
            tag=0,
            default="-1",
        ),
        F(
            "next_producer_id",
            "NextProducerId",
            "int64",
            V(1, None),
            tagged_versions=V(1, None),
            tag=1,
            default="-1",
        ),
        F("producer_epoch", "ProducerEpoch", "int16", V(0, None)),
        F("transaction_timeout_ms", "TransactionTimeoutMs", "int32", V(0, None)),
        F("transaction_status", "TransactionStatus", "int8", V(0, None)),
        F(
            "transaction_partitions",
            "TransactionPartitions",
            "[]PartitionsSchema",
            V(0, None),
            nullable_versions=V(0, None),
            fields=(
                F("topic", "Topic", "string", V(0, None)),
                F("partition_ids", "PartitionIds", "[]int32", V(0, None)),
            ),
        ),
        F("transaction_last_update_timestamp_ms", "TransactionLastUpdateTimestampMs", "int64", V(0, None)),
        F("transaction_start_timestamp_ms", "TransactionStartTimestampMs", "int64", V(0, None)),
        F(
            "client_transaction_version",
            "ClientTransactionVersion",
            "int16",
            V(1, None),
            tagged_versions=V(1, None),
            tag=2,
            default="0",
        ),
    ),
)


def key(transactional_id: str) -> bytes:
    return _VERSION.pack(KEY_VERSION) + codec.encode(
        TRANSACTION_LOG_KEY, KEY_VERSION, {"transactional_id": transactional_id}
    )


def decode_key(data: bytes) -> str | None:
    """The transactional id, or None for a key version this broker does not know."""
    (version,) = _VERSION.unpack_from(data, 0)
    if version != KEY_VERSION:
        return None
    msg, _ = codec.decode(TRANSACTION_LOG_KEY, version, memoryview(data), 2)
    return msg["transactional_id"]


_TAGGED = ("previous_producer_id", "next_producer_id", "client_transaction_version")


def value(msg: dict[str, Any]) -> bytes:
    """``msg`` holds TransactionLogValue fields by snake_case name."""
    version = VALUE_VERSION_TV2 if msg.get("client_transaction_version", 0) >= 2 else VALUE_VERSION
    if version < VALUE_VERSION_TV2:
        msg = {k: v for k, v in msg.items() if k not in _TAGGED}
    return _VERSION.pack(version) + codec.encode(TRANSACTION_LOG_VALUE, version, msg)


def decode_value(data: bytes) -> dict[str, Any]:
    (version,) = _VERSION.unpack_from(data, 0)
    msg, _ = codec.decode(TRANSACTION_LOG_VALUE, min(version, 1), memoryview(data), 2)
    return msg
