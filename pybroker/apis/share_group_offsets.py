"""KIP-932's admin APIs of a share group's offsets: DescribeShareGroupOffsets (90), AlterShareGroupOffsets (91)
and DeleteShareGroupOffsets (92), as Kafka's KafkaApis and GroupCoordinatorService answer them.

The state they read and change is the share-partition state kept by the share coordinators (the leaders of
``__share_group_state``, in a cluster possibly other brokers), reached through the persister as Kafka's group
coordinator reaches it: ReadShareGroupStateSummary for describe, InitializeShareGroupState (a new state epoch
at the new start offset) for alter, DeleteShareGroupState for delete. A share partition's leader that held
the group's share partitions in memory dropped them when the group's last share session on it ended
(Kafka's ShareGroupListener.onGroupEmpty), so the next consumer reads what was written here.

Kafka's group coordinator remembers which share partitions of a group it initialized (every partition of
a subscribed topic, when an assignment covers it, at start offset -1); pybroker's group remembers the same
in memory (``ShareGroup.initialized_topics``), and "every partition of the group" is those together with
the partitions its share coordinators have a start offset for (asking for the summary of each partition of
each topic), so state written before this broker became the group's coordinator is found too.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pybroker.apis import RequestContext, auth, handles
from pybroker.apis.groups import _coordinator, _coordinator_error
from pybroker.apis.share_groups import _partition, service
from pybroker.coordinator.share.persister import ShareStatePersister
from pybroker.coordinator.share.state_records import SharePartitionKey
from pybroker.metadata.features import SHARE_VERSION
from pybroker.protocol.errors import ErrorCode
from pybroker.protocol.messages.api_keys import ApiKey

if TYPE_CHECKING:
    from pybroker.coordinator.share.manager import ShareGroupService
    from pybroker.protocol.typed.groups import (
        AlterShareGroupOffsetsRequest,
        AlterShareGroupOffsetsResponse,
        AlterShareGroupOffsetsResponsePartition,
        AlterShareGroupOffsetsResponseTopic,
        DeleteShareGroupOffsetsRequest,
        DeleteShareGroupOffsetsResponse,
        DeleteShareGroupOffsetsResponseTopic,
        DescribeShareGroupOffsetsRequest,
        DescribeShareGroupOffsetsRequestTopic,
        DescribeShareGroupOffsetsResponse,
        DescribeShareGroupOffsetsResponseGroup,
        DescribeShareGroupOffsetsResponsePartition,
        DescribeShareGroupOffsetsResponseTopic,
    )

ZERO_UUID = uuid.UUID(int=0)
UNINITIALIZED_START_OFFSET = -1  # Kafka's PartitionFactory: no state for the share partition
NO_OFFSET_INFORMATION = "There is no offset information to delete."


def persister(svc: ShareGroupService) -> ShareStatePersister:
    return ShareStatePersister(svc.coordinator, svc.persister)


async def initialized_partitions(
    svc: ShareGroupService, group_id: str, topics: dict[str, tuple[uuid.UUID, int]]
) -> dict[str, list[int]]:
    """Topic name -> the share partitions of the group: those the group initialized when an assignment
    covered their topic (Kafka's initialized topics, listed whether or not a member fetched them), and
    those its share coordinators have a start offset for (the group's own record is in memory only)."""
    keys = [(name, SharePartitionKey(group_id, tid, i)) for name, (tid, count) in sorted(topics.items()) for i in range(count)]
    state = persister(svc)
    summaries = await asyncio.gather(*(state.read_state_summary(key) for _, key in keys))
    group = svc.group(group_id)
    initialized = {} if group is None else group.initialized_topics
    found: dict[str, list[int]] = {}
    for (name, key), summary in zip(keys, summaries, strict=True):
        has_state = summary["error_code"] == ErrorCode.NONE and summary["start_offset"] != UNINITIALIZED_START_OFFSET
        if has_state or key.partition in initialized.get(key.topic_id, ()):
            found.setdefault(name, []).append(key.partition)
    return found


# -- DescribeShareGroupOffsets ------------------------------------------------------------------------


@handles(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 0, 1)
async def handle_describe_share_group_offsets(
    ctx: RequestContext, request: DescribeShareGroupOffsetsRequest
) -> DescribeShareGroupOffsetsResponse:
    """The start offset of each share partition (-1 where the group has no state for it, or the share
    coordinator could not say: Kafka treats it as absence of data), its leader epoch at the share
    coordinator and, from v1, its lag: records below the high watermark past the start offset not yet
    acknowledged or archived."""
    enabled = ctx.services.features.enabled(SHARE_VERSION)
    svc = service(ctx) if enabled else None
    out: list[DescribeShareGroupOffsetsResponseGroup] = []
    for g in request["groups"]:
        group_id = g["group_id"]
        error: ErrorCode | None = None
        if svc is None:
            error = ErrorCode.UNSUPPORTED_VERSION
        elif not auth.authorize(ctx, auth.DESCRIBE, auth.GROUP, group_id):
            error = ErrorCode.GROUP_AUTHORIZATION_FAILED
        elif g.get("topics") is None and _coordinator(ctx, group_id) is None:
            error = _coordinator_error(ctx, group_id)  # "every topic" is the coordinator's to say
        if error is not None or svc is None:
            code = error or ErrorCode.UNSUPPORTED_VERSION
            out.append({"group_id": group_id, "topics": [], "error_code": code, "error_message": code.message})
            continue
        out.append(await _describe_group(ctx, svc, group_id, g.get("topics")))
    return {"throttle_time_ms": 0, "groups": out}


async def _describe_group(
    ctx: RequestContext, svc: ShareGroupService, group_id: str, wanted: Sequence[DescribeShareGroupOffsetsRequestTopic] | None
) -> DescribeShareGroupOffsetsResponseGroup:
    topics = svc.topics()
    if wanted is None:  # every topic the group has state for, those the principal may describe
        found = await initialized_partitions(svc, group_id, topics)
        hidden = auth.denied(ctx, auth.DESCRIBE, auth.TOPIC, found.keys())
        wanted = [{"topic_name": name, "partitions": ps} for name, ps in found.items() if name not in hidden]
    state = persister(svc)
    topics_out: list[DescribeShareGroupOffsetsResponseTopic] = []
    for t in wanted:
        name = t["topic_name"]
        info = topics.get(name)
        if not auth.authorize(ctx, auth.DESCRIBE, auth.TOPIC, name, log_denied=False):
            code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            parts = [_described(i, error=code, message=code.message) for i in t["partitions"]]
            topics_out.append({"topic_name": name, "topic_id": ZERO_UUID, "partitions": parts})
            continue
        if info is None:  # Kafka: an unknown topic is absence of data, not an error
            topics_out.append({"topic_name": name, "topic_id": ZERO_UUID, "partitions": [_described(i) for i in t["partitions"]]})
            continue
        topic_id = info[0]
        keys = [SharePartitionKey(group_id, topic_id, i) for i in t["partitions"]]
        summaries = await asyncio.gather(*(state.read_state_summary(k) for k in keys))
        parts = []
        for key, summary in zip(keys, summaries, strict=True):
            if summary["error_code"] != ErrorCode.NONE or summary["start_offset"] == UNINITIALIZED_START_OFFSET:
                parts.append(_described(key.partition))
                continue
            start = summary["start_offset"]
            parts.append(_described(key.partition, start, summary["leader_epoch"], _lag(ctx, name, key.partition, start, summary)))
        topics_out.append({"topic_name": name, "topic_id": topic_id, "partitions": parts})
    return {"group_id": group_id, "topics": topics_out, "error_code": ErrorCode.NONE, "error_message": None}


def _described(  # noqa: PLR0913
    index: int, start: int = UNINITIALIZED_START_OFFSET, leader_epoch: int = -1, lag: int = -1,
    error: ErrorCode = ErrorCode.NONE, message: str | None = None,
) -> DescribeShareGroupOffsetsResponsePartition:  # fmt: skip
    return {"partition_index": index, "start_offset": start, "leader_epoch": leader_epoch, "lag": lag,
            "error_code": error, "error_message": message}  # fmt: skip


def _lag(ctx: RequestContext, topic: str, index: int, start: int, summary: dict[str, Any]) -> int:
    """KIP-1226's lag: high watermark - start offset - records delivered past the start offset (the share
    coordinator's delivery-complete count). -1 when either is not known here (no replica of the partition on
    this broker, or a state written without the count)."""
    p = _partition(ctx, topic, index)
    done = summary.get("delivery_complete_count", -1)
    if p is None or done < 0:
        return -1
    return max(p.high_watermark - start - done, 0)


# -- AlterShareGroupOffsets ---------------------------------------------------------------------------


def _group_checks(ctx: RequestContext, svc: ShareGroupService, group_id: str, create: bool) -> tuple[ErrorCode, str | None] | None:
    """Kafka's checks before either write: the group's coordinator is here, the group exists (alter makes an
    empty one, as Kafka 4.3 does) and has no member (ShareGroup.validateEmptyGroup)."""
    if _coordinator(ctx, group_id) is None:
        code = _coordinator_error(ctx, group_id)
        return code, code.message
    g = svc.group(group_id, create=create)
    if g is None:
        return ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found."
    if g.members:
        return ErrorCode.NON_EMPTY_GROUP, ErrorCode.NON_EMPTY_GROUP.message
    return None


@handles(ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, 0)
async def handle_alter_share_group_offsets(
    ctx: RequestContext, request: AlterShareGroupOffsetsRequest
) -> AlterShareGroupOffsetsResponse:
    group_id = request["group_id"]
    if not ctx.services.features.enabled(SHARE_VERSION):
        return _alter_error(ErrorCode.UNSUPPORTED_VERSION, None)
    if not auth.authorize(ctx, auth.READ, auth.GROUP, group_id):
        return _alter_error(ErrorCode.GROUP_AUTHORIZATION_FAILED, None)
    if not group_id:
        return _alter_error(ErrorCode.INVALID_GROUP_ID, None)
    svc = service(ctx)
    refused = _group_checks(ctx, svc, group_id, create=True)
    if refused is not None:
        return _alter_error(*refused)
    topics = svc.topics()
    state = persister(svc)
    responses: list[AlterShareGroupOffsetsResponseTopic] = []
    for t in request["topics"]:
        name = t["topic_name"]
        info = topics.get(name)
        topic_error = None
        if not auth.authorize(ctx, auth.READ, auth.TOPIC, name):
            topic_error = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif info is None:
            topic_error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if topic_error is not None or info is None:
            code = topic_error or ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            parts: list[AlterShareGroupOffsetsResponsePartition] = [
                {"partition_index": p["partition_index"], "error_code": code, "error_message": code.message} for p in t["partitions"]
            ]
            responses.append({"topic_name": name, "topic_id": ZERO_UUID, "partitions": parts})
            continue
        topic_id, count = info
        results = await asyncio.gather(*(
            _alter_partition(svc, state, SharePartitionKey(group_id, topic_id, p["partition_index"]), p["start_offset"], count)
            for p in t["partitions"]
        ))  # fmt: skip
        responses.append({"topic_name": name, "topic_id": topic_id, "partitions": list(results)})
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None, "responses": responses}


async def _alter_partition(
    svc: ShareGroupService, state: ShareStatePersister, key: SharePartitionKey, start_offset: int, count: int
) -> AlterShareGroupOffsetsResponsePartition:
    """InitializeShareGroupState at ``start_offset`` with a state epoch above the one the share coordinator
    has: the share partition starts afresh there, and a leader still writing the old epoch is fenced."""
    if not 0 <= key.partition < count:
        code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return {"partition_index": key.partition, "error_code": code, "error_message": code.message}
    summary = await state.read_state_summary(key)
    epoch = max(summary.get("state_epoch", 0), 0) + 1 if summary["error_code"] == ErrorCode.NONE else 0
    result = await state.initialize_state(key, epoch, start_offset)
    if result["error_code"] == ErrorCode.NONE:
        _forget_loaded(svc, key)
        group = svc.group(key.group_id)
        if group is not None:  # as Kafka's alterShareGroupOffsets records the partitions it initialized
            group.initialized_topics.setdefault(key.topic_id, set()).add(key.partition)
    code = ErrorCode(result["error_code"])
    message = None if code == ErrorCode.NONE else result.get("error_message") or code.message
    return {"partition_index": key.partition, "error_code": code, "error_message": message}


def _forget_loaded(svc: ShareGroupService, key: SharePartitionKey) -> None:
    """A share partition this broker leads and still holds (a session of the group is open here): dropped,
    the next fetch reads the state just written."""
    sp = svc.share_partitions.get(key)
    if sp is not None:
        svc._unload(key, sp)


def _alter_error(code: ErrorCode, message: str | None) -> AlterShareGroupOffsetsResponse:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "responses": []}


