"""Transaction APIs (KIP-98): AddPartitionsToTxn (24), AddOffsetsToTxn (25), EndTxn (26),
WriteTxnMarkers (27), TxnOffsetCommit (28).  InitProducerId (22) is in ``producer_ids``.

The handlers translate requests for the transaction coordinator and the group coordinator; the
state machine lives in ``pybroker.coordinator.transaction``.
"""

from __future__ import annotations

import logging
from typing import Any

from pybroker.apis import RequestContext, handles
from pybroker.coordinator.offsets_topic import TOPIC as OFFSETS_TOPIC
from pybroker.coordinator.transaction.service import marker_writer
from pybroker.protocol.errors import ErrorCode

log = logging.getLogger(__name__)


def _txn(ctx: RequestContext):  # noqa: ANN202
    c = getattr(ctx.broker, "transaction_coordinator", None)
    return c if c is not None and c.started else None


# -- AddPartitionsToTxn -----------------------------------------------------------------------------------
def _topic_results(topics: list[dict], errors: dict[tuple[str, int], ErrorCode]) -> list[dict]:
    return [
        {
            "name": t["name"],
            "results_by_partition": [
                {"partition_index": p, "partition_error_code": errors[(t["name"], p)]} for p in t["partitions"]
            ],
        }
        for t in topics
    ]


async def _add_one(ctx: RequestContext, txn_id: str, pid: int, epoch: int, topics: list[dict], verify: bool):
    wanted = [(t["name"], p) for t in topics for p in t["partitions"]]
    coordinator = _txn(ctx)
    if coordinator is None:
        return {tp: ErrorCode.COORDINATOR_NOT_AVAILABLE for tp in wanted}
    unknown = {tp for tp in wanted if ctx.broker.partition(*tp) is None}
    if unknown:
        # Kafka: the unknown partitions fail and the rest are not attempted.
        return {
            tp: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown else ErrorCode.OPERATION_NOT_ATTEMPTED
            for tp in wanted
        }
    if verify:
        return coordinator.verify_partitions(txn_id, pid, epoch, wanted)
    error = await coordinator.add_partitions(txn_id, pid, epoch, wanted)
    return {tp: error for tp in wanted}


@handles(24, 0, 5)
async def handle_add_partitions_to_txn(ctx: RequestContext, request: dict) -> dict:
    if ctx.version <= 3:
        topics = request["v3_and_below_topics"]
        errors = await _add_one(
            ctx,
            request["v3_and_below_transactional_id"],
            request["v3_and_below_producer_id"],
            request["v3_and_below_producer_epoch"],
            topics,
            False,
        )
        return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": _topic_results(topics, errors)}
    results = []
    for t in request["transactions"]:
        errors = await _add_one(
            ctx, t["transactional_id"], t["producer_id"], t["producer_epoch"], t["topics"], t["verify_only"]
        )
        results.append({"transactional_id": t["transactional_id"], "topic_results": _topic_results(t["topics"], errors)})
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "results_by_transaction": results}


# -- AddOffsetsToTxn ----------------------------------------------------------------------------------------
@handles(25, 0, 4)
async def handle_add_offsets_to_txn(ctx: RequestContext, request: dict) -> dict:
    coordinator = _txn(ctx)
    gc = ctx.broker.group_coordinator
    if coordinator is None or gc is None:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE}
    if not request["group_id"]:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.INVALID_GROUP_ID}
    tp = (OFFSETS_TOPIC, gc.partition_for(request["group_id"]))
    error = await coordinator.add_partitions(
        request["transactional_id"], request["producer_id"], request["producer_epoch"], [tp]
    )
    return {"throttle_time_ms": 0, "error_code": error}


# -- EndTxn ---------------------------------------------------------------------------------------------------
# v5 is transaction version 2 (KIP-890 part 2, epoch bump per transaction): not advertised, as Kafka
# 4.3.1 marks it unstable.
@handles(26, 0, 4)
async def handle_end_txn(ctx: RequestContext, request: dict) -> dict:
    coordinator = _txn(ctx)
    if coordinator is None:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE}
    error = await coordinator.end_transaction(
        request["transactional_id"], request["producer_id"], request["producer_epoch"], request["committed"]
    )
    if error == ErrorCode.PRODUCER_FENCED and ctx.version < 2:
        error = ErrorCode.INVALID_PRODUCER_EPOCH  # PRODUCER_FENCED is new in v2 (KIP-588)
    return {"throttle_time_ms": 0, "error_code": error}


# -- WriteTxnMarkers ------------------------------------------------------------------------------------------
@handles(27, 0, 1)
def handle_write_txn_markers(ctx: RequestContext, request: dict) -> dict:
    write = marker_writer(ctx.broker)
    out = []
    for m in request["markers"]:
        wanted = [(t["name"], p) for t in m["topics"] for p in t["partition_indexes"]]
        errors = write(m["producer_id"], m["producer_epoch"], m["transaction_result"], m["coordinator_epoch"], wanted)
        out.append(
            {
                "producer_id": m["producer_id"],
                "topics": [
                    {
                        "name": t["name"],
                        "partitions": [
                            {"partition_index": p, "error_code": errors[(t["name"], p)]}
                            for p in t["partition_indexes"]
                        ],
                    }
                    for t in m["topics"]
                ],
            }
        )
    return {"markers": out}


# -- TxnOffsetCommit --------------------------------------------------------------------------------------------
def _commit_response(request: dict, errors: dict[tuple[str, int], ErrorCode]) -> dict[str, Any]:
    return {
        "throttle_time_ms": 0,
        "topics": [
            {
                "name": t["name"],
                "partitions": [
                    {"partition_index": p["partition_index"], "error_code": errors[(t["name"], p["partition_index"])]}
                    for p in t["partitions"]
                ],
            }
            for t in request["topics"]
        ],
    }


@handles(28, 0, 4)
async def handle_txn_offset_commit(ctx: RequestContext, request: dict) -> dict:
    wanted = [
        (t["name"], p["partition_index"], p["committed_offset"], p.get("committed_leader_epoch", -1), p["committed_metadata"])
        for t in request["topics"]
        for p in t["partitions"]
    ]
    coordinator = _txn(ctx)
    gc = ctx.broker.group_coordinator
    if coordinator is None or gc is None:
        return _commit_response(request, {(t, p): ErrorCode.COORDINATOR_NOT_AVAILABLE for t, p, *_ in wanted})
    group_id = request["group_id"]
    # The __consumer_offsets partition of the group must have been added (AddOffsetsToTxn) first.
    tp = (OFFSETS_TOPIC, gc.partition_for(group_id))
    check = coordinator.verify_partitions(
        request["transactional_id"], request["producer_id"], request["producer_epoch"], [tp]
    )[tp]
    if check != ErrorCode.NONE:
        if check == ErrorCode.PRODUCER_FENCED and ctx.version < 2:
            check = ErrorCode.INVALID_PRODUCER_EPOCH
        return _commit_response(request, {(t, p): check for t, p, *_ in wanted})
    b = ctx.broker
    errors, wait = gc.txn_offsets.commit(
        group_id=group_id,
        producer_id=request["producer_id"],
        producer_epoch=request["producer_epoch"],
        generation_id=request.get("generation_id", -1) if ctx.version >= 3 else -1,
        member_id=request.get("member_id", "") if ctx.version >= 3 else "",
        group_instance_id=request.get("group_instance_id") if ctx.version >= 3 else None,
        offsets=wanted,
        topic_exists=lambda topic, partition: b.partition(topic, partition) is not None,
    )
    if wait is not None:
        await wait
    return _commit_response(request, errors)
