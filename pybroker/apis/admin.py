"""Topic administration: CreateTopics (19), DeleteTopics (20), CreatePartitions (37), DeleteRecords (21).

On a cluster these go to the controller; a single broker is its own controller and applies them
at once, so the timeouts in the requests never expire.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pybroker import config as broker_config
from pybroker.apis import RequestContext, auth, handles
from pybroker.controller.limits import check_creation_limits, new_topic_records
from pybroker.protocol.errors import ErrorCode, KafkaError
from pybroker.protocol.messages.api_keys import ApiKey
from pybroker.quotas.client_quotas import THROTTLING_QUOTA_EXCEEDED_MESSAGE, ControllerMutationQuota
from pybroker.storage.errors import OffsetOutOfRangeError

if TYPE_CHECKING:
    from pybroker.protocol.typed.admin import (
        CreatableReplicaAssignment,
        CreatableTopic,
        CreatableTopicResult,
        CreatePartitionsRequest,
        CreatePartitionsResponse,
        CreatePartitionsTopicResult,
        CreateTopicsRequest,
        CreateTopicsResponse,
        DeletableTopicResult,
        DeleteRecordsPartitionResult,
        DeleteRecordsRequest,
        DeleteRecordsResponse,
        DeleteRecordsTopicResult,
        DeleteTopicsRequest,
        DeleteTopicsResponse,
    )


def _replication_error(
    ctx: RequestContext, rf: int, assignments: Sequence[CreatableReplicaAssignment]
) -> KafkaError | None:
    live = set(ctx.metadata_image().brokers) or {ctx.services.node_id}
    brokers = len(live)
    if rf == -1:
        rf = ctx.services.config.default_replication_factor
    if assignments:
        for a in assignments:
            if any(n not in live for n in a["broker_ids"]):
                return KafkaError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Unknown broker in assignment {a['broker_ids']}"
                )
        return None
    if rf <= 0:
        return KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0.")
    if rf > brokers:
        return KafkaError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"Unable to replicate the partition {rf} time(s): The target replication factor of {rf} "
            f"cannot be reached because only {brokers} broker(s) are registered.",
        )
    return None


def _mutation_quota(ctx: RequestContext, strict_from: int) -> ControllerMutationQuota:
    """controller_mutation_rate of the request's user and client id; strict from ``strict_from``."""
    return ControllerMutationQuota(
        ctx.services.controller_mutation_quotas,
        ctx.principal.name,
        ctx.header.client_id or "",
        ctx.version >= strict_from,
    )


def _check_mutation_quota(quota: ControllerMutationQuota) -> None:
    if quota.exceeded():
        raise KafkaError(ErrorCode.THROTTLING_QUOTA_EXCEEDED, THROTTLING_QUOTA_EXCEEDED_MESSAGE)


def _requested_partitions(ctx: RequestContext, topics: Sequence[CreatableTopic]) -> int:
    """Partitions a CreateTopics asks for, counted as Kafka's controller does before anything else
    (validateTotalNumberOfPartitions): assignments, else num_partitions, -1 meaning num.partitions."""
    total = 0
    for t in topics:
        if t["assignments"]:
            total += len(t["assignments"])
        elif t["num_partitions"] == -1:
            total += ctx.services.config.num_partitions
        elif t["num_partitions"] > 0:
            total += t["num_partitions"]
    return total


def _validate_new_topic(ctx: RequestContext, t: CreatableTopic) -> tuple[int, dict[str, str | None]]:
    """The partition count and configs of a valid CreateTopics entry; raises KafkaError otherwise."""
    err = _replication_error(ctx, t["replication_factor"], t["assignments"])
    if err is not None:
        raise err
    n = t["num_partitions"]
    if t["assignments"]:
        if n != -1:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "Both numPartitions and assignments were set.")
        n = len(t["assignments"])
    elif n == -1:
        n = ctx.services.config.num_partitions
    configs = {c["name"]: c["value"] for c in t["configs"]}
    ctx.topic_admin.check_new_topic(t["name"], n, configs)
    return n, configs


