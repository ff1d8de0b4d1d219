"""InitProducerId (22): producer ids for idempotent producers.

Ids come from the metadata store's persisted blocks, so they are unique across restarts.
Transactional ids need the transaction coordinator, which does not exist yet: such requests are
refused with a clear error rather than half-served.
"""

from __future__ import annotations

import logging

from pybroker.apis import RequestContext, handles
from pybroker.protocol.errors import ErrorCode
from pybroker.storage.errors import KafkaStorageError

log = logging.getLogger(__name__)
MAX_EPOCH = 32767


@handles(22, 0, 5)
def handle_init_producer_id(ctx: RequestContext, request: dict) -> dict:
    if request.get("transactional_id") is not None:
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            "producer_id": -1,
            "producer_epoch": -1,
        }
    pid = request.get("producer_id", -1)
    epoch = request.get("producer_epoch", -1)
    if pid >= 0 and 0 <= epoch < MAX_EPOCH - 1:
        # KIP-360: an idempotent producer may bump its own epoch to reset its sequences.
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.NONE,
            "producer_id": pid,
            "producer_epoch": epoch + 1,
        }
    try:
        new_pid = ctx.broker.metadata.allocate_producer_id()
    except KafkaStorageError:  # a new id block could not be recorded (disk full): retriable
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE,
            "producer_id": -1,
            "producer_epoch": -1,
        }
    log.debug("producer id %d for %s", new_pid, ctx.peer)
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "producer_id": new_pid, "producer_epoch": 0}
