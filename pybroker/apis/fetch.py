"""Fetch (1): serve file ranges of the logs, long-polling until min_bytes arrive or max_wait_ms ends.

Incremental fetch sessions (KIP-227) are kept in ``fetch_session``: a full fetch with epoch 0
opens one, later fetches name only changed partitions and get only partitions with news.  A full
response always lists every requested partition (pitfall 7).  Long polls wait on the partitions'
append notifications, never on a timer loop.
"""

from __future__ import annotations

import asyncio
import logging
import time

from pybroker.apis import RequestContext, handles
from pybroker.apis.fetch_session import (
    FINAL_EPOCH,
    INVALID_SESSION_ID,
    FetchContext,
    FetchItem,
    PartitionKey,
    PartitionResult,
    SessionError,
)
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


def _requested(request: dict, by_id: bool) -> tuple[list[FetchItem], list[PartitionKey]]:
    """The partitions this request names, and those it asks its session to forget."""
    field = "topic_id" if by_id else "topic"
    items = [
        FetchItem(
            (t[field], fp["partition"]),
            fp["fetch_offset"],
            fp["partition_max_bytes"],
            fp.get("current_leader_epoch", -1),
        )
        for t in request["topics"]
        for fp in t["partitions"]
    ]
    forgotten = [(t[field], i) for t in request.get("forgotten_topics_data") or () for i in t["partitions"]]
    return items, forgotten


def _resolve(ctx: RequestContext, items: list[FetchItem], by_id: bool) -> tuple[list[dict], list[_Wanted]]:
    """A response entry per item (errors for unknown partitions) and the partitions to read."""
    b = ctx.broker
    entries: list[dict] = []
    wanted: list[_Wanted] = []
    missing = ErrorCode.UNKNOWN_TOPIC_ID if by_id else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    for item in items:
        topic, idx = item.key
        if by_id:
            rec = b.metadata.topics_by_id.get(topic)
            topic = rec.name if rec is not None else None
        p = b.partition(topic, idx) if topic is not None else None
        if p is None:
            entries.append(_partition_resp(idx, missing))
            continue
        resp = _partition_resp(idx)
        entries.append(resp)
        wanted.append(_Wanted(p, item.fetch_offset, item.max_bytes, item.leader_epoch, resp))
    return entries, wanted


def _result(resp: dict) -> PartitionResult:
    records = resp["records"]
    size = records.size if hasattr(records, "size") else len(records)
    return PartitionResult(resp["error_code"], resp["high_watermark"], resp["log_start_offset"], size)


def _topics_out(items: list[FetchItem], entries: list[dict], include: list[bool], by_id: bool) -> list[dict]:
    """Included entries grouped by topic; a topic met again after another gets a second entry,
    as Kafka's FetchResponse does when a session's order interleaves topics."""
    field = "topic_id" if by_id else "topic"
    topics: list[dict] = []
    for item, entry, keep in zip(items, entries, include, strict=True):
        if not keep:
            continue
        topic = item.key[0]
        if not topics or topics[-1][field] != topic:
            topics.append({field: topic, "partitions": []})
        topics[-1]["partitions"].append(entry)
    return topics


def _respond(fctx: FetchContext, entries: list[dict], by_id: bool) -> dict:
    try:
        session_id, include = fctx.finish([_result(e) for e in entries])
    except SessionError as e:
        return _session_error(e)
    return {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NONE,
        "session_id": session_id,
        "responses": _topics_out(fctx.items, entries, include, by_id),
    }


def _session_error(e: SessionError) -> dict:
    log.debug("fetch session error: %s", e)
    return {"throttle_time_ms": 0, "error_code": e.code, "session_id": 0, "responses": []}


