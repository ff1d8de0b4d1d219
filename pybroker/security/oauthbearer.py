"""SASL/OAUTHBEARER (RFC 7628) as Kafka's broker serves it.

Two validators, chosen as Kafka chooses its server callback handler
(``listener.name.<l>.oauthbearer.sasl.server.callback.handler.class``):

- ``UnsecuredJwsValidator`` (OAuthBearerUnsecuredValidatorCallbackHandler, the default, for development):
  an unsecured JWS (``alg`` ``none``, empty signature) whose principal claim (``sub`` unless the JAAS option
  ``unsecuredValidatorPrincipalClaimName`` says otherwise) is a string, ``iat`` (optional) not in the future,
  ``exp`` (required) not past, ``exp`` after ``iat``, and the ``unsecuredValidatorRequiredScope`` present.
- ``JwksValidator`` (OAuthBearerValidatorCallbackHandler, jose4j in Kafka; PyJWT here): a signed JWT
  (RS*/ES*/PS*, never ``none``) verified with the key of its ``kid`` from the JWKS at
  ``sasl.oauthbearer.jwks.endpoint.url`` (a ``file:`` URL), ``exp`` and ``iat`` required, audience and
  issuer checked when ``sasl.oauthbearer.expected.audience`` / ``.expected.issuer`` are set, the principal
  from ``sasl.oauthbearer.sub.claim.name``, ``sasl.oauthbearer.clock.skew.seconds`` of leeway.

A token that fails validation is answered as Kafka's OAuthBearerSaslServer does: the server's challenge is
the JSON error (``{"status":"invalid_token"}``), the client answers %x01, and the exchange fails with that
JSON as the SASL_AUTHENTICATION_FAILED message.
"""

from __future__ import annotations

import base64
import json
import logging
import re
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import unquote, urlparse

from pybroker.security.mechanisms import OAUTHBEARER, SaslAuthenticationError, SaslError, SaslServer

log = logging.getLogger(__name__)

SECURED_HANDLER_CLASS = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
# Kafka 3.x's name of the same handler, still accepted.
SECURED_HANDLER_CLASS_OLD = (
    "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerValidatorCallbackHandler"
)
UNSECURED_HANDLER_CLASS = (
    "org.apache.kafka.common.security.oauthbearer.internals.unsecured.OAuthBearerUnsecuredValidatorCallbackHandler"
)
_SIGNED_ALGORITHMS = ["RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256", "PS384", "PS512"]
_SASLNAME = re.compile(r"^(?:[\x01-\x7F]|=2C|=3D)+$")


class InvalidToken(Exception):
    """The token is not acceptable; ``scope`` set for an insufficient_scope failure."""

    def __init__(self, message: str, scope: str | None = None) -> None:
        super().__init__(message)
        self.scope = scope


class Token:
    def __init__(self, principal: str, expiration_ms: int) -> None:
        self.principal = principal
        self.expiration_ms = expiration_ms


def _b64url_json(part: str) -> dict:
    try:
        raw = base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise InvalidToken(f"malformed JOSE part: {e}") from None
    if not isinstance(value, dict):
        raise InvalidToken("a JOSE part is not a JSON object")
    return value


def _number(claims: dict, name: str) -> float | None:
    value = claims.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidToken(f"The claim {name} is not a number")
    return float(value)


class UnsecuredJwsValidator:
    def __init__(self, options: dict[str, str], clock: Callable[[], float] = time.time) -> None:
        self.principal_claim = (options.get("unsecuredValidatorPrincipalClaimName") or "").strip() or "sub"
        self.scope_claim = (options.get("unsecuredValidatorScopeClaimName") or "").strip() or "scope"
        self.required_scope = (options.get("unsecuredValidatorRequiredScope") or "").split()
        self.skew_ms = int((options.get("unsecuredValidatorAllowableClockSkewMs") or "0").strip() or 0)
        self.clock = clock

    def validate(self, token: str) -> Token:
        parts = token.split(".")
        if len(parts) != 3:
            raise InvalidToken("an unsecured JWS has three dot-separated parts")
        header, claims = _b64url_json(parts[0]), _b64url_json(parts[1])
        if header.get("alg") != "none":
            raise InvalidToken("an unsecured JWS must use the 'none' algorithm")
        if parts[2]:
            raise InvalidToken("an unsecured JWS must have an empty signature")
        principal = claims.get(self.principal_claim)
        if not isinstance(principal, str) or not principal:
            raise InvalidToken(f"Required claim missing or not a string: {self.principal_claim}")
        now_ms = self.clock() * 1000
        iat = _number(claims, "iat")
        if iat is not None and iat * 1000 > now_ms + self.skew_ms:
            raise InvalidToken("The token was issued in the future")
        exp = _number(claims, "exp")
        if exp is None:
            raise InvalidToken("Required claim missing: exp")
        if now_ms - self.skew_ms >= exp * 1000:
            raise InvalidToken("The token is expired")
        if iat is not None and exp <= iat:
            raise InvalidToken("The token's expiration time is not after its issued-at time")
        if self.required_scope:
            scope = claims.get(self.scope_claim)
            granted = scope.split() if isinstance(scope, str) else scope if isinstance(scope, list) else []
            missing = [s for s in self.required_scope if s not in granted]
            if missing:
                raise InvalidToken("The token lacks required scope", scope=" ".join(self.required_scope))
        return Token(principal, int(exp * 1000))


