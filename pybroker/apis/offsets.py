"""ListOffsets (2): earliest, latest, max timestamp, earliest-local, latest-tiered, earliest pending
upload, offset by timestamp; and OffsetForLeaderEpoch (23): where a leader epoch ends, from the log's
leader-epoch cache."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pybroker.apis import RequestContext, auth, handles
from pybroker.protocol.errors import ErrorCode, KafkaError
from pybroker.protocol.messages.api_keys import ApiKey

if TYPE_CHECKING:
    from pybroker.protocol.typed.offsets import (
        EpochEndOffset,
        ListOffsetsPartitionResponse,
        ListOffsetsRequest,
        ListOffsetsResponse,
        ListOffsetsTopicResponse,
        OffsetForLeaderEpochRequest,
        OffsetForLeaderEpochResponse,
        OffsetForLeaderTopicResult,
    )

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3  # KIP-734, v7+
EARLIEST_LOCAL = -4  # KIP-405, v8+; without tiered storage it is the log start offset
LATEST_TIERED = -5  # KIP-1005, v9+
EARLIEST_PENDING_UPLOAD = -6  # KIP-1023, v11+
# Kafka's ReplicaManager.timestampMinSupportedVersion: a special timestamp below its version, or one
# it does not know, is UNSUPPORTED_VERSION.
SPECIAL_TIMESTAMP_MIN_VERSION = {
    EARLIEST: 1,
    LATEST: 1,
    MAX_TIMESTAMP: 7,
    EARLIEST_LOCAL: 8,
    LATEST_TIERED: 9,
    EARLIEST_PENDING_UPLOAD: 11,
}
READ_COMMITTED = 1
CONSUMER_REPLICA_ID = -1


def lookup_offset(
    p, timestamp: int, read_committed: bool, version: int, from_replica: bool = False
) -> tuple[ErrorCode, int, int]:
    """(error, timestamp, offset) as ListOffsets answers them."""
    if timestamp < 0 and version < SPECIAL_TIMESTAMP_MIN_VERSION.get(timestamp, 1 << 15):
        return ErrorCode.UNSUPPORTED_VERSION, -1, -1
    upper = p.log_end_offset if from_replica else p.fetch_upper_bound(read_committed)
    # KIP-207 (Kafka's Partition.fetchOffsetForTimestamp): a new leader whose high watermark has not
    # reached the start of its epoch does not know yet what the old leader had committed; "latest" (or a
    # lookup that finds nothing below it) would move backwards, so a client is told to retry.
    start = p.leader_epoch_start_offset
    lagging = not from_replica and start is not None and start > p.high_watermark
    if timestamp == LATEST:
        return (ErrorCode.OFFSET_NOT_AVAILABLE, -1, -1) if lagging else (ErrorCode.NONE, -1, upper)
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return ErrorCode.NONE, -1, p.log_start_offset
    if timestamp in (LATEST_TIERED, EARLIEST_PENDING_UPLOAD):
        # Kafka's UnifiedLog.fetchOffsetByTimestamp on a log without remote storage: offset -1,
        # leader epoch -1 (nothing is tiered, nothing waits for upload).
        return ErrorCode.NONE, -1, -1
    if timestamp == MAX_TIMESTAMP:
        found = p.log.offset_of_max_timestamp()
    else:
        found = p.log.offset_for_timestamp(timestamp)
    if found is None or found[0] >= upper:
        if lagging:
            return ErrorCode.OFFSET_NOT_AVAILABLE, -1, -1
        return ErrorCode.NONE, -1, -1  # no record at or after that time: offset -1 (Spark relies on it)
    return ErrorCode.NONE, found[1], found[0]


@handles(ApiKey.LIST_OFFSETS, 1, 11)
def handle_list_offsets(ctx: RequestContext, request: ListOffsetsRequest) -> ListOffsetsResponse:
    rm = ctx.replica_manager
    read_committed = request.get("isolation_level", 0) == READ_COMMITTED
    unauthorized = auth.denied(ctx, auth.DESCRIBE, auth.TOPIC, (t["name"] for t in request["topics"]))
    # A follower (or a debugging tool) reads "latest" as the log end offset (Kafka: no isolation
    # level unless the request comes from a consumer).
    from_replica = request["replica_id"] != CONSUMER_REPLICA_ID
    topics: list[ListOffsetsTopicResponse] = []
    for t in request["topics"]:
        parts: list[ListOffsetsPartitionResponse] = []
        for rp in t["partitions"]:
            idx = rp["partition_index"]
            out: ListOffsetsPartitionResponse = {
                "partition_index": idx,
                "error_code": ErrorCode.NONE,
                "timestamp": -1,
                "offset": -1,
                "leader_epoch": -1,
            }
            timestamp = rp["timestamp"]
            try:
                if t["name"] in unauthorized:
                    raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                # Kafka's ReplicaManager.fetchOffset refuses a special timestamp newer than the version
                # before it looks for the partition: any broker, leader or not, answers UNSUPPORTED_VERSION.
                if timestamp < 0 and ctx.version < SPECIAL_TIMESTAMP_MIN_VERSION.get(timestamp, 1 << 15):
                    raise KafkaError(ErrorCode.UNSUPPORTED_VERSION)
                p = rm.get_partition_or_error(t["name"], idx)
            except KafkaError as e:
                out["error_code"] = e.code
            else:
                error = p.check_leader(rp.get("current_leader_epoch", -1))
                if error != ErrorCode.NONE:
                    out["error_code"] = error
                else:
                    code, ts, off = lookup_offset(p, timestamp, read_committed, ctx.version, from_replica)
                    out.update({"error_code": code, "timestamp": ts, "offset": off})
                    if code == ErrorCode.NONE and off >= 0 and ctx.version >= 4:  # the field exists from v4
                        out["leader_epoch"] = p.leader_epoch
            parts.append(out)
        topics.append({"name": t["name"], "partitions": parts})
    return {"throttle_time_ms": 0, "topics": auth.unauthorized_last(topics, unauthorized, "name")}


@handles(ApiKey.OFFSET_FOR_LEADER_EPOCH, 2, 4)
def handle_offset_for_leader_epoch(
    ctx: RequestContext, request: OffsetForLeaderEpochRequest
) -> OffsetForLeaderEpochResponse:
    """Consumers validate their position after a leader change (librdkafka sends v2, Java v3+ when
    advertised); followers will use it to find their truncation point."""
    rm = ctx.replica_manager
    # Kafka: ClusterAction on the cluster (a follower), else Describe on each topic.
    unauthorized: frozenset[str] = frozenset()
    if not auth.authorize_cluster(ctx, auth.CLUSTER_ACTION, log_denied=False):
        unauthorized = auth.denied(ctx, auth.DESCRIBE, auth.TOPIC, (t["topic"] for t in request["topics"]))
    topics: list[OffsetForLeaderTopicResult] = []
    for t in request["topics"]:
        parts: list[EpochEndOffset] = []
        for rp in t["partitions"]:
            idx = rp["partition"]
            out: EpochEndOffset = {"error_code": ErrorCode.NONE, "partition": idx, "leader_epoch": -1, "end_offset": -1}
            try:
                if t["topic"] in unauthorized:
                    raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                p = rm.get_partition_or_error(t["topic"], idx)
            except KafkaError as e:
                out["error_code"] = e.code
            else:
                error = p.check_leader(rp.get("current_leader_epoch", -1))
                if error != ErrorCode.NONE:
                    out["error_code"] = error
                else:
                    epoch, end = p.log.end_offset_for_epoch(rp["leader_epoch"])
                    out.update({"leader_epoch": epoch, "end_offset": end})
            parts.append(out)
        topics.append({"topic": t["topic"], "partitions": parts})
    return {"throttle_time_ms": 0, "topics": auth.unauthorized_last(topics, unauthorized, "topic")}
