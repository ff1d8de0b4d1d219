"""ListOffsets (2): earliest, latest, max timestamp, earliest-local, offset by timestamp; and
OffsetForLeaderEpoch (23): where a leader epoch ends, from the log's leader-epoch cache."""

from __future__ import annotations

from pybroker.apis import RequestContext, handles
from pybroker.protocol.errors import ErrorCode, KafkaError

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3  # KIP-734, v7+
EARLIEST_LOCAL = -4  # KIP-405, v8+; without tiered storage it is the log start offset
READ_COMMITTED = 1


def _lookup(p, timestamp: int, read_committed: bool, version: int) -> tuple[ErrorCode, int, int]:
    """(error, timestamp, offset) as ListOffsets answers them."""
    upper = p.fetch_upper_bound(read_committed)
    if timestamp == LATEST:
        return ErrorCode.NONE, -1, upper
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        if timestamp == EARLIEST_LOCAL and version < 8:
            return ErrorCode.UNSUPPORTED_VERSION, -1, -1
        return ErrorCode.NONE, -1, p.log_start_offset
    if timestamp == MAX_TIMESTAMP:
        if version < 7:
            return ErrorCode.UNSUPPORTED_VERSION, -1, -1
        found = p.log.offset_of_max_timestamp()
        if found is None or found[0] >= upper:
            return ErrorCode.NONE, -1, -1
        return ErrorCode.NONE, found[1], found[0]
    if timestamp < 0:
        return ErrorCode.UNSUPPORTED_VERSION, -1, -1
    found = p.log.offset_for_timestamp(timestamp)
    if found is None or found[0] >= upper:
        return ErrorCode.NONE, -1, -1  # no record at or after that time: offset -1 (Spark relies on it)
    return ErrorCode.NONE, found[1], found[0]


@handles(2, 1, 8)
def handle_list_offsets(ctx: RequestContext, request: dict) -> dict:
    rm = ctx.replica_manager
    read_committed = request.get("isolation_level", 0) == READ_COMMITTED
    topics = []
    for t in request["topics"]:
        parts = []
        for rp in t["partitions"]:
            idx = rp["partition_index"]
            out = {
                "partition_index": idx,
                "error_code": ErrorCode.NONE,
                "timestamp": -1,
                "offset": -1,
                "leader_epoch": -1,
            }
            try:
                p = rm.get_partition_or_error(t["name"], idx)
            except KafkaError as e:
                out["error_code"] = e.code
            else:
                epoch = rp.get("current_leader_epoch", -1)
                if epoch >= 0 and epoch != p.leader_epoch:
                    out["error_code"] = (
                        ErrorCode.FENCED_LEADER_EPOCH
                        if epoch < p.leader_epoch
                        else ErrorCode.UNKNOWN_LEADER_EPOCH
                    )
                else:
                    code, ts, off = _lookup(p, rp["timestamp"], read_committed, ctx.version)
                    out.update(error_code=code, timestamp=ts, offset=off)
                    if code == ErrorCode.NONE and off >= 0 and ctx.version >= 4:  # the field exists from v4
                        out["leader_epoch"] = p.leader_epoch
            parts.append(out)
        topics.append({"name": t["name"], "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}


@handles(23, 2, 4)
def handle_offset_for_leader_epoch(ctx: RequestContext, request: dict) -> dict:
    """Consumers validate their position after a leader change (librdkafka sends v2, Java v3+ when
    advertised); followers will use it to find their truncation point."""
    rm = ctx.replica_manager
    topics = []
    for t in request["topics"]:
        parts = []
        for rp in t["partitions"]:
            idx = rp["partition"]
            out = {"error_code": ErrorCode.NONE, "partition": idx, "leader_epoch": -1, "end_offset": -1}
            try:
                p = rm.get_partition_or_error(t["topic"], idx)
            except KafkaError as e:
                out["error_code"] = e.code
            else:
                current = rp.get("current_leader_epoch", -1)
                if current >= 0 and current != p.leader_epoch:
                    out["error_code"] = (
                        ErrorCode.FENCED_LEADER_EPOCH
                        if current < p.leader_epoch
                        else ErrorCode.UNKNOWN_LEADER_EPOCH
                    )
                else:
                    epoch, end = p.log.leader_epochs.end_offset_for(rp["leader_epoch"], p.log_end_offset)
                    out.update(leader_epoch=epoch, end_offset=end)
            parts.append(out)
        topics.append({"topic": t["topic"], "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}
