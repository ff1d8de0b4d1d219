"""KIP-1071 streams group APIs: StreamsGroupHeartbeat (88) and StreamsGroupDescribe (89).

The handlers translate between the wire and ``coordinator.streams.manager.StreamsGroupManager``.
As Kafka's KafkaApis does, the heartbeat's answer names the internal topics (repartition and
changelog) the group's topology needs and that do not exist; the broker creates them with the
partition counts and configs the coordinator decided, and the group becomes ready on a later
heartbeat, once they exist.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from pybroker.apis import RequestContext, auth, handles
from pybroker.apis.groups import _after, _client_host, _client_id, _coordinator, _coordinator_error
from pybroker.coordinator.streams.manager import described_error, error_response
from pybroker.coordinator.streams.topology import MISSING_INTERNAL_TOPICS, InternalTopic
from pybroker.metadata.features import STREAMS_VERSION
from pybroker.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

STREAMS_GROUP_HEARTBEAT = 88
STREAMS_GROUP_DESCRIBE = 89

# Internal topics being created, so that the heartbeats of a group's members do not ask again while
# the creation is under way.
_creating: set[str] = set()


@handles(STREAMS_GROUP_HEARTBEAT, 0, 0)
def handle_streams_group_heartbeat(ctx: RequestContext, request: dict):  # noqa: ANN201
    if not ctx.services.features.enabled(STREAMS_VERSION):
        # Kafka: the streams rebalance protocol is off below streams.version 1 (checked first).
        return error_response(ErrorCode.UNSUPPORTED_VERSION, None)
    group_id = request["group_id"]
    if not auth.authorize(ctx, auth.READ, auth.GROUP, group_id):
        return error_response(ErrorCode.GROUP_AUTHORIZATION_FAILED, None)
    topology = request.get("topology")
    if topology is not None and auth.enabled(ctx):
        # Kafka: Describe on every topic the topology names.
        names = {t for s in topology["subtopologies"] for t in s["source_topics"]}
        names |= {t for s in topology["subtopologies"] for t in s["repartition_sink_topics"]}
        names |= {t["name"] for s in topology["subtopologies"] for t in s["repartition_source_topics"]}
        names |= {t["name"] for s in topology["subtopologies"] for t in s["state_changelog_topics"]}
        if auth.denied(ctx, auth.DESCRIBE, auth.TOPIC, sorted(names)):
            return error_response(ErrorCode.TOPIC_AUTHORIZATION_FAILED, None)
    coordinator = _coordinator(ctx, group_id)
    if coordinator is None:
        return error_response(_coordinator_error(ctx, group_id), None)
    configs = ctx.services.group_configs.get(group_id)  # every group's configs (IncrementalAlterConfigs)
    response, to_create, wait = coordinator.streams.heartbeat(
        request, _client_id(ctx), _client_host(ctx), configs
    )
    if to_create:
        _create_internal_topics(ctx, response, to_create)
    # Answered once the records the heartbeat wrote are durable in __consumer_offsets.
    return response if wait is None else _after(wait, response)


def _create_internal_topics(
    ctx: RequestContext, response: dict[str, Any], topics: list[InternalTopic]
) -> None:
    """Kafka's AutoTopicCreationManager.createStreamsInternalTopics: needs Create on the cluster or on
    each topic; an unauthorized one is reported in the statuses instead."""
    names = [t.name for t in topics]
    denied = (
        frozenset()
        if auth.authorize_cluster(ctx, auth.CREATE, log_denied=False)
        else auth.denied(ctx, auth.CREATE, auth.TOPIC, names)
    )
    if denied:
        response["status"].append(
            {
                "status_code": MISSING_INTERNAL_TOPICS,
                "status_detail": f"Unauthorized to CREATE on topics {', '.join(sorted(denied))}.",
            }
        )
    for topic in topics:
        if topic.name in denied or topic.name in _creating:
            continue
        _creating.add(topic.name)
        asyncio.ensure_future(_create(ctx, topic))


async def _create(ctx: RequestContext, topic: InternalTopic) -> None:
    b = ctx.services
    rf = topic.replication_factor if topic.replication_factor > 0 else b.config.default_replication_factor
    configs: dict[str, str | None] = dict(topic.configs)
    try:
        ctx.topic_admin.check_new_topic(topic.name, topic.partitions, configs)
        await ctx.topic_admin.create_topic_async(topic.name, topic.partitions, configs, replication_factor=rf)
        log.info("created streams internal topic %s with %d partitions", topic.name, topic.partitions)
    except KafkaError as exc:
        if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
            log.warning("could not create streams internal topic %s: %s", topic.name, exc)
    except Exception:
        log.exception("could not create streams internal topic %s", topic.name)
    finally:
        _creating.discard(topic.name)


@handles(STREAMS_GROUP_DESCRIBE, 0, 0)
def handle_streams_group_describe(ctx: RequestContext, request: dict) -> dict[str, Any]:
    if not ctx.services.features.enabled(STREAMS_VERSION):
        return {
            "throttle_time_ms": 0,
            "groups": [described_error(g, ErrorCode.UNSUPPORTED_VERSION, None) for g in request["group_ids"]],
        }
    coordinator = _coordinator(ctx)
    include_ops = bool(request.get("include_authorized_operations"))
    groups = []
    refused = []  # Kafka answers the groups it refused first
    for group_id in request["group_ids"]:
        if not auth.authorize(ctx, auth.DESCRIBE, auth.GROUP, group_id):
            refused.append(described_error(group_id, ErrorCode.GROUP_AUTHORIZATION_FAILED, None))
        elif coordinator is None or not coordinator.is_coordinator_for(group_id):
            groups.append(described_error(group_id, _coordinator_error(ctx, group_id), None))
        else:
            groups.append(
                coordinator.streams.describe(
                    group_id, include_ops, auth.authorized_operations(ctx, auth.GROUP, group_id)
                )
            )
    return {"throttle_time_ms": 0, "groups": refused + groups}
