"""Fetch (1): serve file ranges of the logs, long-polling until min_bytes arrive or max_wait_ms ends.

Incremental fetch sessions (KIP-227) are kept in ``fetch_session``: a full fetch with epoch 0
opens one, later fetches name only changed partitions and get only partitions with news.  A full
response always lists every requested partition (pitfall 7).  Long polls wait on the partitions'
append notifications, never on a timer loop.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import TYPE_CHECKING

from pybroker.apis import RequestContext, auth, handles
from pybroker.apis.fetch_session import (
    FINAL_EPOCH,
    INVALID_SESSION_ID,
    FetchContext,
    FetchItem,
    PartitionKey,
    PartitionResult,
    SessionError,
)
from pybroker.protocol.errors import ErrorCode, KafkaError
from pybroker.protocol.messages.api_keys import ApiKey
from pybroker.replication.replica_manager import EMPTY, FetchPartitionStatus

if TYPE_CHECKING:
    from pybroker.protocol.typed.fetch import (
        FetchableTopicResponse,
        FetchRequest,
        FetchResponse,
        FetchResponsePartitionData,
    )

log = logging.getLogger(__name__)

READ_COMMITTED = 1


def _partition_resp(index: int, code: ErrorCode = ErrorCode.NONE) -> FetchResponsePartitionData:
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


def _requested(request: FetchRequest, by_id: bool) -> tuple[list[FetchItem], list[PartitionKey]]:
    """The partitions this request names, and those it asks its session to forget."""
    items = [
        FetchItem(
            (t["topic_id"] if by_id else t["topic"], fp["partition"]),
            fp["fetch_offset"],
            fp["partition_max_bytes"],
            fp.get("current_leader_epoch", -1),
        )
        for t in request["topics"]
        for fp in t["partitions"]
    ]
    forgotten = [
        (t["topic_id"] if by_id else t["topic"], i)
        for t in request.get("forgotten_topics_data") or ()
        for i in t["partitions"]
    ]
    return items, forgotten


def _resolve(
    ctx: RequestContext, items: list[FetchItem], by_id: bool, follower: bool = False
) -> tuple[list[FetchResponsePartitionData], list[FetchPartitionStatus]]:
    """A response entry per item (errors for unknown or unauthorized partitions) and the partitions to read."""
    rm = ctx.replica_manager
    image = ctx.metadata_image() if by_id else None
    entries: list[FetchResponsePartitionData] = []
    wanted: list[FetchPartitionStatus] = []
    missing = ErrorCode.UNKNOWN_TOPIC_ID if by_id else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    names: list[str | None] = []
    for item in items:
        named_by = item.key[0]
        if isinstance(named_by, str):  # by name (v12 and older)
            names.append(named_by)
        else:  # by id (v13+): the image's name for it, if any
            t = image.topics_by_id.get(named_by) if image is not None else None
            names.append(t.name if t is not None else None)
    # Kafka: a follower needs ClusterAction on the cluster, a consumer Read on each topic.
    if follower:
        unauthorized = frozenset() if auth.authorize_cluster(ctx, auth.CLUSTER_ACTION) else frozenset(names)
    else:
        unauthorized = auth.denied(ctx, auth.READ, auth.TOPIC, names)
    for item, topic in zip(items, names, strict=True):
        idx = item.key[1]
        if topic is None:
            entries.append(_partition_resp(idx, missing))
            continue
        if topic in unauthorized:
            entries.append(_partition_resp(idx, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
            continue
        try:
            p = rm.get_partition_or_error(topic, idx)
        except KafkaError as e:
            code = missing if e.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION else e.code
            entries.append(_partition_resp(idx, code))
            continue
        resp = _partition_resp(idx)
        entries.append(resp)
        wanted.append(FetchPartitionStatus(p, item.fetch_offset, item.max_bytes, item.leader_epoch, resp))
    return entries, wanted


def _result(resp: FetchResponsePartitionData) -> PartitionResult:
    records = resp["records"]
    size = records.size if hasattr(records, "size") else len(records)
    return PartitionResult(resp["error_code"], resp["high_watermark"], resp["log_start_offset"], size)


def _topics_out(
    items: list[FetchItem], entries: list[FetchResponsePartitionData], include: list[bool], by_id: bool
) -> list[FetchableTopicResponse]:
    """Included entries grouped by topic; a topic met again after another gets a second entry,
    as Kafka's FetchResponse does when a session's order interleaves topics."""
    topics: list[FetchableTopicResponse] = []
    last = None
    partitions: list[FetchResponsePartitionData] = []
    for item, entry, keep in zip(items, entries, include, strict=True):
        if not keep:
            continue
        topic = item.key[0]
        if not topics or last != topic:
            last, partitions = topic, []
            if by_id:
                assert not isinstance(topic, str)
                topics.append({"topic_id": topic, "partitions": partitions})
            else:
                assert isinstance(topic, str)
                topics.append({"topic": topic, "partitions": partitions})
        partitions.append(entry)
    return topics


def _respond(fctx: FetchContext, entries: list[FetchResponsePartitionData], by_id: bool) -> FetchResponse:
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


def _session_error(e: SessionError) -> FetchResponse:
    log.debug("fetch session error: %s", e)
    return {"throttle_time_ms": 0, "error_code": e.code, "session_id": 0, "responses": []}


# v17 (KIP-853) and v18 (KIP-1166: a follower's high watermark, tagged) change nothing a consumer
# sends or reads; the response is the same from v16.
@handles(ApiKey.FETCH, 4, 18)
def handle_fetch(ctx: RequestContext, request: FetchRequest) -> FetchResponse | Awaitable[FetchResponse]:
    replica_id = (
        request["replica_state"]["replica_id"] if ctx.version >= 15 else request.get("replica_id", -1)
    )
    by_id = ctx.version >= 13
    requested, forgotten = _requested(request, by_id)
    # Before v7 there are no sessions: the request is its own full, sessionless fetch.
    session_id = request.get("session_id", INVALID_SESSION_ID) if ctx.version >= 7 else INVALID_SESSION_ID
    epoch = request.get("session_epoch", FINAL_EPOCH) if ctx.version >= 7 else FINAL_EPOCH
    try:
        fctx = ctx.services.fetch_sessions.context(session_id, epoch, by_id, requested, forgotten)
    except SessionError as e:
        return _session_error(e)
    read_committed = request.get("isolation_level", 0) == READ_COMMITTED
    entries, wanted = _resolve(ctx, fctx.items, by_id, replica_id >= 0)
    waiting = ctx.replica_manager.fetch_messages(
        wanted,
        max_bytes=request.get("max_bytes", 0x7FFFFFFF),
        min_bytes=request["min_bytes"],
        max_wait_ms=request["max_wait_ms"],
        read_committed=read_committed,
        replica_id=replica_id,
    )
    if waiting is None:
        _count_bytes_out(ctx.metrics, wanted)
        return _respond(fctx, entries, by_id)
    return _respond_after(ctx, waiting, fctx, entries, by_id, wanted)


def _count_bytes_out(metrics, wanted: list[FetchPartitionStatus]) -> None:
    # Every partition with records is in the response, session or not (KIP-227 leaves out only
    # partitions with nothing new), so this counts what is sent.
    for w in wanted:
        records = w.resp["records"]
        if records is not EMPTY:
            metrics.fetched(w.partition.topic, records.size)


async def _respond_after(
    ctx: RequestContext,
    waiting: Awaitable[None],
    fctx: FetchContext,
    entries: list[FetchResponsePartitionData],
    by_id: bool,
    wanted: list[FetchPartitionStatus],
) -> FetchResponse:
    await waiting  # the long poll: the entries are filled when it ends
    _count_bytes_out(ctx.metrics, wanted)
    return _respond(fctx, entries, by_id)
