"""Produce (0): validate each partition's record batch (header + CRC only), append, acknowledge.

Batches stay opaque bytes: the header is parsed, the CRC checked, offsets stamped in place by the
log.  Every partition of a request succeeds or fails on its own; a failed partition writes nothing.
"""

from __future__ import annotations

import asyncio
import logging
import time

from pybroker.apis import RequestContext, handles
from pybroker.protocol.errors import ErrorCode
from pybroker.records.batch import CorruptRecordError, InvalidRecordError, validate_produce_batches
from pybroker.storage.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    RecordTooLargeError,
    StorageError,
)

log = logging.getLogger(__name__)

# KAFKA-18659: librdkafka < 2.11.1 disables compression unless Produce is advertised from v0, so we
# advertise 0 (as Kafka 4.0 does) and answer v0-2 with UNSUPPORTED_VERSION.
MIN_IMPLEMENTED = 3


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


def _check_transactional(
    ctx: RequestContext, transactional_id: str | None, topic: str, index: int, batch
) -> tuple[ErrorCode, str] | None:
    """Kafka's checks of a transactional producer's batch: no control batch from a client, and the
    partition must be in the producer's ongoing transaction (AddPartitionsToTxn first)."""
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
        code = ErrorCode.INVALID_TXN_STATE  # as Kafka answers Produce v3-10 (TRANSACTION_ABORTABLE from v11)
    return code, f"{topic}-{index} is not part of an ongoing transaction of {transactional_id!r}"


def _append_one(
    ctx: RequestContext,
    topic: str,
    index: int,
    records,
    now_ms: int,
    acks: int,
    transactional_id: str | None = None,
) -> tuple[dict, object]:
    """Returns (partition response, partition-or-None to wait on for acks=all)."""
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
        if len(batches) != 1:
            return _result(
                index,
                ErrorCode.INVALID_RECORD,
                "Produce requests with version 3 or later must contain exactly one record batch per partition",
            ), None
        refused = _check_transactional(ctx, transactional_id, topic, index, batches[0])
        if refused is not None:
            return _result(index, *refused), None
        buf = bytearray(records)
        info = p.append_as_leader(buf, batches, now_ms)
    except CorruptRecordError as e:
        return _result(index, ErrorCode.CORRUPT_MESSAGE, str(e)), None
    except InvalidRecordError as e:
        return _result(index, ErrorCode.INVALID_RECORD, str(e)), None
    except RecordTooLargeError as e:
        return _result(index, ErrorCode.MESSAGE_TOO_LARGE, str(e)), None
    except OutOfOrderSequenceError as e:
        return _result(index, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, str(e)), None
    except InvalidProducerEpochError as e:
        return _result(index, ErrorCode.INVALID_PRODUCER_EPOCH, str(e)), None
    except InvalidTxnStateError as e:
        return _result(index, ErrorCode.INVALID_TXN_STATE, str(e)), None
    except StorageError as e:
        log.error("append to %s-%d failed: %s", topic, index, e)
        return _result(index, ErrorCode.KAFKA_STORAGE_ERROR, str(e)), None
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
            if error is not None:
                parts.append(_result(pd["index"], *error))
                continue
            resp, wait = _append_one(
                ctx, name, pd["index"], pd["records"], now_ms, acks, request.get("transactional_id")
            )
            parts.append(resp)
            if wait is not None and acks == -1:
                waits.append((resp, *wait))
        responses.append({"name": name, "partition_responses": parts})
    if acks == 0:
        return None  # acks=0: the client expects no response at all
    response = {"responses": responses, "throttle_time_ms": 0}
    pending = []
    for resp, p, last_offset in waits:
        fut = p.wait_replicated(last_offset)
        if fut is not None:
            pending.append((resp, fut))
    if not pending:
        return response
    return _await_replication(response, pending, request["timeout_ms"])


async def _await_replication(response: dict, pending: list, timeout_ms: int) -> dict:
    futs = [f for _, f in pending]
    await asyncio.wait(futs, timeout=max(timeout_ms, 0) / 1000)
    for resp, fut in pending:
        if not fut.done() or fut.cancelled():
            fut.cancel()
            resp["error_code"] = ErrorCode.REQUEST_TIMED_OUT
            resp["error_message"] = "not enough in-sync replicas acknowledged the write in time"
    return response
