"""Transaction APIs (KIP-98): AddPartitionsToTxn (24), AddOffsetsToTxn (25), EndTxn (26),
WriteTxnMarkers (27), TxnOffsetCommit (28).  InitProducerId (22) is in ``producer_ids``.

The handlers translate requests for the transaction coordinator and the group coordinator; the
state machine lives in ``pybroker.coordinator.transaction``.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pybroker.apis import RequestContext, auth, handles
from pybroker.apis.groups import partition_exists
from pybroker.coordinator.offsets_topic import TOPIC as OFFSETS_TOPIC
from pybroker.coordinator.topic_regex import InvalidTopicRegex, compile_topic_regex
from pybroker.coordinator.transaction.service import marker_writer
from pybroker.metadata.store import is_internal_topic
from pybroker.protocol.errors import ErrorCode
from pybroker.protocol.messages.api_keys import ApiKey

if TYPE_CHECKING:
    from pybroker.protocol.typed.admin import (
        DescribeProducersRequest,
        DescribeProducersResponse,
        DescribeTransactionsRequest,
        DescribeTransactionsResponse,
        DescribeTransactionsResponseTransactionState,
        ListTransactionsRequest,
        ListTransactionsResponse,
        ListTransactionsResponseTransactionState,
        PartitionResponse,
        ProducerState,
        TopicResponse,
    )
    from pybroker.protocol.typed.producer import (
        AddOffsetsToTxnRequest,
        AddOffsetsToTxnResponse,
        AddPartitionsToTxnRequest,
        AddPartitionsToTxnResponse,
        AddPartitionsToTxnResult,
        AddPartitionsToTxnTopic,
        AddPartitionsToTxnTopicResult,
        EndTxnRequest,
        EndTxnResponse,
        TxnOffsetCommitRequest,
        TxnOffsetCommitResponse,
        WritableTxnMarkerResult,
        WriteTxnMarkersRequest,
        WriteTxnMarkersResponse,
    )

log = logging.getLogger(__name__)


def _txn(ctx: RequestContext):  # noqa: ANN202
    c = getattr(ctx.services, "transaction_coordinator", None)
    return c if c is not None and c.started else None


# -- AddPartitionsToTxn --------------------------------------------------------------------------------------
def _topic_results(
    topics: Sequence[AddPartitionsToTxnTopic], errors: dict[tuple[str, int], ErrorCode]
) -> list[AddPartitionsToTxnTopicResult]:
    return [
        {
            "name": t["name"],
            "results_by_partition": [
                {"partition_index": p, "partition_error_code": errors[(t["name"], p)]}
                for p in t["partitions"]
            ],
        }
        for t in topics
    ]


async def _add_one(
    ctx: RequestContext, txn_id: str, pid: int, epoch: int, topics: Sequence[AddPartitionsToTxnTopic], verify: bool
):
    wanted = [(t["name"], p) for t in topics for p in t["partitions"]]
    coordinator = _txn(ctx)
    if coordinator is None:
        return {tp: ErrorCode.COORDINATOR_NOT_AVAILABLE for tp in wanted}
    unknown = {tp for tp in wanted if ctx.replica_manager.get_partition(*tp) is None}
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


@handles(ApiKey.ADD_PARTITIONS_TO_TXN, 0, 5)
async def handle_add_partitions_to_txn(
    ctx: RequestContext, request: AddPartitionsToTxnRequest
) -> AddPartitionsToTxnResponse:
    if ctx.version <= 3:
        topics = request["v3_and_below_topics"]
        refused = _add_refused(ctx, request["v3_and_below_transactional_id"], topics)
        if refused is not None:
            return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": _topic_results(topics, refused)}
        errors = await _add_one(
            ctx,
            request["v3_and_below_transactional_id"],
            request["v3_and_below_producer_id"],
            request["v3_and_below_producer_epoch"],
            topics,
            False,
        )
        return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": _topic_results(topics, errors)}
    # v4+ comes from brokers (the KIP-890 verification): ClusterAction on the cluster.
    if not auth.authorize_cluster(ctx, auth.CLUSTER_ACTION):
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            "results_by_transaction": [],
        }
    results: list[AddPartitionsToTxnResult] = []
    for t in request["transactions"]:
        errors = await _add_one(
            ctx, t["transactional_id"], t["producer_id"], t["producer_epoch"], t["topics"], t["verify_only"]
        )
        results.append(
            {"transactional_id": t["transactional_id"], "topic_results": _topic_results(t["topics"], errors)}
        )
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "results_by_transaction": results}


def _add_refused(
    ctx: RequestContext, txn_id: str, topics: Sequence[AddPartitionsToTxnTopic]
) -> dict[tuple[str, int], ErrorCode] | None:
    """A client's AddPartitionsToTxn (v0-3): Write on the transactional id, then Write on each
    (non-internal) topic; any refusal fails the whole request, the other partitions OPERATION_NOT_ATTEMPTED."""
    wanted = [(t["name"], p) for t in topics for p in t["partitions"]]
    if not auth.authorize(ctx, auth.WRITE, auth.TRANSACTIONAL_ID, txn_id):
        return {tp: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED for tp in wanted}
    # As Kafka, internal topics are never among the authorized ones (they are left out of the check).
    internal = {t for t, _ in wanted if is_internal_topic(t)}
    unauthorized = internal | auth.denied(ctx, auth.WRITE, auth.TOPIC, (t for t, _ in wanted if t not in internal))
    if not unauthorized:
        return None
    errors = {}
    for t, p in wanted:
        if t in unauthorized:
            errors[(t, p)] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif ctx.replica_manager.get_partition(t, p) is None:
            errors[(t, p)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        else:
            errors[(t, p)] = ErrorCode.OPERATION_NOT_ATTEMPTED
    return errors


# -- AddOffsetsToTxn -----------------------------------------------------------------------------------------
@handles(ApiKey.ADD_OFFSETS_TO_TXN, 0, 4)
async def handle_add_offsets_to_txn(ctx: RequestContext, request: AddOffsetsToTxnRequest) -> AddOffsetsToTxnResponse:
    coordinator = _txn(ctx)
    gc = ctx.services.group_coordinator
    if not auth.authorize(ctx, auth.WRITE, auth.TRANSACTIONAL_ID, request["transactional_id"]):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
    if not auth.authorize(ctx, auth.READ, auth.GROUP, request["group_id"]):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED}
    if coordinator is None or gc is None:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE}
    if not request["group_id"]:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.INVALID_GROUP_ID}
    tp = (OFFSETS_TOPIC, gc.partition_for(request["group_id"]))
    error = await coordinator.add_partitions(
        request["transactional_id"], request["producer_id"], request["producer_epoch"], [tp]
    )
    return {"throttle_time_ms": 0, "error_code": error}


# -- EndTxn --------------------------------------------------------------------------------------------------
# v5 is transaction version 2 (KIP-890 part 2): the coordinator bumps the producer epoch at every
# EndTxn and answers the new id and epoch (clients use it once ApiVersions finalizes transaction.version 2).
END_TXN_TV2_VERSION = 5


@handles(ApiKey.END_TXN, 0, 5)
async def handle_end_txn(ctx: RequestContext, request: EndTxnRequest) -> EndTxnResponse:
    coordinator = _txn(ctx)
    if not auth.authorize(ctx, auth.WRITE, auth.TRANSACTIONAL_ID, request["transactional_id"]):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
    if coordinator is None:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE}
    if ctx.version >= END_TXN_TV2_VERSION:
        error, producer_id, producer_epoch = await coordinator.end_transaction_v2(
            request["transactional_id"], request["producer_id"], request["producer_epoch"], request["committed"]
        )
        return {
            "throttle_time_ms": 0,
            "error_code": error,
            "producer_id": producer_id,
            "producer_epoch": producer_epoch,
        }
    error = await coordinator.end_transaction(
        request["transactional_id"], request["producer_id"], request["producer_epoch"], request["committed"]
    )
    if error == ErrorCode.PRODUCER_FENCED and ctx.version < 2:
        error = ErrorCode.INVALID_PRODUCER_EPOCH  # PRODUCER_FENCED is new in v2 (KIP-588)
    return {"throttle_time_ms": 0, "error_code": error}


# -- WriteTxnMarkers -----------------------------------------------------------------------------------------
# v2 (KIP-1228) tells the leader the marker's transaction version (0 for v1): a TV2 marker carries the
# epoch EndTxn bumped to, so the leader refuses one no newer than the producer's with
# INVALID_PRODUCER_EPOCH (unless it is a retry of a completed transaction's; ``check_marker_epoch``).
@handles(ApiKey.WRITE_TXN_MARKERS, 1, 2)
def handle_write_txn_markers(ctx: RequestContext, request: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse:
    # Kafka: Alter on the cluster, else ClusterAction (a broker's request); otherwise every partition refused.
    allowed = auth.authorize_cluster(ctx, auth.ALTER, log_denied=False) or auth.authorize_cluster(
        ctx, auth.CLUSTER_ACTION
    )
    services = ctx.services
    write = (
        marker_writer(services.replica_manager.get_partition, lambda: services.group_coordinator)
        if allowed
        else _refuse_markers
    )
    out: list[WritableTxnMarkerResult] = []
    for m in request["markers"]:
        wanted = [(t["name"], p) for t in m["topics"] for p in t["partition_indexes"]]
        errors = write(
            m["producer_id"],
            m["producer_epoch"],
            m["transaction_result"],
            m["coordinator_epoch"],
            wanted,
            m.get("transaction_version", 0),
        )
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


# -- TxnOffsetCommit -----------------------------------------------------------------------------------------
def _commit_response(
    request: TxnOffsetCommitRequest, errors: dict[tuple[str, int], ErrorCode]
) -> TxnOffsetCommitResponse:
    return {
        "throttle_time_ms": 0,
        "topics": [
            {
                "name": t["name"],
                "partitions": [
                    {
                        "partition_index": p["partition_index"],
                        "error_code": errors[(t["name"], p["partition_index"])],
                    }
                    for p in t["partitions"]
                ],
            }
            for t in request["topics"]
        ],
    }


# KIP-890 part 2: from v5 the request adds the group's __consumer_offsets partition to the transaction
# itself (what AddOffsetsToTxn does; Kafka's TransactionSupportedOperation.ADD_PARTITION).
TXN_OFFSET_COMMIT_ADDS_VERSION = 5


@handles(ApiKey.TXN_OFFSET_COMMIT, 0, 5)
async def handle_txn_offset_commit(ctx: RequestContext, request: TxnOffsetCommitRequest) -> TxnOffsetCommitResponse:
    wanted = [
        (
            t["name"],
            p["partition_index"],
            p["committed_offset"],
            p.get("committed_leader_epoch", -1),
            p["committed_metadata"],
        )
        for t in request["topics"]
        for p in t["partitions"]
    ]
    coordinator = _txn(ctx)
    gc = ctx.services.group_coordinator
    # Kafka: Write on the transactional id, Read on the group, then Read on each topic.
    if not auth.authorize(ctx, auth.WRITE, auth.TRANSACTIONAL_ID, request["transactional_id"]):
        return _commit_response(request, {(t, p): ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED for t, p, *_ in wanted})
    if not auth.authorize(ctx, auth.READ, auth.GROUP, request["group_id"]):
        return _commit_response(request, {(t, p): ErrorCode.GROUP_AUTHORIZATION_FAILED for t, p, *_ in wanted})
    unauthorized = auth.denied(ctx, auth.READ, auth.TOPIC, (t["name"] for t in request["topics"]))
    refused = {(t, p): ErrorCode.TOPIC_AUTHORIZATION_FAILED for t, p, *_ in wanted if t in unauthorized}
    wanted = [w for w in wanted if w[0] not in unauthorized]
    if not wanted and refused:
        return _commit_response(request, refused)
    if coordinator is None or gc is None:
        errors = {(t, p): ErrorCode.COORDINATOR_NOT_AVAILABLE for t, p, *_ in wanted}
        return _commit_response(request, {**errors, **refused})
    group_id = request["group_id"]
    if not gc.is_coordinator_for(group_id):  # a cluster: another broker coordinates the group
        errors = {(t, p): ErrorCode.NOT_COORDINATOR for t, p, *_ in wanted}
        return _commit_response(request, {**errors, **refused})
    tp = (OFFSETS_TOPIC, gc.partition_for(group_id))
    # In a cluster the transactional id may be coordinated by another broker: asked over the wire
    # (Kafka's AddPartitionsToTxnManager), as a partition leader does for a transactional batch.
    router = ctx.services.transaction_router
    txn_id, producer_id, producer_epoch = request["transactional_id"], request["producer_id"], request["producer_epoch"]
    if ctx.version >= TXN_OFFSET_COMMIT_ADDS_VERSION:
        if router is not None:
            check = await router.add_partitions(txn_id, producer_id, producer_epoch, [tp])
        else:
            check = await coordinator.add_partitions(txn_id, producer_id, producer_epoch, [tp])
        if check == ErrorCode.PRODUCER_FENCED:  # as Kafka's AddPartitionsToTxnManager answers it
            check = ErrorCode.INVALID_PRODUCER_EPOCH
    else:
        # The __consumer_offsets partition of the group must have been added (AddOffsetsToTxn) first.
        if router is not None:
            check = (await router.verify(txn_id, producer_id, producer_epoch, [tp]))[tp]
        else:
            check = coordinator.verify_partitions(txn_id, producer_id, producer_epoch, [tp])[tp]
        if check == ErrorCode.PRODUCER_FENCED and ctx.version < 2:
            check = ErrorCode.INVALID_PRODUCER_EPOCH
        elif check == ErrorCode.TRANSACTION_ABORTABLE:
            check = ErrorCode.INVALID_TXN_STATE
    if check != ErrorCode.NONE:
        return _commit_response(request, {**{(t, p): check for t, p, *_ in wanted}, **refused})
    errors, wait = gc.txn_offsets.commit(
        group_id=group_id,
        producer_id=request["producer_id"],
        producer_epoch=request["producer_epoch"],
        generation_id=request.get("generation_id", -1) if ctx.version >= 3 else -1,
        member_id=request.get("member_id", "") if ctx.version >= 3 else "",
        group_instance_id=request.get("group_instance_id") if ctx.version >= 3 else None,
        offsets=wanted,
        # The metadata decides (Kafka's metadata cache), not this broker's replicas: in a cluster the
        # coordinator need not host the committed partition.
        topic_exists=functools.partial(partition_exists, ctx),
    )
    if wait is not None:
        await wait
    return _commit_response(request, {**errors, **refused})


# -- DescribeTransactions / ListTransactions / DescribeProducers (KIP-664) ---------------------------------
@handles(ApiKey.DESCRIBE_TRANSACTIONS, 0, 0)
def handle_describe_transactions(
    ctx: RequestContext, request: DescribeTransactionsRequest
) -> DescribeTransactionsResponse:
    coordinator = _txn(ctx)
    states: list[DescribeTransactionsResponseTransactionState] = []
    for txn_id in request["transactional_ids"]:
        if not auth.authorize(ctx, auth.DESCRIBE, auth.TRANSACTIONAL_ID, txn_id):
            states.append(_txn_state_error(txn_id, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
            continue
        md = coordinator.describe(txn_id) if coordinator is not None else None
        if md is None:
            code = (
                ErrorCode.COORDINATOR_NOT_AVAILABLE
                if coordinator is None
                else ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
            )
            states.append(
                {
                    "error_code": code,
                    "transactional_id": txn_id,
                    "transaction_state": "",
                    "transaction_timeout_ms": 0,
                    "transaction_start_time_ms": -1,
                    "producer_id": -1,
                    "producer_epoch": -1,
                    "topics": [],
                }
            )
            continue
        by_topic: dict[str, list[int]] = {}
        # Only the partitions of topics the principal may describe.
        hidden = auth.denied(ctx, auth.DESCRIBE, auth.TOPIC, (t for t, _ in md.partitions))
        for topic, partition in sorted(md.partitions):
            if topic not in hidden:
                by_topic.setdefault(topic, []).append(partition)
        states.append(
            {
                "error_code": ErrorCode.NONE,
                "transactional_id": txn_id,
                "transaction_state": md.state.kafka_name,
                "transaction_timeout_ms": md.timeout_ms,
                "transaction_start_time_ms": md.start_timestamp_ms,
                "producer_id": md.producer_id,
                "producer_epoch": md.producer_epoch,
                "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
            }
        )
    return {"throttle_time_ms": 0, "transaction_states": states}


def _txn_state_error(txn_id: str, code: ErrorCode) -> DescribeTransactionsResponseTransactionState:
    return {
        "error_code": code,
        "transactional_id": txn_id,
        "transaction_state": "",
        "transaction_timeout_ms": 0,
        "transaction_start_time_ms": -1,
        "producer_id": -1,
        "producer_epoch": -1,
        "topics": [],
    }


def _list_error(code: ErrorCode) -> ListTransactionsResponse:
    return {"throttle_time_ms": 0, "error_code": code, "unknown_state_filters": [], "transaction_states": []}


@handles(ApiKey.LIST_TRANSACTIONS, 0, 2)
def handle_list_transactions(ctx: RequestContext, request: ListTransactionsRequest) -> ListTransactionsResponse:
    from pybroker.coordinator.transaction.metadata import TransactionState

    coordinator = _txn(ctx)
    if coordinator is None:
        return _list_error(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    # v2 (KIP-1152): only transactional ids the whole of which the pattern matches.  Kafka compiles it
    # with java.util.regex; here it goes through the same linear-time subset as subscription regexes
    # (a backtracking pattern could stall the event loop), refusing what that subset refuses.
    pattern = None
    pattern_text = request.get("transactional_id_pattern") if ctx.version >= 2 else None
    if pattern_text:
        try:
            pattern = compile_topic_regex(pattern_text)
        except InvalidTopicRegex:
            return _list_error(ErrorCode.INVALID_REGULAR_EXPRESSION)
    known = {s.kafka_name for s in TransactionState}
    state_filters = set(request["state_filters"])
    pid_filters = set(request["producer_id_filters"])
    duration = request.get("duration_filter", -1) if ctx.version >= 1 else -1
    now = coordinator.clock.now_ms()
    out: list[ListTransactionsResponseTransactionState] = []
    for txn_id, md in sorted(coordinator.transactions.items()):
        if state_filters and md.state.kafka_name not in state_filters:
            continue
        if pid_filters and md.producer_id not in pid_filters:
            continue
        if md.state == TransactionState.DEAD:
            continue
        # KIP-994: only transactions running longer than the duration.
        if duration >= 0 and now - md.start_timestamp_ms <= duration:
            continue
        if pattern is not None and pattern.fullmatch(txn_id) is None:
            continue
        if not auth.authorize(ctx, auth.DESCRIBE, auth.TRANSACTIONAL_ID, txn_id, log_denied=False):
            continue
        out.append(
            {
                "transactional_id": txn_id,
                "producer_id": md.producer_id,
                "transaction_state": md.state.kafka_name,
            }
        )
    return {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NONE,
        "unknown_state_filters": sorted(state_filters - known),
        "transaction_states": out,
    }


@handles(ApiKey.DESCRIBE_PRODUCERS, 0, 0)
def handle_describe_producers(ctx: RequestContext, request: DescribeProducersRequest) -> DescribeProducersResponse:
    topics: list[TopicResponse] = []
    unauthorized = auth.denied(ctx, auth.READ, auth.TOPIC, (t["name"] for t in request["topics"]))
    for t in request["topics"]:
        parts: list[PartitionResponse] = []
        for index in t["partition_indexes"]:
            p = ctx.replica_manager.get_partition(t["name"], index)
            if p is None or t["name"] in unauthorized:
                parts.append(
                    {
                        "partition_index": index,
                        "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED
                        if t["name"] in unauthorized
                        else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                        "error_message": None,
                        "active_producers": [],
                    }
                )
                continue
            producers: list[ProducerState] = [
                {
                    "producer_id": e.producer_id,
                    "producer_epoch": e.epoch,
                    "last_sequence": e.last_sequence,
                    "last_timestamp": e.last_timestamp,
                    "coordinator_epoch": e.coordinator_epoch,
                    "current_txn_start_offset": e.current_txn_first_offset,
                }
                for e in p.log.producer_state.producers.values()
            ]
            parts.append(
                {
                    "partition_index": index,
                    "error_code": ErrorCode.NONE,
                    "error_message": None,
                    "active_producers": producers,
                }
            )
        topics.append({"name": t["name"], "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}


def _refuse_markers(producer_id, producer_epoch, result, coordinator_epoch, wanted, version=0) -> dict:  # noqa: ANN001
    return {tp: ErrorCode.CLUSTER_AUTHORIZATION_FAILED for tp in wanted}
