"""KIP-848 consumer group APIs: ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69).

The handlers translate between the wire and ``coordinator.consumer_coordinator.ConsumerGroupManager``,
which holds the protocol.  Heartbeats are answered at once (nothing is held), after the records
they produced are durable in ``__consumer_offsets``.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING

from pybroker.apis import RequestContext, auth, handles
from pybroker.apis.groups import _after, _client_host, _client_id, _coordinator, _coordinator_error
from pybroker.coordinator.consumer_coordinator import HeartbeatRequest
from pybroker.coordinator.consumer_records import assignment_from_wire
from pybroker.metadata.features import GROUP_VERSION
from pybroker.protocol.api import AUTHORIZED_OPERATIONS_OMITTED
from pybroker.protocol.errors import ErrorCode
from pybroker.protocol.messages.api_keys import ApiKey

if TYPE_CHECKING:
    from pybroker.protocol.typed.groups import (
        ConsumerGroupDescribeRequest,
        ConsumerGroupDescribeResponse,
        ConsumerGroupDescribeResponseDescribedGroup,
        ConsumerGroupHeartbeatRequest,
        ConsumerGroupHeartbeatResponse,
    )


@handles(ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, 1)
def handle_consumer_group_heartbeat(
    ctx: RequestContext, request: ConsumerGroupHeartbeatRequest
) -> ConsumerGroupHeartbeatResponse | Awaitable[ConsumerGroupHeartbeatResponse]:
    if not ctx.services.features.enabled(GROUP_VERSION):
        # Kafka: the consumer rebalance protocol is off below group.version 1 (checked before any ACL).
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.UNSUPPORTED_VERSION,
            "error_message": None,
            "member_id": None,
            "member_epoch": 0,
            "heartbeat_interval_ms": 0,
            "assignment": None,
        }
    coordinator = _coordinator(ctx, request["group_id"])
    # Kafka: Read on the group, then Describe on every topic subscribed to by name.
    refused = None
    subscribed = request.get("subscribed_topic_names")
    if not auth.authorize(ctx, auth.READ, auth.GROUP, request["group_id"]):
        refused = ErrorCode.GROUP_AUTHORIZATION_FAILED
    elif subscribed and auth.denied(ctx, auth.DESCRIBE, auth.TOPIC, subscribed):
        refused = ErrorCode.TOPIC_AUTHORIZATION_FAILED
    if coordinator is None or refused is not None:
        return {
            "throttle_time_ms": 0,
            "error_code": _coordinator_error(ctx, request["group_id"]) if refused is None else refused,
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
            subscribed_topic_names=subscribed,
            subscribed_topic_regex=request.get("subscribed_topic_regex") if ctx.version >= 1 else None,
            server_assignor=request.get("server_assignor"),
            owned=None if topic_partitions is None else assignment_from_wire(topic_partitions),
            client_id=_client_id(ctx),
            client_host=_client_host(ctx),
            version=ctx.version,
        )
    )
    return response if wait is None else _after(wait, response)


@handles(ApiKey.CONSUMER_GROUP_DESCRIBE, 0, 1)
def handle_consumer_group_describe(
    ctx: RequestContext, request: ConsumerGroupDescribeRequest
) -> ConsumerGroupDescribeResponse:
    if not ctx.services.features.enabled(GROUP_VERSION):
        return {
            "throttle_time_ms": 0,
            "groups": [_group_error(g, ErrorCode.UNSUPPORTED_VERSION, None) for g in request["group_ids"]],
        }
    coordinator = _coordinator(ctx)
    include_ops = bool(request.get("include_authorized_operations"))
    groups: list[ConsumerGroupDescribeResponseDescribedGroup] = []
    refused: list[ConsumerGroupDescribeResponseDescribedGroup] = []  # Kafka answers the groups it refused first
    for group_id in request["group_ids"]:
        if not auth.authorize(ctx, auth.DESCRIBE, auth.GROUP, group_id):
            refused.append(_group_error(group_id, ErrorCode.GROUP_AUTHORIZATION_FAILED, None))
            continue
        if coordinator is None or not coordinator.is_coordinator_for(group_id):
            groups.append(
                {
                    "error_code": _coordinator_error(ctx, group_id),
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
            described = coordinator.consumer.describe(
                group_id, include_ops, auth.authorized_operations(ctx, auth.GROUP, group_id)
            )
            if described["error_code"] == ErrorCode.NONE and _assigned_topics_hidden(ctx, described):
                described = _group_error(
                    group_id,
                    ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                    "The group has described topic(s) that the client is not authorized to describe.",
                )
            groups.append(described)
    return {"throttle_time_ms": 0, "groups": refused + groups}


def _assigned_topics_hidden(ctx: RequestContext, described: ConsumerGroupDescribeResponseDescribedGroup) -> bool:
    """Kafka refuses to describe a group whose members' (target) assignments name a topic the
    principal may not describe."""
    if not auth.enabled(ctx):
        return False
    names = {
        tp.get("topic_name")
        for m in described.get("members", ())
        for assignment in (m.get("assignment"), m.get("target_assignment"))
        if assignment
        for tp in assignment.get("topic_partitions", ())
    }
    return bool(auth.denied(ctx, auth.DESCRIBE, auth.TOPIC, names, log_denied=False))


def _group_error(
    group_id: str, code: ErrorCode, message: str | None
) -> ConsumerGroupDescribeResponseDescribedGroup:
    return {
        "error_code": code,
        "error_message": message,
        "group_id": group_id,
        "group_state": "",
        "group_epoch": 0,
        "assignment_epoch": 0,
        "assignor_name": "",
        "members": [],
        "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }
