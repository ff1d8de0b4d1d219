"""Fetch (1): serve file ranges of the logs, long-polling until min_bytes arrive or max_wait_ms ends.

Fetch sessions (KIP-227) are declined: every response carries session_id 0, so clients keep
sending full fetches, and a full response always lists every requested partition (pitfall 7).
Long polls wait on the partitions' append notifications, never on a timer loop.
"""

from __future__ import annotations

import asyncio
import logging
import uuid

from pybroker.apis import RequestContext, handles
from pybroker.protocol.errors import ErrorCode
from pybroker.storage.errors import OffsetOutOfRangeError

log = logging.getLogger(__name__)

READ_COMMITTED = 1
EMPTY = b""


class _Wanted:
    """One requested partition and the response entry it fills."""

    __slots__ = ("partition", "fetch_offset", "max_bytes", "leader_epoch", "resp")

    def __init__(self, partition, fetch_offset: int, max_bytes: int, leader_epoch: int, resp: dict):
        self.partition = partition
        self.fetch_offset = fetch_offset
        self.max_bytes = max_bytes
        self.leader_epoch = leader_epoch
        self.resp = resp


def _partition_resp(index: int, code: ErrorCode = ErrorCode.NONE) -> dict:
    return {
        "partition_index": index,
        "error_code": code,
        "high_watermark": -1,
        "last_stable_offset": -1,
        "log_start_offset": -1,
        "aborted_transactions": None,
        "preferred_read_replica": -1,
        "records": EMPTY,
    }


def _plan(ctx: RequestContext, request: dict) -> tuple[list[dict], list[_Wanted]]:
    b = ctx.broker
    by_id = ctx.version >= 13
    topics_out: list[dict] = []
    wanted: list[_Wanted] = []
    for t in request["topics"]:
        if by_id:
            tid: uuid.UUID = t["topic_id"]
            rec = b.metadata.topics_by_id.get(tid)
            name = rec.name if rec is not None else None
            topic_out = {"topic_id": tid, "partitions": []}
            missing = ErrorCode.UNKNOWN_TOPIC_ID
        else:
            name = t["topic"]
            topic_out = {"topic": name, "partitions": []}
            missing = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        for fp in t["partitions"]:
            idx = fp["partition"]
            p = b.partition(name, idx) if name is not None else None
            if p is None:
                topic_out["partitions"].append(_partition_resp(idx, missing))
                continue
            resp = _partition_resp(idx)
            topic_out["partitions"].append(resp)
            wanted.append(
                _Wanted(
                    p, fp["fetch_offset"], fp["partition_max_bytes"], fp.get("current_leader_epoch", -1), resp
                )
            )
        topics_out.append(topic_out)
    return topics_out, wanted


def _read_all(broker, wanted: list[_Wanted], max_bytes: int, read_committed: bool) -> tuple[int, bool]:
    """Fill every response entry; returns (bytes gathered, whether any partition has an error)."""
    total = 0
    errored = False
    for w in wanted:
        p = w.partition
        resp = w.resp
        if broker.partitions.get((p.topic, p.index)) is not p:
            # Deleted (or recreated) while this fetch waited: its log is gone.
            resp["error_code"] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            resp["records"] = EMPTY
            errored = True
            continue
        resp["high_watermark"] = p.high_watermark
        resp["last_stable_offset"] = p.last_stable_offset
        resp["log_start_offset"] = p.log_start_offset
        resp["aborted_transactions"] = [] if read_committed else None
        resp["records"] = EMPTY
        if w.leader_epoch >= 0 and w.leader_epoch != p.leader_epoch:
            resp["error_code"] = (
                ErrorCode.FENCED_LEADER_EPOCH
                if w.leader_epoch < p.leader_epoch
                else ErrorCode.UNKNOWN_LEADER_EPOCH
            )
            errored = True
            continue
        upper = p.fetch_upper_bound(read_committed)
        if w.fetch_offset == upper and w.fetch_offset >= p.log_start_offset:
            continue
        budget = min(w.max_bytes, max_bytes - total)
        if budget <= 0 and total > 0:
            continue
        try:
            # KIP-74: the first partition with data returns at least one whole batch, whatever the limits.
            sl = p.log.read(w.fetch_offset, max(budget, 0), upper, total == 0)
        except OffsetOutOfRangeError:
            resp["error_code"] = ErrorCode.OFFSET_OUT_OF_RANGE
            errored = True
            continue
        resp["error_code"] = ErrorCode.NONE
        if sl is not None and sl.size > 0:
            resp["records"] = sl
            total += sl.size
    return total, errored


@handles(1, 4, 16)
def handle_fetch(ctx: RequestContext, request: dict):
    replica_id = (
        request["replica_state"]["replica_id"] if ctx.version >= 15 else request.get("replica_id", -1)
    )
    session_epoch = request.get("session_epoch", -1)
    if request.get("session_id", 0) != 0 or session_epoch > 0:
        # We never hand out a session, so an incremental fetch names one we do not know.
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
            "session_id": 0,
            "responses": [],
        }
    if replica_id >= 0:
        log.debug("follower fetch from replica %d served as a consumer fetch", replica_id)
    read_committed = request.get("isolation_level", 0) == READ_COMMITTED
    topics_out, wanted = _plan(ctx, request)
    response = {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "session_id": 0, "responses": topics_out}
    max_bytes = request.get("max_bytes", 0x7FFFFFFF)
    total, errored = _read_all(ctx.broker, wanted, max_bytes, read_committed)
    max_wait = request["max_wait_ms"]
    if total >= request["min_bytes"] or max_wait <= 0 or errored or not wanted:
        return response
    return _long_poll(ctx.broker, response, wanted, max_bytes, read_committed, request["min_bytes"], max_wait)


async def _long_poll(
    broker,
    response: dict,
    wanted: list[_Wanted],
    max_bytes: int,
    read_committed: bool,
    min_bytes: int,
    max_wait_ms: int,
) -> dict:
    loop = asyncio.get_running_loop()
    woken = asyncio.Event()
    partitions = {id(w.partition): w.partition for w in wanted}.values()
    for p in partitions:
        p.add_data_listener(woken.set)
    deadline = loop.time() + max_wait_ms / 1000
    try:
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            try:
                await asyncio.wait_for(woken.wait(), remaining)
            except TimeoutError:
                break
            woken.clear()
            total, errored = _read_all(broker, wanted, max_bytes, read_committed)
            if total >= min_bytes or errored:
                return response
        _read_all(broker, wanted, max_bytes, read_committed)
        return response
    finally:
        for p in partitions:
            p.remove_data_listener(woken.set)
