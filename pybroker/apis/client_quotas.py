"""DescribeClientQuotas (48) and AlterClientQuotas (49): client quotas stored in the broker's
metadata store, validated as Kafka's ClientQuotaControlManager does, applied to the next request."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pybroker.apis import RequestContext, auth, handles
from pybroker.protocol.errors import ErrorCode
from pybroker.protocol.messages.api_keys import ApiKey
from pybroker.quotas.client_quotas import IP, QuotaError, describe, validate_entity, validate_op
from pybroker.security.acl import AclOperation
from pybroker.storage.errors import KafkaStorageError

if TYPE_CHECKING:
    from pybroker.protocol.typed.admin import (
        AlterClientQuotasRequest,
        AlterClientQuotasResponse,
        AlterClientQuotasResponseEntryData,
        DescribeClientQuotasRequest,
        DescribeClientQuotasResponse,
        EntityData,
    )


@handles(ApiKey.DESCRIBE_CLIENT_QUOTAS, 0, 1)
def describe_client_quotas(ctx: RequestContext, req: DescribeClientQuotasRequest) -> DescribeClientQuotasResponse:
    if not auth.authorize_cluster(ctx, AclOperation.DESCRIBE_CONFIGS):  # Kafka: DescribeConfigs on the cluster
        return {"throttle_time_ms": 0, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                "error_message": None, "entries": None}
    components = [(c["entity_type"], c["match_type"], c["match"]) for c in req["components"]]
    try:
        found = describe(ctx.services.metadata_store.client_quotas, components, req["strict"])
    except QuotaError as e:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.INVALID_REQUEST, "error_message": str(e),
                "entries": None}
    return {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "entries": [
            {
                "entity": [{"entity_type": t, "entity_name": n} for t, n in key],
                "values": [{"key": k, "value": v} for k, v in sorted(values.items())],
            }
            for key, values in found
        ],
    }


@handles(ApiKey.ALTER_CLIENT_QUOTAS, 0, 1)
def alter_client_quotas(ctx: RequestContext, req: AlterClientQuotasRequest) -> AlterClientQuotasResponse:
    # One result per entity, as Kafka answers from a map keyed by entity (the last alteration's error).
    results: dict[tuple, AlterClientQuotasResponseEntryData] = {}
    changes: dict = {}
    if not auth.authorize_cluster(ctx, AclOperation.ALTER_CONFIGS):  # Kafka: AlterConfigs on the cluster
        return {
            "throttle_time_ms": 0,
            "entries": [
                _result(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None, entry["entity"]) for entry in req["entries"]
            ],
        }
    for entry in req["entries"]:
        entity = [(e["entity_type"], e["entity_name"]) for e in entry["entity"]]
        error, message = ErrorCode.NONE, None
        try:
            key = validate_entity(entity)
        except QuotaError as e:
            results[tuple(sorted(entity, key=repr))] = _result(ErrorCode.INVALID_REQUEST, str(e), entry["entity"])
            continue
        try:
            ops: dict[str, float | None] = {}
            for op in entry["ops"]:
                validate_op(op["key"], op["value"], op["remove"], ip_entity=any(t == IP for t, _ in key))
                if op["key"] in ops:
                    raise QuotaError(f"Duplicate quota key {op['key']} not updating quota for entity {entity}")
                ops[op["key"]] = None if op["remove"] else float(op["value"])
        except QuotaError as e:
            error, message = ErrorCode.INVALID_REQUEST, str(e)
        else:
            changes.setdefault(key, {}).update(ops)
        results[key] = _result(error, message, entry["entity"])
    if changes and not req["validate_only"]:
        try:
            ctx.services.metadata_store.alter_client_quotas(changes)
        except KafkaStorageError as e:
            for r in results.values():
                if r["error_code"] == ErrorCode.NONE:
                    r["error_code"], r["error_message"] = ErrorCode.UNKNOWN_SERVER_ERROR, str(e)
    return {"throttle_time_ms": 0, "entries": list(results.values())}


def _result(error: int, message: str | None, entity: Sequence[EntityData]) -> AlterClientQuotasResponseEntryData:
    return {"error_code": error, "error_message": message, "entity": entity}
