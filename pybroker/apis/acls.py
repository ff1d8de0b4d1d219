"""DescribeAcls (29), CreateAcls (30), DeleteAcls (31), as Kafka's AclApis and AclControlManager answer them.

Describing needs Describe on the cluster, creating and deleting Alter on the cluster
(CLUSTER_AUTHORIZATION_FAILED otherwise); with no authorizer configured each answers SECURITY_DISABLED.
A request naming an UNKNOWN (code 0) type, pattern, operation or permission is one Kafka cannot parse
(its request classes refuse it): the connection is closed.  Changes are written to the metadata store
in one atomic write per request before they are answered.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pybroker.apis import CloseConnection, RequestContext, auth, handles
from pybroker.apis.auth import ALTER, DESCRIBE, authorize_cluster
from pybroker.protocol.errors import ErrorCode
from pybroker.protocol.messages.api_keys import ApiKey
from pybroker.security.acl import (
    AclBinding,
    AclBindingFilter,
    is_concrete,
    operation,
    pattern_type,
    permission_type,
    resource_type,
)
from pybroker.storage.errors import KafkaStorageError

if TYPE_CHECKING:
    from pybroker.protocol.typed.admin import (
        AclCreationResult,
        AclDescription,
        CreateAclsRequest,
        CreateAclsResponse,
        DeleteAclsFilter,
        DeleteAclsFilterResult,
        DeleteAclsMatchingAcl,
        DeleteAclsRequest,
        DeleteAclsResponse,
        DescribeAclsRequest,
        DescribeAclsResource,
        DescribeAclsResponse,
    )

log = logging.getLogger(__name__)

DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = ApiKey.DESCRIBE_ACLS, ApiKey.CREATE_ACLS, ApiKey.DELETE_ACLS
_NOT_AUTHORIZED = "Request is not authorized: it needs {} on the cluster."
_NO_AUTHORIZER = "No Authorizer is configured."


def _check_codes(ctx: RequestContext, items: Sequence[Mapping[str, Any]], kind: str, rtype: str, ptype: str) -> None:
    for item in items:
        if 0 in (item[rtype], item[ptype], item["operation"], item["permission_type"]):
            raise CloseConnection(f"{kind} v{ctx.version} request contains UNKNOWN elements: {item}")


def _filter(item: DescribeAclsRequest | DeleteAclsFilter) -> AclBindingFilter:
    return AclBindingFilter(
        resource_type(item["resource_type_filter"]),
        item["resource_name_filter"],
        pattern_type(item["pattern_type_filter"]),
        item["principal_filter"],
        item["host_filter"],
        operation(item["operation"]),
        permission_type(item["permission_type"]),
    )


def _describe_resources(acls: list[AclBinding]) -> list[DescribeAclsResource]:
    """Kafka's DescribeAclsResponse.aclsResources: the ACLs grouped by resource pattern."""
    by_pattern: dict[tuple, list[AclDescription]] = {}
    for acl in acls:
        entries = by_pattern.setdefault((acl.resource_type, acl.resource_name, acl.pattern_type), [])
        entry: AclDescription = {
            "principal": acl.principal,
            "host": acl.host,
            "operation": acl.operation,
            "permission_type": acl.permission_type,
        }
        if entry not in entries:
            entries.append(entry)
    return [
        {"resource_type": rt, "resource_name": name, "pattern_type": pt, "acls": entries}
        for (rt, name, pt), entries in by_pattern.items()
    ]


