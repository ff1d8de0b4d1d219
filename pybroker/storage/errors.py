"""Storage exceptions; the broker maps them to Kafka error codes."""

import logging
import os

from pybroker.records.errors import CorruptRecordError, InvalidRecordError

logger = logging.getLogger(__name__)


class StorageError(Exception):
    """An I/O or consistency failure of the log itself (Kafka: KAFKA_STORAGE_ERROR)."""


class KafkaStorageError(StorageError):
    """The operating system refused a write or read of a log directory (ENOSPC, EIO, EROFS, EMFILE,
    ...): Kafka's KafkaStorageException, answered as KAFKA_STORAGE_ERROR for the partitions it
    hit.  Unlike Kafka, which takes the directory offline (and stops when it was the only one),
    the broker stays up: nothing was written, reads go on, writes resume once the cause is gone."""

    def __init__(self, message: str, errno: int | None = None) -> None:
        super().__init__(message)
        self.errno = errno


# (log directory, errno) -> failures since the first one was logged.  Logged once per cause, not
# per request: a full disk fails every produce request until space returns.
failing: dict[tuple[str, int | None], int] = {}


def io_failure(directory: os.PathLike[str] | str, what: str, exc: OSError) -> KafkaStorageError:
    """The KafkaStorageError for ``exc`` (``what`` failed in log directory ``directory``), logged
    the first time this cause appears in that directory."""
    key = (os.fspath(directory), exc.errno)
    seen = failing.get(key)
    failing[key] = (seen or 0) + 1
    if seen is None:
        logger.error(
            "storage error in log directory %s: %s failed: %s (logged once; the affected partitions "
            "answer KAFKA_STORAGE_ERROR until it succeeds again)",
            key[0],
            what,
            exc.strerror or exc,
        )
    return KafkaStorageError(f"{what} failed: {exc.strerror or exc}", exc.errno)


def io_success(directory: os.PathLike[str] | str) -> None:
    """A write to ``directory`` succeeded: its failures are over (the hot path calls it only when
    ``failing`` is not empty)."""
    name = os.fspath(directory)
    for key in [k for k in failing if k[0] == name]:
        count = failing.pop(key)
        logger.warning(
            "log directory %s writes again after %d failed attempt(s) (errno %s)", name, count, key[1]
        )


class OffsetOutOfRangeError(StorageError):
    """Requested offset is below the log start offset or above the log end offset."""


class OutOfOrderSequenceError(StorageError):
    """An idempotent producer's batch does not continue its sequence."""


class InvalidProducerEpochError(StorageError):
    """A batch from an older producer epoch than the one already seen (a fenced producer)."""


class TransactionCoordinatorFencedError(StorageError):
    """A marker from a coordinator epoch older than the producer's last marker's (a zombie coordinator;
    Kafka: TRANSACTION_COORDINATOR_FENCED)."""


class InvalidTxnStateError(StorageError):
    """A non-transactional batch from a producer with an ongoing transaction (Kafka: INVALID_TXN_STATE)."""


class RecordTooLargeError(StorageError):
    """A batch above max.message.bytes, or a request larger than a whole segment."""


class UnexpectedAppendOffsetError(StorageError):
    """A follower append whose batches do not continue past the log end (Kafka's
    UnexpectedAppendOffsetException): the follower's fetch state and log disagree."""

    def __init__(self, message: str, first_offset: int = -1, last_offset: int = -1) -> None:
        super().__init__(message)
        self.first_offset = first_offset
        self.last_offset = last_offset


class LogDirLockedError(StorageError):
    """Another process holds the log directory lock."""


__all__ = [
    "CorruptRecordError",
    "InvalidProducerEpochError",
    "InvalidRecordError",
    "InvalidTxnStateError",
    "KafkaStorageError",
    "LogDirLockedError",
    "OffsetOutOfRangeError",
    "OutOfOrderSequenceError",
    "RecordTooLargeError",
    "StorageError",
    "UnexpectedAppendOffsetError",
]
