"""Checking and validating one produced partition batch before the leader appends it (the part of
Kafka's ReplicaManager.appendRecords / UnifiedLog.analyzeAndValidateRecords that needs no log).

The header is parsed and the CRC checked; then the records are walked (records.validator): in place
for an uncompressed batch, on the event loop; in a worker thread, decompressing in bounded chunks, for
a compressed one or one the topic recompresses.  Each failure becomes the partition's response with
Kafka's error code.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

from pybroker.protocol.errors import ErrorCode
from pybroker.records.batch import BatchHeader, iter_batch_headers
from pybroker.records.errors import (
    CorruptRecordError,
    InvalidRecordError,
    RecordBatchTooLargeError,
    RecordFormatError,
    UnsupportedCompressionError,
)
from pybroker.records.streams import RecordDecompressionError
from pybroker.records.validator import (
    DecompressedSizeLimitError,
    InvalidTimestampError,
    RecordValidationError,
    ValidationRules,
    validate_batch,
)
from pybroker.storage.config import LogConfig
from pybroker.storage.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    RecordTooLargeError,
    StorageError,
)

log = logging.getLogger(__name__)

# KIP-110: zstd batches need Produce v7 or later.
ZSTD_MIN_PRODUCE_VERSION = 7

# Refusals that are the client's doing (some are StorageErrors): answered without an error log.
REFUSED = (
    RecordFormatError,
    RecordTooLargeError,
    OutOfOrderSequenceError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
)


def partition_response(
    index: int,
    code: ErrorCode,
    message: str | None = None,
    base_offset: int = -1,
    log_append_time: int = -1,
    log_start_offset: int = -1,
) -> dict:
    """A Produce partition response (Kafka's PartitionResponse)."""
    return {
        "index": index,
        "error_code": code,
        "base_offset": base_offset,
        "log_append_time_ms": log_append_time,
        "log_start_offset": log_start_offset,
        "record_errors": [],
        "error_message": message,
    }


def validation_rules(config: LogConfig) -> ValidationRules:
    """Kafka's LogValidator arguments for a log: what produced records must satisfy (made once
    per LogConfig object: a log's config is replaced, never changed, when its settings change)."""
    cached = _RULES.get(id(config))
    if cached is not None and cached[0] is config:
        return cached[1]
    rules = _validation_rules(config)
    if len(_RULES) >= 4096:
        _RULES.clear()
    _RULES[id(config)] = (config, rules)
    return rules


_RULES: dict[int, tuple[LogConfig, ValidationRules]] = {}


def _validation_rules(config: LogConfig) -> ValidationRules:
    return ValidationRules(
        compacted=config.is_compacted,
        log_append_time=config.uses_log_append_time,
        timestamp_before_max_ms=config.message_timestamp_before_max_ms,
        timestamp_after_max_ms=config.message_timestamp_after_max_ms,
        max_message_bytes=config.max_message_bytes,
        target_codec=config.target_codec,
        compression_level=config.compression_level,
    )


def executor() -> ThreadPoolExecutor:
    """Threads for walks that decompress or recompress.  Two: the codecs release the GIL, the
    machine's cores bound what runs at once anyway, and each walk holds a codec window (zstd: up to
    32 MiB, streams.ZSTD_MAX_WINDOW), so their number bounds that memory too."""
    global _EXECUTOR
    if _EXECUTOR is None:
        _EXECUTOR = ThreadPoolExecutor(max_workers=2, thread_name_prefix="produce-validate")
    return _EXECUTOR


_EXECUTOR: ThreadPoolExecutor | None = None


def error_response(index: int, e: Exception) -> dict:
    """The partition response for a batch LogValidator (or the log) refused."""
    if isinstance(e, InvalidTimestampError):
        resp = partition_response(index, ErrorCode.INVALID_TIMESTAMP, str(e))
        resp["record_errors"] = [
            {"batch_index": i, "batch_index_error_message": m} for i, m in e.record_errors
        ]
        return resp
    if isinstance(e, RecordValidationError):
        resp = partition_response(index, ErrorCode.INVALID_RECORD, str(e))
        resp["record_errors"] = [
            {"batch_index": i, "batch_index_error_message": m} for i, m in e.record_errors
        ]
        return resp
    if isinstance(e, CorruptRecordError):
        return partition_response(index, ErrorCode.CORRUPT_MESSAGE, str(e))
    if isinstance(e, InvalidRecordError):
        return partition_response(index, ErrorCode.INVALID_RECORD, str(e))
    if isinstance(e, UnsupportedCompressionError):
        return partition_response(index, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, str(e))
    if isinstance(e, (RecordDecompressionError, DecompressedSizeLimitError)):
        # Kafka: a KafkaException from its decompressing iterator (or an OutOfMemoryError while it
        # rebuilds a batch for recompression), both answered UNKNOWN_SERVER_ERROR.
        log.info("refused a produced batch: %s", e)
        return partition_response(index, ErrorCode.UNKNOWN_SERVER_ERROR, str(e))
    if isinstance(e, (RecordTooLargeError, RecordBatchTooLargeError)):
        return partition_response(index, ErrorCode.MESSAGE_TOO_LARGE, str(e))
    if isinstance(e, OutOfOrderSequenceError):
        return partition_response(index, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, str(e))
    if isinstance(e, InvalidProducerEpochError):
        return partition_response(index, ErrorCode.INVALID_PRODUCER_EPOCH, str(e))
    if isinstance(e, InvalidTxnStateError):
        return partition_response(index, ErrorCode.INVALID_TXN_STATE, str(e))
    if isinstance(e, StorageError):
        return partition_response(index, ErrorCode.KAFKA_STORAGE_ERROR, str(e))
    raise e


def writable(records) -> bytearray | memoryview:
    """The batch to walk and stamp offsets into: the request's own bytes when they are writable
    (the server's frames are bytearrays the transport read into: no copy), else a copy."""
    if isinstance(records, memoryview) and not records.readonly:
        return records
    return bytearray(records)


def validate(records, header: BatchHeader, rules: ValidationRules, now_ms: int):
    """LogValidator's walk; returns the batch to append (maybe recompressed) and its headers."""
    buf = writable(records)  # walked, then stamped, in place
    validated = validate_batch(buf, header, rules, now_ms)
    if not validated.recompressed:
        return buf, [header]
    return validated.data, list(iter_batch_headers(validated.data, verify_crc=False))
