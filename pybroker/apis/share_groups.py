"""KIP-932 share groups: ShareGroupHeartbeat (76), ShareGroupDescribe (77), ShareFetch (78),
ShareAcknowledge (79), and the share group configs of IncrementalAlterConfigs (resource type GROUP).

The handlers translate between the wire and ``coordinator.share.manager.ShareGroupService`` (made on
first use and kept as ``BrokerServices.share_groups``). ShareFetch follows Kafka's KafkaApis/SharePartitionManager:
the share session's epoch is checked (0 opens a session, -1 closes it and releases the member's records),
piggybacked acknowledgements are applied first, then each partition's records are read from its next
fetch offset and acquired for the member; the batches go out whole and ``AcquiredRecords`` says which
offsets the member holds. With nothing to acquire the request waits up to MaxWaitMs for an append.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from pybroker.apis import RequestContext, auth, handles
from pybroker.apis.consumer_groups import _group_error
from pybroker.apis.groups import _client_host, _client_id
from pybroker.coordinator.share.manager import (
    FINAL_SESSION_EPOCH,
    INITIAL_SESSION_EPOCH,
    SHARE_GROUP_CONFIG_KEYS,
    ShareGroupService,
    ShareSession,
    ShareStateUnavailable,
)
from pybroker.coordinator.share.share_partition import AcknowledgementBatch, SharePartition
from pybroker.coordinator.share.state_records import SharePartitionKey
from pybroker.coordinator.streams.manager import STREAMS_GROUP_CONFIG_KEYS
from pybroker.metadata.features import SHARE_VERSION
from pybroker.protocol.api import AUTHORIZED_OPERATIONS_OMITTED
from pybroker.protocol.errors import ErrorCode, KafkaError
from pybroker.protocol.messages.api_keys import ApiKey
from pybroker.storage.segment import whole_batch_headers

if TYPE_CHECKING:
    from pybroker.protocol.typed.fetch import AcknowledgementBatch as WireAcknowledgementBatch
    from pybroker.protocol.typed.fetch import (
        AcquiredRecords,
        LeaderIdAndEpoch,
        ShareAcknowledgeRequest,
        ShareAcknowledgeResponse,
        ShareAcknowledgeResponsePartitionData,
        ShareAcknowledgeTopicResponse,
        ShareFetchRequest,
        ShareFetchResponse,
        ShareFetchResponsePartitionData,
    )
    from pybroker.protocol.typed.groups import (
        ShareGroupDescribeRequest,
        ShareGroupDescribeResponse,
        ShareGroupDescribeResponseDescribedGroup,
        ShareGroupDescribeResponseMember,
        ShareGroupHeartbeatRequest,
        ShareGroupHeartbeatResponse,
        ShareGroupHeartbeatResponseAssignment,
    )
    from pybroker.replication.partition import Partition

    # A ShareFetch partition's answer, made on first use (the one the acknowledgements and acquisitions fill).
    _Entry = Callable[[uuid.UUID, int, "Partition | None"], ShareFetchResponsePartitionData]

log = logging.getLogger(__name__)

MAX_FETCH_BYTES = 8 * 1024 * 1024  # per partition read: bounds the response whatever MaxBytes says
BATCH_OPTIMIZED, RECORD_LIMIT = 0, 1  # ShareFetch v2's ShareAcquireMode (KIP-1206)


def service(ctx: RequestContext) -> ShareGroupService:
    svc = ctx.services.share_groups
    if svc is None:
        # made on first use, over the coordinators' services (its state topic is an internal topic)
        coordinator = ctx.services.group_coordinator
        if coordinator is None or coordinator.services is None:
            raise RuntimeError("the group coordinator has not started")
        svc = ShareGroupService(
            coordinator.services,
            ctx.services.metadata_image,
            request_state_topic=ctx.services.share_state_topic_creator,
            persister=ctx.services.share_state_persister,
            group_configs=ctx.services.group_configs,
        )
        ctx.services.share_groups = svc
    return svc


def _partition(ctx: RequestContext, topic: str | None, index: int) -> Partition | None:
    return ctx.replica_manager.get_partition(topic, index) if topic else None


# -- ShareGroupHeartbeat / ShareGroupDescribe ----------------------------------------------------------


@handles(ApiKey.SHARE_GROUP_HEARTBEAT, 1, 1)
def handle_share_group_heartbeat(ctx: RequestContext, request: ShareGroupHeartbeatRequest) -> ShareGroupHeartbeatResponse:
    if not ctx.services.features.enabled(SHARE_VERSION):
        # Kafka: share groups are off below share.version 1 (checked before anything else).
        return _heartbeat_error(ErrorCode.UNSUPPORTED_VERSION, None)
    svc = service(ctx)
    group_id = request["group_id"]
    if not group_id:
        return _heartbeat_error(ErrorCode.INVALID_REQUEST, "GroupId can't be empty.")
    if not auth.authorize(ctx, auth.READ, auth.GROUP, group_id):
        return _heartbeat_error(ErrorCode.GROUP_AUTHORIZATION_FAILED, None)
    subscribed = request.get("subscribed_topic_names")
    if subscribed and auth.denied(ctx, auth.DESCRIBE, auth.TOPIC, subscribed):
        return _heartbeat_error(ErrorCode.TOPIC_AUTHORIZATION_FAILED, None)
    group = svc.group(group_id, create=request["member_epoch"] == 0)
    if group is None:
        return _heartbeat_error(ErrorCode.UNKNOWN_MEMBER_ID, None)
    r = group.heartbeat(
        request["member_id"],
        request["member_epoch"],
        subscribed,
        svc.topics(),
        client_id=_client_id(ctx),
        client_host=_client_host(ctx),
        rack_id=request.get("rack_id"),
    )
    if r.error != ErrorCode.NONE:
        return _heartbeat_error(r.error, r.error_message)
    assignment: ShareGroupHeartbeatResponseAssignment | None = None
    if r.assignment is not None:
        assignment = {
            "topic_partitions": [
                {"topic_id": topic_id, "partitions": list(parts)} for topic_id, parts in sorted(r.assignment.items(), key=str)
            ]
        }
    return {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "member_id": r.member_id,
        "member_epoch": r.member_epoch,
        "heartbeat_interval_ms": r.heartbeat_interval_ms,
        "assignment": assignment,
    }


def _heartbeat_error(code: ErrorCode, message: str | None) -> ShareGroupHeartbeatResponse:
    return {
        "throttle_time_ms": 0,
        "error_code": code,
        "error_message": message,
        "member_id": None,
        "member_epoch": 0,
        "heartbeat_interval_ms": 0,
        "assignment": None,
    }


@handles(ApiKey.SHARE_GROUP_DESCRIBE, 1, 1)
def handle_share_group_describe(ctx: RequestContext, request: ShareGroupDescribeRequest) -> ShareGroupDescribeResponse:
    if not ctx.services.features.enabled(SHARE_VERSION):
        # The consumer-group error entry has the same fields as a share group's.
        off = [cast("ShareGroupDescribeResponseDescribedGroup", _group_error(g, ErrorCode.UNSUPPORTED_VERSION, None))
               for g in request["group_ids"]]  # fmt: skip
        return {"throttle_time_ms": 0, "groups": off}
    svc = service(ctx)
    names = {tid: name for name, (tid, _) in svc.topics().items()}
    groups: list[ShareGroupDescribeResponseDescribedGroup] = []
    for group_id in request["group_ids"]:
        g = svc.group(group_id)
        denied = not auth.authorize(ctx, auth.DESCRIBE, auth.GROUP, group_id)
        if g is None or denied:
            groups.append(
                {
                    "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED if denied else ErrorCode.GROUP_ID_NOT_FOUND,
                    "error_message": None if denied else f"Group {group_id} not found.",
                    "group_id": group_id,
                    "group_state": "Dead",
                    "group_epoch": 0,
                    "assignment_epoch": 0,
                    "assignor_name": "",
                    "members": [],
                    "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
                }
            )
            continue
        members: list[ShareGroupDescribeResponseMember] = [
            {
                "member_id": m.member_id,
                "rack_id": m.rack_id,
                "member_epoch": m.member_epoch,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "subscribed_topic_names": sorted(m.subscribed_topic_names),
                "assignment": {
                    "topic_partitions": [
                        {"topic_id": tid, "topic_name": names.get(tid, ""), "partitions": list(ps)}
                        for tid, ps in m.assignment.items()
                    ]
                },
            }
            for m in g.members.values()
        ]
        groups.append(
            {
                "error_code": ErrorCode.NONE,
                "error_message": None,
                "group_id": group_id,
                "group_state": g.state.value,
                "group_epoch": g.group_epoch,
                "assignment_epoch": g.assignment_epoch,
                "assignor_name": "simple",
                "members": members,
                "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
            }
        )
    return {"throttle_time_ms": 0, "groups": groups}


# -- share sessions -------------------------------------------------------------------------------------


def _session(svc: ShareGroupService, ctx: RequestContext, group_id: str, member_id: str, epoch: int, fetch: bool) -> tuple[ShareSession | None, ErrorCode]:
    """Kafka's ShareSessionCache rules: 0 opens a session (ShareFetch only), -1 is the last request of
    one, any other epoch must be the session's next one."""
    key = (group_id, member_id)
    if epoch == INITIAL_SESSION_EPOCH:
        if not fetch:
            return None, ErrorCode.INVALID_SHARE_SESSION_EPOCH
        old = svc.sessions.pop(key, None)
        if old is not None:
            svc._release_session(old)
        opened = ShareSession(group_id, member_id, ctx.peer)
        svc.sessions[key] = opened
        return opened, ErrorCode.NONE
    session = svc.sessions.get(key)
    if session is None:
        return None, ErrorCode.SHARE_SESSION_NOT_FOUND
    if epoch == FINAL_SESSION_EPOCH:
        return session, ErrorCode.NONE
    if epoch != session.epoch:
        return None, ErrorCode.INVALID_SHARE_SESSION_EPOCH
    session.epoch = session.epoch + 1 if session.epoch < 2**31 - 1 else 1
    session.connection = ctx.peer
    return session, ErrorCode.NONE


