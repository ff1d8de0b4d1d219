"""KIP-848 consumer group APIs: ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69).

The handlers translate between the wire and ``coordinator.consumer_coordinator.ConsumerGroupManager``,
which holds the protocol.  Heartbeats are answered at once (nothing is held), after the records
they produced are durable in ``__consumer_offsets``.
"""

from __future__ import annotations

from typing import Any

from pybroker.apis import RequestContext, handles
from pybroker.apis.groups import GROUP_AUTHORIZED_OPERATIONS, _after, _client_host, _client_id, _coordinator
from pybroker.coordinator.consumer_coordinator import HeartbeatRequest
from pybroker.coordinator.consumer_records import assignment_from_wire
from pybroker.protocol.errors import ErrorCode

CONSUMER_GROUP_HEARTBEAT = 68
CONSUMER_GROUP_DESCRIBE = 69
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)


@handles(CONSUMER_GROUP_HEARTBEAT, 0, 1)
def handle_consumer_group_heartbeat(ctx: RequestContext, request: dict):  # noqa: ANN201
    coordinator = _coordinator(ctx)
    if coordinator is None:
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE,
            "error_message": None,
            "member_id": None,
            "member_epoch": 0,
            "heartbeat_interval_ms": 0,
            "assignment": None,
        }
    topic_partitions = request.get("topic_partitions")
    response, wait = coordinator.consumer.heartbeat(
        HeartbeatRequest(
            group_id=request["group_id"],
            member_id=request["member_id"],
            member_epoch=request["member_epoch"],
            instance_id=request.get("instance_id"),
            rack_id=request.get("rack_id"),
            rebalance_timeout_ms=request.get("rebalance_timeout_ms", -1),
            subscribed_topic_names=request.get("subscribed_topic_names"),
            subscribed_topic_regex=request.get("subscribed_topic_regex") if ctx.version >= 1 else None,
            server_assignor=request.get("server_assignor"),
            owned=None if topic_partitions is None else assignment_from_wire(topic_partitions),
            client_id=_client_id(ctx),
            client_host=_client_host(ctx),
            version=ctx.version,
        )
    )
    return response if wait is None else _after(wait, response)


@handles(CONSUMER_GROUP_DESCRIBE, 0, 1)
def handle_consumer_group_describe(ctx: RequestContext, request: dict) -> dict[str, Any]:
    coordinator = _coordinator(ctx)
    include_ops = bool(request.get("include_authorized_operations"))
    groups = []
    for group_id in request["group_ids"]:
        if coordinator is None:
            groups.append(
                {
                    "error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE,
                    "error_message": None,
                    "group_id": group_id,
                    "group_state": "",
                    "group_epoch": 0,
                    "assignment_epoch": 0,
                    "assignor_name": "",
                    "members": [],
                    "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
                }
            )
        else:
            groups.append(coordinator.consumer.describe(group_id, include_ops, GROUP_AUTHORIZED_OPERATIONS))
    return {"throttle_time_ms": 0, "groups": groups}
