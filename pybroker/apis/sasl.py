"""SaslHandshake (17), SaslAuthenticate (36), DescribeUserScramCredentials (50) and
AlterUserScramCredentials (51).

The SASL exchange itself happens in the connection's authenticator (security/authenticator.py) before any
handler runs; these two handlers answer what reaches the request handlers, as Kafka's KafkaApis does:
a SaslHandshake or SaslAuthenticate on a connection that is already authenticated (and is not
re-authenticating) or on a listener without SASL gets ILLEGAL_SASL_STATE.

SCRAM credentials are kept in the metadata store as Kafka's controller keeps UserScramCredentialRecords,
with ScramControlManager's validation and messages.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from pybroker.apis import RequestContext, auth, handles
from pybroker.protocol.errors import ErrorCode
from pybroker.protocol.messages.api_keys import ApiKey
from pybroker.security.scram import MAX_ITERATIONS, ScramCredential, ScramMechanism
from pybroker.storage.errors import KafkaStorageError

if TYPE_CHECKING:
    from pybroker.protocol.typed.admin import (
        AlterUserScramCredentialsRequest,
        AlterUserScramCredentialsResponse,
        AlterUserScramCredentialsResult,
        CredentialInfo,
        DescribeUserScramCredentialsRequest,
        DescribeUserScramCredentialsResponse,
        DescribeUserScramCredentialsResult,
        ScramCredentialDeletion,
        ScramCredentialUpsertion,
    )
    from pybroker.protocol.typed.other import (
        SaslAuthenticateRequest,
        SaslAuthenticateResponse,
        SaslHandshakeRequest,
        SaslHandshakeResponse,
    )

log = logging.getLogger(__name__)


def _mechanism(type_id: int) -> ScramMechanism:
    """A mechanism type already validated (_validate_name_and_mechanism)."""
    mechanism = ScramMechanism.from_type(type_id)
    assert mechanism is not None, type_id
    return mechanism


@handles(ApiKey.SASL_HANDSHAKE, 0, 1)
def handle_sasl_handshake(ctx: RequestContext, request: SaslHandshakeRequest) -> SaslHandshakeResponse:
    return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": []}


@handles(ApiKey.SASL_AUTHENTICATE, 0, 2)
def handle_sasl_authenticate(ctx: RequestContext, request: SaslAuthenticateRequest) -> SaslAuthenticateResponse:
    return {
        "error_code": ErrorCode.ILLEGAL_SASL_STATE,
        "error_message": "SaslAuthenticate request received after successful authentication",
        "auth_bytes": b"",
        "session_lifetime_ms": 0,
    }


@handles(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, 0)
def handle_describe_user_scram_credentials(
    ctx: RequestContext, request: DescribeUserScramCredentialsRequest
) -> DescribeUserScramCredentialsResponse:
    store = ctx.services.metadata_store
    users = request.get("users")
    if not auth.authorize_cluster(ctx, auth.DESCRIBE):  # Kafka: Describe on the cluster
        refused = (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, auth.default_message(ErrorCode.CLUSTER_AUTHORIZATION_FAILED))
        return {
            "throttle_time_ms": 0,
            "error_code": refused[0],
            "error_message": refused[1],
            "results": [
                {"user": "", "error_code": refused[0], "error_message": refused[1], "credential_infos": []}
                for _ in users or ()
            ],
        }
    if not users:
        names = sorted(store.scram_credentials)
        duplicated: set[str] = set()
    else:
        names, seen, duplicated = [], set(), set()
        for u in users:
            name = u["name"]
            if name in seen:
                duplicated.add(name)
            else:
                seen.add(name)
                names.append(name)
    results: list[DescribeUserScramCredentialsResult] = []
    for name in names:
        if name in duplicated:
            results.append(
                {
                    "user": name,
                    "error_code": ErrorCode.DUPLICATE_RESOURCE,
                    "error_message": f"Cannot describe SCRAM credentials for the same user twice in a single "
                    f"request: {name}",
                    "credential_infos": [],
                }
            )
            continue
        by_mechanism = store.scram_credentials.get(name)
        if not by_mechanism:
            results.append(
                {
                    "user": name,
                    "error_code": ErrorCode.RESOURCE_NOT_FOUND,
                    "error_message": f"Attempt to describe a user credential that does not exist: {name}",
                    "credential_infos": [],
                }
            )
            continue
        infos: list[CredentialInfo] = []
        for mechanism in ScramMechanism:
            credential = by_mechanism.get(mechanism.mechanism_name)
            if credential is not None:
                infos.append({"mechanism": mechanism.type_id, "iterations": credential.iterations})
        results.append({"user": name, "error_code": ErrorCode.NONE, "error_message": None, "credential_infos": infos})
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None, "results": results}


def _validate_name_and_mechanism(name: str, type_id: int) -> tuple[int, str] | None:
    if not name:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if ScramMechanism.from_type(type_id) is None:
        return ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    return None


@handles(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, 0)
def handle_alter_user_scram_credentials(
    ctx: RequestContext, request: AlterUserScramCredentialsRequest
) -> AlterUserScramCredentialsResponse:
    """ScramControlManager.alterCredentials: a user named twice in one request (in deletions or upsertions)
    is refused with DUPLICATE_RESOURCE; the accepted changes are written together."""
    store = ctx.services.metadata_store
    if not auth.authorize_cluster(ctx, auth.ALTER):  # Kafka's controller: Alter on the cluster
        changes = [*(request.get("deletions") or []), *(request.get("upsertions") or [])]
        users = sorted({c["name"] for c in changes})
        return {
            "throttle_time_ms": 0,
            "results": [
                {
                    "user": user,
                    "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                    "error_message": "Request is not authorized: it needs Alter on the cluster.",
                }
                for user in users
            ],
        }
    errors: dict[str, tuple[int, str]] = {}
    deletions: dict[str, ScramCredentialDeletion] = {}
    upsertions: dict[str, ScramCredentialUpsertion] = {}
    duplicate = (ErrorCode.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request")
    for d in request.get("deletions") or []:
        name = d["name"]
        if name in errors:
            continue
        if deletions.pop(name, None) is not None:
            errors[name] = duplicate
            continue
        error = _validate_name_and_mechanism(name, d["mechanism"])
        if error is None and store.scram_credential(name, _mechanism(d["mechanism"]).mechanism_name) is None:
            error = (ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist")
        if error is not None:
            errors[name] = error
        else:
            deletions[name] = d
    for u in request.get("upsertions") or []:
        name = u["name"]
        if name in errors:
            continue
        if deletions.pop(name, None) is not None or upsertions.pop(name, None) is not None:
            errors[name] = duplicate
            continue
        error = _validate_name_and_mechanism(name, u["mechanism"])
        if error is None:
            if u["iterations"] < _mechanism(u["mechanism"]).min_iterations:
                error = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
            elif u["iterations"] > MAX_ITERATIONS:
                error = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
        if error is not None:
            errors[name] = error
        else:
            upsertions[name] = u
    removed = [(n, _mechanism(d["mechanism"]).mechanism_name) for n, d in deletions.items()]
    added = []
    for name, u in upsertions.items():
        mechanism = _mechanism(u["mechanism"])
        credential = ScramCredential.from_salted_password(
            mechanism, bytes(u["salt"]), bytes(u["salted_password"]), u["iterations"]
        )
        added.append((name, mechanism.mechanism_name, credential))
    results: list[AlterUserScramCredentialsResult] = []
    if removed or added:
        try:
            store.alter_scram_credentials(removed, added)
        except KafkaStorageError as e:
            log.error("could not record SCRAM credentials: %s", e)
            failure = (ErrorCode.KAFKA_STORAGE_ERROR, str(e))
            for name in [*deletions, *upsertions]:
                errors[name] = failure
            deletions, upsertions = {}, {}
    for name in [*deletions, *upsertions]:
        results.append({"user": name, "error_code": ErrorCode.NONE, "error_message": None})
    for name, (code, message) in errors.items():
        results.append({"user": name, "error_code": code, "error_message": message})
    return {"throttle_time_ms": 0, "results": results}