def _readable_topics(ctx: RequestContext, svc: ShareGroupService) -> dict[uuid.UUID, str]:
    """Topic id -> name of the topics the principal may READ; the others answer as unknown ids
    (Kafka answers TOPIC_AUTHORIZATION_FAILED for them; here they are not served either way)."""
    names = {tid: name for name, (tid, _) in svc.topics().items()}
    hidden = auth.denied(ctx, auth.READ, auth.TOPIC, names.values())
    return {tid: name for tid, name in names.items() if name not in hidden}


def _close_session(svc: ShareGroupService, session: ShareSession) -> None:
    svc.sessions.pop((session.group_id, session.member_id), None)
    svc._release_session(session)


def _leader(p: Partition | None, node_id: int) -> LeaderIdAndEpoch:
    return {"leader_id": node_id if p is not None else -1, "leader_epoch": p.leader_epoch if p is not None else -1}


def _batches(raw: Iterable[WireAcknowledgementBatch]) -> list[AcknowledgementBatch]:
    return [AcknowledgementBatch(b["first_offset"], b["last_offset"], tuple(b["acknowledge_types"])) for b in raw]


async def _acknowledge(  # noqa: PLR0913
    svc: ShareGroupService, names: dict[uuid.UUID, str], group_id: str, member_id: str, topic_id: uuid.UUID,
    index: int, batches: Sequence[WireAcknowledgementBatch], renew: bool = False, p: Partition | None = None,
) -> ErrorCode:
    """Apply the acknowledgements, answered once the state they changed is written at the share coordinator
    (Kafka's SharePartition.acknowledge completes after the persister's writeState)."""
    name = names.get(topic_id)
    if name is None:
        return ErrorCode.UNKNOWN_TOPIC_ID
    if p is not None and not p.is_leader:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    try:
        sp = await svc.share_partition(group_id, topic_id, name, index)
    except ShareStateUnavailable as exc:
        return exc.code
    if sp is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    code = sp.acknowledge(member_id, _batches(batches), allow_renew=renew)
    if code != ErrorCode.NONE:
        return code
    durable = svc.durable(SharePartitionKey(group_id, topic_id, index))
    if durable is None:
        return code
    written = await durable
    return written if isinstance(written, ErrorCode) else ErrorCode.NONE