def _read_all(
    broker, wanted: list[_Wanted], max_bytes: int, read_committed: bool, replica_id: int = -1
) -> tuple[int, bool]:
    """Fill every response entry; returns (bytes gathered, whether any partition has an error)."""
    now_ms = int(time.time() * 1000)
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
        if replica_id >= 0:
            # A follower's fetch: up to the log end, its position recorded (replication/partition).
            budget = min(w.max_bytes, max_bytes - total)
            if budget <= 0 and total > 0:
                continue
            r = p.fetch_for_follower(
                replica_id, w.fetch_offset, w.leader_epoch, max(budget, 0), -1, now_ms, total == 0
            )
            resp["error_code"] = r.error
            resp["high_watermark"] = r.high_watermark
            resp["last_stable_offset"] = r.last_stable_offset
            resp["log_start_offset"] = r.log_start_offset
            resp["records"] = r.records if r.records is not None and r.records.size else EMPTY
            errored |= r.error != ErrorCode.NONE
            total += len(resp["records"])
            continue
        resp["high_watermark"] = p.high_watermark
        resp["last_stable_offset"] = p.last_stable_offset
        resp["log_start_offset"] = p.log_start_offset
        resp["aborted_transactions"] = [] if read_committed else None
        resp["records"] = EMPTY
        error = p.check_leader(w.leader_epoch)
        if error != ErrorCode.NONE:
            resp["error_code"] = error
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
            if read_committed:
                # The consumer drops the batches of these producers from their first offset on.
                resp["aborted_transactions"] = [
                    {"producer_id": a.producer_id, "first_offset": a.first_offset}
                    for a in p.log.collect_aborted_transactions(w.fetch_offset, upper)
                ]
    return total, errored


@handles(1, 4, 16)
def handle_fetch(ctx: RequestContext, request: dict):
    replica_id = (
        request["replica_state"]["replica_id"] if ctx.version >= 15 else request.get("replica_id", -1)
    )
    by_id = ctx.version >= 13
    requested, forgotten = _requested(request, by_id)
    # Before v7 there are no sessions: the request is its own full, sessionless fetch.
    session_id = request.get("session_id", INVALID_SESSION_ID) if ctx.version >= 7 else INVALID_SESSION_ID
    epoch = request.get("session_epoch", FINAL_EPOCH) if ctx.version >= 7 else FINAL_EPOCH
    try:
        fctx = ctx.broker.fetch_sessions.context(session_id, epoch, by_id, requested, forgotten)
    except SessionError as e:
        return _session_error(e)
    read_committed = request.get("isolation_level", 0) == READ_COMMITTED
    entries, wanted = _resolve(ctx, fctx.items, by_id)
    max_bytes = request.get("max_bytes", 0x7FFFFFFF)
    total, errored = _read_all(ctx.broker, wanted, max_bytes, read_committed, replica_id)
    max_wait = request["max_wait_ms"]
    if total >= request["min_bytes"] or max_wait <= 0 or errored or not wanted:
        _count_bytes_out(ctx.metrics, wanted)
        return _respond(fctx, entries, by_id)
    return _long_poll(
        ctx,
        fctx,
        entries,
        by_id,
        wanted,
        max_bytes,
        read_committed,
        request["min_bytes"],
        max_wait,
        replica_id,
    )


def _count_bytes_out(metrics, wanted: list[_Wanted]) -> None:
    # Every partition with records is in the response, session or not (KIP-227 leaves out only
    # partitions with nothing new), so this counts what is sent.
    for w in wanted:
        records = w.resp["records"]
        if records is not EMPTY:
            metrics.fetched(w.partition.topic, records.size)


async def _long_poll(
    ctx: RequestContext,
    fctx: FetchContext,
    entries: list[dict],
    by_id: bool,
    wanted: list[_Wanted],
    max_bytes: int,
    read_committed: bool,
    min_bytes: int,
    max_wait_ms: int,
    replica_id: int,
) -> dict:
    broker = ctx.broker
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
            total, errored = _read_all(broker, wanted, max_bytes, read_committed, replica_id)
            if total >= min_bytes or errored:
                _count_bytes_out(ctx.metrics, wanted)
                return _respond(fctx, entries, by_id)
        _read_all(broker, wanted, max_bytes, read_committed, replica_id)
        _count_bytes_out(ctx.metrics, wanted)
        return _respond(fctx, entries, by_id)
    finally:
        for p in partitions:
            p.remove_data_listener(woken.set)
