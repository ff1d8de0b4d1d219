"""Metadata (3) and DescribeCluster (60): brokers, the controller, topics and partition leaders.

A topic's Metadata entry (all its partitions) is encoded once and kept, per layout of the topic
struct (versions that encode it identically share one encoding), until its leaders, epochs,
replicas, ISR, partition count or the topic itself change: a Metadata of 10,000 partitions is then
a join of cached bytes, not 10,000 dicts built and encoded per request.  A Metadata for every topic
that the authorizer filters nothing from is the list of those entries kept for the image it was made
from, so 10,000 topics of one partition cost one lookup, not 10,000.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import TYPE_CHECKING, Any

from pybroker.apis import RequestContext, auth, handles
from pybroker.metadata.image import BrokerRegistration, MetadataImage, TopicImage
from pybroker.metadata.store import InvalidTopicName, is_internal_topic, validate_topic_name
from pybroker.protocol import codec
from pybroker.protocol.api import AUTHORIZED_OPERATIONS_OMITTED, RESPONSES
from pybroker.protocol.errors import ErrorCode
from pybroker.protocol.messages.api_keys import ApiKey
from pybroker.security.acl import CLUSTER_NAME

if TYPE_CHECKING:
    from uuid import UUID

    from pybroker.protocol.typed.admin import DescribeClusterRequest, DescribeClusterResponse
    from pybroker.protocol.typed.metadata import (
        MetadataRequest,
        MetadataResponse,
        MetadataResponsePartition,
        MetadataResponseTopic,
    )

ZERO_UUID_INT = 0
METADATA = ApiKey.METADATA
TOPICS_PATH = ("topics",)


def broker_nodes(image: MetadataImage, listener_name: str, id_key: str = "node_id") -> list[Any]:
    """The brokers' endpoints on the listener the client connected on (Kafka's MetadataCache
    getAliveBrokerNodes(listenerName)); a broker without that listener is left out. The dicts are
    MetadataResponseBroker (``node_id``) or DescribeClusterBroker (``broker_id``) by ``id_key``."""
    nodes = []
    for b in image.brokers.values():
        endpoint = b.endpoint(listener_name)
        if endpoint is not None:
            nodes.append({id_key: b.node_id, "host": endpoint[0], "port": endpoint[1], "rack": b.rack})
    return nodes


def topic_metadata(topic: TopicImage, brokers: Mapping[int, BrokerRegistration]) -> MetadataResponseTopic:
    """The topic's Metadata entry as a dict (what ``TopicMetadataCache`` encodes and keeps): each
    partition's leader, epoch, replicas and ISR from the image; replicas on brokers that are not
    registered are offline, and a partition whose leader is not registered has none
    (LEADER_NOT_AVAILABLE), as Kafka's MetadataCache answers."""
    partitions: list[MetadataResponsePartition] = []
    # Partitions share a handful of replica sets: each set's offline replicas are worked out once.
    offline_of: dict[tuple[int, ...], tuple[int, ...]] = {}
    for i, reg in topic.partitions.items():
        if reg.leader in brokers:
            code, leader = ErrorCode.NONE, reg.leader
        else:
            code, leader = ErrorCode.LEADER_NOT_AVAILABLE, -1
        replicas = tuple(reg.replicas)
        offline = offline_of.get(replicas)
        if offline is None:
            offline = offline_of[replicas] = tuple(r for r in replicas if r not in brokers)
        partitions.append(
            {
                "error_code": code,
                "partition_index": i,
                "leader_id": leader,
                "leader_epoch": reg.leader_epoch,
                "replica_nodes": reg.replicas,
                "isr_nodes": reg.isr,
                "offline_replicas": offline,
            }
        )
    return {
        "error_code": ErrorCode.NONE,
        "name": topic.name,
        "topic_id": topic.topic_id,
        "is_internal": topic.internal,
        "partitions": partitions,
    }