class JwksValidator:
    def __init__(
        self,
        jwks_url: str,
        audience: list[str],
        issuer: str | None,
        sub_claim: str = "sub",
        clock_skew_s: int = 30,
    ) -> None:
        import jwt  # PyJWT with cryptography: loaded only when a listener validates signed tokens

        self._jwt = jwt
        self.keys = _load_jwks(jwks_url)
        self.audience = audience
        self.issuer = issuer
        self.sub_claim = sub_claim
        self.clock_skew_s = clock_skew_s

    def validate(self, token: str) -> Token:
        jwt = self._jwt
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as e:
            raise InvalidToken(f"malformed token: {e}") from None
        kid = header.get("kid")
        key = self.keys.get(kid) if kid is not None else (next(iter(self.keys.values())) if len(self.keys) == 1 else None)
        if key is None:
            raise InvalidToken(f"no key in the JWKS for kid {kid!r}")
        options = {"require": ["exp", "iat"], "verify_aud": bool(self.audience)}
        try:
            claims = jwt.decode(
                token,
                key=key,
                algorithms=_SIGNED_ALGORITHMS,
                audience=self.audience or None,
                issuer=self.issuer or None,
                leeway=self.clock_skew_s,
                options=options,
            )
        except jwt.PyJWTError as e:
            raise InvalidToken(f"could not validate the token: {e}") from None
        principal = claims.get(self.sub_claim)
        if not isinstance(principal, str) or not principal:
            raise InvalidToken(f"The claim {self.sub_claim} is missing or not a string")
        return Token(principal, int(float(claims["exp"]) * 1000))


def _load_jwks(url: str) -> dict[str | None, object]:
    """The public keys of a JWKS document by kid; only file: URLs (the broker fetches nothing)."""
    import jwt

    parsed = urlparse(url)
    if parsed.scheme != "file":
        raise ValueError(f"sasl.oauthbearer.jwks.endpoint.url {url}: pybroker reads JWKS from file: URLs only")
    document = json.loads(Path(unquote(parsed.path)).read_text())
    keys: dict[str | None, object] = {}
    for jwk in document.get("keys", []):
        if jwk.get("use", "sig") != "sig":
            continue
        keys[jwk.get("kid")] = jwt.PyJWK.from_dict(jwk).key
    if not keys:
        raise ValueError(f"sasl.oauthbearer.jwks.endpoint.url {url}: the JWKS has no signing key")
    return keys


class OAuthBearerSaslServer(SaslServer):
    mechanism = OAUTHBEARER

    def __init__(self, validator: UnsecuredJwsValidator | JwksValidator) -> None:
        self._validator = validator
        self._error: str | None = None

    def evaluate_response(self, response: bytes) -> bytes:
        if response == b"\x01" and self._error is not None:
            raise SaslAuthenticationError(self._error)
        self._error = None
        authzid, token = _parse_client_initial_response(response)
        try:
            validated = self._validator.validate(token)
        except InvalidToken as e:
            log.debug("OAUTHBEARER token refused: %s", e)
            status = "insufficient_scope" if e.scope is not None else "invalid_token"
            error = f'{{"status":"{status}"'
            if e.scope is not None:
                error += f', "scope":"{e.scope}"'
            self._error = error + "}"
            return self._error.encode()
        if authzid and authzid != validated.principal:
            raise SaslAuthenticationError(
                f"Authentication failed: Client requested an authorization id ({authzid}) that is different "
                f"from the token's principal name ({validated.principal})"
            )
        self.authorization_id = validated.principal
        self.credential_expiration_ms = validated.expiration_ms
        self.complete = True
        return b""


def _parse_client_initial_response(response: bytes) -> tuple[str, str]:
    """``n,[a=authzid],\\x01auth=Bearer <token>\\x01[key=value\\x01]*\\x01`` -> (authzid, token)."""
    try:
        text = response.decode("utf-8")
    except UnicodeDecodeError:
        raise SaslError("Invalid OAUTHBEARER client first message") from None
    first = text.find(",")
    second = text.find(",", first + 1) if first >= 0 else -1
    if not text.startswith("n,") or second < 0:
        raise SaslError("Invalid OAUTHBEARER client first message")
    gs2 = text[first + 1 : second]
    authzid = ""
    if gs2:
        if not gs2.startswith("a=") or not _SASLNAME.match(gs2[2:]):
            raise SaslError("Invalid OAUTHBEARER client first message")
        authzid = gs2[2:].replace("=2C", ",").replace("=3D", "=")
    rest = text[second + 1 :]
    if not rest.startswith("\x01") or not rest.endswith("\x01\x01"):
        raise SaslError("Invalid OAUTHBEARER client first message")
    auth = None
    for kv in rest[1:-2].split("\x01"):
        key, sep, value = kv.partition("=")
        if not sep:
            raise SaslError("Invalid OAUTHBEARER client first message")
        if key == "auth":
            auth = value
    if auth is None:
        raise SaslError("Invalid OAUTHBEARER client first message")
    scheme, _, token = auth.partition(" ")
    if scheme.lower() != "bearer":
        raise SaslError(f"Invalid scheme in OAUTHBEARER client first message: {scheme}")
    token = token.strip()
    if not re.fullmatch(r"[-_.a-zA-Z0-9]+", token):
        raise SaslError("Invalid OAUTHBEARER client first message")
    return authzid, token
