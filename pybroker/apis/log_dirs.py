"""DescribeLogDirs (35): the log directories of this broker with the partitions each holds and their
sizes, as `kafka-log-dirs --describe` shows them; AlterReplicaLogDirs (34): move a replica to another
of this broker's log dirs (replication/log_dir_mover.py).

As Kafka's ReplicaManager.describeLogDirs: every log directory is listed (with its volume's total and
usable bytes from v4), each with the requested partitions it holds (all of them for a null topic
list); the offset lag of a current (non-future) log is max(high watermark - log end offset, 0), of a
future log (a replica being moved there, IsFutureKey) how far its copy is behind the current log.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from pybroker.apis import RequestContext, auth, handles
from pybroker.protocol.errors import ErrorCode
from pybroker.protocol.messages.api_keys import ApiKey
from pybroker.storage.errors import StorageError

if TYPE_CHECKING:
    from pybroker.metadata.image import MetadataImage
    from pybroker.protocol.typed.admin import (
        AlterReplicaLogDirPartitionResult,
        AlterReplicaLogDirsRequest,
        AlterReplicaLogDirsResponse,
        AlterReplicaLogDirTopicResult,
        DescribeLogDirsPartition,
        DescribeLogDirsRequest,
        DescribeLogDirsResponse,
        DescribeLogDirsResult,
    )

DESCRIBE_LOG_DIRS = ApiKey.DESCRIBE_LOG_DIRS


# v5 (KIP-1066) adds is_cordoned: a cordoned directory takes no new partitions.  pybroker has no
# cordoning (log.dirs.cordoned), so every directory answers false, as Kafka's default.
@handles(DESCRIBE_LOG_DIRS, 1, 5)
def handle_describe_log_dirs(ctx: RequestContext, request: DescribeLogDirsRequest) -> DescribeLogDirsResponse:
    b = ctx.services
    if not auth.authorize_cluster(ctx, auth.DESCRIBE):  # Kafka: no directories, the error (v3+) at the top
        return {"throttle_time_ms": 0, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "results": []}
    wanted: set[tuple[str, int]] | None = None
    if request["topics"] is not None:
        wanted = {(t["topic"], p) for t in request["topics"] for p in t["partitions"]}
    by_dir: dict[Path, dict[str, list[DescribeLogDirsPartition]]] = {Path(d).resolve(): {} for d in b.log_dirs}
    for (topic, index), partition in sorted(b.replica_manager.partitions.items()):
        if wanted is not None and (topic, index) not in wanted:
            continue
        log = partition.log
        log_dir = Path(log.directory).resolve().parent
        by_dir.setdefault(log_dir, {}).setdefault(topic, []).append(
            {
                "partition_index": index,
                "partition_size": log.size_bytes,
                "offset_lag": max(partition.high_watermark - log.log_end_offset, 0),
                "is_future_key": False,
            }
        )
    mover = b.log_dir_mover
    for log_dir, future in mover.log_manager.future_logs() if mover is not None else ():
        key = (future.topic, future.partition)
        hosted = b.replica_manager.partitions.get(key)
        if hosted is None or (wanted is not None and key not in wanted):
            continue
        by_dir.setdefault(log_dir.resolve(), {}).setdefault(future.topic, []).append(
            {
                "partition_index": future.partition,
                "partition_size": future.size_bytes,
                "offset_lag": max(hosted.log.log_end_offset - future.log_end_offset, 0),
                "is_future_key": True,
            }
        )
    results: list[DescribeLogDirsResult] = []
    for log_dir, topics in by_dir.items():
        result: DescribeLogDirsResult = {
            "error_code": ErrorCode.NONE,
            "log_dir": str(log_dir),
            "topics": [{"name": name, "partitions": parts} for name, parts in sorted(topics.items())],
        }
        try:
            usage = shutil.disk_usage(log_dir)
            result.update({"total_bytes": usage.total, "usable_bytes": usage.free})
        except OSError:
            result.update({"error_code": ErrorCode.KAFKA_STORAGE_ERROR, "topics": []})
        results.append(result)
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "results": results}


# Kafka's KafkaApis.handleAlterReplicaLogDirsRequest and ReplicaManager.alterReplicaLogDirs, with the
# codes Apache Kafka 4.3.1 was measured to answer: a path that is not one of the configured log dirs
# (compared exactly) LOG_DIR_NOT_FOUND; a partition the cluster does not have UNKNOWN_TOPIC_OR_PARTITION;
# one this broker holds no replica of REPLICA_NOT_AVAILABLE; a dir that cannot take the copy
# KAFKA_STORAGE_ERROR.  NONE means the move is under way (or there was nothing to move).
@handles(ApiKey.ALTER_REPLICA_LOG_DIRS, 1, 2)
def handle_alter_replica_log_dirs(
    ctx: RequestContext, request: AlterReplicaLogDirsRequest
) -> AlterReplicaLogDirsResponse:
    b = ctx.services
    authorized = auth.authorize_cluster(ctx, auth.ALTER)
    results: dict[str, list[AlterReplicaLogDirPartitionResult]] = {}
    image = b.metadata_image()
    for entry in request["dirs"]:
        log_dir = b.log_dir_mover.log_manager.configured_log_dir(entry["path"]) if b.log_dir_mover else None
        for topic in entry["topics"]:
            for index in topic["partitions"]:
                if not authorized:
                    code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
                elif log_dir is None:
                    code = ErrorCode.LOG_DIR_NOT_FOUND
                else:
                    code = _alter(ctx, image, topic["name"], index, log_dir)
                results.setdefault(topic["name"], []).append({"partition_index": index, "error_code": code})
    topics: list[AlterReplicaLogDirTopicResult] = [
        {"topic_name": name, "partitions": parts} for name, parts in results.items()
    ]
    return {"throttle_time_ms": 0, "results": topics}


def _alter(ctx: RequestContext, image: MetadataImage, topic: str, index: int, log_dir: Path) -> ErrorCode:
    b = ctx.services
    assert b.log_dir_mover is not None
    if image.partition(topic, index) is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if b.replica_manager.get_partition(topic, index) is None:
        return ErrorCode.REPLICA_NOT_AVAILABLE
    try:
        b.log_dir_mover.alter(topic, index, log_dir)
    except StorageError:  # the destination cannot take the copy (logged by storage)
        return ErrorCode.KAFKA_STORAGE_ERROR
    return ErrorCode.NONE
