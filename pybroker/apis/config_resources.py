"""ListConfigResources (74; v0 was ListClientMetricsResources, v1 is KIP-1142's): the resources that
DescribeConfigs can describe, by type.

As Kafka's KafkaApis answers: v0 lists client-metrics resources only; v1 with no types lists every
supported type; a type it does not support is refused with UNSUPPORTED_VERSION. Topics are every
topic, BROKER and BROKER_LOGGER every registered broker's id, GROUP the groups with dynamic configs and
CLIENT_METRICS the client-metrics subscriptions (apis/telemetry.py); pybroker keeps no group configs
yet, so GROUP lists none.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pybroker.apis import RequestContext, handles
from pybroker.protocol.errors import ErrorCode
from pybroker.protocol.messages.api_keys import ApiKey

if TYPE_CHECKING:
    from pybroker.protocol.typed.admin import (
        ConfigResource,
        ListConfigResourcesRequest,
        ListConfigResourcesResponse,
    )

TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 2, 4, 8, 16, 32
SUPPORTED = (TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP)


@handles(ApiKey.LIST_CONFIG_RESOURCES, 0, 1)
def handle_list_config_resources(
    ctx: RequestContext, request: ListConfigResourcesRequest
) -> ListConfigResourcesResponse:
    wanted = request.get("resource_types", []) if ctx.version >= 1 else [CLIENT_METRICS]
    if any(t not in SUPPORTED for t in wanted):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.UNSUPPORTED_VERSION, "config_resources": []}
    types = set(wanted or SUPPORTED)
    image = ctx.metadata_image()
    resources: list[ConfigResource] = []
    if TOPIC in types:
        resources += [{"resource_name": n, "resource_type": TOPIC} for n in image.topics_by_name]
    for rtype in (BROKER, BROKER_LOGGER):
        if rtype in types:
            resources += [{"resource_name": str(b), "resource_type": rtype} for b in image.brokers]
    if CLIENT_METRICS in types:
        subscriptions = ctx.services.metadata_store.client_metrics
        resources += [{"resource_name": n, "resource_type": CLIENT_METRICS} for n in subscriptions]
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "config_resources": resources}
