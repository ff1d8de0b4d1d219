"""Produce (0): validate each partition's record batch as Kafka's LogValidator does, append, acknowledge.

The header is parsed and the CRC checked; then the records are walked (records.validator): in place
for an uncompressed batch, on the event loop; in a worker thread, decompressing in bounded chunks, for
a compressed one or one the topic recompresses.  Offsets are stamped in place by the log.  Every
partition of a request succeeds or fails on its own; a failed partition writes nothing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor

from pybroker.apis import RequestContext, handles
from pybroker.metadata.store import is_internal_topic
from pybroker.protocol.errors import ErrorCode
from pybroker.records.batch import BatchHeader, iter_batch_headers, validate_produce_batches
from pybroker.records.compression import CompressionType
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
from pybroker.replication.partition import NotLeaderOrFollowerError
from pybroker.storage.config import LogConfig
from pybroker.storage.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    KafkaStorageError,
    OutOfOrderSequenceError,
    RecordTooLargeError,
    StorageError,
)

log = logging.getLogger(__name__)

# KAFKA-18659: librdkafka < 2.11.1 disables compression unless Produce is advertised from v0, so we
# advertise 0 (as Kafka 4.0 does) and answer v0-2 with UNSUPPORTED_VERSION.
MIN_IMPLEMENTED = 3
# KIP-110: zstd batches need Produce v7 or later.
ZSTD_MIN_PRODUCE_VERSION = 7


def _result(
    index: int,
    code: ErrorCode,
    message: str | None = None,
    base_offset: int = -1,
    log_append_time: int = -1,
    log_start_offset: int = -1,
) -> dict:
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
    """Kafka's LogValidator arguments for a log: what produced records must satisfy."""
    return ValidationRules(
        compacted=config.is_compacted,
        log_append_time=config.uses_log_append_time,
        timestamp_before_max_ms=config.message_timestamp_before_max_ms,
        timestamp_after_max_ms=config.message_timestamp_after_max_ms,
        max_message_bytes=config.max_message_bytes,
        target_codec=config.target_codec,
        compression_level=config.compression_level,
    )


def _executor() -> ThreadPoolExecutor:
    """Threads for walks that decompress or recompress.  Two: the codecs release the GIL, the
    machine's cores bound what runs at once anyway, and each walk holds a codec window (zstd: up to
    32 MiB, streams.ZSTD_MAX_WINDOW), so their number bounds that memory too."""
    global _EXECUTOR
    if _EXECUTOR is None:
        _EXECUTOR = ThreadPoolExecutor(max_workers=2, thread_name_prefix="produce-validate")
    return _EXECUTOR


_EXECUTOR: ThreadPoolExecutor | None = None


def _error_result(index: int, e: Exception) -> dict:
    """The partition response for a batch LogValidator (or the log) refused."""
    if isinstance(e, InvalidTimestampError):
        resp = _result(index, ErrorCode.INVALID_TIMESTAMP, str(e))
        resp["record_errors"] = [
            {"batch_index": i, "batch_index_error_message": m} for i, m in e.record_errors
        ]
        return resp
    if isinstance(e, RecordValidationError):
        resp = _result(index, ErrorCode.INVALID_RECORD, str(e))
        resp["record_errors"] = [
            {"batch_index": i, "batch_index_error_message": m} for i, m in e.record_errors
        ]
        return resp
    if isinstance(e, CorruptRecordError):
        return _result(index, ErrorCode.CORRUPT_MESSAGE, str(e))
    if isinstance(e, InvalidRecordError):
        return _result(index, ErrorCode.INVALID_RECORD, str(e))
    if isinstance(e, UnsupportedCompressionError):
        return _result(index, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, str(e))
    if isinstance(e, (RecordDecompressionError, DecompressedSizeLimitError)):
        # Kafka: a KafkaException from its decompressing iterator (or an OutOfMemoryError while it
        # rebuilds a batch for recompression), both answered UNKNOWN_SERVER_ERROR.
        log.info("refused a produced batch: %s", e)
        return _result(index, ErrorCode.UNKNOWN_SERVER_ERROR, str(e))
    if isinstance(e, (RecordTooLargeError, RecordBatchTooLargeError)):
        return _result(index, ErrorCode.MESSAGE_TOO_LARGE, str(e))
    if isinstance(e, OutOfOrderSequenceError):
        return _result(index, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, str(e))
    if isinstance(e, InvalidProducerEpochError):
        return _result(index, ErrorCode.INVALID_PRODUCER_EPOCH, str(e))
    if isinstance(e, InvalidTxnStateError):
        return _result(index, ErrorCode.INVALID_TXN_STATE, str(e))
    if isinstance(e, StorageError):
        return _result(index, ErrorCode.KAFKA_STORAGE_ERROR, str(e))
    raise e


