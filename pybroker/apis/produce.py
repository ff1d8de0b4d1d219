"""Produce (0): hand each partition's record batch to the replica manager, answer when acknowledged.

Validation (Kafka's LogValidator), the leader append and the acks=all wait live in
``replication.replica_manager.ReplicaManager.append_records``, as in Kafka's ReplicaManager; this
handler checks the version and shapes the response.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable

from pybroker.apis import RequestContext, auth, handles
from pybroker.protocol.errors import ErrorCode
from pybroker.replication.append import partition_response

# KAFKA-18659: librdkafka < 2.11.1 disables compression unless Produce is advertised from v0, so we
# advertise 0 (as Kafka 4.0 does) and answer v0-2 with UNSUPPORTED_VERSION.
MIN_IMPLEMENTED = 3
# RecordBatch v2: magic at byte 16, the int16 attributes at 21; bit 4 marks a transactional batch.
_MAGIC_OFFSET, _ATTRIBUTES_OFFSET, _TRANSACTIONAL_FLAG = 16, 21, 0x10


@handles(0, MIN_IMPLEMENTED, 11, advertised_min=0)
def handle_produce(ctx: RequestContext, request: dict):
    acks = request["acks"]
    if ctx.version < MIN_IMPLEMENTED:
        responses = [
            {
                "name": td["name"],
                "partition_responses": [
                    partition_response(
                        pd["index"],
                        ErrorCode.UNSUPPORTED_VERSION,
                        "Produce v0-2 (message format v0/v1) is not supported",
                    )
                    for pd in td["partition_data"]
                ],
            }
            for td in request["topic_data"]
        ]
    else:
        topic_data, refused = request["topic_data"], []
        if auth.enabled(ctx):
            # Kafka: Write on the transactional id of transactional batches, then Write on each topic.
            tid = request.get("transactional_id")
            if _has_transactional_records(topic_data) and (
                tid is None or not auth.authorize(ctx, auth.WRITE, auth.TRANSACTIONAL_ID, tid)
            ):
                return _every_partition(request, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
            unauthorized = auth.denied(ctx, auth.WRITE, auth.TOPIC, (td["name"] for td in topic_data))
            if unauthorized:
                refused = [td for td in topic_data if td["name"] in unauthorized]
                topic_data = [td for td in topic_data if td["name"] not in unauthorized]
                refused = _every_partition({"acks": 1, "topic_data": refused}, ErrorCode.TOPIC_AUTHORIZATION_FAILED)[
                    "responses"
                ]
        appended = ctx.replica_manager.append_records(
            topic_data,
            acks=acks,
            timeout_ms=request["timeout_ms"],
            api_version=ctx.version,
            transactional_id=request.get("transactional_id"),
            now_ms=int(time.time() * 1000),
        )
        if not isinstance(appended, list):
            return _respond_after(appended, acks, refused)
        responses = appended + refused
    if acks == 0:
        return None  # acks=0: the client expects no response at all
    return {"responses": responses, "throttle_time_ms": 0}

async def _respond_after(appended: Awaitable[list[dict]], acks: int, refused: list[dict]) -> dict | None:
    responses = await appended
    if acks == 0:
        return None
    return {"responses": responses + refused, "throttle_time_ms": 0}


def _has_transactional_records(topic_data: list[dict]) -> bool:
    """Kafka's RequestUtils.hasTransactionalRecords: a batch with the transactional attribute bit."""
    for td in topic_data:
        for pd in td["partition_data"]:
            records = pd["records"]
            if records is not None and len(records) > _ATTRIBUTES_OFFSET + 1 and records[_MAGIC_OFFSET] == 2:
                if records[_ATTRIBUTES_OFFSET + 1] & _TRANSACTIONAL_FLAG:
                    return True
    return False


def _every_partition(request: dict, code: ErrorCode) -> dict | None:
    """Kafka's ProduceRequest.getErrorResponse: the one error for every partition (acks=0: nothing)."""
    if request["acks"] == 0:
        return None
    return {
        "throttle_time_ms": 0,
        "responses": [
            {
                "name": td["name"],
                "partition_responses": [partition_response(pd["index"], code) for pd in td["partition_data"]],
            }
            for td in request["topic_data"]
        ],
    }

