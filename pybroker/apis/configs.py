"""DescribeConfigs (32), AlterConfigs (33), IncrementalAlterConfigs (44) for topics and the broker."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Mapping
from typing import TYPE_CHECKING, Any

from pybroker import config as broker_config
from pybroker.apis import RequestContext, auth, broker_loggers, handles, telemetry
from pybroker.protocol.errors import DEFAULT_MESSAGES, ErrorCode, KafkaError
from pybroker.protocol.messages.api_keys import ApiKey

if TYPE_CHECKING:
    from pybroker.protocol.typed.admin import (
        AlterConfigsRequest,
        AlterConfigsResourceResponse,
        AlterConfigsResponse,
        DescribeConfigsRequest,
        DescribeConfigsResourceResult,
        DescribeConfigsResponse,
        DescribeConfigsResult,
        IncrementalAlterConfigsRequest,
        IncrementalAlterConfigsResponse,
    )

log = logging.getLogger(__name__)

TOPIC = 2
BROKER = 4
BROKER_LOGGER = 8
GROUP = 32
CLIENT_METRICS = telemetry.CLIENT_METRICS
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def _entry(e, version: int, include_synonyms: bool, include_docs: bool) -> DescribeConfigsResourceResult:
    entry: DescribeConfigsResourceResult = {
        "name": e.name,
        "value": e.value,
        "read_only": e.read_only,
        "config_source": e.source,
        "is_sensitive": e.sensitive,
        "synonyms": [{"name": n, "value": v, "source": s} for n, v, s in e.synonyms]
        if include_synonyms
        else [],
        "config_type": e.config_type,
        "documentation": e.documentation if include_docs else None,
    }
    return entry


def _describe_broker_name_error(ctx: RequestContext, name: str) -> str | None:
    """Kafka's answers (INVALID_REQUEST) for a BROKER resource name that is not "" or this node's id."""
    if name == "":
        return None
    if not _is_int(name):
        return f"Broker id must be an integer, but it is: {name}"
    if int(name) != ctx.services.node_id:
        return f"Unexpected broker id, expected {ctx.services.node_id} or empty string, but received {name}"
    return None


def _alter_node_name_error(ctx: RequestContext, name: str, allow_default: bool) -> str | None:
    if name == "" and allow_default:
        return None
    if not _is_int(name):
        return f"Node id must be an integer, but it is: {name}"
    if int(name) != ctx.services.node_id:
        return f"Unexpected broker id, expected {ctx.services.node_id}, but received {name}"
    return None


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


@handles(ApiKey.DESCRIBE_CONFIGS, 1, 4)
def handle_describe_configs(ctx: RequestContext, request: DescribeConfigsRequest) -> DescribeConfigsResponse:
    b = ctx.services
    include_synonyms = request.get("include_synonyms", False)
    include_docs = request.get("include_documentation", False)
    results: list[DescribeConfigsResult] = []
    refused: list[DescribeConfigsResult] = []  # Kafka answers the resources it refused after the others
    for r in request["resources"]:
        rtype, rname, keys = r["resource_type"], r["resource_name"], r["configuration_keys"]
        out: DescribeConfigsResult = {
            "error_code": ErrorCode.NONE,
            "error_message": None,
            "resource_type": rtype,
            "resource_name": rname,
            "configs": [],
        }
        denial = _config_denial(ctx, auth.DESCRIBE_CONFIGS, rtype, rname)
        if denial is not None:
            out.update({"error_code": denial, "error_message": DEFAULT_MESSAGES[denial]})
            refused.append(out)
            continue
        if rtype == TOPIC:
            rec = ctx.metadata_image().topic(rname)
            if rec is None:
                out.update(
                    {
                        "error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                        "error_message": f"Topic '{rname}' does not exist.",
                    }
                )
                results.append(out)
                continue
            entries = broker_config.describe_topic_config(b.config, dict(rec.configs))
        elif rtype == CLIENT_METRICS:
            stored = b.metadata_store.client_metrics.get(rname, {})
            out["configs"] = [
                {
                    "name": k,
                    "value": v,
                    "read_only": False,
                    "config_source": 1 if k in stored else 5,  # DYNAMIC_TOPIC_CONFIG's slot, DEFAULT_CONFIG
                    "is_sensitive": False,
                    "synonyms": [],
                    "config_type": 0,
                    "documentation": None,
                }
                for k, v in telemetry.describe_entries(stored)
                if keys is None or k in keys
            ]
            results.append(out)
            continue
        elif rtype in (BROKER, BROKER_LOGGER):
            error = (
                _describe_broker_name_error(ctx, rname)
                if rtype == BROKER
                else _alter_node_name_error(ctx, rname, allow_default=False)
            )
            if error is not None:
                out.update({"error_code": ErrorCode.INVALID_REQUEST, "error_message": error})
                results.append(out)
                continue
            if rtype == BROKER_LOGGER:
                entries = broker_loggers.describe(keys)
            elif rname == "":
                entries = broker_config.describe_broker_default_config(b.config)
            else:
                entries = broker_config.describe_broker_config(b.config)
        else:
            out.update(
                {
                    "error_code": ErrorCode.INVALID_REQUEST,
                    "error_message": f"Unsupported resource type {rtype} or unknown resource '{rname}'",
                }
            )
            results.append(out)
            continue
        if keys is not None:
            wanted = set(keys)
            entries = [e for e in entries if e.name in wanted]
        out["configs"] = [_entry(e, ctx.version, include_synonyms, include_docs) for e in entries]
        results.append(out)
    return {"throttle_time_ms": 0, "results": results + refused}


def _config_denial(ctx: RequestContext, op, rtype: int, name: str) -> ErrorCode | None:
    """Kafka's ConfigHelper / ControllerApis checks: DescribeConfigs or AlterConfigs on the topic, on the
    cluster for the broker and its loggers; the error names the resource type refused."""
    if rtype == TOPIC:
        return None if auth.authorize(ctx, op, auth.TOPIC, name) else ErrorCode.TOPIC_AUTHORIZATION_FAILED
    if rtype in (BROKER, BROKER_LOGGER, CLIENT_METRICS):  # Kafka: client metrics are cluster resources
        return None if auth.authorize_cluster(ctx, op) else ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    return None


async def _apply_topic_configs(
    ctx: RequestContext, name: str, new: dict[str, str], validate_only: bool
) -> tuple[ErrorCode, str | None]:
    b = ctx.services
    try:
        broker_config.validate_topic_configs(new)
    except broker_config.ConfigError as e:
        return ErrorCode.INVALID_CONFIG, str(e)
    if not validate_only:
        try:
            await b.topic_admin.alter_topic_configs(name, new)
        except KafkaError as e:  # the change could not be recorded (KAFKA_STORAGE_ERROR, REQUEST_TIMED_OUT)
            return ErrorCode(e.code), e.message
        log.info("topic %s configs now %s", name, new)
    return ErrorCode.NONE, None


async def _alter(ctx: RequestContext, request: Mapping[str, Any], incremental: bool) -> AlterConfigsResponse:
    """AlterConfigs and IncrementalAlterConfigs (whose config entries add ``config_operation``): the
    request is read as a plain mapping; both answers have the same shape."""
    b = ctx.services
    validate_only = request.get("validate_only", False)
    responses: list[AlterConfigsResourceResponse] = []
    for r in request["resources"]:
        rtype, rname = r["resource_type"], r["resource_name"]
        code, message = ErrorCode.NONE, None
        denial = _config_denial(ctx, auth.ALTER_CONFIGS, rtype, rname)
        if denial is not None:
            code, message = denial, DEFAULT_MESSAGES[denial]
        elif rtype == TOPIC:
            rec = ctx.metadata_image().topic(rname)
            if rec is None:
                code, message = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{rname}' does not exist."
            elif incremental and (problem := _incremental_ops_problem(r["configs"])) is not None:
                code, message = ErrorCode.INVALID_REQUEST, problem
            else:
                new = dict(rec.configs) if incremental else {}
                try:
                    for c in r["configs"]:
                        _apply_op(new, c, incremental, b)
                except ValueError as e:
                    code, message = ErrorCode.INVALID_CONFIG, str(e)
                else:
                    code, message = await _apply_topic_configs(ctx, rname, new, validate_only)
        elif rtype == BROKER:
            code, message = _alter_broker(ctx, rname, r["configs"], incremental, validate_only)
        elif rtype == CLIENT_METRICS:
            code, message = _alter_client_metrics(ctx, rname, r["configs"], incremental, validate_only)
        elif rtype == BROKER_LOGGER:
            code, message = _alter_loggers(ctx, rname, r["configs"], incremental, validate_only)
        elif rtype == GROUP and incremental:
            from pybroker.apis.share_groups import alter_group_configs

            code, message = alter_group_configs(ctx, rname, r["configs"], validate_only)
        else:
            code, message = ErrorCode.INVALID_REQUEST, f"unsupported resource type {rtype}"
        responses.append(
            {"error_code": code, "error_message": message, "resource_type": rtype, "resource_name": rname}
        )
    return {"throttle_time_ms": 0, "responses": responses}


def _alter_broker(
    ctx: RequestContext, name: str, ops: list[dict], incremental: bool, validate_only: bool
) -> tuple[ErrorCode, str | None]:
    """Dynamic broker configs of the cluster default ("") or this broker (its node id), as Kafka's
    ConfigAdminManager and DynamicBrokerConfig do: every problem is INVALID_REQUEST with Kafka's message."""
    b = ctx.services
    error = _alter_node_name_error(ctx, name, allow_default=True)
    if error is not None:
        return ErrorCode.INVALID_REQUEST, error
    if incremental:
        problem = _incremental_ops_problem(ops)
        if problem is not None:
            return ErrorCode.INVALID_REQUEST, problem
    level = b.topic_admin.dynamic_config_level(name)
    new = b.config.dynamic_configs(level) if incremental else {}
    for c in ops:
        key, value = c["name"], c["value"]
        op = c.get("config_operation", SET) if incremental else SET
        if op == SET:
            if value is None:
                new.pop(key, None)
            else:
                new[key] = value
        elif op == DELETE:
            new.pop(key, None)
        elif op in (APPEND, SUBTRACT):
            definition = broker_config.BROKER_CONFIGS.get(key)
            if definition is None or definition.type != broker_config.ConfigType.LIST:
                verb = "append" if op == APPEND else "subtract"
                return ErrorCode.INVALID_CONFIG, f"Config value {verb} is not allowed for config key: {key}"
            current = new.get(key)
            if current is None:
                current = broker_config.format_value(b.config.get(key))
            new[key] = _list_op(current, value, op)
        else:
            return ErrorCode.INVALID_REQUEST, f"Unknown config operation {op}"
    try:
        b.config.validate_dynamic(level, new)
    except broker_config.ConfigError as e:
        return ErrorCode.INVALID_REQUEST, str(e)
    if not validate_only:
        b.topic_admin.set_dynamic_broker_configs(name, new)
    return ErrorCode.NONE, None