_REFUSED = (
    RecordFormatError,
    RecordTooLargeError,
    OutOfOrderSequenceError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
)


def _check_transactional(
    ctx: RequestContext, transactional_id: str | None, topic: str, index: int, batch: BatchHeader
) -> tuple[ErrorCode, str] | None:
    """Kafka's checks of a transactional producer's batch: no control batch from a client, and the
    partition must be in the producer's ongoing transaction (AddPartitionsToTxn first; KIP-890)."""
    if batch.is_control:
        return ErrorCode.INVALID_RECORD, "Clients are not allowed to write control records"
    if transactional_id is None or not batch.is_transactional:
        return None
    coordinator = getattr(ctx.broker, "transaction_coordinator", None)
    if coordinator is None or not coordinator.started:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, "the transaction coordinator is not available"
    code = coordinator.verify_partitions(
        transactional_id, batch.producer_id, batch.producer_epoch, [(topic, index)]
    )[(topic, index)]
    if code == ErrorCode.NONE:
        return None
    if code == ErrorCode.PRODUCER_FENCED:
        code = ErrorCode.INVALID_PRODUCER_EPOCH
    elif code == ErrorCode.TRANSACTION_ABORTABLE and ctx.version < 11:
        code = ErrorCode.INVALID_TXN_STATE  # what Kafka answers Produce v3-10 (v11: TRANSACTION_ABORTABLE)
    return code, f"{topic}-{index} is not part of an ongoing transaction of {transactional_id!r}"


def _check_one(
    ctx: RequestContext,
    topic: str,
    index: int,
    records,
    acks: int,
    version: int,
    transactional_id: str | None = None,
):
    """Checks needing no record walk.  Returns (error response, None) or (None, (partition, header))."""
    p = ctx.broker.partition(topic, index)
    if p is None:
        return _result(index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), None
    if not p.is_leader:
        return _not_leader(p, index), None
    if acks == -1 and not p.has_enough_replicas():
        # Checked before writing, as Kafka does: nothing is appended.
        return _result(
            index,
            ErrorCode.NOT_ENOUGH_REPLICAS,
            f"{len(p.isr)} in-sync replica(s), fewer than min.insync.replicas={p.min_insync_replicas}",
        ), None
    if records is None or len(records) == 0:
        return _result(index, ErrorCode.INVALID_RECORD, "Produce request carries no record batch"), None
    try:
        batches = validate_produce_batches(records)
    except RecordFormatError as e:
        return _error_result(index, e), None
    if len(batches) != 1:
        return _result(
            index,
            ErrorCode.INVALID_RECORD,
            "Produce requests with version 3 or later must contain exactly one record batch per partition",
        ), None
    header = batches[0]
    if header.compression > CompressionType.ZSTD:
        return _result(
            index, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"unknown compression codec {header.compression}"
        ), None
    if header.compression == CompressionType.ZSTD and version < ZSTD_MIN_PRODUCE_VERSION:
        # Kafka's ProduceRequest.validateRecords: zstd needs Produce v7 (KIP-110).
        return _result(
            index,
            ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
            f"Produce requests with version {version} are not allowed to use ZStandard compression",
        ), None
    if header.size > p.log.config.max_message_bytes:
        # Kafka checks the batch as sent before walking it (UnifiedLog.analyzeAndValidateRecords).
        return _result(
            index,
            ErrorCode.MESSAGE_TOO_LARGE,
            f"batch of {header.size} bytes exceeds max.message.bytes {p.log.config.max_message_bytes}",
        ), None
    refused = _check_transactional(ctx, transactional_id, topic, index, header)
    if refused is not None:
        return _result(index, *refused), None
    return None, (p, header)


