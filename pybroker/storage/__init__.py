"""Storage engine: segments, indexes, producer state, logs and the log manager (Kafka's model)."""

from pybroker.storage.config import LogConfig
from pybroker.storage.errors import (
    CorruptRecordError,
    InvalidProducerEpochError,
    InvalidRecordError,
    LogDirLockedError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    RecordTooLargeError,
    StorageError,
)
from pybroker.storage.file_slice import FileSlice
from pybroker.storage.log import AppendInfo, Log
from pybroker.storage.manager import LogManager

__all__ = [
    "AppendInfo",
    "CorruptRecordError",
    "FileSlice",
    "InvalidProducerEpochError",
    "InvalidRecordError",
    "Log",
    "LogConfig",
    "LogDirLockedError",
    "LogManager",
    "OffsetOutOfRangeError",
    "OutOfOrderSequenceError",
    "RecordTooLargeError",
    "StorageError",
]