@handles(DESCRIBE_ACLS, 1, 3)
def handle_describe_acls(ctx: RequestContext, request: DescribeAclsRequest) -> DescribeAclsResponse:
    _check_codes(ctx, [request], "DescribeAcls", "resource_type_filter", "pattern_type_filter")
    out: DescribeAclsResponse = {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": "", "resources": []}
    if not authorize_cluster(ctx, DESCRIBE):
        return {**out, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "error_message": _NOT_AUTHORIZED.format("Describe")}
    authorizer = auth.authorizer_of(ctx)
    if authorizer is None:
        return {
            **out,
            "error_code": ErrorCode.SECURITY_DISABLED,
            "error_message": "No Authorizer is configured on the broker",
        }
    out["resources"] = _describe_resources(authorizer.acls(_filter(request)))
    return out


@handles(CREATE_ACLS, 1, 3)
def handle_create_acls(ctx: RequestContext, request: CreateAclsRequest) -> CreateAclsResponse:
    creations = request["creations"]
    _check_codes(ctx, creations, "CreateAcls", "resource_type", "resource_pattern_type")

    def every(code: ErrorCode, message: str | None) -> CreateAclsResponse:
        return {
            "throttle_time_ms": 0,
            "results": [{"error_code": code, "error_message": message} for _ in creations],
        }

    if not authorize_cluster(ctx, ALTER):
        return every(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, _NOT_AUTHORIZED.format("Alter"))
    authorizer = auth.authorizer_of(ctx)
    if authorizer is None:
        return every(ErrorCode.SECURITY_DISABLED, _NO_AUTHORIZER)
    bindings = [
        AclBinding(
            resource_type(c["resource_type"]),
            c["resource_name"],
            pattern_type(c["resource_pattern_type"]),
            c["principal"],
            c["host"],
            operation(c["operation"]),
            permission_type(c["permission_type"]),
        )
        for c in creations
    ]
    if not all(is_concrete(b) for b in bindings):
        return every(ErrorCode.UNKNOWN_SERVER_ERROR, None)
    try:
        outcomes = authorizer.create_acls(bindings)
    except KafkaStorageError as e:
        return every(ErrorCode.KAFKA_STORAGE_ERROR, str(e))
    results: list[AclCreationResult] = []
    for outcome in outcomes:
        if outcome is None:
            results.append({"error_code": ErrorCode.NONE, "error_message": ""})  # Kafka's default, not null
        else:
            results.append({"error_code": ErrorCode.INVALID_REQUEST, "error_message": str(outcome)})
    log.info("%s created ACLs %s", ctx.principal, [b for b, o in zip(bindings, outcomes, strict=True) if o is None])
    return {"throttle_time_ms": 0, "results": results}


@handles(DELETE_ACLS, 1, 3)
def handle_delete_acls(ctx: RequestContext, request: DeleteAclsRequest) -> DeleteAclsResponse:
    filters = request["filters"]
    _check_codes(ctx, filters, "DeleteAcls", "resource_type_filter", "pattern_type_filter")

    def every(code: ErrorCode, message: str) -> DeleteAclsResponse:
        return {
            "throttle_time_ms": 0,
            "filter_results": [
                {"error_code": code, "error_message": message, "matching_acls": []} for _ in filters
            ],
        }

    if not authorize_cluster(ctx, ALTER):
        return every(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, _NOT_AUTHORIZED.format("Alter"))
    authorizer = auth.authorizer_of(ctx)
    if authorizer is None:
        return every(ErrorCode.SECURITY_DISABLED, _NO_AUTHORIZER)
    try:
        outcomes = authorizer.delete_acls([_filter(f) for f in filters])
    except KafkaStorageError as e:
        return every(ErrorCode.KAFKA_STORAGE_ERROR, str(e))
    results: list[DeleteAclsFilterResult] = []
    for outcome in outcomes:
        if isinstance(outcome, Exception):
            results.append({"error_code": ErrorCode.INVALID_REQUEST, "error_message": str(outcome), "matching_acls": []})
            continue
        matching: list[DeleteAclsMatchingAcl] = [
            {
                "error_code": ErrorCode.NONE,
                "error_message": None,
                "resource_type": acl.resource_type,
                "resource_name": acl.resource_name,
                "pattern_type": acl.pattern_type,
                "principal": acl.principal,
                "host": acl.host,
                "operation": acl.operation,
                "permission_type": acl.permission_type,
            }
            for acl in outcome
        ]
        results.append({"error_code": ErrorCode.NONE, "error_message": None, "matching_acls": matching})
    if any(not isinstance(o, Exception) and o for o in outcomes):
        log.info("%s deleted ACLs %s", ctx.principal, [a for o in outcomes if not isinstance(o, Exception) for a in o])
    return {"throttle_time_ms": 0, "filter_results": results}