def _validate(records, header: BatchHeader, rules: ValidationRules, now_ms: int):
    """LogValidator's walk; returns the batch to append (maybe recompressed) and its headers."""
    buf = bytearray(records)  # the copy the log stamps offsets into; walked in place
    validated = validate_batch(buf, header, rules, now_ms)
    if not validated.recompressed:
        return buf, [header]
    return validated.data, list(iter_batch_headers(validated.data, verify_crc=False))


def _not_leader(p, index: int) -> dict:
    """NOT_LEADER_OR_FOLLOWER with KIP-951's hint of the leader this broker knows (Produce v10+
    carries it; earlier versions drop the tagged field)."""
    resp = _result(index, ErrorCode.NOT_LEADER_OR_FOLLOWER)
    resp["current_leader"] = {"leader_id": p.leader_id, "leader_epoch": p.leader_epoch}
    return resp


def _append(ctx: RequestContext, p, index: int, buf: bytearray, batches: list[BatchHeader], now_ms: int):
    """Returns (partition response, partition-or-None to wait on for acks=all)."""
    try:
        info = p.append_as_leader(buf, batches, now_ms)
        ctx.metrics.produced(p.topic, len(buf), batches[0].records_count)
    except _REFUSED as e:  # the client's doing (some are StorageErrors): no error log
        return _error_result(index, e), None
    except NotLeaderOrFollowerError:  # leadership moved while the batch was validated
        return _not_leader(p, index), None
    except StorageError as e:
        if not isinstance(e, KafkaStorageError):  # an I/O failure is logged by storage, once per cause
            log.error("append to %s-%d failed: %s", p.topic, index, e)
        return _error_result(index, e), None
    resp = _result(
        index, ErrorCode.NONE, None, info.first_offset, info.log_append_time_ms, info.log_start_offset
    )
    return resp, (p, info.last_offset)


@handles(0, MIN_IMPLEMENTED, 11, advertised_min=0)
def handle_produce(ctx: RequestContext, request: dict):
    acks = request["acks"]
    now_ms = int(time.time() * 1000)
    responses = []
    waits: list[tuple[dict, object, int]] = []
    deferred: list[tuple] = []
    if ctx.version < MIN_IMPLEMENTED:
        error = (ErrorCode.UNSUPPORTED_VERSION, "Produce v0-2 (message format v0/v1) is not supported")
    elif acks not in (0, 1, -1):
        error = (ErrorCode.INVALID_REQUIRED_ACKS, f"acks={acks} is not one of 0, 1, -1")
    else:
        error = None
    for topic_data in request["topic_data"]:
        name = topic_data["name"]
        parts = []
        for pd in topic_data["partition_data"]:
            index, records = pd["index"], pd["records"]
            if error is not None:
                parts.append(_result(index, *error))
                continue
            if is_internal_topic(name):  # Kafka's ReplicaManager: "Cannot append to internal topic"
                parts.append(_result(index, ErrorCode.INVALID_TOPIC_EXCEPTION))
                continue
            refused, checked = _check_one(
                ctx, name, index, records, acks, ctx.version, request.get("transactional_id")
            )
            if refused is not None:
                parts.append(refused)
                _count_failure(ctx, name, refused)
                continue
            p, header = checked
            rules = validation_rules(p.log.config)
            if header.compression != CompressionType.NONE or rules.recompresses(header):
                # Decompressing (and recompressing) runs in a thread; the partition's slot in the
                # response is filled once it is done, appends then made in request order.
                parts.append(None)
                deferred.append((parts, len(parts) - 1, p, index, bytes(records), header, rules))
                continue
            try:
                buf, batches = _validate(records, header, rules, now_ms)
            except RecordFormatError as e:
                parts.append(_error_result(index, e))
                _count_failure(ctx, name, parts[-1])
                continue
            resp, wait = _append(ctx, p, index, buf, batches, now_ms)
            parts.append(resp)
            _count_failure(ctx, name, resp)
            if wait is not None and acks == -1:
                waits.append((resp, *wait))
        responses.append({"name": name, "partition_responses": parts})
    response = {"responses": responses, "throttle_time_ms": 0}
    if deferred:
        return _validate_off_loop(ctx, response, deferred, waits, now_ms, acks, request["timeout_ms"])
    if acks == 0:
        return None  # acks=0: the client expects no response at all
    return _wait_for_acks(response, waits, request["timeout_ms"])


