"""Produce (0): validate each partition's record batch as Kafka's LogValidator does, append, acknowledge.

The header is parsed and the CRC checked; then the records are walked (records.validator): in place
for an uncompressed batch, on the event loop; in a worker thread, decompressing in bounded chunks, for
a compressed one or one the topic recompresses.  Offsets are stamped in place by the log.  Every
partition of a request succeeds or fails on its own; a failed partition writes nothing.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
import uuid
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
# advertise 0 (as Kafka 4 does, ApiKeys.PRODUCE_API_VERSIONS_RESPONSE_MIN_VERSION) while v0-2 stay
# unsupported: like Kafka's request parser, the server closes a connection that sends one.
MIN_IMPLEMENTED = 3
# KIP-110: zstd batches need Produce v7 or later.
ZSTD_MIN_PRODUCE_VERSION = 7
# KIP-890 part 2: from v12 a transactional batch adds its partition to the transaction itself (Kafka's
# TransactionSupportedOperation.ADD_PARTITION), instead of only verifying an earlier AddPartitionsToTxn.
IMPLICIT_ADD_PARTITIONS_VERSION = 12
# KIP-516: from v13 topics are named by id only.
TOPIC_IDS_VERSION = 13
ZERO_UUID = uuid.UUID(int=0)
# Coordinator errors a producer would not retry, answered as NOT_ENOUGH_REPLICAS so that it does
# (Kafka's ReplicaManager.appendRecords after transaction verification).  CONCURRENT_TRANSACTIONS stays
# itself from v12 (TV2 clients retry it), as in Kafka.
_RETRIABLE_AS_NOT_ENOUGH_REPLICAS = frozenset(
    {
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
    }
)


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
    ctx: RequestContext,
    transactional_id: str | None,
    topic: str,
    index: int,
    batch: BatchHeader,
    added: dict[tuple[str, int], ErrorCode] | None = None,
) -> tuple[ErrorCode, str] | None:
    """Kafka's checks of a transactional producer's batch: no control batch from a client, and the
    partition must be in the producer's ongoing transaction: added by an earlier AddPartitionsToTxn
    and verified here (KIP-890 part 1), or, from v12, added by this request (``added``: the
    coordinator's answers, KIP-890 part 2)."""
    if batch.is_control:
        return ErrorCode.INVALID_RECORD, "Clients are not allowed to write control records"
    if transactional_id is None or not batch.is_transactional:
        return None
    code = added.get((topic, index)) if added is not None else None
    if code is None:
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
    elif code in _RETRIABLE_AS_NOT_ENOUGH_REPLICAS or (
        code == ErrorCode.CONCURRENT_TRANSACTIONS and ctx.version < IMPLICIT_ADD_PARTITIONS_VERSION
    ):
        return ErrorCode.NOT_ENOUGH_REPLICAS, (
            f"Unable to verify the partition has been added to the transaction. Underlying error: {code.name}"
        )
    return code, f"{topic}-{index} is not part of an ongoing transaction of {transactional_id!r}"


def _check_one(
    ctx: RequestContext,
    topic: str,
    index: int,
    records,
    acks: int,
    version: int,
    transactional_id: str | None = None,
    added: dict[tuple[str, int], ErrorCode] | None = None,
):
    """Checks needing no record walk.  Returns (error response, None) or (None, (partition, header))."""
    p = ctx.broker.partition(topic, index)
    if p is None:
        return _result(index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), None
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
    refused = _check_transactional(ctx, transactional_id, topic, index, header, added)
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


def _append(ctx: RequestContext, p, index: int, buf: bytearray, batches: list[BatchHeader], now_ms: int):
    """Returns (partition response, partition-or-None to wait on for acks=all)."""
    try:
        info = p.append_as_leader(buf, batches, now_ms)
        ctx.metrics.produced(p.topic, len(buf), batches[0].records_count)
    except _REFUSED as e:  # the client's doing (some are StorageErrors): no error log
        return _error_result(index, e), None
    except StorageError as e:
        if not isinstance(e, KafkaStorageError):  # an I/O failure is logged by storage, once per cause
            log.error("append to %s-%d failed: %s", p.topic, index, e)
        return _error_result(index, e), None
    resp = _result(
        index, ErrorCode.NONE, None, info.first_offset, info.log_append_time_ms, info.log_start_offset
    )
    return resp, (p, info.last_offset)


def _topic_name(ctx: RequestContext, topic_data: dict) -> str:
    """The topic's name; from v13 that of its id ("" for an unknown id, as Kafka's metadata cache)."""
    if ctx.version < TOPIC_IDS_VERSION:
        return topic_data["name"]
    rec = ctx.broker.metadata.topics_by_id.get(topic_data["topic_id"])
    return rec.name if rec is not None else ""


@handles(0, MIN_IMPLEMENTED, 13, advertised_min=0)
def handle_produce(ctx: RequestContext, request: dict):
    if ctx.version >= IMPLICIT_ADD_PARTITIONS_VERSION and request.get("transactional_id") is not None:
        return _add_partitions_then_produce(ctx, request)
    return _produce(ctx, request)


async def _add_partitions_then_produce(ctx: RequestContext, request: dict):
    """Produce v12+ of a transactional producer: its transactional batches' partitions are added to the
    transaction first (what AddPartitionsToTxn with verifyOnly=false does), then the request is handled
    as any other, each partition answered with the coordinator's verdict."""
    wanted: dict[tuple[int, int], list[tuple[str, int]]] = {}
    for topic_data in request["topic_data"]:
        name = _topic_name(ctx, topic_data)
        for pd in topic_data["partition_data"]:
            records = pd["records"]
            if (
                not name
                or records is None
                or is_internal_topic(name)
                or ctx.broker.partition(name, pd["index"]) is None
            ):
                continue  # answered by the usual checks
            try:
                batches = validate_produce_batches(records)
            except RecordFormatError:
                continue
            if len(batches) == 1 and batches[0].is_transactional and not batches[0].is_control:
                batch = batches[0]
                wanted.setdefault((batch.producer_id, batch.producer_epoch), []).append((name, pd["index"]))
    added: dict[tuple[str, int], ErrorCode] = {}
    if wanted:
        coordinator = getattr(ctx.broker, "transaction_coordinator", None)
        for (producer_id, producer_epoch), partitions in wanted.items():
            if coordinator is None or not coordinator.started:
                code = ErrorCode.COORDINATOR_NOT_AVAILABLE
            else:
                code = await coordinator.add_partitions(
                    request["transactional_id"], producer_id, producer_epoch, partitions
                )
            added.update(dict.fromkeys(partitions, code))
    result = _produce(ctx, request, added)
    return await result if inspect.isawaitable(result) else result


def _produce(ctx: RequestContext, request: dict, added: dict[tuple[str, int], ErrorCode] | None = None):
    acks = request["acks"]
    now_ms = int(time.time() * 1000)
    responses = []
    waits: list[tuple[dict, object, int]] = []
    deferred: list[tuple] = []
    if acks not in (0, 1, -1):
        error = (ErrorCode.INVALID_REQUIRED_ACKS, f"acks={acks} is not one of 0, 1, -1")
    else:
        error = None
    by_id = ctx.version >= TOPIC_IDS_VERSION
    for topic_data in request["topic_data"]:
        name = _topic_name(ctx, topic_data)
        parts = []
        for pd in topic_data["partition_data"]:
            index, records = pd["index"], pd["records"]
            if error is not None:
                parts.append(_result(index, *error))
                continue
            if by_id and not name:  # Kafka: UNKNOWN_TOPIC_ID only where the request names topics by id
                parts.append(_result(index, ErrorCode.UNKNOWN_TOPIC_ID))
                continue
            if is_internal_topic(name):  # Kafka's ReplicaManager: "Cannot append to internal topic"
                parts.append(_result(index, ErrorCode.INVALID_TOPIC_EXCEPTION))
                continue
            refused, checked = _check_one(
                ctx, name, index, records, acks, ctx.version, request.get("transactional_id"), added
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
        responses.append(
            {"name": name, "topic_id": topic_data.get("topic_id", ZERO_UUID), "partition_responses": parts}
        )
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
    futs = [f for _, f in pending]
    await asyncio.wait(futs, timeout=max(timeout_ms, 0) / 1000)
    for resp, fut in pending:
        if not fut.done() or fut.cancelled():
            fut.cancel()
            resp["error_code"] = ErrorCode.REQUEST_TIMED_OUT
            resp["error_message"] = "not enough in-sync replicas acknowledged the write in time"
    return response
