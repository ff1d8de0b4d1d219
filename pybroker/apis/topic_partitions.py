"""DescribeTopicPartitions (75, KIP-966): topics and partitions in pages of at most
``max.request.partition.size.limit`` partitions, resumed from the response's cursor.

As Kafka's DescribeTopicPartitionsRequestHandler and KRaftMetadataCache answer: topics in name order,
the cursor's partition index applies to the cursor's topic only, a topic whose partitions do not all fit
ends the page with a cursor at its first missing partition, and a page that ends exactly at a topic's
end points the cursor at the next topic's partition 0. An empty topic list describes every topic and
leaves out (rather than errors) names that do not exist.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING

from pybroker.apis import RequestContext, handles
from pybroker.metadata.image import BrokerRegistration, TopicImage
from pybroker.metadata.store import InvalidTopicName, is_internal_topic, validate_topic_name
from pybroker.protocol.errors import ErrorCode
from pybroker.protocol.messages.api_keys import ApiKey

if TYPE_CHECKING:
    from pybroker.protocol.typed.admin import (
        Cursor,
        DescribeTopicPartitionsRequest,
        DescribeTopicPartitionsResponse,
        DescribeTopicPartitionsResponsePartition,
        DescribeTopicPartitionsResponseTopic,
    )

ZERO_UUID = uuid.UUID(int=0)

# Kafka's AuthHelper.authorizedOperations without an authorizer: every operation a topic supports
# (READ 3, WRITE 4, CREATE 5, DELETE 6, ALTER 7, DESCRIBE 8, DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11).
TOPIC_OPERATIONS = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))


def _partitions(
    topic: TopicImage, brokers: Mapping[int, BrokerRegistration], listener: str, start: int, max_count: int
) -> tuple[list[DescribeTopicPartitionsResponsePartition], int]:
    """The partitions [start, start + max_count) of ``topic`` and the next index left out (-1: none)."""
    count = topic.num_partitions
    upper = min(count, start + max_count)
    next_index = upper if upper < count else -1
    out: list[DescribeTopicPartitionsResponsePartition] = []
    for index in range(start, upper):
        reg = topic.partitions.get(index)
        if reg is None:
            continue
        leader_broker = brokers.get(reg.leader)
        alive = leader_broker is not None and leader_broker.endpoint(listener) is not None
        out.append(
            {
                "error_code": ErrorCode.NONE,
                "partition_index": index,
                "leader_id": reg.leader if alive else -1,
                "leader_epoch": reg.leader_epoch,
                "replica_nodes": list(reg.replicas),
                "isr_nodes": list(reg.isr),
                # No eligible leader replicas (KIP-966's ELR is a feature Kafka leaves off by default).
                "eligible_leader_replicas": [],
                "last_known_elr": [],
                "offline_replicas": [
                    r for r in reg.replicas if r not in brokers or brokers[r].endpoint(listener) is None
                ],
            }
        )
    return out, next_index


def _missing_topic(name: str) -> DescribeTopicPartitionsResponseTopic:
    try:
        validate_topic_name(name)
        code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    except InvalidTopicName:
        code = ErrorCode.INVALID_TOPIC_EXCEPTION
    return {
        "error_code": code,
        "name": name,
        "topic_id": ZERO_UUID,
        "is_internal": is_internal_topic(name),
        "partitions": [],
        "topic_authorized_operations": -(2**31),
    }


@handles(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, 0)
def handle_describe_topic_partitions(
    ctx: RequestContext, request: DescribeTopicPartitionsRequest
) -> DescribeTopicPartitionsResponse:
    image = ctx.metadata_image()
    brokers = image.brokers
    listener = ctx.security.listener_name
    cursor = request.get("cursor")
    cursor_topic = cursor["topic_name"] if cursor is not None else ""
    fetch_all = not request["topics"]
    if fetch_all:
        names = {n for n in image.topics_by_name if n >= cursor_topic}
    else:
        names = {t["name"] for t in request["topics"] if t["name"] >= cursor_topic}
        if cursor is not None and cursor_topic not in names:
            # Kafka throws InvalidRequestException: the whole response carries the error.
            return _error_response(request, ErrorCode.INVALID_REQUEST)
    limit = min(ctx.services.config.get("max.request.partition.size.limit"), request["response_partition_limit"])
    remaining = limit
    topics: list[DescribeTopicPartitionsResponseTopic] = []
    next_cursor: Cursor | None = None
    for name in sorted(names):
        if remaining <= 0:
            if remaining == 0:
                next_cursor = {"topic_name": name, "partition_index": 0}
            break
        topic = image.topics_by_name.get(name)
        if topic is None:
            if not fetch_all:
                topics.append(_missing_topic(name))
            continue
        start = cursor["partition_index"] if cursor is not None and name == cursor_topic else 0
        partitions, next_index = _partitions(topic, brokers, listener, start, remaining)
        topics.append(
            {
                "error_code": ErrorCode.NONE,
                "name": name,
                "topic_id": topic.topic_id,
                "is_internal": is_internal_topic(name),
                "partitions": partitions,
                "topic_authorized_operations": TOPIC_OPERATIONS,
            }
        )
        if next_index != -1:
            next_cursor = {"topic_name": name, "partition_index": next_index}
            break
        remaining -= len(partitions)
    return {"throttle_time_ms": 0, "topics": topics, "next_cursor": next_cursor}


def _error_response(request: DescribeTopicPartitionsRequest, code: ErrorCode) -> DescribeTopicPartitionsResponse:
    """Kafka's DescribeTopicPartitionsRequest.getErrorResponse: the error on every requested topic."""
    topics: list[DescribeTopicPartitionsResponseTopic] = [
        {"error_code": code, "name": t["name"], "topic_id": ZERO_UUID, "is_internal": False, "partitions": []}
        for t in request["topics"]
    ]
    return {"throttle_time_ms": 0, "topics": topics, "next_cursor": None}
