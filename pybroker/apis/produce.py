"""Produce (0): hand each partition's record batch to the replica manager, answer when acknowledged.

Validation (Kafka's LogValidator), the leader append and the acks=all wait live in
``replication.replica_manager.ReplicaManager.append_records``, as in Kafka's ReplicaManager; this
handler checks the version and shapes the response: v12 adds a transactional batch's partition to the
transaction first (KIP-890 part 2), v13 names topics by id (KIP-516).
"""

from __future__ import annotations

import inspect
import time
import uuid
from collections.abc import Awaitable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from pybroker.apis import RequestContext, auth, handles
from pybroker.metadata.store import is_internal_topic
from pybroker.protocol.errors import ErrorCode
from pybroker.protocol.messages.api_keys import ApiKey
from pybroker.records.batch import validate_produce_batches
from pybroker.records.errors import RecordFormatError
from pybroker.replication.append import Appended, partition_response

if TYPE_CHECKING:
    from pybroker.protocol.typed.produce import (
        ProduceRequest,
        ProduceResponse,
        TopicProduceData,
        TopicProduceResponse,
    )

    # What a Produce request gets: the response, none (acks=0), or either to come.
    Answer = ProduceResponse | None
    Pending = Answer | Appended | Awaitable[Answer]

# KAFKA-18659: librdkafka < 2.11.1 disables compression unless Produce is advertised from v0, so we
# advertise 0 (as Kafka 4 does, ApiKeys.PRODUCE_API_VERSIONS_RESPONSE_MIN_VERSION) while v0-2 stay
# unsupported: like Kafka's request parser, the server closes a connection that sends one.
MIN_IMPLEMENTED = 3
# KIP-890 part 2: from v12 a transactional batch adds its partition to the transaction itself (Kafka's
# TransactionSupportedOperation.ADD_PARTITION), instead of only verifying an earlier AddPartitionsToTxn.
IMPLICIT_ADD_PARTITIONS_VERSION = 12
# KIP-516: from v13 topics are named by id only.
TOPIC_IDS_VERSION = 13
ZERO_UUID = uuid.UUID(int=0)
# RecordBatch v2: magic at byte 16, the int16 attributes at 21; bit 4 marks a transactional batch.
_MAGIC_OFFSET, _ATTRIBUTES_OFFSET, _TRANSACTIONAL_FLAG = 16, 21, 0x10


