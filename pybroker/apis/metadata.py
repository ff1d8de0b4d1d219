"""Metadata (3) and DescribeCluster (60): brokers, the controller, topics and partition leaders.

A topic's Metadata entry (all its partitions) is encoded once and kept, per layout of the topic
struct (versions that encode it identically share one encoding), until its leaders, epochs,
replicas, ISR, partition count or the topic itself change: a Metadata of 10,000 partitions is then
a join of cached bytes, not 10,000 dicts built and encoded per request.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pybroker.apis import RequestContext, handles
from pybroker.metadata.store import InvalidTopicName, TopicRecord, is_internal_topic, validate_topic_name
from pybroker.protocol import codec
from pybroker.protocol.api import RESPONSES
from pybroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from pybroker.replication.partition import Partition

ZERO_UUID_INT = 0
METADATA = 3
TOPICS_PATH = ("topics",)


def broker_nodes(ctx: RequestContext, id_key: str = "node_id") -> list[dict]:
    b = ctx.broker
    return [{id_key: b.node_id, "host": b.advertised_host, "port": b.advertised_port, "rack": None}]


def topic_metadata(ctx: RequestContext, rec: TopicRecord) -> dict:
    """The topic's Metadata entry as a dict (what ``TopicMetadataCache`` encodes and keeps)."""
    partitions = []
    partition = ctx.broker.partition
    for i in range(rec.partitions):
        p = partition(rec.name, i)
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
                "replica_nodes": p.replicas,
                "isr_nodes": p.isr,
                "offline_replicas": (),
            }
        )
    return {
        "error_code": ErrorCode.NONE,
        "name": rec.name,
        "topic_id": rec.topic_id,
        "is_internal": rec.internal,
        "partitions": partitions,
    }


class TopicMetadataCache:
    """Encoded Metadata topic entries: topic name -> (the record they were built from, its partition
    count then, {encoding key: encoded entry}).

    ``invalidate`` is called for every change of a partition's leadership state (``Partition``'s
    listener) and when partitions are registered or removed; an entry built from another
    ``TopicRecord`` object (the topic deleted and created again) or another partition count is never
    served, whatever the hooks did.  Entries with a partition not yet registered are not kept."""

    def __init__(self) -> None:
        self._entries: dict[str, tuple[TopicRecord, int, dict[tuple, codec.Encoded]]] = {}

    def invalidate(self, topic: str) -> None:
        self._entries.pop(topic, None)

    def partition_changed(self, partition: Partition) -> None:
        self._entries.pop(partition.topic, None)

    def __len__(self) -> int:
        return len(self._entries)

    def encoded(self, ctx: RequestContext, rec: TopicRecord) -> codec.Encoded | dict:
        spec = RESPONSES[METADATA]
        key = codec.element_encoding_key(spec, ctx.version, TOPICS_PATH)
        entry = self._entries.get(rec.name)
        if entry is not None and entry[0] is rec and entry[1] == rec.partitions:
            by_key = entry[2]
            cached = by_key.get(key)
            if cached is not None:
                return cached
        else:
            by_key = {}
        value = topic_metadata(ctx, rec)
        if any(p["error_code"] != ErrorCode.NONE for p in value["partitions"]):
            return value  # a partition still being created: answer from the live state, keep nothing
        encoded = codec.encode_element(spec, ctx.version, TOPICS_PATH, value)
        by_key[key] = encoded
        self._entries[rec.name] = (rec, rec.partitions, by_key)
        return encoded


def _error_topic(name: str | None, code: ErrorCode, topic_id=None) -> dict:
    # Kafka answers is_internal by name even for a topic that does not exist (Topic.isInternal).
    internal = name is not None and is_internal_topic(name)
    out = {"error_code": code, "name": name, "is_internal": internal, "partitions": []}
    if topic_id is not None:
        out["topic_id"] = topic_id
    return out


# v13 (KIP-1102) adds a top-level error code, REBOOTSTRAP_REQUIRED when the client must rebootstrap; a
# broker that answers is never in that state, so it stays NONE.
@handles(3, 0, 13)
def handle_metadata(ctx: RequestContext, request: dict) -> dict:
    b = ctx.broker
    cache: TopicMetadataCache = b.metadata_cache
    requested = request.get("topics")
    # v0: an empty list means every topic; v1+: null means every topic and [] none.
    all_topics = requested is None or (ctx.version == 0 and not requested)
    allow_auto_create = request.get("allow_auto_topic_creation", True) if ctx.version >= 4 else True
    topics: list[dict] = []
    if all_topics:
        topics = [cache.encoded(ctx, rec) for rec in b.metadata.topics.values()]
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
                    topics.append(cache.encoded(ctx, rec))
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
                topics.append(cache.encoded(ctx, rec))
    return {
        "throttle_time_ms": 0,
        "brokers": broker_nodes(ctx),
        "cluster_id": b.cluster_id,
        # The single broker is its own controller: admin clients send CreateTopics etc. here.
        "controller_id": b.node_id,
        "topics": topics,
    }


ENDPOINT_TYPE_BROKER = 1  # KIP-919's EndpointType: 0 unknown, 1 broker, 2 controller
ENDPOINT_TYPES = {1: "BROKER", 2: "CONTROLLER"}


@handles(60, 0, 2)
def handle_describe_cluster(ctx: RequestContext, request: dict) -> dict:
    b = ctx.broker
    wanted = request.get("endpoint_type", ENDPOINT_TYPE_BROKER)
    if wanted != ENDPOINT_TYPE_BROKER:
        # Kafka's AuthHelper.computeDescribeClusterResponse: this listener is a broker endpoint.
        if wanted in ENDPOINT_TYPES:
            code = ErrorCode.MISMATCHED_ENDPOINT_TYPE
            message = (
                "The request was sent to an endpoint of type BROKER, but we wanted an endpoint of type "
                + ENDPOINT_TYPES[wanted]
            )
        else:
            code = ErrorCode.UNSUPPORTED_ENDPOINT_TYPE
            message = f"Unsupported endpoint type {wanted}"
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.INVALID_REQUEST if ctx.version == 0 else code,
            "error_message": message,
        }
    # v2 (KIP-1073): fenced brokers are listed only when asked for, with is_fenced; a broker that
    # answers is not fenced, so the list (and is_fenced=false) is the same either way.
    return {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "endpoint_type": ENDPOINT_TYPE_BROKER,
        "cluster_id": b.cluster_id,
        "controller_id": b.node_id,
        "brokers": broker_nodes(ctx, "broker_id"),
    }
