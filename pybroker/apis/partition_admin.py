"""ElectLeaders (43), AlterPartitionReassignments (45) and ListPartitionReassignments (46).

The controller does the work (``TopicAdmin``: on a single broker its own controller, which has nothing
to elect or move; in a cluster the active ZooKeeper controller, controller/controller.py).  In a cluster
a broker that is not the active controller answers NOT_CONTROLLER, as Kafka's ZK-mode controller does:
admin clients send these requests to the controller Metadata names, and retry on NOT_CONTROLLER.

As KafkaApis: ALTER on the cluster for ElectLeaders and AlterPartitionReassignments, DESCRIBE for
ListPartitionReassignments; an election over every partition (``topic_partitions`` null) leaves out the
partitions that needed none.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pybroker.apis import RequestContext, auth, handles
from pybroker.protocol.errors import ErrorCode, KafkaError
from pybroker.security.acl import AclOperation

TopicPartition = tuple[str, int]


def _error_fields(error: KafkaError | None) -> tuple[int, str | None]:
    if error is None:
        return ErrorCode.NONE, None
    return int(error.code), error.message or None


def _by_topic(items: Iterable[tuple[TopicPartition, dict]]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for (topic, _), entry in sorted(items, key=lambda item: item[0]):
        out.setdefault(topic, []).append(entry)
    return out


@handles(43, 0, 2)
async def elect_leaders(ctx: RequestContext, req: dict) -> dict:
    requested = req["topic_partitions"]
    partitions = None if requested is None else [(t["topic"], p) for t in requested for p in t["partitions"]]
    top_error = ErrorCode.NONE
    results: dict[TopicPartition, KafkaError | None]
    if not auth.authorize_cluster(ctx, AclOperation.ALTER):
        top_error = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        results = {tp: KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED) for tp in partitions or []}
    else:
        try:
            results = await ctx.topic_admin.elect_leaders(
                partitions, req.get("election_type", 0), timeout_ms=req["timeout_ms"]
            )
        except KafkaError as e:
            results = {tp: e for tp in partitions or []}
        if partitions is None:
            results = {tp: e for tp, e in results.items() if e is None or e.code != ErrorCode.ELECTION_NOT_NEEDED}
    entries = []
    for tp, error in results.items():
        code, message = _error_fields(error)
        entries.append((tp, {"partition_id": tp[1], "error_code": code, "error_message": message}))
    return {
        "throttle_time_ms": 0,
        "error_code": top_error,
        "replica_election_results": [
            {"topic": topic, "partition_result": found} for topic, found in _by_topic(entries).items()
        ],
    }


@handles(45, 0, 1)
async def alter_partition_reassignments(ctx: RequestContext, req: dict) -> dict:
    wanted = {(t["name"], p["partition_index"]): p["replicas"] for t in req["topics"] for p in t["partitions"]}
    allow_rf_change = req.get("allow_replication_factor_change", True)
    response = {
        "throttle_time_ms": 0,
        "allow_replication_factor_change": allow_rf_change,
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "responses": [],
    }
    if not auth.authorize_cluster(ctx, AclOperation.ALTER):
        return {**response, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED}
    try:
        results = await ctx.topic_admin.alter_partition_reassignments(wanted, allow_rf_change)
    except KafkaError as e:  # NOT_CONTROLLER: the whole request, as Kafka answers it
        return {**response, "error_code": int(e.code), "error_message": e.message or None}
    entries = []
    for tp in wanted:
        code, message = _error_fields(results.get(tp))
        entries.append((tp, {"partition_index": tp[1], "error_code": code, "error_message": message}))
    response["responses"] = [{"name": topic, "partitions": found} for topic, found in _by_topic(entries).items()]
    return response


@handles(46, 0, 0)
async def list_partition_reassignments(ctx: RequestContext, req: dict) -> dict:
    response: dict[str, Any] = {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None, "topics": []}
    if not auth.authorize_cluster(ctx, AclOperation.DESCRIBE):
        return {**response, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED}
    requested = req["topics"]
    partitions = None if requested is None else {(t["name"], p) for t in requested for p in t["partition_indexes"]}
    try:
        ongoing = await ctx.topic_admin.list_partition_reassignments(partitions)
    except KafkaError as e:
        return {**response, "error_code": int(e.code), "error_message": e.message or None}
    entries = [
        (tp, {"partition_index": tp[1], "replicas": replicas, "adding_replicas": adding, "removing_replicas": removing})
        for tp, (replicas, adding, removing) in ongoing.items()
    ]
    response["topics"] = [{"name": topic, "partitions": found} for topic, found in _by_topic(entries).items()]
    return response
