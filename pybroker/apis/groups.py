"""Group APIs: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, DescribeGroups,
ListGroups, DeleteGroups, OffsetCommit, OffsetFetch, OffsetDelete.

Each handler only translates between the wire shape of its version and ``coordinator.GroupCoordinator``,
which holds the classic rebalance protocol.  JoinGroup and SyncGroup answers may be held (an
awaitable), which mutes the member's connection meanwhile, as Kafka does.
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from pybroker.apis import RequestContext, auth, handles
from pybroker.coordinator.offsets_topic import TOPIC as OFFSETS_TOPIC
from pybroker.coordinator.offsets_topic import partition_for
from pybroker.coordinator.transaction.service import TOPIC as TRANSACTION_TOPIC
from pybroker.protocol.api import AUTHORIZED_OPERATIONS_OMITTED
from pybroker.protocol.errors import ErrorCode
from pybroker.protocol.messages.api_keys import ApiKey

if TYPE_CHECKING:
    from pybroker.coordinator.coordinator import GroupCoordinator
    from pybroker.protocol.typed.groups import (
        Coordinator,
        DeletableGroupResult,
        DeleteGroupsRequest,
        DeleteGroupsResponse,
        DescribeGroupsRequest,
        DescribeGroupsResponse,
        DescribeGroupsResponseDescribedGroup,
        FindCoordinatorRequest,
        FindCoordinatorResponse,
        HeartbeatRequest,
        HeartbeatResponse,
        JoinGroupRequest,
        LeaveGroupRequest,
        LeaveGroupResponse,
        ListGroupsRequest,
        ListGroupsResponse,
        OffsetCommitRequest,
        OffsetCommitRequestTopic,
        OffsetCommitResponse,
        OffsetCommitResponseTopic,
        OffsetDeleteRequest,
        OffsetDeleteResponse,
        OffsetDeleteResponseTopic,
        OffsetFetchRequest,
        OffsetFetchRequestTopic,
        OffsetFetchRequestTopics,
        OffsetFetchResponse,
        OffsetFetchResponseGroup,
        SyncGroupRequest,
    )

log = logging.getLogger(__name__)

FIND_COORDINATOR = ApiKey.FIND_COORDINATOR
JOIN_GROUP = ApiKey.JOIN_GROUP
HEARTBEAT = ApiKey.HEARTBEAT
LEAVE_GROUP = ApiKey.LEAVE_GROUP
SYNC_GROUP = ApiKey.SYNC_GROUP
DESCRIBE_GROUPS = ApiKey.DESCRIBE_GROUPS
LIST_GROUPS = ApiKey.LIST_GROUPS
OFFSET_COMMIT = ApiKey.OFFSET_COMMIT
OFFSET_FETCH = ApiKey.OFFSET_FETCH
DELETE_GROUPS = ApiKey.DELETE_GROUPS
OFFSET_DELETE = ApiKey.OFFSET_DELETE
_Response = TypeVar("_Response")

KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1
KEY_TYPE_SHARE = 2


def _coordinator(ctx: RequestContext, group_id: str | None = None) -> GroupCoordinator | None:
    """The running group coordinator; with ``group_id``, only if it coordinates that group (in a cluster,
    the group's __consumer_offsets partition is led here)."""
    coordinator = getattr(ctx.services, "group_coordinator", None)
    if coordinator is None or not coordinator.started:
        return None
    if group_id is not None and not coordinator.is_coordinator_for(group_id):
        return None
    return coordinator


def _coordinator_error(ctx: RequestContext, group_id: str | None = None) -> ErrorCode:
    """Why ``_coordinator(ctx, group_id)`` gave None: NOT_COORDINATOR when another broker coordinates the
    group (the client looks the coordinator up again), else COORDINATOR_NOT_AVAILABLE."""
    running = _coordinator(ctx)
    if running is not None and group_id is not None and not running.is_coordinator_for(group_id):
        return ErrorCode.NOT_COORDINATOR
    return ErrorCode.COORDINATOR_NOT_AVAILABLE


def _client_host(ctx: RequestContext) -> str:
    # Kafka reports InetAddress.toString(): "/127.0.0.1".
    return "/" + ctx.peer.rsplit(":", 1)[0]


def _client_id(ctx: RequestContext) -> str:
    return ctx.header.client_id or ""


# -- FindCoordinator ----------------------------------------------------------------------------------
def _coordinator_partition_leader(ctx: RequestContext, topic_name: str, key: str) -> int:
    """The leader of the key's partition of __consumer_offsets or __transaction_state (-1 while there
    is none): the key's coordinator in a cluster."""
    topic = ctx.metadata_image().topic(topic_name)
    if topic is None or not topic.partitions:
        return -1
    registration = topic.partitions.get(partition_for(key, len(topic.partitions)))
    return -1 if registration is None else registration.leader


def _find_share_coordinator(ctx: RequestContext, key: str) -> Coordinator:
    """Key type 2 (KIP-932): the share coordinator of ``group:topicId:partition``, the leader of the key's
    __share_group_state partition, made here on first use. Kafka asks FindCoordinator v6 and CLUSTER_ACTION
    (only brokers' persisters look share coordinators up)."""
    from pybroker.apis.share_groups import service
    from pybroker.coordinator.share.share_coordinator import TOPIC as SHARE_STATE_TOPIC
    from pybroker.coordinator.share.state_records import SharePartitionKey

    def refused(error: ErrorCode, message: str | None) -> Coordinator:
        return {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": error, "error_message": message}

    if ctx.version < 6:
        return refused(ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_REQUEST.message)
    if not auth.authorize_cluster(ctx, auth.CLUSTER_ACTION):
        return refused(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
    try:
        share_key = SharePartitionKey.parse(key)
    except ValueError:
        return refused(ErrorCode.INVALID_REQUEST, "")
    try:
        service(ctx).coordinator.ensure_topic()
    except RuntimeError:
        return refused(ErrorCode.COORDINATOR_NOT_AVAILABLE, "The coordinator is not available.")
    node_id = _coordinator_partition_leader(ctx, SHARE_STATE_TOPIC, share_key.coordinator_key)
    node = ctx.metadata_image().brokers.get(node_id)
    if node is None:
        return refused(ErrorCode.COORDINATOR_NOT_AVAILABLE, "The coordinator is not available.")
    host, port = node.endpoint(ctx.security.listener_name) or (node.host, node.port)
    return {"key": key, "node_id": node.node_id, "host": host, "port": port, "error_code": ErrorCode.NONE, "error_message": None}


def _find_one(ctx: RequestContext, key: str, key_type: int) -> Coordinator:
    if key_type == KEY_TYPE_SHARE:
        return _find_share_coordinator(ctx, key)
    b = ctx.services
    # Kafka: Describe on the group, or on the transactional id, before anything else.
    refused = None
    if key_type == KEY_TYPE_GROUP and not auth.authorize(ctx, auth.DESCRIBE, auth.GROUP, key):
        refused = ErrorCode.GROUP_AUTHORIZATION_FAILED
    elif key_type == KEY_TYPE_TRANSACTION and not auth.authorize(ctx, auth.DESCRIBE, auth.TRANSACTIONAL_ID, key):
        refused = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    if refused is not None:
        return {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": refused, "error_message": None}
    coordinator = _coordinator(ctx)
    txn = getattr(b, "transaction_coordinator", None)
    node_id = b.node_id
    if key_type == KEY_TYPE_GROUP and coordinator is not None:
        # As Kafka's FindCoordinator: created on first use (again, should it have been deleted).
        coordinator.ensure_offsets_topic()
    if b.cluster_mode:
        # A group's coordinator is the leader of its __consumer_offsets partition, a transactional id's
        # the leader of its __transaction_state partition (made through ZooKeeper on first use).
        if key_type == KEY_TYPE_TRANSACTION and b.transaction_router is not None:
            b.transaction_router.ensure_topic()
        node_id = _coordinator_partition_leader(
            ctx, OFFSETS_TOPIC if key_type == KEY_TYPE_GROUP else TRANSACTION_TOPIC, key
        )
        if node_id not in ctx.metadata_image().brokers:
            coordinator = txn = None
    if (key_type == KEY_TYPE_GROUP and coordinator is not None) or (
        key_type == KEY_TYPE_TRANSACTION and txn is not None and txn.started
    ):
        # This broker coordinates every group and transaction (it leads every internal partition);
        # the client is told its endpoint on the listener it came in on, as Kafka does.
        node = ctx.metadata_image().brokers[node_id]
        host, port = node.endpoint(ctx.security.listener_name) or (node.host, node.port)
        return {
            "key": key,
            "node_id": node.node_id,
            "host": host,
            "port": port,
            "error_code": ErrorCode.NONE,
            "error_message": None,
        }
    if key_type in (KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION):
        error, message = ErrorCode.COORDINATOR_NOT_AVAILABLE, "The coordinator is not available."
    else:
        error, message = ErrorCode.INVALID_REQUEST, f"Invalid coordinator key type {key_type}"
    return {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": error, "error_message": message}


@handles(FIND_COORDINATOR, 0, 6)
def handle_find_coordinator(ctx: RequestContext, request: FindCoordinatorRequest) -> FindCoordinatorResponse:
    key_type = request.get("key_type", KEY_TYPE_GROUP)
    if ctx.version >= 4:
        return {
            "throttle_time_ms": 0,
            "coordinators": [_find_one(ctx, key, key_type) for key in request["coordinator_keys"]],
        }
    one = _find_one(ctx, request["key"], key_type)
    out: FindCoordinatorResponse = {
        "throttle_time_ms": 0,
        "error_code": one["error_code"],
        "node_id": one["node_id"],
        "host": one["host"],
        "port": one["port"],
    }
    if ctx.version >= 1:  # v0 has no error message
        out["error_message"] = one["error_message"]
        if one["error_code"] in (ErrorCode.GROUP_AUTHORIZATION_FAILED, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED):
            out["error_message"] = auth.default_message(ErrorCode(one["error_code"]))
    return out


# -- JoinGroup / SyncGroup / Heartbeat / LeaveGroup --------------------------------------------------
def _join_response(version: int, result: dict[str, Any]) -> dict[str, Any]:
    out = {"throttle_time_ms": 0, **result}
    if version < 7:
        out["protocol_name"] = out["protocol_name"] or ""
        out.pop("protocol_type", None)
    if version < 9:
        out.pop("skip_assignment", None)
    return out


async def _held(fut: Awaitable[dict[str, Any]], shape) -> dict[str, Any]:  # noqa: ANN001
    return shape(await fut)


@handles(JOIN_GROUP, 0, 9)
def handle_join_group(ctx: RequestContext, request: JoinGroupRequest):  # noqa: ANN201
    coordinator = _coordinator(ctx, request["group_id"])
    version = ctx.version
    denied = not auth.authorize(ctx, auth.READ, auth.GROUP, request["group_id"])
    if coordinator is None or denied:
        return _join_response(
            version,
            {
                "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED if denied else _coordinator_error(ctx, request["group_id"]),  # noqa: E501
                "generation_id": -1,
                "protocol_type": None,
                "protocol_name": None,
                "leader": "",
                "skip_assignment": False,
                "member_id": "" if denied else request["member_id"],
                "members": [],
            },
        )
    instance_id = request.get("group_instance_id") if version >= 5 else None
    session_timeout = request["session_timeout_ms"]
    fut = coordinator.join_group(
        group_id=request["group_id"],
        member_id=request["member_id"],
        group_instance_id=instance_id,
        client_id=_client_id(ctx),
        client_host=_client_host(ctx),
        session_timeout_ms=session_timeout,
        rebalance_timeout_ms=request["rebalance_timeout_ms"] if version >= 1 else session_timeout,
        protocol_type=request["protocol_type"],
        protocols=[(p["name"], bytes(p["metadata"])) for p in request["protocols"]],
        # KIP-394: from v4 a new dynamic member first gets its id with MEMBER_ID_REQUIRED.
        require_known_member_id=version >= 4 and instance_id is None,
        reason=request.get("reason"),
    )
    if fut.done():
        return _join_response(version, fut.result())
    return _held(fut, lambda r: _join_response(version, r))


def _sync_response(version: int, result: dict[str, Any]) -> dict[str, Any]:
    out = {"throttle_time_ms": 0, **result}
    if version < 5:
        out.pop("protocol_type")
        out.pop("protocol_name")
    return out


@handles(SYNC_GROUP, 0, 5)
def handle_sync_group(ctx: RequestContext, request: SyncGroupRequest):  # noqa: ANN201
    coordinator = _coordinator(ctx, request["group_id"])
    version = ctx.version
    denied = not auth.authorize(ctx, auth.READ, auth.GROUP, request["group_id"])
    if coordinator is None or denied:
        return _sync_response(
            version,
            {
                "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED if denied else _coordinator_error(ctx, request["group_id"]),  # noqa: E501
                "protocol_type": None,
                "protocol_name": None,
                "assignment": b"",
            },
        )
    fut = coordinator.sync_group(
        group_id=request["group_id"],
        generation_id=request["generation_id"],
        member_id=request["member_id"],
        group_instance_id=request.get("group_instance_id") if version >= 3 else None,
        protocol_type=request.get("protocol_type") if version >= 5 else None,
        protocol_name=request.get("protocol_name") if version >= 5 else None,
        assignments={a["member_id"]: bytes(a["assignment"]) for a in request["assignments"]},
    )
    if fut.done():
        return _sync_response(version, fut.result())
    return _held(fut, lambda r: _sync_response(version, r))


@handles(HEARTBEAT, 0, 4)
def handle_heartbeat(ctx: RequestContext, request: HeartbeatRequest) -> HeartbeatResponse:
    coordinator = _coordinator(ctx, request["group_id"])
    if not auth.authorize(ctx, auth.READ, auth.GROUP, request["group_id"]):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED}
    if coordinator is None:
        return {"throttle_time_ms": 0, "error_code": _coordinator_error(ctx, request["group_id"])}
    error = coordinator.heartbeat(
        group_id=request["group_id"],
        generation_id=request["generation_id"],
        member_id=request["member_id"],
        group_instance_id=request.get("group_instance_id") if ctx.version >= 3 else None,
    )
    return {"throttle_time_ms": 0, "error_code": error}


@handles(LEAVE_GROUP, 0, 5)
def handle_leave_group(ctx: RequestContext, request: LeaveGroupRequest) -> LeaveGroupResponse:
    coordinator = _coordinator(ctx, request["group_id"])
    version = ctx.version
    if version >= 3:
        leaving = [(m["member_id"], m.get("group_instance_id")) for m in request["members"]]
    else:
        leaving = [(request["member_id"], None)]
    if not auth.authorize(ctx, auth.READ, auth.GROUP, request["group_id"]):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "members": []}
    if coordinator is None:
        return {"throttle_time_ms": 0, "error_code": _coordinator_error(ctx, request["group_id"]), "members": []}
    top, results = coordinator.leave_group(request["group_id"], leaving)
    if version < 3:
        # One member: its own error is the answer.
        error = top if top != ErrorCode.NONE or not results else results[0][2]
        return {"throttle_time_ms": 0, "error_code": error}
    return {
        "throttle_time_ms": 0,
        "error_code": top,
        "members": [{"member_id": m, "group_instance_id": i, "error_code": e} for m, i, e in results],
    }


# -- admin views --------------------------------------------------------------------------------------
def _not_found(described: dict) -> bool:
    """The coordinator's answer for a group it does not have: Dead, no error, no members."""
    return (
        described["error_code"] == ErrorCode.NONE
        and described["group_state"] == "Dead"  # GroupState.DEAD
        and not described["members"]
        and not described["protocol_type"]
    )


@handles(DESCRIBE_GROUPS, 0, 6)
def handle_describe_groups(ctx: RequestContext, request: DescribeGroupsRequest) -> DescribeGroupsResponse:
    coordinator = _coordinator(ctx)
    include_ops = ctx.version >= 3 and request.get("include_authorized_operations", False)
    groups: list[Any] = []  # the coordinator describes a group as a plain dict
    refused: list[DescribeGroupsResponseDescribedGroup] = []  # Kafka answers the groups it refused first
    for group_id in request["groups"]:
        if not auth.authorize(ctx, auth.DESCRIBE, auth.GROUP, group_id):
            refused.append(
                {
                    "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED,
                    "group_id": group_id,
                    "group_state": "",
                    "protocol_type": "",
                    "protocol_data": "",
                    "members": [],
                    "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
                }
            )
            continue
        if coordinator is None or not coordinator.is_coordinator_for(group_id):
            described = {
                "error_code": _coordinator_error(ctx, group_id),
                "group_id": group_id,
                "group_state": "",
                "protocol_type": "",
                "protocol_data": "",
                "members": [],
            }
        else:
            described = coordinator.describe_group(group_id)
            if ctx.version >= 6 and _not_found(described):
                # KIP-1043: v6 says so (GroupMetadataManager.describeGroups); older versions answer
                # an empty Dead group with no error.
                described["error_code"] = ErrorCode.GROUP_ID_NOT_FOUND
                described["error_message"] = (
                    f"Group {group_id} is not a classic group."
                    if group_id in coordinator.consumer.groups or group_id in coordinator.streams.groups
                    else f"Group {group_id} not found."
                )
        described["authorized_operations"] = (
            auth.authorized_operations(ctx, auth.GROUP, group_id)
            if include_ops and described["error_code"] == ErrorCode.NONE
            else AUTHORIZED_OPERATIONS_OMITTED
        )
        groups.append(described)
    return {"throttle_time_ms": 0, "groups": refused + groups}


@handles(LIST_GROUPS, 0, 5)
def handle_list_groups(ctx: RequestContext, request: ListGroupsRequest) -> ListGroupsResponse:
    coordinator = _coordinator(ctx)
    if coordinator is None:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE, "groups": []}
    states_filter = request.get("states_filter") if ctx.version >= 4 else None
    types_filter = request.get("types_filter") if ctx.version >= 5 else None
    states = None if states_filter is None else list(states_filter)
    types = None if types_filter is None else list(types_filter)
    groups: list[Any] = coordinator.list_groups(states, types)  # ListedGroup-shaped plain dicts
    share_groups = ctx.services.share_groups
    if share_groups is not None:
        groups += share_groups.list_entries(states, types)
    # Describe on the cluster lists every group; otherwise only the groups the principal may describe.
    if not auth.authorize_cluster(ctx, auth.DESCRIBE, log_denied=False):
        hidden = auth.denied(ctx, auth.DESCRIBE, auth.GROUP, (g["group_id"] for g in groups), log_denied=False)
        groups = [g for g in groups if g["group_id"] not in hidden]
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "groups": groups}


@handles(DELETE_GROUPS, 0, 2)
def handle_delete_groups(
    ctx: RequestContext, request: DeleteGroupsRequest
) -> DeleteGroupsResponse | Awaitable[DeleteGroupsResponse]:
    coordinator = _coordinator(ctx)
    names = list(dict.fromkeys(request["groups_names"]))
    unauthorized = auth.denied(ctx, auth.DELETE, auth.GROUP, names)
    refused: list[DeletableGroupResult] = [
        {"group_id": g, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED} for g in names if g in unauthorized
    ]
    allowed = [g for g in request["groups_names"] if g not in unauthorized]
    if coordinator is None:
        unavailable: list[DeletableGroupResult] = [
            {"group_id": g, "error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE} for g in allowed
        ]
        return {"throttle_time_ms": 0, "results": unavailable + refused}
    # In a cluster, groups coordinated by another broker: NOT_COORDINATOR, as Kafka answers them.
    here = [g for g in allowed if coordinator.is_coordinator_for(g)]
    elsewhere: list[DeletableGroupResult] = [
        {"group_id": g, "error_code": ErrorCode.NOT_COORDINATOR} for g in allowed if g not in here
    ]
    if ctx.services.share_groups is not None and any(ctx.services.share_groups.group(g) for g in here):
        return _delete_with_share_groups(ctx, coordinator, here, elsewhere + refused)
    results, wait = coordinator.delete_groups(here) if here else ([], None)
    deleted: list[DeletableGroupResult] = [{"group_id": g, "error_code": e} for g, e in results]
    response: DeleteGroupsResponse = {"throttle_time_ms": 0, "results": deleted + elsewhere + refused}
    return response if wait is None else _after(wait, response)


async def _delete_with_share_groups(
    ctx: RequestContext, coordinator: GroupCoordinator, here: list[str], others: list[DeletableGroupResult]
) -> DeleteGroupsResponse:
    """Kafka deletes the share groups first (their share-partition state, then the group), then the rest."""
    from pybroker.apis.share_group_offsets import delete_share_groups

    shares = await delete_share_groups(ctx, here)
    rest = [g for g in here if g not in shares]
    results, wait = coordinator.delete_groups(rest) if rest else ([], None)
    if wait is not None:
        await wait
    deleted: list[DeletableGroupResult] = [{"group_id": g, "error_code": e} for g, e in [*shares.items(), *results]]
    return {"throttle_time_ms": 0, "results": deleted + others}


async def _after(wait: Awaitable[None], response: _Response) -> _Response:
    await wait
    return response


# -- offsets ------------------------------------------------------------------------------------------
TOPIC_IDS_VERSION = 10  # OffsetCommit and OffsetFetch v10 (KIP-848) name topics by id only
ZERO_UUID = uuid.UUID(int=0)


def _name_topics_by_id(
    ctx: RequestContext, topics: Sequence[OffsetCommitRequestTopic] | Sequence[OffsetFetchRequestTopics]
) -> None:
    """v10: gives each topic of the request the name of its id ("" for an unknown id), as Kafka's
    KafkaApis does from its metadata cache before anything else looks at the topics."""
    image = ctx.metadata_image()
    for t in topics:
        topic = image.topic_by_id(t["topic_id"]) if t["topic_id"] != ZERO_UUID else None
        t["name"] = topic.name if topic is not None else ""


def partition_exists(ctx: RequestContext, topic: str, partition: int) -> bool:
    image = ctx.metadata_image().topic(topic)
    return image is not None and partition in image.partitions


def _topic_id(ctx: RequestContext, name: str) -> uuid.UUID:
    topic = ctx.metadata_image().topic(name)
    return topic.topic_id if topic is not None else ZERO_UUID


@handles(OFFSET_COMMIT, 2, 10)
def handle_offset_commit(
    ctx: RequestContext, request: OffsetCommitRequest
) -> OffsetCommitResponse | Awaitable[OffsetCommitResponse]:
    coordinator = _coordinator(ctx, request["group_id"])
    version = ctx.version
    unknown_ids: dict[tuple[str, int], ErrorCode] = {}
    if version >= TOPIC_IDS_VERSION:
        _name_topics_by_id(ctx, request["topics"])
        unknown_ids = {
            ("", p["partition_index"]): ErrorCode.UNKNOWN_TOPIC_ID
            for t in request["topics"]
            if not t["name"]
            for p in t["partitions"]
        }
    wanted = [
        (
            t["name"],
            p["partition_index"],
            p["committed_offset"],
            p.get("committed_leader_epoch", -1),
            p["committed_metadata"],
        )
        for t in request["topics"]
        if version < TOPIC_IDS_VERSION or t["name"]
        for p in t["partitions"]
    ]
    if not auth.authorize(ctx, auth.READ, auth.GROUP, request["group_id"]):
        refusal = {(t, p): ErrorCode.GROUP_AUTHORIZATION_FAILED for t, p, *_ in wanted}
        return _commit_response(request, refusal | dict.fromkeys(unknown_ids, ErrorCode.GROUP_AUTHORIZATION_FAILED))
    # Read on each topic: the partitions of the others are answered TOPIC_AUTHORIZATION_FAILED.
    unauthorized = auth.denied(ctx, auth.READ, auth.TOPIC, (t["name"] for t in request["topics"]))
    refused = {(t, p): ErrorCode.TOPIC_AUTHORIZATION_FAILED for t, p, *_ in wanted if t in unauthorized}
    wanted = [w for w in wanted if w[0] not in unauthorized]
    if coordinator is None:
        unavailable = _coordinator_error(ctx, request["group_id"])
        errors = {(t, p): unavailable for t, p, *_ in wanted}
        return _commit_response(request, errors | unknown_ids | refused)
    if not wanted and refused:
        return _commit_response(request, refused | unknown_ids)
    errors, wait = coordinator.commit_offsets(
        group_id=request["group_id"],
        generation_id=request.get("generation_id_or_member_epoch", -1) if version >= 1 else -1,
        member_id=request.get("member_id", "") if version >= 1 else "",
        group_instance_id=request.get("group_instance_id") if version >= 7 else None,
        retention_time_ms=request.get("retention_time_ms", -1) if 2 <= version <= 4 else -1,
        offsets=wanted,
        # The metadata decides (Kafka's metadata cache), not this broker's replicas: in a cluster the
        # coordinator need not host the committed partition.
        topic_exists=functools.partial(partition_exists, ctx),
        api_version=version,
    )
    response = _commit_response(request, errors | unknown_ids | refused)
    return response if wait is None else _after(wait, response)


def _commit_response(request: OffsetCommitRequest, errors: dict[tuple[str, int], ErrorCode]) -> OffsetCommitResponse:
    topics: list[OffsetCommitResponseTopic] = [
        {
            "name": t["name"],
            "topic_id": t.get("topic_id", ZERO_UUID),  # v10
            "partitions": [
                {
                    "partition_index": p["partition_index"],
                    "error_code": errors[(t["name"], p["partition_index"])],
                }
                for p in t["partitions"]
            ],
        }
        for t in request["topics"]
    ]
    return {"throttle_time_ms": 0, "topics": topics}


def _fetched_partition(index: int, om: Any) -> dict[str, Any]:
    if om is None:
        return {
            "partition_index": index,
            "committed_offset": -1,
            "committed_leader_epoch": -1,
            "metadata": "",
            "error_code": ErrorCode.NONE,
        }
    return {
        "partition_index": index,
        "committed_offset": om.offset,
        "committed_leader_epoch": om.leader_epoch,
        "metadata": om.metadata,
        "error_code": ErrorCode.NONE,
    }


def _fetch_group(
    ctx: RequestContext,
    coordinator: GroupCoordinator | None,
    group_id: str,
    topics: Sequence[OffsetFetchRequestTopic] | Sequence[OffsetFetchRequestTopics] | None,
    version: int,
    member_id: str | None = None,
    member_epoch: int = -1,
    require_stable: bool = False,
    by_id: Callable[[str], uuid.UUID] | None = None,
) -> tuple[ErrorCode, list[Any]]:
    """by_id (v10): the id of a topic name; the answer's topics carry it. The topics are
    OffsetFetchResponseTopic (v0-7) or OffsetFetchResponseTopics (v8+) dicts."""
    wanted = None if topics is None else [(t["name"], list(t["partition_indexes"])) for t in topics]
    # Offsets of topics the principal may not describe are not shown (asked for: TOPIC_AUTHORIZATION_FAILED).
    refused: list[dict[str, Any]] = []
    if wanted is not None:
        unauthorized = auth.denied(ctx, auth.DESCRIBE, auth.TOPIC, (name for name, _ in wanted))
        refused = [
            {
                "name": name,
                "partitions": [
                    {
                        "partition_index": i,
                        "committed_offset": -1,
                        "committed_leader_epoch": -1,
                        "metadata": "",
                        "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                    }
                    for i in parts
                ],
            }
            for name, parts in wanted
            if name in unauthorized
        ]
        wanted = [w for w in wanted if w[0] not in unauthorized]
    if coordinator is None or not coordinator.is_coordinator_for(group_id):
        return _coordinator_error(ctx, group_id), []
    error, found = coordinator.fetch_offsets(group_id, wanted, member_id, member_epoch)
    if wanted is None:
        hidden = auth.denied(ctx, auth.DESCRIBE, auth.TOPIC, (name for name, _ in found), log_denied=False)
        found = [f for f in found if f[0] not in hidden]
    out = []
    for name, parts in found:
        if by_id is not None:
            topic_id = by_id(name)
            if topic_id == ZERO_UUID:
                continue  # Kafka: a topic without an id cannot be written in v10, so it is left out
        partitions = [_fetched_partition(i, om) for i, om in parts]
        if require_stable:
            # KIP-447: a partition with offsets pending in an open transaction is not answered yet.
            for p in partitions:
                if coordinator.txn_offsets.is_pending(group_id, (name, p["partition_index"])):
                    p.update(committed_offset=-1, error_code=ErrorCode.UNSTABLE_OFFSET_COMMIT)
        if version < 5:
            for p in partitions:
                p.pop("committed_leader_epoch")
        topic: dict[str, Any] = {"name": name, "partitions": partitions}
        if by_id is not None:
            topic["topic_id"] = topic_id
        out.append(topic)
    for t in refused:
        if version < 5:
            for p in t["partitions"]:
                p.pop("committed_leader_epoch")
        if by_id is not None:
            t["topic_id"] = by_id(t["name"])
    return error, out + refused


@handles(OFFSET_FETCH, 1, 10)
def handle_offset_fetch(ctx: RequestContext, request: OffsetFetchRequest) -> OffsetFetchResponse:
    coordinator = _coordinator(ctx)
    version = ctx.version
    if version >= 8:
        groups: list[OffsetFetchResponseGroup] = []
        by_id = None
        for g in request["groups"]:
            if not auth.authorize(ctx, auth.DESCRIBE, auth.GROUP, g["group_id"]):
                groups.append(
                    {"group_id": g["group_id"], "topics": [], "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED}
                )
                continue
            unknown: list[dict[str, Any]] = []
            group_topics = g["topics"]
            if version >= TOPIC_IDS_VERSION:
                by_id = functools.partial(_topic_id, ctx)
                if group_topics is not None:
                    _name_topics_by_id(ctx, group_topics)
                    # Kafka's fetchOffsetsForGroup: an unknown id is answered UNKNOWN_TOPIC_ID, after
                    # the coordinator's topics.
                    unknown = [
                        {
                            "topic_id": t["topic_id"],
                            "name": "",
                            "partitions": [
                                {
                                    "partition_index": i,
                                    "committed_offset": -1,
                                    "error_code": ErrorCode.UNKNOWN_TOPIC_ID,
                                }
                                for i in t["partition_indexes"]
                            ],
                        }
                        for t in group_topics
                        if not t["name"]
                    ]
                    group_topics = [t for t in group_topics if t["name"]]
            error, found = _fetch_group(
                ctx,
                coordinator,
                g["group_id"],
                group_topics,
                version,
                # v9 (KIP-848): a consumer group member names itself, and its epoch is checked.
                g.get("member_id") if version >= 9 else None,
                g.get("member_epoch", -1) if version >= 9 else -1,
                request.get("require_stable", False),
                by_id,
            )
            if error == ErrorCode.NONE:
                found += unknown
            groups.append({"group_id": g["group_id"], "topics": found, "error_code": error})
        return {"throttle_time_ms": 0, "groups": groups}
    topics: list[Any]  # OffsetFetchResponseTopic dicts
    if not auth.authorize(ctx, auth.DESCRIBE, auth.GROUP, request["group_id"]):
        error, topics = ErrorCode.GROUP_AUTHORIZATION_FAILED, []
    else:
        error, topics = _fetch_group(
            ctx,
            coordinator,
            request["group_id"],
            request["topics"],
            version,
            require_stable=version >= 7 and request.get("require_stable", False),
        )
    if version < 2 and error != ErrorCode.NONE:
        # v0/v1 have no top-level error: report it on every partition asked for.
        topics = [
            {
                "name": t["name"],
                "partitions": [
                    {"partition_index": i, "committed_offset": -1, "metadata": "", "error_code": error}
                    for i in t["partition_indexes"]
                ],
            }
            for t in request["topics"] or []
        ]
    response: OffsetFetchResponse = {"throttle_time_ms": 0, "topics": topics}
    if version >= 2:
        response["error_code"] = error
    return response


@handles(OFFSET_DELETE, 0, 0)
def handle_offset_delete(
    ctx: RequestContext, request: OffsetDeleteRequest
) -> OffsetDeleteResponse | Awaitable[OffsetDeleteResponse]:
    coordinator = _coordinator(ctx, request["group_id"])
    wanted = [(t["name"], p["partition_index"]) for t in request["topics"] for p in t["partitions"]]
    if not auth.authorize(ctx, auth.DELETE, auth.GROUP, request["group_id"]):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "topics": []}
    if coordinator is None:
        return {"throttle_time_ms": 0, "error_code": _coordinator_error(ctx, request["group_id"]), "topics": []}
    unauthorized = auth.denied(ctx, auth.READ, auth.TOPIC, (t["name"] for t in request["topics"]))
    error, errors, wait = coordinator.delete_offsets(request["group_id"], [w for w in wanted if w[0] not in unauthorized])
    errors = {**errors, **{w: ErrorCode.TOPIC_AUTHORIZATION_FAILED for w in wanted if w[0] in unauthorized}}
    topics: list[OffsetDeleteResponseTopic] = []
    if error == ErrorCode.NONE:
        topics = [
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
        ]
    response: OffsetDeleteResponse = {"throttle_time_ms": 0, "error_code": error, "topics": topics}
    return response if wait is None else _after(wait, response)
