"""ApiVersions (18): the advertised table is computed from the handler registry."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from pybroker.apis import REGISTRY, RequestContext, handles
from pybroker.protocol.errors import ErrorCode
from pybroker.protocol.messages.api_keys import ApiKey

if TYPE_CHECKING:
    from pybroker.protocol.typed.api_versions import (
        ApiVersion,
        ApiVersionsRequest,
        ApiVersionsResponse,
    )

# KIP-511: Apache brokers validate the client's self-description with this pattern.
_SOFTWARE_RE = re.compile(r"^[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?$")


# KIP-714's APIs.  Kafka advertises them only when a telemetry receiver is configured (a metrics
# reporter implementing ClientTelemetry); pybroker's receiver is the metrics endpoint, so they are
# advertised only with metrics.listener set.  They are answered either way, as Kafka answers them.
TELEMETRY_API_KEYS = frozenset({ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, ApiKey.PUSH_TELEMETRY})


def advertised_api_keys(telemetry_receiver: bool = True) -> list[ApiVersion]:
    return [
        {
            "api_key": h.api_key,
            "min_version": h.advertised_min if h.advertised_min is not None else h.min_version,
            "max_version": h.max_version,
        }
        for h in sorted(REGISTRY.values(), key=lambda h: h.api_key)
        if telemetry_receiver or h.api_key not in TELEMETRY_API_KEYS
    ]

@handles(ApiKey.API_VERSIONS, 0, 4)
def handle_api_versions(ctx: RequestContext, request: ApiVersionsRequest) -> ApiVersionsResponse:
    if ctx.version >= 3:
        name = request.get("client_software_name", "")
        version = request.get("client_software_version", "")
        if not _SOFTWARE_RE.match(name) or not _SOFTWARE_RE.match(version):
            return {"error_code": ErrorCode.INVALID_REQUEST, "api_keys": []}
    # The finalized features (UpdateFeatures, metadata/features.py) tell clients what the cluster has
    # turned on: a Java producer uses transaction version 2 (EndTxn v5, implicit partitions) only when
    # transaction.version is finalized at 2.  Features at level 0 are left out, as Kafka does.
    features = ctx.services.features
    return {
        "error_code": ErrorCode.NONE,
        # Without a receiver, clients such as librdkafka would otherwise subscribe and push for nothing.
        "api_keys": advertised_api_keys(bool(ctx.services.config.get("metrics.listener"))),
        "throttle_time_ms": 0,
        "supported_features": [
            {"name": name, "min_version": low, "max_version": high} for name, low, high in features.supported()
        ],
        "finalized_features_epoch": features.epoch,
        "finalized_features": [
            {"name": name, "min_version_level": level, "max_version_level": level}
            for name, level in features.finalized()
        ],
    }
