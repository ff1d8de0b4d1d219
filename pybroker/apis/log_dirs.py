"""DescribeLogDirs (35): the log directories of this broker with the partitions each holds and their
sizes, as `kafka-log-dirs --describe` shows them.

As Kafka's ReplicaManager.describeLogDirs: every log directory is listed (with its volume's total and
usable bytes from v4), each with the requested partitions it holds (all of them for a null topic
list); the offset lag of a current (non-future) log is max(high watermark - log end offset, 0).
pybroker has no AlterReplicaLogDirs, so no log is ever a future log.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from pybroker.apis import RequestContext, auth, handles
from pybroker.protocol.errors import ErrorCode
from pybroker.protocol.messages.api_keys import ApiKey

if TYPE_CHECKING:
    from pybroker.protocol.typed.admin import (
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
