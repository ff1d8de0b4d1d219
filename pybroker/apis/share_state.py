"""The share coordinator's RPCs (KIP-932): InitializeShareGroupState (83), ReadShareGroupState (84),
WriteShareGroupState (85), DeleteShareGroupState (86) and ReadShareGroupStateSummary (87).

As Kafka's KafkaApis and ShareCoordinatorService answer them: CLUSTER_ACTION on the cluster or every
partition is CLUSTER_AUTHORIZATION_FAILED; a request with no topics, a topic with no partitions or an empty
group id gets an empty response; each share partition (group, topic id, partition) is then answered by
``ShareCoordinator`` if this broker leads its ``__share_group_state`` partition, else NOT_COORDINATOR (the
sender looks the coordinator up again with FindCoordinator key type 2). The answer waits until the records
an operation wrote are replicated.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from pybroker.apis import RequestContext, auth, handles
from pybroker.apis.share_groups import service
from pybroker.coordinator.share.share_coordinator import ShareCoordinator
from pybroker.coordinator.share.share_partition import StateBatch
from pybroker.coordinator.share.state_records import SharePartitionKey, delivery_state
from pybroker.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

INITIALIZE_SHARE_GROUP_STATE = 83
READ_SHARE_GROUP_STATE = 84
WRITE_SHARE_GROUP_STATE = 85
DELETE_SHARE_GROUP_STATE = 86
READ_SHARE_GROUP_STATE_SUMMARY = 87

# What a failed write of the state topic becomes (Kafka's CoordinatorOperationExceptionHelper).
_WRITE_ERRORS = {
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
}

Op = Callable[[ShareCoordinator, SharePartitionKey, dict[str, Any]], tuple[dict, Awaitable | None]]


def _coordinator(ctx: RequestContext) -> ShareCoordinator | None:
    try:
        return service(ctx).coordinator
    except RuntimeError:  # the group coordinator (and with it the share coordinator) has not started
        return None


async def _serve(ctx: RequestContext, request: dict, what: str, op: Op, defaults: dict[str, Any]) -> dict[str, Any]:
    def failed(partition: int, code: ErrorCode, message: str) -> dict[str, Any]:
        return {"partition": partition, "error_code": code, "error_message": message, **defaults}

    topics = request["topics"]
    if not auth.authorize_cluster(ctx, auth.CLUSTER_ACTION):
        code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return {
            "results": [
                {"topic_id": t["topic_id"], "partitions": [failed(p["partition"], code, code.message) for p in t["partitions"]]}
                for t in topics
            ]
        }
    if not topics or any(not t["partitions"] for t in topics) or not request["group_id"]:
        return {"results": []}
    coordinator = _coordinator(ctx)
    group_id = request["group_id"]
    results: list[dict[str, Any]] = []
    waits: list[tuple[dict[str, Any], Awaitable[Any]]] = []
    for t in topics:
        partitions: list[dict[str, Any]] = []
        for p in t["partitions"]:
            key = SharePartitionKey(group_id, t["topic_id"], p["partition"])
            if coordinator is None:
                code = ErrorCode.COORDINATOR_NOT_AVAILABLE
                partitions.append(failed(key.partition, code, "Share coordinator is not available."))
                continue
            if not coordinator.owns(key):
                code = ErrorCode.NOT_COORDINATOR
                partitions.append(failed(key.partition, code, f"Unable to {what}: {code.message}"))
                continue
            try:
                result, wait = op(coordinator, key, p)
            except RuntimeError as exc:  # the state partition closed under us
                log.warning("%s for %s: %s", what, key, exc)
                code = ErrorCode.COORDINATOR_NOT_AVAILABLE
                result, wait = failed(key.partition, code, f"Unable to {what}: {code.message}"), None
            partitions.append(result)
            if wait is not None:
                waits.append((result, wait))
        results.append({"topic_id": t["topic_id"], "partitions": partitions})
    if waits:
        outcomes = await asyncio.gather(*(w for _, w in waits))
        for (result, _), outcome in zip(waits, outcomes, strict=True):
            if isinstance(outcome, ErrorCode) and outcome != ErrorCode.NONE:
                code = _WRITE_ERRORS.get(outcome, outcome)
                result.update(failed(result["partition"], code, f"Unable to {what}: {code.message}"))
    return {"results": results}


def _batches(raw: list[dict[str, int]]) -> list[StateBatch]:
    return [
        StateBatch(b["first_offset"], b["last_offset"], delivery_state(b["delivery_state"]), b["delivery_count"])
        for b in raw
    ]


@handles(INITIALIZE_SHARE_GROUP_STATE, 0, 0)
async def handle_initialize_share_group_state(ctx: RequestContext, request: dict) -> dict[str, Any]:
    def op(c: ShareCoordinator, key: SharePartitionKey, p: dict[str, Any]) -> tuple[dict, Awaitable | None]:
        return c.initialize_state(key, p["state_epoch"], p["start_offset"])

    return await _serve(ctx, request, "initialize share group state", op, {})


@handles(WRITE_SHARE_GROUP_STATE, 0, 1)
async def handle_write_share_group_state(ctx: RequestContext, request: dict) -> dict[str, Any]:
    def op(c: ShareCoordinator, key: SharePartitionKey, p: dict[str, Any]) -> tuple[dict, Awaitable | None]:
        return c.write_state(
            key,
            p["state_epoch"],
            p["leader_epoch"],
            p["start_offset"],
            _batches(p["state_batches"]),
            p.get("delivery_complete_count", -1),
        )

    return await _serve(ctx, request, "write share group state", op, {})


@handles(READ_SHARE_GROUP_STATE, 0, 0)
async def handle_read_share_group_state(ctx: RequestContext, request: dict) -> dict[str, Any]:
    def op(c: ShareCoordinator, key: SharePartitionKey, p: dict[str, Any]) -> tuple[dict, Awaitable | None]:
        return c.read_state_and_maybe_update_leader_epoch(key, p["leader_epoch"])

    defaults = {"state_epoch": 0, "start_offset": 0, "state_batches": []}
    return await _serve(ctx, request, "read share group state", op, defaults)


@handles(READ_SHARE_GROUP_STATE_SUMMARY, 0, 1)
async def handle_read_share_group_state_summary(ctx: RequestContext, request: dict) -> dict[str, Any]:
    def op(c: ShareCoordinator, key: SharePartitionKey, _p: dict[str, Any]) -> tuple[dict, Awaitable | None]:
        return c.read_state_summary(key), None

    defaults = {"state_epoch": 0, "leader_epoch": 0, "start_offset": 0, "delivery_complete_count": -1}
    return await _serve(ctx, request, "read share group state summary", op, defaults)


@handles(DELETE_SHARE_GROUP_STATE, 0, 0)
async def handle_delete_share_group_state(ctx: RequestContext, request: dict) -> dict[str, Any]:
    def op(c: ShareCoordinator, key: SharePartitionKey, _p: dict[str, Any]) -> tuple[dict, Awaitable | None]:
        return c.delete_state(key)

    return await _serve(ctx, request, "delete share group state", op, {})


