"""The handlers' one way to ask the authorizer (Kafka's AuthHelper): each check is one call here.

With no authorizer configured every check passes at the cost of one attribute test, and the
authorized-operations bitfields report every supported operation, as Kafka does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from pybroker.apis import RequestContext
from pybroker.protocol.errors import DEFAULT_MESSAGES, ErrorCode
from pybroker.security.acl import CLUSTER_NAME, SUPPORTED_OPERATIONS, AclOperation, ResourceType

# Kafka's AclOperation / ResourceType names, so a check reads like KafkaApis.
READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = (
    AclOperation.READ,
    AclOperation.WRITE,
    AclOperation.CREATE,
    AclOperation.DELETE,
    AclOperation.ALTER,
    AclOperation.DESCRIBE,
)
CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = (
    AclOperation.CLUSTER_ACTION,
    AclOperation.DESCRIBE_CONFIGS,
    AclOperation.ALTER_CONFIGS,
    AclOperation.IDEMPOTENT_WRITE,
)
TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID = (
    ResourceType.TOPIC,
    ResourceType.GROUP,
    ResourceType.CLUSTER,
    ResourceType.TRANSACTIONAL_ID,
)


def _authorizer(ctx: RequestContext):
    # The one place handlers reach the authorizer (the broker's, or its services' once handlers get
    # narrow services); getattr: stand-ins without one (tests, views) mean none is configured.
    holder = getattr(ctx, "services", None) or getattr(ctx, "broker", None)
    return getattr(holder, "authorizer", None)


authorizer_of = _authorizer


def enabled(ctx: RequestContext) -> bool:
    return _authorizer(ctx) is not None


def authorize(
    ctx: RequestContext, op: AclOperation, rtype: ResourceType, name: str, *, log_denied: bool = True
) -> bool:
    authorizer = _authorizer(ctx)
    if authorizer is None:
        return True
    return authorizer.authorize(str(ctx.principal), ctx.client_host, op, rtype, name, log_denied)


def authorize_cluster(ctx: RequestContext, op: AclOperation, *, log_denied: bool = True) -> bool:
    return authorize(ctx, op, CLUSTER, CLUSTER_NAME, log_denied=log_denied)


def denied(
    ctx: RequestContext, op: AclOperation, rtype: ResourceType, names: Iterable[str | None], *, log_denied: bool = True
) -> frozenset[str]:
    """The names (of those given) the principal may not ``op``: empty when there is no authorizer."""
    authorizer = _authorizer(ctx)
    if authorizer is None:
        return frozenset()
    principal, host = str(ctx.principal), ctx.client_host
    return frozenset(
        n
        for n in set(names)
        if n is not None and not authorizer.authorize(principal, host, op, rtype, n, log_denied)
    )


def authorize_by_resource_type(ctx: RequestContext, op: AclOperation, rtype: ResourceType) -> bool:
    authorizer = _authorizer(ctx)
    if authorizer is None:
        return True
    return authorizer.authorize_by_resource_type(str(ctx.principal), ctx.client_host, op, rtype)


def authorized_operations(ctx: RequestContext, rtype: ResourceType, name: str) -> int:
    """Kafka's AuthHelper.authorizedOperations bitfield (bit n: the operation of code n)."""
    authorizer = _authorizer(ctx)
    if authorizer is None:
        bits = 0
        for op in SUPPORTED_OPERATIONS[rtype]:
            bits |= 1 << op
        return bits
    return authorizer.authorized_operations(str(ctx.principal), ctx.client_host, rtype, name)


_Entry = TypeVar("_Entry", bound=Mapping[str, Any])  # a response entry: dict or TypedDict


def unauthorized_last(entries: list[_Entry], unauthorized: frozenset[str], key: str) -> list[_Entry]:
    """Kafka answers the authorized entries first, then the refused ones (``responses ++ unauthorized``)."""
    if not unauthorized:
        return entries
    return [e for e in entries if e[key] not in unauthorized] + [e for e in entries if e[key] in unauthorized]


def default_message(code: ErrorCode) -> str:
    """Kafka's message of an error raised without one (Errors.message())."""
    return DEFAULT_MESSAGES[code]
