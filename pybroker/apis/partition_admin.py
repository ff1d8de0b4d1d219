"""ElectLeaders (43), AlterPartitionReassignments (45) and ListPartitionReassignments (46).

The controller does the work (``TopicAdmin``: on a single broker its own controller, which has nothing
to elect or move; in a cluster the active ZooKeeper controller, controller/controller.py).  A broker
that is not the active controller hands the request to it through ZooKeeper and answers with its result
(cluster_mode.ClusterMode._controller_request), as Kafka 4's brokers forward these to the controller.

As Kafka's ControllerApis and ReplicationControlManager: ALTER on the cluster for ElectLeaders and
AlterPartitionReassignments, DESCRIBE for ListPartitionReassignments; an unknown election type is
INVALID_REQUEST; an election over every partition (``topic_partitions`` null) lists every topic and
leaves out the partitions that needed none; partitions whose election is not seen within the request's
timeout answer REQUEST_TIMED_OUT (Kafka's DelayedElectLeader).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, TypeVar

from pybroker.apis import RequestContext, auth, handles
from pybroker.protocol.errors import ErrorCode, KafkaError
from pybroker.protocol.messages.api_keys import ApiKey
from pybroker.security.acl import AclOperation

if TYPE_CHECKING:
    from pybroker.protocol.typed.admin import ElectLeadersRequest, ElectLeadersResponse, PartitionResult
    from pybroker.protocol.typed.other import (
        AlterPartitionReassignmentsRequest,
        AlterPartitionReassignmentsResponse,
        ListPartitionReassignmentsRequest,
        ListPartitionReassignmentsResponse,
        OngoingPartitionReassignment,
        ReassignablePartitionResponse,
    )

TopicPartition = tuple[str, int]
_Entry = TypeVar("_Entry")


def _error_fields(error: KafkaError | None) -> tuple[int, str | None]:
    if error is None:
        return ErrorCode.NONE, None
    return int(error.code), error.message or None


def _by_topic(items: Iterable[tuple[TopicPartition, _Entry]]) -> dict[str, list[_Entry]]:
    out: dict[str, list[_Entry]] = {}
    for (topic, _), entry in sorted(items, key=lambda item: item[0]):
        out.setdefault(topic, []).append(entry)
    return out


@handles(ApiKey.ELECT_LEADERS, 0, 2)
async def elect_leaders(ctx: RequestContext, req: ElectLeadersRequest) -> ElectLeadersResponse:
    requested = req["topic_partitions"]
    partitions = None if requested is None else [(t["topic"], p) for t in requested for p in t["partitions"]]
    top_error = ErrorCode.NONE
    results: dict[TopicPartition, KafkaError | None]
    election_type = req.get("election_type", 0) if ctx.version >= 1 else 0
    if not auth.authorize_cluster(ctx, AclOperation.ALTER):
        top_error = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        results = {tp: KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED) for tp in partitions or []}
    elif election_type not in (0, 1):
        # ElectLeadersRequest.getErrorResponse of Kafka's InvalidRequestException.
        top_error = ErrorCode.INVALID_REQUEST
        error = KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown election type {election_type}")
        results = {tp: error for tp in partitions or []}
    else:
        try:
            results = await ctx.topic_admin.elect_leaders(partitions, election_type, timeout_ms=req["timeout_ms"])
        except KafkaError as e:
            results = {tp: e for tp in partitions or []}
        if partitions is None:
            results = {tp: e for tp, e in results.items() if e is None or e.code != ErrorCode.ELECTION_NOT_NEEDED}
    by_topic: dict[str, list[PartitionResult]] = {}
    if partitions is None and top_error == ErrorCode.NONE:
        by_topic = {name: [] for name in sorted(ctx.metadata_image().topics_by_name)}
    for t in requested or ():
        by_topic.setdefault(t["topic"], [])
    for tp, outcome in results.items():
        code, message = _error_fields(outcome)
        by_topic.setdefault(tp[0], []).append({"partition_id": tp[1], "error_code": code, "error_message": message})
    return {
        "throttle_time_ms": 0,
        "error_code": top_error,
        "replica_election_results": [
            {"topic": topic, "partition_result": found} for topic, found in by_topic.items()
        ],
    }


@handles(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, 1)
async def alter_partition_reassignments(
    ctx: RequestContext, req: AlterPartitionReassignmentsRequest
) -> AlterPartitionReassignmentsResponse:
    wanted = {
        (t["name"], p["partition_index"]): None if p["replicas"] is None else list(p["replicas"])
        for t in req["topics"]
        for p in t["partitions"]
    }
    allow_rf_change = req.get("allow_replication_factor_change", True)
    response: AlterPartitionReassignmentsResponse = {
        "throttle_time_ms": 0,
        "allow_replication_factor_change": allow_rf_change,
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "responses": [],
    }
    results: dict[TopicPartition, KafkaError | None]
    if not auth.authorize_cluster(ctx, AclOperation.ALTER):
        # AlterPartitionReassignmentsRequest.getErrorResponse: the error at the top and on every partition.
        error = KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        response.update({"error_code": error.code, "error_message": error.message})
        results = dict.fromkeys(wanted, error)
    else:
        try:
            results = await ctx.topic_admin.alter_partition_reassignments(
                wanted, allow_rf_change, timeout_ms=req["timeout_ms"]
            )
        except KafkaError as e:  # REQUEST_TIMED_OUT (the controller did not answer): the whole request
            return {**response, "error_code": int(e.code), "error_message": e.message or None}
    entries: list[tuple[TopicPartition, ReassignablePartitionResponse]] = []
    for tp in wanted:
        code, message = _error_fields(results.get(tp))
        entries.append((tp, {"partition_index": tp[1], "error_code": code, "error_message": message}))
    response["responses"] = [{"name": topic, "partitions": found} for topic, found in _by_topic(entries).items()]
    return response


@handles(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, 0)
async def list_partition_reassignments(
    ctx: RequestContext, req: ListPartitionReassignmentsRequest
) -> ListPartitionReassignmentsResponse:
    response: ListPartitionReassignmentsResponse = {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None, "topics": []}
    if not auth.authorize_cluster(ctx, AclOperation.DESCRIBE):
        return {**response, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED}
    requested = req["topics"]
    partitions = None if requested is None else {(t["name"], p) for t in requested for p in t["partition_indexes"]}
    try:
        ongoing = await ctx.topic_admin.list_partition_reassignments(partitions, timeout_ms=req["timeout_ms"])
    except KafkaError as e:
        return {**response, "error_code": int(e.code), "error_message": e.message or None}
    entries: list[tuple[TopicPartition, OngoingPartitionReassignment]] = [
        (tp, {"partition_index": tp[1], "replicas": replicas, "adding_replicas": adding, "removing_replicas": removing})
        for tp, (replicas, adding, removing) in ongoing.items()
    ]
    response["topics"] = [{"name": topic, "partitions": found} for topic, found in _by_topic(entries).items()]
    return response
