"""InitProducerId (22): producer ids for idempotent producers.

Ids come from the metadata store's persisted blocks, so they are unique across restarts.
A transactional id goes to the transaction coordinator (epoch bump, fencing, KIP-360 recovery).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import TYPE_CHECKING

from pybroker.apis import RequestContext, auth, handles
from pybroker.protocol.errors import ErrorCode, KafkaError
from pybroker.protocol.messages.api_keys import ApiKey
from pybroker.storage.errors import KafkaStorageError

if TYPE_CHECKING:
    from pybroker.protocol.typed.producer import InitProducerIdRequest, InitProducerIdResponse

log = logging.getLogger(__name__)
MAX_EPOCH = 32767


@handles(ApiKey.INIT_PRODUCER_ID, 0, 5)
def handle_init_producer_id(
    ctx: RequestContext, request: InitProducerIdRequest
) -> InitProducerIdResponse | Awaitable[InitProducerIdResponse]:
    tid = request.get("transactional_id")
    # Kafka: Write on the transactional id; an idempotent producer IdempotentWrite on the cluster or
    # Write on at least one topic (KIP-679).
    if tid is not None and not auth.authorize(ctx, auth.WRITE, auth.TRANSACTIONAL_ID, tid):
        return _refused(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if (
        tid is None
        and not auth.authorize_cluster(ctx, auth.IDEMPOTENT_WRITE, log_denied=False)
        and not auth.authorize_by_resource_type(ctx, auth.WRITE, auth.TOPIC)
    ):
        return _refused(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    if tid is not None:
        return _init_transactional(ctx, request)
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
        new_pid = ctx.services.allocate_producer_id()
    except KafkaStorageError:  # a new id block could not be recorded (disk full): retriable
        return _refused(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    except KafkaError as exc:  # cluster mode: the next block is still being claimed from ZooKeeper
        return _refused(exc.code)
    log.debug("producer id %d for %s", new_pid, ctx.peer)
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "producer_id": new_pid, "producer_epoch": 0}


def _refused(code: ErrorCode) -> InitProducerIdResponse:
    return {"throttle_time_ms": 0, "error_code": code, "producer_id": -1, "producer_epoch": -1}


async def _init_transactional(ctx: RequestContext, request: InitProducerIdRequest) -> InitProducerIdResponse:
    coordinator = getattr(ctx.services, "transaction_coordinator", None)
    if coordinator is None or not coordinator.started:
        error, pid, epoch = ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, -1
    else:
        try:
            error, pid, epoch = await coordinator.init_producer_id(
                request["transactional_id"],
                request["transaction_timeout_ms"],
                request.get("producer_id", -1),
                request.get("producer_epoch", -1),
            )
        except KafkaError as exc:  # no producer id to hand out yet (cluster mode): retriable
            error, pid, epoch = exc.code, -1, -1
    if error == ErrorCode.PRODUCER_FENCED and ctx.version < 4:
        error = ErrorCode.INVALID_PRODUCER_EPOCH  # PRODUCER_FENCED is new in v4 (KIP-588)
    return {"throttle_time_ms": 0, "error_code": error, "producer_id": pid, "producer_epoch": epoch}