@handles(ApiKey.CREATE_TOPICS, 2, 7)
async def handle_create_topics(ctx: RequestContext, request: CreateTopicsRequest) -> CreateTopicsResponse:
    b = ctx.services
    validate_only = request.get("validate_only", False)
    # Every entry is validated first: like Kafka's controller, the request as a whole is refused
    # (each topic POLICY_VIOLATION) when it asks for too many partitions, or when the valid topics
    # together would write too many metadata records — and nothing is created then.
    checked: list[tuple[int, dict[str, str | None]] | KafkaError] = []
    seen: set[str] = set()
    for t in request["topics"]:
        try:
            if t["name"] in seen:
                raise KafkaError(
                    ErrorCode.INVALID_REQUEST,
                    f"Create topics request from client contains duplicate topic {t['name']}",
                )
            seen.add(t["name"])
            checked.append(_validate_new_topic(ctx, t))
        except KafkaError as e:
            checked.append(e)
    # Kafka's controller: Create on the cluster, else on each topic; the configs of a created topic
    # are answered only with DescribeConfigs on it.
    names = [t["name"] for t in request["topics"]]
    unauthorized = (
        frozenset() if auth.authorize_cluster(ctx, auth.CREATE, log_denied=False) else auth.denied(ctx, auth.CREATE, auth.TOPIC, names)
    )
    hidden_configs = auth.denied(ctx, auth.DESCRIBE_CONFIGS, auth.TOPIC, names, log_denied=False)
    checked = [
        KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
        if t["name"] in unauthorized and not (isinstance(c, KafkaError) and c.code == ErrorCode.INVALID_REQUEST)
        else c
        for t, c in zip(request["topics"], checked, strict=True)
    ]
    refusal: KafkaError | None = None
    try:
        check_creation_limits(
            _requested_partitions(ctx, request["topics"]),
            sum(new_topic_records(*c) for c in checked if not isinstance(c, KafkaError)),
        )
    except KafkaError as e:
        refusal = e
    quota = _mutation_quota(ctx, 6)
    results: list[CreatableTopicResult] = []
    for t, check in zip(request["topics"], checked, strict=True):
        name = t["name"]
        out: CreatableTopicResult = {
            "name": name,
            "error_code": ErrorCode.NONE,
            "error_message": None,
            "num_partitions": -1,
            "replication_factor": -1,
            "configs": None,
        }
        try:
            if refusal is not None:
                raise refusal
            if isinstance(check, KafkaError):
                raise check
            n, configs = check
            _check_mutation_quota(quota)
            rf = t["replication_factor"]
            if rf == -1:
                rf = b.config.default_replication_factor
            assignments = {a["partition_index"]: list(a["broker_ids"]) for a in t["assignments"]}
            if assignments:
                rf = len(next(iter(assignments.values())))
            rec = await b.topic_admin.create_topic_async(
                name,
                n,
                configs,
                validate_only=validate_only,
                timeout_ms=request["timeout_ms"],
                replication_factor=rf,
                assignments=assignments or None,
            )
            if not validate_only:
                quota.record(n)
            out["num_partitions"] = n
            out["replication_factor"] = rf
            if rec is not None:
                out["topic_id"] = rec.topic_id
            if ctx.version >= 5 and name in hidden_configs:
                out["topic_config_error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                out["configs"] = []
            elif ctx.version >= 5:
                out["configs"] = [
                    {
                        "name": e.name,
                        "value": e.value,
                        "read_only": e.read_only,
                        "config_source": e.source,
                        "is_sensitive": e.sensitive,
                    }
                    for e in broker_config.describe_topic_config(
                        b.config, {k: v for k, v in configs.items() if v is not None}
                    )
                ]
        except KafkaError as e:
            out.update({"error_code": e.code, "error_message": e.message})
        results.append(out)
    return {"throttle_time_ms": quota.throttle_ms, "topics": auth.unauthorized_last(results, unauthorized, "name")}


@handles(ApiKey.DELETE_TOPICS, 1, 6)
async def handle_delete_topics(ctx: RequestContext, request: DeleteTopicsRequest) -> DeleteTopicsResponse:
    b = ctx.services
    if ctx.version >= 6:
        wanted = [(t.get("name"), t.get("topic_id")) for t in request["topics"]]
    else:
        wanted = [(n, None) for n in request["topic_names"]]
    quota = _mutation_quota(ctx, 5)
    # Kafka's controller: Delete on the cluster, else Delete (and Describe, to learn a name) per topic.
    all_allowed = auth.authorize_cluster(ctx, auth.DELETE, log_denied=False)
    first = ctx.metadata_image()
    named = [
        n if n is not None or t is None else getattr(first.topics_by_id.get(t), "name", None) for n, t in wanted
    ]
    undescribable = frozenset() if all_allowed else auth.denied(ctx, auth.DESCRIBE, auth.TOPIC, named)
    undeletable = frozenset() if all_allowed else auth.denied(ctx, auth.DELETE, auth.TOPIC, named)
    responses: list[DeletableTopicResult] = []
    for name, tid in wanted:
        out: DeletableTopicResult = {"name": name, "error_code": ErrorCode.NONE, "error_message": None}
        by_id = None  # the id the request named the topic by, checked again when its turn comes
        image = ctx.metadata_image()  # as of this topic's turn: earlier deletions are in it
        if name is None and tid is not None:
            rec = image.topics_by_id.get(tid)
            if rec is None:
                out.update(
                    {"topic_id": tid, "error_code": ErrorCode.UNKNOWN_TOPIC_ID, "error_message": "unknown topic id"}
                )
                responses.append(out)
                continue
            if rec.name in undeletable:
                # The name only to a principal that may describe the topic.
                shown = None if rec.name in undescribable else rec.name
                out.update({"name": shown, "topic_id": tid, "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED})
                responses.append(out)
                continue
            name = rec.name
            out["name"] = name
            by_id = tid
        elif name in undescribable or (name in undeletable and image.topic(name) is not None):
            out["error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            responses.append(out)
            continue
        assert name is not None  # v6 decodes every topic's id: a topic without a name took the branch above
        rec = image.topic(name)
        if rec is not None:
            out["topic_id"] = rec.topic_id
        try:
            _check_mutation_quota(quota)
            await b.topic_admin.delete_topic_async(name, by_id, request["timeout_ms"])
            if rec is not None:
                quota.record(rec.num_partitions)
        except KafkaError as e:
            out.update({"error_code": e.code, "error_message": e.message})
        responses.append(out)
    return {"throttle_time_ms": quota.throttle_ms, "responses": responses}


@handles(ApiKey.CREATE_PARTITIONS, 0, 3)
async def handle_create_partitions(ctx: RequestContext, request: CreatePartitionsRequest) -> CreatePartitionsResponse:
    b = ctx.services
    quota = _mutation_quota(ctx, 3)
    results: list[CreatePartitionsTopicResult] = []
    unauthorized = auth.denied(ctx, auth.ALTER, auth.TOPIC, (t["name"] for t in request["topics"]))
    for t in request["topics"]:
        out: CreatePartitionsTopicResult = {"name": t["name"], "error_code": ErrorCode.NONE, "error_message": None}
        if t["name"] in unauthorized:
            out["error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            results.append(out)
            continue
        try:
            _check_mutation_quota(quota)
            before = ctx.metadata_image().topic(t["name"])
            old_count = before.num_partitions if before is not None else 0
            assignments = t.get("assignments")
            live = set(ctx.metadata_image().brokers) or {b.node_id}
            if assignments:
                for a in assignments:
                    if any(n not in live for n in a["broker_ids"]):
                        raise KafkaError(
                            ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Unknown broker in {a['broker_ids']}"
                        )
            await b.topic_admin.add_partitions(
                t["name"],
                t["count"],
                validate_only=request.get("validate_only", False),
                timeout_ms=request["timeout_ms"],
                **({"assignments": [list(a["broker_ids"]) for a in assignments]} if assignments else {}),
            )
            if not request.get("validate_only", False):
                quota.record(max(t["count"] - old_count, 0))
        except KafkaError as e:
            out.update({"error_code": e.code, "error_message": e.message})
        results.append(out)
    return {"throttle_time_ms": quota.throttle_ms, "results": auth.unauthorized_last(results, unauthorized, "name")}


@handles(ApiKey.DELETE_RECORDS, 0, 2)
def handle_delete_records(ctx: RequestContext, request: DeleteRecordsRequest) -> DeleteRecordsResponse:
    rm = ctx.replica_manager
    unauthorized = auth.denied(ctx, auth.DELETE, auth.TOPIC, (t["name"] for t in request["topics"]))
    topics: list[DeleteRecordsTopicResult] = []
    for t in request["topics"]:
        parts: list[DeleteRecordsPartitionResult] = []
        for rp in t["partitions"]:
            idx = rp["partition_index"]
            out: DeleteRecordsPartitionResult = {"partition_index": idx, "low_watermark": -1, "error_code": ErrorCode.NONE}
            try:
                if t["name"] in unauthorized:
                    raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                p = rm.get_partition_or_error(t["name"], idx)
            except KafkaError as e:
                out["error_code"] = e.code
            else:
                offset = rp["offset"]
                if offset == -1:  # -1 means "up to the high watermark"
                    offset = p.high_watermark
                if offset < 0 or offset > p.high_watermark:
                    out["error_code"] = ErrorCode.OFFSET_OUT_OF_RANGE
                else:
                    try:
                        p.log.delete_records_before(offset)
                        out["low_watermark"] = p.log_start_offset
                    except OffsetOutOfRangeError:
                        out["error_code"] = ErrorCode.OFFSET_OUT_OF_RANGE
            parts.append(out)
        topics.append({"name": t["name"], "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}