@handles(ApiKey.PRODUCE, MIN_IMPLEMENTED, 13, advertised_min=0)
def handle_produce(ctx: RequestContext, request: ProduceRequest) -> Pending:
    topic_data: Sequence[TopicProduceData] = request["topic_data"]
    unknown_ids: list[TopicProduceResponse] = []
    if ctx.version >= TOPIC_IDS_VERSION:
        topic_data, unknown_ids = _name_topics_by_id(ctx, topic_data)
    if auth.enabled(ctx):
        # Kafka: Write on the transactional id of transactional batches, then Write on each topic,
        # before anything else is looked at.
        tid = request.get("transactional_id")
        if _has_transactional_records(request["topic_data"]) and (
            tid is None or not auth.authorize(ctx, auth.WRITE, auth.TRANSACTIONAL_ID, tid)
        ):
            return _every_partition(request, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        unauthorized = auth.denied(ctx, auth.WRITE, auth.TOPIC, (td["name"] for td in topic_data))
        if unauthorized:
            refused = [td for td in topic_data if td["name"] in unauthorized]
            topic_data = [td for td in topic_data if td["name"] not in unauthorized]
            unknown_ids = unknown_ids + _topic_errors(refused, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    if request.get("transactional_id") is not None and (
        ctx.version >= IMPLICIT_ADD_PARTITIONS_VERSION or ctx.services.transaction_router is not None
    ):
        return _add_partitions_then_append(ctx, request, topic_data, unknown_ids)
    return _append(ctx, request, topic_data, unknown_ids, None)


def _name_topics_by_id(
    ctx: RequestContext, topic_data: Sequence[TopicProduceData]
) -> tuple[list[TopicProduceData], list[TopicProduceResponse]]:
    """v13: each topic with the name of its id; the topics whose id is unknown are answered
    UNKNOWN_TOPIC_ID (Kafka does so only where the request names topics by id)."""
    image = ctx.metadata_image()
    known: list[TopicProduceData] = []
    unknown: list[TopicProduceResponse] = []
    for td in topic_data:
        topic = image.topic_by_id(td["topic_id"])
        if topic is None:
            unknown.append(
                {"topic_id": td["topic_id"], "partition_responses": _partition_errors(td, ErrorCode.UNKNOWN_TOPIC_ID)}
            )
        else:
            td["name"] = topic.name  # (the request's own decoded entry: named in place, not copied)
            known.append(td)
    return known, unknown


async def _add_partitions_then_append(
    ctx: RequestContext,
    request: ProduceRequest,
    topic_data: Sequence[TopicProduceData],
    unknown_ids: list[TopicProduceResponse],
) -> Answer:
    """Produce v12+ of a transactional producer: its transactional batches' partitions are added to the
    transaction first (what AddPartitionsToTxn with verifyOnly=false does), then the request is appended
    as any other, each transactional partition answered with the coordinator's verdict.  In a cluster the
    coordinator may be another broker: ``transaction_router`` asks it (and, for Produce v3-11, only
    verifies that the partition was added, KIP-890 part 1)."""
    wanted: dict[tuple[int, int], list[tuple[str, int]]] = {}
    for td in topic_data:
        name = td["name"]
        for pd in td["partition_data"]:
            records = pd["records"]
            if (
                records is None
                or is_internal_topic(name)
                or ctx.replica_manager.get_partition(name, pd["index"]) is None
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
    coordinator = getattr(ctx.services, "transaction_coordinator", None)
    router = ctx.services.transaction_router
    for (producer_id, producer_epoch), partitions in wanted.items():
        if router is not None:
            tid = request["transactional_id"]
            if ctx.version < IMPLICIT_ADD_PARTITIONS_VERSION:
                added.update(await router.verify(tid, producer_id, producer_epoch, partitions))
                continue
            code = await router.add_partitions(tid, producer_id, producer_epoch, partitions)
        elif coordinator is None or not coordinator.started:
            code = ErrorCode.COORDINATOR_NOT_AVAILABLE
        else:
            code = await coordinator.add_partitions(
                request["transactional_id"], producer_id, producer_epoch, partitions
            )
        added.update(dict.fromkeys(partitions, code))
    result = _append(ctx, request, topic_data, unknown_ids, added)
    return await result if inspect.isawaitable(result) else result


def _append(
    ctx: RequestContext,
    request: ProduceRequest,
    topic_data: Sequence[TopicProduceData],
    unknown_ids: list[TopicProduceResponse],
    added: dict[tuple[str, int], ErrorCode] | None,
) -> Pending:
    acks = request["acks"]
    appended = ctx.services.replica_manager.append_records(
        topic_data,
        acks=acks,
        timeout_ms=request["timeout_ms"],
        api_version=ctx.version,
        transactional_id=request.get("transactional_id"),
        now_ms=int(time.time() * 1000),
        added_to_transaction=added,
    )
    if not isinstance(appended, list):
        later = _respond_after(ctx, appended, acks, topic_data, unknown_ids)
        # Batches already in their logs: the connection's next produce request may be handled meanwhile.
        return Appended(later) if isinstance(appended, Appended) else later
    if acks == 0:
        return None  # acks=0: the client expects no response at all
    return _response(ctx, appended, topic_data, unknown_ids)


def _response(
    ctx: RequestContext,
    responses: list[Any],  # the replica manager's topic responses, plain dicts
    topic_data: Sequence[TopicProduceData],
    unknown_ids: list[TopicProduceResponse],
) -> ProduceResponse:
    for resp, td in zip(responses, topic_data, strict=True):
        resp["topic_id"] = td.get("topic_id", ZERO_UUID)  # v13
    response: ProduceResponse = {"responses": responses + unknown_ids, "throttle_time_ms": 0}
    # KIP-951: a partition answered NOT_LEADER_OR_FOLLOWER names its current leader (Produce v10+),
    # and the response carries that broker's endpoint, so the client can retry there before its
    # next Metadata.  Earlier versions have neither field.
    leaders = set()
    for t in responses:
        for p in t["partition_responses"]:
            current = p.get("current_leader")
            if current is None:
                continue
            if ctx.version < 10:
                del p["current_leader"]
            elif current["leader_id"] >= 0:
                leaders.add(current["leader_id"])
    if leaders:
        image = ctx.metadata_image()
        endpoints = [b for b in (image.broker(node) for node in sorted(leaders)) if b is not None]
        response["node_endpoints"] = [
            {"node_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack} for b in endpoints
        ]
    return response


async def _respond_after(
    ctx: RequestContext,
    appended: Awaitable[list[Any]],
    acks: int,
    topic_data: Sequence[TopicProduceData],
    unknown_ids: list[TopicProduceResponse],
) -> Answer:
    responses = await appended
    if acks == 0:
        return None
    return _response(ctx, responses, topic_data, unknown_ids)


def _has_transactional_records(topic_data: Iterable[TopicProduceData]) -> bool:
    """Kafka's RequestUtils.hasTransactionalRecords: a batch with the transactional attribute bit."""
    for td in topic_data:
        for pd in td["partition_data"]:
            records = pd["records"]
            if records is not None and len(records) > _ATTRIBUTES_OFFSET + 1 and records[_MAGIC_OFFSET] == 2:
                if records[_ATTRIBUTES_OFFSET + 1] & _TRANSACTIONAL_FLAG:
                    return True
    return False


def _every_partition(request: ProduceRequest, code: ErrorCode) -> Answer:
    """Kafka's ProduceRequest.getErrorResponse: the one error for every partition (acks=0: nothing)."""
    if request["acks"] == 0:
        return None
    return {"throttle_time_ms": 0, "responses": _topic_errors(request["topic_data"], code)}


def _topic_errors(topic_data: Iterable[TopicProduceData], code: ErrorCode) -> list[TopicProduceResponse]:
    """A topic response for each topic, ``code`` for each of its partitions."""
    return [
        {
            "name": td.get("name", ""),
            "topic_id": td.get("topic_id", ZERO_UUID),
            "partition_responses": _partition_errors(td, code),
        }
        for td in topic_data
    ]


def _partition_errors(td: TopicProduceData, code: ErrorCode) -> list[Any]:
    """``code`` for each partition of a topic (replication.append's partition responses, plain dicts)."""
    return [partition_response(pd["index"], code) for pd in td["partition_data"]]