# -- DeleteShareGroupOffsets --------------------------------------------------------------------------


@handles(ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0, 0)
async def handle_delete_share_group_offsets(
    ctx: RequestContext, request: DeleteShareGroupOffsetsRequest
) -> DeleteShareGroupOffsetsResponse:
    group_id = request["group_id"]
    if not ctx.services.features.enabled(SHARE_VERSION):
        return _delete_error(ErrorCode.UNSUPPORTED_VERSION, ErrorCode.UNSUPPORTED_VERSION.message)
    if not auth.authorize(ctx, auth.DELETE, auth.GROUP, group_id):
        return _delete_error(ErrorCode.GROUP_AUTHORIZATION_FAILED, ErrorCode.GROUP_AUTHORIZATION_FAILED.message)
    if not group_id:
        return _delete_error(ErrorCode.INVALID_GROUP_ID, ErrorCode.INVALID_GROUP_ID.message)
    svc = service(ctx)
    refused = _group_checks(ctx, svc, group_id, create=False)
    if refused is not None:
        return _delete_error(*refused)
    topics = svc.topics()
    responses: list[DeleteShareGroupOffsetsResponseTopic] = []
    for t in request["topics"]:
        name = t["topic_name"]
        info = topics.get(name)
        if not auth.authorize(ctx, auth.READ, auth.TOPIC, name):
            code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            responses.append({"topic_name": name, "topic_id": ZERO_UUID, "error_code": code, "error_message": code.message})
        elif info is None:
            code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            responses.append({"topic_name": name, "topic_id": ZERO_UUID, "error_code": code, "error_message": code.message})
        else:
            responses.append(await _delete_topic(svc, group_id, name, info))
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None, "responses": responses}