async def _validate_off_loop(
    ctx: RequestContext, response: dict, deferred: list, waits: list, now_ms: int, acks: int, timeout_ms: int
):
    """Walk compressed batches in the executor, then append each in request order on the loop.
    The connection sends nothing else meanwhile (the server answers its requests in order)."""
    loop = asyncio.get_running_loop()
    jobs = [
        loop.run_in_executor(_executor(), _validate, records, header, rules, now_ms)
        for (_parts, _slot, _p, _index, records, header, rules) in deferred
    ]
    for (parts, slot, p, index, _records, _header, _rules), job in zip(deferred, jobs, strict=True):
        try:
            buf, batches = await job
        except RecordFormatError as e:
            parts[slot] = _error_result(index, e)
            _count_failure(ctx, p.topic, parts[slot])
            continue
        if ctx.broker.partition(p.topic, index) is not p:  # deleted or recreated meanwhile
            parts[slot] = _result(index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            continue
        resp, wait = _append(ctx, p, index, buf, batches, now_ms)
        parts[slot] = resp
        _count_failure(ctx, p.topic, resp)
        if wait is not None and acks == -1:
            waits.append((resp, *wait))
    if acks == 0:
        return None
    result = _wait_for_acks(response, waits, timeout_ms)
    if isinstance(result, dict):
        return result
    return await result


def _count_failure(ctx: RequestContext, topic: str, resp: dict) -> None:
    if resp["error_code"] != ErrorCode.NONE and ctx.broker.topic(topic) is not None:
        ctx.metrics.produce_failed(topic)  # (never for unknown names: they would grow the totals)


def _wait_for_acks(response: dict, waits: list, timeout_ms: int):
    pending = []
    for resp, p, last_offset in waits:
        fut = p.wait_replicated(last_offset)
        if fut is not None:
            pending.append((resp, fut))
    if not pending:
        return response
    return _await_replication(response, pending, timeout_ms)


async def _await_replication(response: dict, pending: list, timeout_ms: int) -> dict:
    futs = [f for _, f in pending if not f.done()]
    if futs:
        await asyncio.wait(futs, timeout=max(timeout_ms, 0) / 1000)
    for resp, fut in pending:
        if fut.done() and not fut.cancelled():
            # NOT_ENOUGH_REPLICAS_AFTER_APPEND (the ISR shrank meanwhile) or NOT_LEADER_OR_FOLLOWER
            # (leadership moved): Kafka's checkEnoughReplicasReachOffset.
            error = fut.result()
            if error:
                resp["error_code"] = error
        else:
            fut.cancel()
            resp["error_code"] = ErrorCode.REQUEST_TIMED_OUT
            resp["error_message"] = "not enough in-sync replicas acknowledged the write in time"
    return response
