"""Storage exceptions; the broker maps them to Kafka error codes."""

from pybroker.records.errors import CorruptRecordError, InvalidRecordError


class StorageError(Exception):
    """An I/O or consistency failure of the log itself (Kafka: KAFKA_STORAGE_ERROR)."""


class OffsetOutOfRangeError(StorageError):
    """Requested offset is below the log start offset or above the log end offset."""


class OutOfOrderSequenceError(StorageError):
    """An idempotent producer's batch does not continue its sequence."""


class InvalidProducerEpochError(StorageError):
    """A batch from an older producer epoch than the one already seen (a fenced producer)."""


class InvalidTxnStateError(StorageError):
    """A non-transactional batch from a producer with an ongoing transaction (Kafka: INVALID_TXN_STATE)."""


class RecordTooLargeError(StorageError):
    """A batch above max.message.bytes, or a request larger than a whole segment."""


class LogDirLockedError(StorageError):
    """Another process holds the log directory lock."""


__all__ = [
    "CorruptRecordError",
    "InvalidProducerEpochError",
    "InvalidRecordError",
    "InvalidTxnStateError",
    "LogDirLockedError",
    "OffsetOutOfRangeError",
    "OutOfOrderSequenceError",
    "RecordTooLargeError",
    "StorageError",
]
