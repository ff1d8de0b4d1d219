"""Leadership and replica placement: ElectLeaders (43), AlterPartitionReassignments (45) and
ListPartitionReassignments (46).

The work is the controller's (``TopicAdmin.elect_leaders`` and the reassignment calls): on one broker
the LocalController (every partition's only replica leads, nothing can move), in a cluster the active
controller, reached directly or through ZooKeeper when another broker is the controller (cluster_mode.py).
Errors as Kafka 4.3.1's ControllerApis / ReplicationControlManager answer them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pybroker.apis import RequestContext, auth, handles
from pybroker.protocol.errors import ErrorCode, KafkaError

PREFERRED, UNCLEAN = 0, 1  # ElectLeaders' ElectionType


def _message(error: KafkaError | None) -> str | None:
    return None if error is None else error.message


def _group(results: Mapping[tuple[str, int], KafkaError | None], order: Iterable[str]) -> dict[str, dict]:
    by_topic: dict[str, dict] = {t: {} for t in order}
    for (topic, partition), error in results.items():
        by_topic.setdefault(topic, {})[partition] = error
    return by_topic


def _elect_response(code: ErrorCode, by_topic: dict[str, dict]) -> dict:
    return {
        "throttle_time_ms": 0,
        "error_code": code,
        "replica_election_results": [
            {
                "topic": topic,
                "partition_result": [
                    {
                        "partition_id": p,
                        "error_code": ErrorCode.NONE if e is None else e.code,
                        "error_message": _message(e),
                    }
                    for p, e in partitions.items()
                ],
            }
            for topic, partitions in by_topic.items()
        ],
    }


def _elect_error(request: dict, code: ErrorCode, message: str | None = None) -> dict:
    """Kafka's ElectLeadersRequest.getErrorResponse: the error at the top and on every partition asked."""
    error = KafkaError(code, message)
    by_topic: dict[str, dict] = {}
    for t in request["topic_partitions"] or ():
        by_topic.setdefault(t["topic"], {}).update({p: error for p in t["partitions"]})
    return _elect_response(code, by_topic)


@handles(43, 0, 2)
async def handle_elect_leaders(ctx: RequestContext, request: dict) -> dict:
    if not auth.authorize_cluster(ctx, auth.ALTER):
        return _elect_error(request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    election_type = request.get("election_type", PREFERRED) if ctx.version >= 1 else PREFERRED
    if election_type not in (PREFERRED, UNCLEAN):
        return _elect_error(request, ErrorCode.INVALID_REQUEST, f"Unknown election type {election_type}")
    asked = request["topic_partitions"]
    partitions = None if asked is None else list(dict.fromkeys((t["topic"], p) for t in asked for p in t["partitions"]))
    try:
        results = await ctx.topic_admin.elect_leaders(partitions, election_type, request["timeout_ms"])
    except KafkaError as e:
        if e.code != ErrorCode.REQUEST_TIMED_OUT or partitions is None:
            return _elect_error(request, e.code, e.message)
        # Kafka's DelayedElectLeader when it expires: the partitions time out, the request does not.
        results = dict.fromkeys(partitions, e)
    if partitions is None:
        # Kafka (ReplicationControlManager.electLeaders): every topic has an entry, leaving out the
        # partitions that already have the wanted leader.
        results = {tp: e for tp, e in results.items() if e is None or e.code != ErrorCode.ELECTION_NOT_NEEDED}
        return _elect_response(ErrorCode.NONE, _group(results, sorted(ctx.metadata_image().topics_by_name)))
    return _elect_response(ErrorCode.NONE, _group(results, (t["topic"] for t in asked)))


def _reassign_response(code: ErrorCode, message: str | None, by_topic: dict[str, dict]) -> dict:
    return {
        "throttle_time_ms": 0,
        "allow_replication_factor_change": True,
        "error_code": code,
        "error_message": message,
        "responses": [
            {
                "name": topic,
                "partitions": [
                    {
                        "partition_index": p,
                        "error_code": ErrorCode.NONE if e is None else e.code,
                        "error_message": _message(e),
                    }
                    for p, e in partitions.items()
                ],
            }
            for topic, partitions in by_topic.items()
        ],
    }


@handles(45, 0, 1)
async def handle_alter_partition_reassignments(ctx: RequestContext, request: dict) -> dict:
    order = [t["name"] for t in request["topics"]]
    targets = {(t["name"], p["partition_index"]): p["replicas"] for t in request["topics"] for p in t["partitions"]}
    if not auth.authorize_cluster(ctx, auth.ALTER):
        # AlterPartitionReassignmentsRequest.getErrorResponse: the error at the top and on every partition.
        error = KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        return _reassign_response(error.code, error.message, _group(dict.fromkeys(targets, error), order))
    results: dict[tuple[str, int], KafkaError | None] = {}
    if ctx.version >= 1 and not request.get("allow_replication_factor_change", True):
        # KIP-860: a target of another size than the partition's replica set is refused.
        image = ctx.metadata_image()
        for tp, target in list(targets.items()):
            topic = image.topic(tp[0])
            reg = topic.partitions.get(tp[1]) if topic is not None else None
            if target is not None and reg is not None and len(target) != len(reg.replicas):
                results[tp] = KafkaError(
                    ErrorCode.INVALID_REPLICATION_FACTOR,
                    f"The replication factor is changed from {len(reg.replicas)} to {len(target)}",
                )
                del targets[tp]
    if targets:
        try:
            results.update(await ctx.topic_admin.alter_partition_reassignments(targets, request["timeout_ms"]))
        except KafkaError as e:
            results.update(dict.fromkeys(targets, e))
    ordered = {tp: results[tp] for t in request["topics"] for tp in ((t["name"], p["partition_index"])
                                                                     for p in t["partitions"])}
    return _reassign_response(ErrorCode.NONE, None, _group(ordered, order))


@handles(46, 0, 0)
async def handle_list_partition_reassignments(ctx: RequestContext, request: dict) -> dict:
    def answer(code: ErrorCode, message: str | None, topics: list[dict]) -> dict:
        return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "topics": topics}

    if not auth.authorize_cluster(ctx, auth.DESCRIBE):
        return answer(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED).message,
                      [])
    asked = request["topics"]
    wanted = None if asked is None else {(t["name"], p) for t in asked for p in t["partition_indexes"]}
    try:
        ongoing = await ctx.topic_admin.list_partition_reassignments(wanted, request["timeout_ms"])
    except KafkaError as e:
        return answer(e.code, e.message, [])
    by_topic: dict[str, list[dict]] = {}
    for (topic, partition), (replicas, adding, removing) in sorted(ongoing.items()):
        by_topic.setdefault(topic, []).append(
            {"partition_index": partition, "replicas": replicas, "adding_replicas": adding,
             "removing_replicas": removing}
        )
    return answer(ErrorCode.NONE, None, [{"name": t, "partitions": ps} for t, ps in by_topic.items()])
