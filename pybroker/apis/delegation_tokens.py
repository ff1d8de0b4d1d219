"""CreateDelegationToken (38), RenewDelegationToken (39), ExpireDelegationToken (40) and
DescribeDelegationToken (41): KIP-48's delegation tokens with KIP-373's owner, as Kafka's ControllerApis
(create, renew, expire) and KafkaApis (describe) answer them; the tokens themselves are the
DelegationTokenManager's (controller/delegation_tokens.py).

- Token requests are refused (DELEGATION_TOKEN_REQUEST_NOT_ALLOWED) on a connection authenticated by a
  token, on PLAINTEXT, and on SSL without a client certificate (``allowTokenRequests``).
- Creating a token for another owner needs CREATE_TOKENS on that User (else
  DELEGATION_TOKEN_AUTHORIZATION_FAILED); anyone may create one for themself.
- Describe lists the tokens the requester owns, requested or renews, and those it may DESCRIBE (the
  DelegationToken resource) or whose owner it may DESCRIBE_TOKENS (the User resource).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from pybroker.apis import RequestContext, auth, handles
from pybroker.protocol.errors import ErrorCode, KafkaError
from pybroker.protocol.messages.api_keys import ApiKey
from pybroker.security.acl import AclOperation, ResourceType
from pybroker.security.context import ANONYMOUS, PLAINTEXT, SSL, KafkaPrincipal

if TYPE_CHECKING:
    from pybroker.controller.delegation_tokens import DelegationTokenManager
    from pybroker.protocol.typed.other import (
        CreateDelegationTokenRequest,
        CreateDelegationTokenResponse,
        DescribedDelegationToken,
        DescribeDelegationTokenRequest,
        DescribeDelegationTokenResponse,
        ExpireDelegationTokenRequest,
        ExpireDelegationTokenResponse,
        RenewDelegationTokenRequest,
        RenewDelegationTokenResponse,
    )
    from pybroker.security.delegation_token import TokenInformation

# DelegationTokenManager.ErrorTimestamp: the timestamps of a request refused before reaching the controller.
ERROR_TIMESTAMP = -1


def allow_token_requests(ctx: RequestContext) -> bool:
    principal = ctx.principal
    protocol = ctx.security_protocol
    return not (
        principal.token_authenticated or protocol == PLAINTEXT or (protocol == SSL and principal == ANONYMOUS)
    )


def _manager(ctx: RequestContext) -> DelegationTokenManager:
    manager = ctx.services.delegation_tokens
    if manager is None or not manager.enabled:
        raise KafkaError(ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED)
    return manager


@handles(ApiKey.CREATE_DELEGATION_TOKEN, 1, 3)
def handle_create_delegation_token(
    ctx: RequestContext, request: CreateDelegationTokenRequest
) -> CreateDelegationTokenResponse:
    requester = ctx.principal
    owner_name = request.get("owner_principal_name")
    owner = KafkaPrincipal(request.get("owner_principal_type") or "", owner_name) if owner_name else requester
    response: CreateDelegationTokenResponse = {
        "throttle_time_ms": 0,
        "principal_type": owner.principal_type,
        "principal_name": owner.name,
        "issue_timestamp_ms": ERROR_TIMESTAMP,
        "expiry_timestamp_ms": ERROR_TIMESTAMP,
        "max_timestamp_ms": ERROR_TIMESTAMP,
        "token_id": "",
        "hmac": b"",
    }
    if ctx.version >= 3:  # KIP-373's requester (CreateDelegationTokenResponse.prepareResponse)
        response["token_requester_principal_type"] = requester.principal_type
        response["token_requester_principal_name"] = requester.name
    if not allow_token_requests(ctx):
        return {**response, "error_code": ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED}
    # A requester may always create a token for itself; for another owner it needs CREATE_TOKENS on the owner.
    if owner != requester and not auth.authorize(ctx, AclOperation.CREATE_TOKENS, ResourceType.USER, str(owner)):
        return {**response, "error_code": ErrorCode.DELEGATION_TOKEN_AUTHORIZATION_FAILED}
    renewers = [KafkaPrincipal(r["principal_type"], r["principal_name"]) for r in request["renewers"]]
    try:
        created = _manager(ctx).create(requester, owner, renewers, request["max_lifetime_ms"])
    except KafkaError as e:
        # The controller's answer: its timestamps are left at 0.
        return {**response, "error_code": e.code, "issue_timestamp_ms": 0, "expiry_timestamp_ms": 0,
                "max_timestamp_ms": 0}  # fmt: skip
    token = created.token
    return {
        **response,
        "error_code": ErrorCode.NONE,
        "issue_timestamp_ms": token.issue_timestamp,
        "expiry_timestamp_ms": token.expiry_timestamp,
        "max_timestamp_ms": token.max_timestamp,
        "token_id": token.token_id,
        "hmac": created.hmac,
    }


@handles(ApiKey.RENEW_DELEGATION_TOKEN, 1, 2)
def handle_renew_delegation_token(
    ctx: RequestContext, request: RenewDelegationTokenRequest
) -> RenewDelegationTokenResponse:
    return _new_expiry(ctx, lambda m: m.renew(ctx.principal, bytes(request["hmac"]), request["renew_period_ms"]))


@handles(ApiKey.EXPIRE_DELEGATION_TOKEN, 1, 2)
def handle_expire_delegation_token(
    ctx: RequestContext, request: ExpireDelegationTokenRequest
) -> ExpireDelegationTokenResponse:
    return _new_expiry(
        ctx, lambda m: m.expire(ctx.principal, bytes(request["hmac"]), request["expiry_time_period_ms"])
    )


def _new_expiry(ctx: RequestContext, change: Callable[[DelegationTokenManager], int]) -> RenewDelegationTokenResponse:
    """Renew and Expire answer alike: the token's new expiry timestamp, or an error code."""
    if not allow_token_requests(ctx):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED,
                "expiry_timestamp_ms": ERROR_TIMESTAMP}  # fmt: skip
    try:
        expiry = change(_manager(ctx))
    except KafkaError as e:
        return {"throttle_time_ms": 0, "error_code": e.code, "expiry_timestamp_ms": 0}
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "expiry_timestamp_ms": expiry}