def _alter_client_metrics(
    ctx: RequestContext, name: str, ops: list[dict], incremental: bool, validate_only: bool
) -> tuple[ErrorCode, str | None]:
    """A client-metrics subscription (KIP-714): its configs replaced or edited, validated as Kafka's
    ClientMetricsConfigs does, then kept in the metadata store."""
    if not name:
        return ErrorCode.INVALID_REQUEST, "Subscription name can't be empty"
    if incremental:
        problem = _incremental_ops_problem(ops)
        if problem is not None:
            return ErrorCode.INVALID_REQUEST, problem
    manager = ctx.services.client_metrics
    new = dict(manager.store.client_metrics.get(name, {})) if incremental else {}
    try:
        for c in ops:
            _apply_op(new, c, incremental, ctx.services)
        telemetry.validate_subscription(new)
    except (ValueError, telemetry.ClientMetricsConfigError) as e:  # Kafka: InvalidRequestException
        return ErrorCode.INVALID_REQUEST, str(e)
    if not validate_only:
        manager.set_subscription(name, new)
        log.info("client metrics subscription %s now %s", name, new)
    return ErrorCode.NONE, None


def _alter_loggers(
    ctx: RequestContext, name: str, ops: list[dict], incremental: bool, validate_only: bool
) -> tuple[ErrorCode, str | None]:
    error = _alter_node_name_error(ctx, name, allow_default=False)
    if error is not None:
        return ErrorCode.INVALID_REQUEST, error
    if not incremental:  # Kafka: loggers only through IncrementalAlterConfigs
        return ErrorCode.INVALID_REQUEST, f"Unknown resource type {BROKER_LOGGER}"
    problem = _incremental_ops_problem(ops)
    if problem is not None:
        return ErrorCode.INVALID_REQUEST, problem
    for c in ops:
        if c.get("config_operation", SET) in (APPEND, SUBTRACT):
            verb = "APPEND" if c["config_operation"] == APPEND else "SUBTRACT"
            return ErrorCode.INVALID_REQUEST, f"{verb} operation is not allowed for the BROKER_LOGGER resource"
    changes = [(c["name"], c.get("config_operation", SET), c["value"]) for c in ops]
    try:
        broker_loggers.validate(changes)
    except broker_loggers.LoggerConfigError as e:
        return e.code, str(e)
    if not validate_only:
        broker_loggers.apply(changes)
    return ErrorCode.NONE, None


