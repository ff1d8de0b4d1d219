"""Produce (0): hand each partition's record batch to the replica manager, answer when acknowledged.

Validation (Kafka's LogValidator), the leader append and the acks=all wait live in
``replication.replica_manager.ReplicaManager.append_records``, as in Kafka's ReplicaManager; this
handler checks the version and shapes the response.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable

from pybroker.apis import RequestContext, handles
from pybroker.protocol.errors import ErrorCode
from pybroker.replication.append import partition_response

# KAFKA-18659: librdkafka < 2.11.1 disables compression unless Produce is advertised from v0, so we
# advertise 0 (as Kafka 4.0 does) and answer v0-2 with UNSUPPORTED_VERSION.
MIN_IMPLEMENTED = 3

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
        appended = ctx.replica_manager.append_records(
            request["topic_data"],
            acks=acks,
            timeout_ms=request["timeout_ms"],
            api_version=ctx.version,
            transactional_id=request.get("transactional_id"),
            now_ms=int(time.time() * 1000),
        )
        if not isinstance(appended, list):
            return _respond_after(appended, acks)
        responses = appended
    if acks == 0:
        return None  # acks=0: the client expects no response at all
    return {"responses": responses, "throttle_time_ms": 0}

async def _respond_after(appended: Awaitable[list[dict]], acks: int) -> dict | None:
    responses = await appended
    if acks == 0:
        return None
    return {"responses": responses, "throttle_time_ms": 0}