async def _delete_topic(
    svc: ShareGroupService, group_id: str, name: str, info: tuple[uuid.UUID, int]
) -> DeleteShareGroupOffsetsResponseTopic:
    """DeleteShareGroupState of the topic's share partitions the group has state for; a topic with none is
    UNKNOWN_TOPIC_OR_PARTITION (Kafka's "no offset information to delete")."""
    topic_id = info[0]
    partitions = (await initialized_partitions(svc, group_id, {name: info})).get(name, [])
    if not partitions:
        code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return {"topic_name": name, "topic_id": ZERO_UUID, "error_code": code, "error_message": NO_OFFSET_INFORMATION}
    keys = [SharePartitionKey(group_id, topic_id, i) for i in partitions]
    state = persister(svc)
    results = await asyncio.gather(*(state.delete_state(k) for k in keys))
    for key in keys:
        _forget_loaded(svc, key)
    failed = next((ErrorCode(r["error_code"]) for r in results if r["error_code"] != ErrorCode.NONE), None)
    if failed is not None:
        return {"topic_name": name, "topic_id": topic_id, "error_code": failed, "error_message": failed.message}
    group = svc.group(group_id)
    if group is not None:  # Kafka's completeDeleteShareGroupOffsets: no longer an initialized topic
        group.initialized_topics.pop(topic_id, None)
    return {"topic_name": name, "topic_id": topic_id, "error_code": ErrorCode.NONE, "error_message": None}


