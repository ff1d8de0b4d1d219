"""Metadata (3) and DescribeCluster (60): brokers, the controller, topics and partition leaders.

A topic's Metadata entry (all its partitions) is encoded once and kept, per layout of the topic
struct (versions that encode it identically share one encoding), until its leaders, epochs,
replicas, ISR, partition count or the topic itself change: a Metadata of 10,000 partitions is then
a join of cached bytes, not 10,000 dicts built and encoded per request.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pybroker.apis import RequestContext, auth, handles
from pybroker.metadata.store import InvalidTopicName, TopicRecord, is_internal_topic, validate_topic_name
from pybroker.protocol import codec
from pybroker.protocol.api import RESPONSES
from pybroker.protocol.errors import ErrorCode
from pybroker.security.acl import CLUSTER_NAME

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


@handles(3, 0, 12)
def handle_metadata(ctx: RequestContext, request: dict) -> dict:
    b = ctx.broker
    cache: TopicMetadataCache = b.metadata_cache
    requested = request.get("topics")
    # v0: an empty list means every topic; v1+: null means every topic and [] none.
    all_topics = requested is None or (ctx.version == 0 and not requested)
    allow_auto_create = request.get("allow_auto_topic_creation", True) if ctx.version >= 4 else True
    with_operations = ctx.version >= 8 and request.get("include_topic_authorized_operations", False)

    def entry(rec: TopicRecord) -> codec.Encoded | dict:
        if not with_operations:
            return cache.encoded(ctx, rec)
        value = topic_metadata(ctx, rec)
        value["topic_authorized_operations"] = auth.authorized_operations(ctx, auth.TOPIC, rec.name)
        return value

    topics: list = []
    refused: list[dict] = []  # Kafka lists the topics refused by the authorizer after the others
    if all_topics:
        # Topics the principal may not describe are left out, as if they did not exist.
        hidden = auth.denied(ctx, auth.DESCRIBE, auth.TOPIC, b.metadata.topics, log_denied=False)
        topics = [entry(rec) for name, rec in b.metadata.topics.items() if name not in hidden]
    else:
        names: list[str] = []
        by_id: set[str] = set()
        for t in requested:
            name = t.get("name")
            if name is None:
                tid = t.get("topic_id")
                rec = b.metadata.topics_by_id.get(tid)
                if rec is None:
                    # Name is nullable only from v12; before that Kafka answers with an empty name.
                    unknown_name = None if ctx.version >= 12 else ""
                    topics.append(_error_topic(unknown_name, ErrorCode.UNKNOWN_TOPIC_ID, tid))
                    continue
                name = rec.name
                by_id.add(name)
            names.append(name)
        hidden = auth.denied(ctx, auth.DESCRIBE, auth.TOPIC, names)
        may_create = None  # decided once, when a missing topic would be created
        for name in names:
            if name in hidden:
                if name in by_id:  # topic ids are not secret: the id is answered, the name is not
                    tid = b.metadata.topics[name].topic_id
                    refused.append(_error_topic(None, ErrorCode.TOPIC_AUTHORIZATION_FAILED, tid))
                    refused[-1]["is_internal"] = False
                else:
                    refused.append(_refused_topic(name, internal=False))
                continue
            rec = b.topic(name)
            if rec is None:
                # Kafka asks for Create (on the cluster, else on the topic) before it looks at the name.
                if allow_auto_create and b.config.auto_create_topics_enable:
                    if may_create is None:
                        may_create = auth.authorize_cluster(ctx, auth.CREATE, log_denied=False)
                    if not may_create and not auth.authorize(ctx, auth.CREATE, auth.TOPIC, name):
                        refused.append(_refused_topic(name, internal=is_internal_topic(name)))
                        continue
                try:
                    validate_topic_name(name)
                except InvalidTopicName:
                    error = _error_topic(name, ErrorCode.INVALID_TOPIC_EXCEPTION)
                    topics.append(_with_operations(ctx, error, with_operations))
                    continue
                if allow_auto_create:
                    rec = b.auto_create_topic(name)
            if rec is None:
                error = _error_topic(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                topics.append(_with_operations(ctx, error, with_operations))
            else:
                topics.append(entry(rec))
    out = {
        "throttle_time_ms": 0,
        "brokers": broker_nodes(ctx),
        "cluster_id": b.cluster_id,
        # The single broker is its own controller: admin clients send CreateTopics etc. here.
        "controller_id": b.node_id,
        "topics": topics + refused,
    }
    if 8 <= ctx.version <= 10 and request.get("include_cluster_authorized_operations", False):
        out["cluster_authorized_operations"] = _cluster_operations(ctx)
    return out


def _refused_topic(name: str, internal: bool) -> dict:
    out = _error_topic(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    out["is_internal"] = internal
    return out


def _with_operations(ctx: RequestContext, topic: dict, wanted: bool) -> dict:
    """Kafka fills topic_authorized_operations for every entry it looked up, errors included."""
    if wanted and topic["name"]:
        topic["topic_authorized_operations"] = auth.authorized_operations(ctx, auth.TOPIC, topic["name"])
    return topic


def _cluster_operations(ctx: RequestContext) -> int:
    """The cluster bitfield Metadata v8-10 and DescribeCluster answer: 0 without Describe on the cluster."""
    if not auth.authorize_cluster(ctx, auth.DESCRIBE):
        return 0
    return auth.authorized_operations(ctx, auth.CLUSTER, CLUSTER_NAME)


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
        "cluster_authorized_operations": (
            _cluster_operations(ctx)
            if request.get("include_cluster_authorized_operations", False)
            else auth.OPERATIONS_NOT_REQUESTED
        ),
    }