@handles(ApiKey.DESCRIBE_DELEGATION_TOKEN, 1, 3)
def handle_describe_delegation_token(
    ctx: RequestContext, request: DescribeDelegationTokenRequest
) -> DescribeDelegationTokenResponse:
    if not allow_token_requests(ctx):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, "tokens": []}
    try:
        manager = _manager(ctx)
    except KafkaError as e:
        return {"throttle_time_ms": 0, "error_code": e.code, "tokens": []}
    owners_requested = request.get("owners")
    if owners_requested is not None and not owners_requested:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "tokens": []}
    owners = (
        None
        if owners_requested is None
        else [KafkaPrincipal(o["principal_type"], o["principal_name"]) for o in owners_requested]
    )
    requester = ctx.principal

    def eligible(token: TokenInformation) -> bool:
        """DelegationTokenManager.filterToken."""
        if owners is not None and not any(token.owner_or_renewer(o) for o in owners):
            return False
        if token.owner_or_renewer(requester):
            return True
        return auth.authorize(ctx, AclOperation.DESCRIBE, ResourceType.DELEGATION_TOKEN, token.token_id) or auth.authorize(
            ctx, AclOperation.DESCRIBE_TOKENS, ResourceType.USER, str(token.owner)
        )

    tokens: list[DescribedDelegationToken] = []
    for token, hmac in manager.tokens(eligible):
        described: DescribedDelegationToken = {
            "principal_type": token.owner.principal_type,
            "principal_name": token.owner.name,
            "issue_timestamp": token.issue_timestamp,
            "expiry_timestamp": token.expiry_timestamp,
            "max_timestamp": token.max_timestamp,
            "token_id": token.token_id,
            "hmac": hmac,
            "renewers": [{"principal_type": r.principal_type, "principal_name": r.name} for r in token.renewers],
        }
        if ctx.version >= 3:
            described["token_requester_principal_type"] = token.token_requester.principal_type
            described["token_requester_principal_name"] = token.token_requester.name
        tokens.append(described)
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "tokens": tokens}
