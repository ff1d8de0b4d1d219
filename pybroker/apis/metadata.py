"""Metadata (3) and DescribeCluster (60): brokers, the controller, topics and partition leaders."""

from __future__ import annotations

from pybroker.apis import RequestContext, handles
from pybroker.metadata.store import InvalidTopicName, TopicRecord, is_internal_topic, validate_topic_name
from pybroker.protocol.errors import ErrorCode

ZERO_UUID_INT = 0


def broker_nodes(ctx: RequestContext, id_key: str = "node_id") -> list[dict]:
    b = ctx.broker
    return [{id_key: b.node_id, "host": b.advertised_host, "port": b.advertised_port, "rack": None}]


def topic_metadata(ctx: RequestContext, rec: TopicRecord) -> dict:
    b = ctx.broker
    partitions = []
    for i in range(rec.partitions):
        p = b.partition(rec.name, i)
        if p is None:
            partitions.append(
                {"error_code": ErrorCode.LEADER_NOT_AVAILABLE, "partition_index": i, "leader_id": -1}
            )
            continue
        partitions.append(
            {
                "error_code": ErrorCode.NONE,
                "partition_index": i,
                "leader_id": p.leader_id,
                "leader_epoch": p.leader_epoch,
                "replica_nodes": list(p.replicas),
                "isr_nodes": list(p.isr),
                "offline_replicas": [],
            }
        )
    return {
        "error_code": ErrorCode.NONE,
        "name": rec.name,
        "topic_id": rec.topic_id,
        "is_internal": rec.internal,
        "partitions": partitions,
    }


def _error_topic(name: str | None, code: ErrorCode, topic_id=None) -> dict:
    # Kafka answers is_internal by name even for a topic that does not exist (Topic.isInternal).
    internal = name is not None and is_internal_topic(name)
    out = {"error_code": code, "name": name, "is_internal": internal, "partitions": []}
    if topic_id is not None:
        out["topic_id"] = topic_id
    return out


@handles(3, 0, 12)
def handle_metadata(ctx: RequestContext, request: dict) -> dict:
    b = ctx.broker
    requested = request.get("topics")
    # v0: an empty list means every topic; v1+: null means every topic and [] none.
    all_topics = requested is None or (ctx.version == 0 and not requested)
    allow_auto_create = request.get("allow_auto_topic_creation", True) if ctx.version >= 4 else True
    topics: list[dict] = []
    if all_topics:
        topics = [topic_metadata(ctx, rec) for rec in b.metadata.topics.values()]
    else:
        for t in requested:
            name = t.get("name")
            if name is None:
                tid = t.get("topic_id")
                rec = b.metadata.topics_by_id.get(tid)
                if rec is None:
                    # Name is nullable only from v12; before that Kafka answers with an empty name.
                    unknown_name = None if ctx.version >= 12 else ""
                    topics.append(_error_topic(unknown_name, ErrorCode.UNKNOWN_TOPIC_ID, tid))
                else:
                    topics.append(topic_metadata(ctx, rec))
                continue
            rec = b.topic(name)
            if rec is None:
                try:
                    validate_topic_name(name)
                except InvalidTopicName:
                    topics.append(_error_topic(name, ErrorCode.INVALID_TOPIC_EXCEPTION))
                    continue
                if allow_auto_create:
                    rec = b.auto_create_topic(name)
            if rec is None:
                topics.append(_error_topic(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
            else:
                topics.append(topic_metadata(ctx, rec))
    return {
        "throttle_time_ms": 0,
        "brokers": broker_nodes(ctx),
        "cluster_id": b.cluster_id,
        # The single broker is its own controller: admin clients send CreateTopics etc. here.
        "controller_id": b.node_id,
        "topics": topics,
    }


@handles(60, 0, 1)
def handle_describe_cluster(ctx: RequestContext, request: dict) -> dict:
    b = ctx.broker
    return {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "endpoint_type": request.get("endpoint_type", 1),
        "cluster_id": b.cluster_id,
        "controller_id": b.node_id,
        "brokers": broker_nodes(ctx, "broker_id"),
    }