def _delete_error(code: ErrorCode, message: str | None) -> DeleteShareGroupOffsetsResponse:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "responses": []}


# -- DeleteGroups of share groups ---------------------------------------------------------------------


async def delete_share_groups(ctx: RequestContext, group_ids: list[str]) -> dict[str, ErrorCode]:
    """Kafka's GroupCoordinatorService.deleteShareGroups, before the other group types are deleted: each of
    ``group_ids`` that is a share group here must be empty (NON_EMPTY_GROUP), its share-partition state is
    deleted at the share coordinators, then the group. The result names only the share groups."""
    svc = ctx.services.share_groups
    if svc is None:
        return {}
    results: dict[str, ErrorCode] = {}
    topics = svc.topics()
    for group_id in group_ids:
        g = svc.group(group_id)
        if g is None:
            continue
        if g.members:
            results[group_id] = ErrorCode.NON_EMPTY_GROUP
            continue
        found = await initialized_partitions(svc, group_id, topics)
        keys = [SharePartitionKey(group_id, topics[name][0], i) for name, ps in found.items() for i in ps]
        deleted = await asyncio.gather(*(persister(svc).delete_state(k) for k in keys))
        for key in keys:
            _forget_loaded(svc, key)
        failed = next((ErrorCode(r["error_code"]) for r in deleted if r["error_code"] != ErrorCode.NONE), None)
        if failed is not None:
            results[group_id] = failed
            continue
        svc.groups.pop(group_id, None)
        results[group_id] = ErrorCode.NONE
    return results