def _incremental_ops_problem(ops: list[dict]) -> str | None:
    """Kafka's ConfigAdminManager checks of one resource's IncrementalAlterConfigs entries."""
    names = [c["name"] for c in ops]
    if len(set(names)) != len(names):
        return "Error due to duplicate config keys"
    for c in ops:
        if c.get("config_operation", SET) != DELETE and c["value"] is None:
            return f"Null value not supported for : {c['name']}"
    return None


def _list_op(current: str, value: str | None, op: int) -> str:
    items = [x for x in current.split(",") if x]
    for v in (value or "").split(","):
        if not v:
            continue
        if op == APPEND and v not in items:
            items.append(v)
        elif op == SUBTRACT and v in items:
            items.remove(v)
    return ",".join(items)


def _apply_op(configs: dict[str, str], c: dict, incremental: bool, broker) -> None:
    name, value = c["name"], c["value"]
    op = c.get("config_operation", SET) if incremental else SET
    if op == SET:
        if value is None and not incremental:
            configs.pop(name, None)
        else:
            configs[name] = value
    elif op == DELETE:
        configs.pop(name, None)
    elif op in (APPEND, SUBTRACT):
        current = configs.get(name)
        if current is None:
            current = broker_config.effective_topic_config_str(broker.config, configs, name)
        items = [x for x in (current or "").split(",") if x]
        for v in (value or "").split(","):
            if not v:
                continue
            if op == APPEND and v not in items:
                items.append(v)
            elif op == SUBTRACT and v in items:
                items.remove(v)
        configs[name] = ",".join(items)
    else:
        raise ValueError(f"unknown config operation {op}")


@handles(ApiKey.ALTER_CONFIGS, 0, 2)
def handle_alter_configs(ctx: RequestContext, request: AlterConfigsRequest) -> Awaitable[AlterConfigsResponse]:
    return _alter(ctx, request, incremental=False)


@handles(ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, 1)
def handle_incremental_alter_configs(
    ctx: RequestContext, request: IncrementalAlterConfigsRequest
) -> Awaitable[IncrementalAlterConfigsResponse]:
    return _alter(ctx, request, incremental=True)