# -- ShareFetch ----------------------------------------------------------------------------------------


def _fetch_error(code: ErrorCode, message: str | None = None, lock_ms: int = 0) -> ShareFetchResponse:
    return {
        "throttle_time_ms": 0,
        "error_code": code,
        "error_message": message,
        "acquisition_lock_timeout_ms": lock_ms,
        "responses": [],
        "node_endpoints": [],
    }


@handles(ApiKey.SHARE_FETCH, 1, 2)
async def handle_share_fetch(ctx: RequestContext, request: ShareFetchRequest) -> ShareFetchResponse:
    if not ctx.services.features.enabled(SHARE_VERSION):
        return _fetch_error(ErrorCode.UNSUPPORTED_VERSION)
    svc = service(ctx)
    group_id = request.get("group_id") or ""
    member_id = request.get("member_id") or ""
    epoch = request["share_session_epoch"]
    if not group_id or not member_id:
        return _fetch_error(ErrorCode.INVALID_REQUEST, "GroupId and MemberId must be set.")
    if not auth.authorize(ctx, auth.READ, auth.GROUP, group_id):
        return _fetch_error(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    session, code = _session(svc, ctx, group_id, member_id, epoch, fetch=True)
    if session is None:
        return _fetch_error(code)
    names = _readable_topics(ctx, svc)
    node_id = ctx.services.node_id
    # v2 (KIP-1222): a renew-acknowledgement request only renews/acknowledges, it acquires nothing
    renew = ctx.version >= 2 and bool(request.get("is_renew_ack"))
    out: dict[tuple[uuid.UUID, int], ShareFetchResponsePartitionData] = {}

    def entry(topic_id: uuid.UUID, index: int, p: Partition | None) -> ShareFetchResponsePartitionData:
        e = out.get((topic_id, index))
        if e is None:
            e = out[(topic_id, index)] = {
                "partition_index": index,
                "error_code": ErrorCode.NONE,
                "error_message": None,
                "acknowledge_error_code": ErrorCode.NONE,
                "acknowledge_error_message": None,
                "current_leader": _leader(p, node_id),
                "records": b"",
                "acquired_records": [],
            }
        return e

    # acknowledgements first, then the session's partitions change, then records are acquired
    for t in request["topics"]:
        for part in t["partitions"]:
            if part["acknowledgement_batches"]:
                name = names.get(t["topic_id"])
                p = _partition(ctx, name, part["partition_index"])
                e = entry(t["topic_id"], part["partition_index"], p)
                e["acknowledge_error_code"] = await _acknowledge(
                    svc, names, group_id, member_id, t["topic_id"], part["partition_index"],
                    part["acknowledgement_batches"], renew, p,
                )
    if epoch == FINAL_SESSION_EPOCH:
        _close_session(svc, session)
        return _fetch_response(svc, out)
    for t in request["topics"]:
        for part in t["partitions"]:
            session.partitions.add((t["topic_id"], part["partition_index"]))
    if renew:
        return _fetch_response(svc, out)
    for forgotten in request.get("forgotten_topics_data") or []:
        for index in forgotten["partitions"]:
            session.partitions.discard((forgotten["topic_id"], index))

    limits = _Limits(
        request.get("max_records") or 500,
        min(request.get("max_bytes") or MAX_FETCH_BYTES, MAX_FETCH_BYTES),
        # KIP-1206: v2's ShareAcquireMode, 1 is record_limit; v1 knows only batch-optimized acquisition
        ctx.version < 2 or request.get("share_acquire_mode", BATCH_OPTIMIZED) != RECORD_LIMIT,
    )
    load_wait = max(request["max_wait_ms"], 0) / 1000
    if await _acquire_all(svc, ctx, session, names, entry, limits, load_wait) or load_wait <= 0:
        return _fetch_response(svc, out)
    return await _long_poll(svc, ctx, session, names, entry, out, limits, request["max_wait_ms"])


@dataclass(frozen=True)
class _Limits:
    """A ShareFetch's bounds: MaxRecords (over all its partitions), MaxBytes (per partition read), and
    whether MaxRecords may be exceeded to the end of a fetched batch (batch-optimized acquisition)."""

    max_records: int
    max_bytes: int
    batch_optimized: bool


async def _acquire_all(  # noqa: PLR0913
    svc: ShareGroupService,
    ctx: RequestContext,
    session: ShareSession,
    names: dict[uuid.UUID, str],
    entry: _Entry,
    limits: _Limits,
    load_wait: float = 0,
) -> bool:
    acquired_any = False
    max_records = limits.max_records
    for topic_id, index in sorted(session.partitions, key=lambda k: (str(k[0]), k[1])):
        if max_records <= 0:
            break
        name = names.get(topic_id)
        p = _partition(ctx, name, index)
        if p is None or name is None:  # no name: no partition either
            entry(topic_id, index, None)["error_code"] = (
                ErrorCode.UNKNOWN_TOPIC_ID if name is None else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            )
            continue
        if not p.is_leader:
            entry(topic_id, index, None)["error_code"] = ErrorCode.NOT_LEADER_OR_FOLLOWER
            continue
        # no record is acquired before the share partition's state is loaded (at most the fetch's wait)
        try:
            sp = await svc.share_partition(session.group_id, topic_id, name, index, timeout=load_wait or None)
        except ShareStateUnavailable as exc:
            entry(topic_id, index, p)["error_code"] = exc.code
            continue
        if sp is None:
            continue
        got = _acquire_one(sp, p, session.member_id, max_records, limits)
        if got is not None:
            records, acquired = got
            e = entry(topic_id, index, p)
            e["records"] = records
            acquired_records: list[AcquiredRecords] = [
                {"first_offset": a.first_offset, "last_offset": a.last_offset, "delivery_count": a.delivery_count}
                for a in acquired
            ]
            e["acquired_records"] = acquired_records
            max_records -= sum(a.last_offset - a.first_offset + 1 for a in acquired)
            acquired_any = True
    return acquired_any


def _acquire_one(sp: SharePartition, p: Partition, member_id: str, max_records: int, limits: _Limits):  # noqa: ANN202
    """Read the log from the share partition's next fetch offset and acquire what it holds. Only the batch
    headers are read, up to the batch holding the last offset the acquisition could take; the records go
    out as a slice of the segment file (sendfile), whole batches up to the last acquired offset (the
    client skips the offsets it did not acquire)."""
    if p.log_start_offset > sp.start_offset:
        sp.advance_to_log_start(p.log_start_offset)
    if not sp.can_acquire():
        return None
    offset = sp.next_fetch_offset()
    hw = p.high_watermark
    if offset >= hw:
        return None
    file_slice = p.log.read(offset, limits.max_bytes, hw)
    if file_slice is None:
        return None
    # the slice ends at max_bytes, maybe inside a batch: whole batches only
    headers = whole_batch_headers(file_slice, sp.acquirable_through(offset, max_records))
    if not headers:
        return None
    last = min(headers[-1].last_offset, hw - 1)
    # batch-optimized: the batch the last acquired record is in goes out whole and is acquired whole
    batch_ends = [h.last_offset for h in headers] if limits.batch_optimized else ()
    acquired = sp.acquire(member_id, offset, last, max_records, batch_ends)
    if not acquired:
        return None
    end = acquired[-1].last_offset
    cut = next((h.end_position for h in headers if h.last_offset >= end), headers[-1].end_position)
    return file_slice.head(cut - file_slice.position), acquired


async def _long_poll(  # noqa: PLR0913
    svc: ShareGroupService,
    ctx: RequestContext,
    session: ShareSession,
    names: dict[uuid.UUID, str],
    entry: _Entry,
    out: dict[tuple[uuid.UUID, int], ShareFetchResponsePartitionData],
    limits: _Limits,
    max_wait_ms: int,
) -> ShareFetchResponse:
    loop = asyncio.get_running_loop()
    woken = loop.create_future()

    def wake() -> None:
        if not woken.done():
            woken.set_result(None)

    parts = []
    for topic_id, index in session.partitions:
        name = names.get(topic_id)
        p = _partition(ctx, name, index)
        if p is not None:
            p.add_data_listener(wake)
            parts.append(p)
    # records released by an expiring lock or another member are not appends: poll for them too
    deadline = loop.time() + max_wait_ms / 1000
    try:
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            try:
                await asyncio.wait_for(asyncio.shield(woken), min(remaining, 0.1))
            except TimeoutError:
                pass
            if woken.done():
                woken = loop.create_future()
            if (session.group_id, session.member_id) not in svc.sessions:
                break
            if await _acquire_all(svc, ctx, session, names, entry, limits, remaining):
                break
    finally:
        for p in parts:
            p.remove_data_listener(wake)
    return _fetch_response(svc, out)


def _fetch_response(
    svc: ShareGroupService, out: dict[tuple[uuid.UUID, int], ShareFetchResponsePartitionData]
) -> ShareFetchResponse:
    by_topic: dict[uuid.UUID, list[ShareFetchResponsePartitionData]] = {}
    for (topic_id, _), e in out.items():
        by_topic.setdefault(topic_id, []).append(e)
    return {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "acquisition_lock_timeout_ms": svc.record_lock_duration_ms,
        "responses": [{"topic_id": t, "partitions": ps} for t, ps in by_topic.items()],
        "node_endpoints": [],
    }


# -- ShareAcknowledge ----------------------------------------------------------------------------------


@handles(ApiKey.SHARE_ACKNOWLEDGE, 1, 2)
async def handle_share_acknowledge(ctx: RequestContext, request: ShareAcknowledgeRequest) -> ShareAcknowledgeResponse:
    svc = service(ctx)
    group_id = request.get("group_id") or ""
    member_id = request.get("member_id") or ""
    epoch = request["share_session_epoch"]
    base: ShareAcknowledgeResponse = {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None, "responses": [], "node_endpoints": []}
    if ctx.version >= 2:
        base["acquisition_lock_timeout_ms"] = svc.record_lock_duration_ms
    if not ctx.services.features.enabled(SHARE_VERSION):
        return {**base, "error_code": ErrorCode.UNSUPPORTED_VERSION}
    if not group_id or not member_id:
        return {**base, "error_code": ErrorCode.INVALID_REQUEST}
    if not auth.authorize(ctx, auth.READ, auth.GROUP, group_id):
        return {**base, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED}
    session, code = _session(svc, ctx, group_id, member_id, epoch, fetch=False)
    if session is None:
        return {**base, "error_code": code}
    names = _readable_topics(ctx, svc)
    responses: list[ShareAcknowledgeTopicResponse] = []
    for t in request["topics"]:
        parts: list[ShareAcknowledgeResponsePartitionData] = []
        for part in t["partitions"]:
            name = names.get(t["topic_id"])
            p = _partition(ctx, name, part["partition_index"])
            code = await _acknowledge(
                svc, names, group_id, member_id, t["topic_id"], part["partition_index"],
                part["acknowledgement_batches"], ctx.version >= 2 and bool(request.get("is_renew_ack")), p,
            )
            parts.append(
                {
                    "partition_index": part["partition_index"],
                    "error_code": code,
                    "error_message": None,
                    "current_leader": _leader(p, ctx.services.node_id),
                }
            )
        responses.append({"topic_id": t["topic_id"], "partitions": parts})
    if epoch == FINAL_SESSION_EPOCH:
        _close_session(svc, session)
    return {**base, "responses": responses}


# -- group configs (IncrementalAlterConfigs, resource type GROUP) ---------------------------------------


def _invalid_streams_group_config(ctx: RequestContext, key: str, value: str) -> str | None:
    """Kafka's GroupConfig.validateValues for the streams keys: an int within the broker's bounds."""
    try:
        number = int(value)
    except ValueError:
        return f"Invalid value {value} for configuration {key}: Not a number of type INT"
    c = ctx.services.config
    bounds = {
        "streams.session.timeout.ms": (
            c.get("group.streams.min.session.timeout.ms"), c.get("group.streams.max.session.timeout.ms")),
        "streams.heartbeat.interval.ms": (
            c.get("group.streams.min.heartbeat.interval.ms"), c.get("group.streams.max.heartbeat.interval.ms")),
        "streams.num.standby.replicas": (0, c.get("group.streams.max.standby.replicas")),
        "streams.initial.rebalance.delay.ms": (0, 2**31 - 1),
        "streams.assignment.interval.ms": (0, 2**31 - 1),
    }  # fmt: skip
    low, high = bounds[key]
    if number < low:
        return f"{key} must be greater than or equal to {low}"
    if number > high:
        return f"{key} must be less than or equal to {high}"
    return None


def alter_group_configs(
    ctx: RequestContext, group_id: str, ops: list[dict], validate_only: bool
) -> tuple[ErrorCode, str | None]:
    if not auth.authorize(ctx, auth.ALTER_CONFIGS, auth.GROUP, group_id):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, None
    svc = service(ctx)
    new = dict(svc.group_configs.get(group_id, {}))
    for op in ops:
        key, value, kind = op["name"], op["value"], op.get("config_operation", 0)
        if key not in SHARE_GROUP_CONFIG_KEYS and key not in STREAMS_GROUP_CONFIG_KEYS:
            return ErrorCode.INVALID_CONFIG, f"Unknown group config name: {key}"
        if key in STREAMS_GROUP_CONFIG_KEYS and kind == 0 and value is not None:
            refused = _invalid_streams_group_config(ctx, key, value)
            if refused is not None:
                return ErrorCode.INVALID_CONFIG, refused
        if kind == 1 or value is None:
            new.pop(key, None)
        elif kind == 0:
            if key == "share.auto.offset.reset" and value not in ("earliest", "latest"):
                return ErrorCode.INVALID_CONFIG, f"Invalid value {value} for configuration {key}"
            new[key] = value
        else:
            return ErrorCode.INVALID_CONFIG, f"Config value append is not allowed for config key: {key}"
    if not validate_only:
        publish = ctx.services.publish_group_configs
        if publish is not None:  # a cluster's: to ZooKeeper first, every broker applies it from there
            try:
                publish(group_id, svc.group_configs.get(group_id, {}), new)
            except KafkaError as exc:
                return exc.code, exc.message
        svc.group_configs[group_id] = new
    return ErrorCode.NONE, None