class TopicMetadataCache:
    """Encoded Metadata topic entries: topic name -> (the ``TopicImage`` and broker set they were
    built from, {encoding key: encoded entry}); the encoding key is the topic struct's layout at the
    request's version, with the topic's authorized operations when the request asks for them.

    An image never changes: a changed topic is a new ``TopicImage`` object, so an entry is served
    only while the image still holds the very object (and broker set) it was built from.
    ``invalidate`` (the image publisher's listener) drops entries early, keeping memory to the
    topics that exist.  ``all_topics`` keeps, per layout, the entries of every topic of the image it
    last answered (its topic map and broker set, both replaced with any change)."""

    def __init__(self) -> None:
        self._entries: dict[str, tuple[TopicImage, Mapping, dict[Hashable, codec.Encoded]]] = {}
        self._layouts: dict[int, tuple] = {}  # version -> element_encoding_key of the topic struct
        self._all: dict[tuple, tuple[Mapping, Mapping, tuple[codec.Encoded, ...]]] = {}

    def invalidate(self, topic: str) -> None:
        self._entries.pop(topic, None)
        self._all.clear()  # made from an image about to be replaced: its entries would be kept alive

    def __len__(self) -> int:
        return len(self._entries)

    def layout(self, version: int) -> tuple:
        key = self._layouts.get(version)
        if key is None:
            key = self._layouts[version] = codec.element_encoding_key(RESPONSES[METADATA], version, TOPICS_PATH)
        return key

    def encoded(
        self,
        version: int,
        topic: TopicImage,
        brokers: Mapping[int, BrokerRegistration],
        operations: int | None = None,
    ) -> codec.Encoded:
        """The topic's entry at ``version``; with ``operations``, its topic_authorized_operations (v8+)."""
        layout = self.layout(version)
        key: Hashable = layout if operations is None else (layout, operations)
        entry = self._entries.get(topic.name)
        if entry is not None and entry[0] is topic and entry[1] is brokers:
            by_key = entry[2]
            cached = by_key.get(key)
            if cached is not None:
                return cached
        else:
            by_key = {}
        value = topic_metadata(topic, brokers)
        if operations is not None:
            value["topic_authorized_operations"] = operations
        encoded = codec.encode_element(RESPONSES[METADATA], version, TOPICS_PATH, value)
        by_key[key] = encoded
        self._entries[topic.name] = (topic, brokers, by_key)
        return encoded

    def all_topics(self, version: int, image: MetadataImage) -> tuple[codec.Encoded, ...]:
        """The entry of every topic of ``image``, in its order."""
        layout = self.layout(version)
        topics, brokers = image.topics_by_name, image.brokers
        kept = self._all.get(layout)
        if kept is not None and kept[0] is topics and kept[1] is brokers:
            return kept[2]
        entries = tuple(self.encoded(version, t, brokers) for t in topics.values())
        self._all[layout] = (topics, brokers, entries)
        return entries


def _error_topic(name: str | None, code: ErrorCode, topic_id: UUID | None = None) -> MetadataResponseTopic:
    # Kafka answers is_internal by name even for a topic that does not exist (Topic.isInternal).
    internal = name is not None and is_internal_topic(name)
    out: MetadataResponseTopic = {"error_code": code, "name": name, "is_internal": internal, "partitions": []}
    if topic_id is not None:
        out["topic_id"] = topic_id
    return out


# v13 (KIP-1102) adds a top-level error code, REBOOTSTRAP_REQUIRED when the client must rebootstrap; a
# broker that answers is never in that state, so it stays NONE.
@handles(ApiKey.METADATA, 0, 13)
def handle_metadata(ctx: RequestContext, request: MetadataRequest) -> MetadataResponse:
    cache: TopicMetadataCache = ctx.metadata_cache
    image = ctx.metadata_image()
    brokers = image.brokers
    version = ctx.version
    requested = request.get("topics")
    # v0: an empty list means every topic; v1+: null means every topic and [] none.
    all_topics = requested is None or (version == 0 and not requested)
    allow_auto_create = request.get("allow_auto_topic_creation", True) if version >= 4 else True
    with_operations = version >= 8 and request.get("include_topic_authorized_operations", False)

    def entry(topic: TopicImage) -> codec.Encoded:
        if not with_operations:
            return cache.encoded(version, topic, brokers)
        return cache.encoded(version, topic, brokers, auth.authorized_operations(ctx, auth.TOPIC, topic.name))

    topics: list[Any] = []  # encoded entries (codec.Encoded) beside MetadataResponseTopic dicts
    refused: list[MetadataResponseTopic] = []  # Kafka lists the topics the authorizer refused after the others
    if all_topics:
        # Topics the principal may not describe are left out, as if they did not exist.
        hidden = auth.denied(ctx, auth.DESCRIBE, auth.TOPIC, image.topics_by_name, log_denied=False)
        if hidden or with_operations:
            topics = [entry(t) for name, t in image.topics_by_name.items() if name not in hidden]
        else:
            topics = list(cache.all_topics(version, image))
    else:
        assert requested is not None  # else all_topics
        names: list[str] = []
        by_id: set[str] = set()
        for t in requested:
            name = t.get("name")
            if name is None:
                tid = t["topic_id"]  # a null name comes with an id (v10+)
                topic = image.topics_by_id.get(tid)
                if topic is None:
                    # Name is nullable only from v12; before that Kafka answers with an empty name.
                    unknown_name = None if version >= 12 else ""
                    topics.append(_error_topic(unknown_name, ErrorCode.UNKNOWN_TOPIC_ID, tid))
                    continue
                name = topic.name
                by_id.add(name)
            names.append(name)
        hidden = auth.denied(ctx, auth.DESCRIBE, auth.TOPIC, names)
        may_create = None  # decided once, when a missing topic would be created
        for name in names:
            if name in hidden:
                if name in by_id:  # topic ids are not secret: the id is answered, the name is not
                    tid = image.topics_by_name[name].topic_id
                    refused.append({**_error_topic(None, ErrorCode.TOPIC_AUTHORIZATION_FAILED, tid), "is_internal": False})
                else:
                    refused.append({**_error_topic(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED), "is_internal": False})
                continue
            topic = image.topics_by_name.get(name)
            if topic is None:
                # Kafka asks for Create (on the cluster, else on the topic) before it looks at the name.
                if allow_auto_create and auth.enabled(ctx) and ctx.services.config.auto_create_topics_enable:
                    if may_create is None:
                        may_create = auth.authorize_cluster(ctx, auth.CREATE, log_denied=False)
                    if not may_create and not auth.authorize(ctx, auth.CREATE, auth.TOPIC, name):
                        refused.append(_error_topic(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                        continue
                try:
                    validate_topic_name(name)
                except InvalidTopicName:
                    topics.append(_with_operations(ctx, _error_topic(name, ErrorCode.INVALID_TOPIC_EXCEPTION), with_operations))
                    continue
                if allow_auto_create and ctx.topic_admin.auto_create_topic(name) is not None:
                    image = ctx.metadata_image()
                    brokers = image.brokers
                    topic = image.topics_by_name.get(name)
            if topic is None:
                topics.append(_with_operations(ctx, _error_topic(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), with_operations))
            else:
                topics.append(entry(topic))
    out: MetadataResponse = {
        "throttle_time_ms": 0,
        "brokers": broker_nodes(image, ctx.security.listener_name),
        "cluster_id": image.cluster_id,
        # A single broker is its own controller: admin clients send CreateTopics etc. here.
        "controller_id": image.controller_id,
        "topics": topics + refused,
    }
    if 8 <= version <= 10 and request.get("include_cluster_authorized_operations", False):
        out["cluster_authorized_operations"] = _cluster_operations(ctx)
    return out


def _with_operations(ctx: RequestContext, topic: MetadataResponseTopic, wanted: bool) -> MetadataResponseTopic:
    """Kafka fills topic_authorized_operations for every entry it looked up, errors included."""
    if wanted and topic["name"]:
        topic["topic_authorized_operations"] = auth.authorized_operations(ctx, auth.TOPIC, topic["name"])
    return topic


def _cluster_operations(ctx: RequestContext) -> int:
    """The cluster bitfield Metadata v8-10 and DescribeCluster answer: 0 without Describe on the cluster."""
    if not auth.authorize_cluster(ctx, auth.DESCRIBE):
        return 0
    return auth.authorized_operations(ctx, auth.CLUSTER, CLUSTER_NAME)


ENDPOINT_TYPE_BROKER = 1  # KIP-919's EndpointType: 0 unknown, 1 broker, 2 controller
ENDPOINT_TYPES = {1: "BROKER", 2: "CONTROLLER"}


@handles(ApiKey.DESCRIBE_CLUSTER, 0, 2)
def handle_describe_cluster(ctx: RequestContext, request: DescribeClusterRequest) -> DescribeClusterResponse:
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
    image = ctx.metadata_image()
    return {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "endpoint_type": ENDPOINT_TYPE_BROKER,
        "cluster_id": image.cluster_id,
        "controller_id": image.controller_id,
        "brokers": broker_nodes(image, ctx.security.listener_name, "broker_id"),
        "cluster_authorized_operations": (
            _cluster_operations(ctx)
            if request.get("include_cluster_authorized_operations", False)
            else AUTHORIZED_OPERATIONS_OMITTED
        ),
    }
