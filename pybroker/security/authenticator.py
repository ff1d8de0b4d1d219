"""The broker side of SASL on one connection: Kafka's SaslServerAuthenticator, sans-IO.

States as Kafka's: INITIAL_REQUEST -> (ApiVersions) -> HANDSHAKE_REQUEST -> (SaslHandshake) ->
AUTHENTICATE -> (SaslAuthenticate ... until the mechanism completes) -> COMPLETE; FAILED closes.

- Before authentication only ApiVersions (once, first) and SaslHandshake are served; any other request
  closes the connection without an answer ("Unexpected Kafka request of type X during SASL handshake.").
- SaslHandshake v0 (KIP-43's old framing): the tokens that follow are bare size-prefixed frames, not
  SaslAuthenticate requests, and are answered the same way.  v1: SaslAuthenticate requests.
- An unknown mechanism: UNSUPPORTED_SASL_MECHANISM listing the enabled ones, then close.
- A failed exchange: SASL_AUTHENTICATION_FAILED with the mechanism's message (PLAIN: "Authentication
  failed: Invalid username or password") or the generic "Authentication failed during authentication due
  to invalid credentials with SASL mechanism X", then close.  A request other than SaslAuthenticate while
  authenticating closes the connection (Kafka answers ILLEGAL_SASL_STATE in that request's own response
  type first; pybroker only closes).
- KIP-368: the session lasts min(connections.max.reauth.ms, the credential's expiry) and SaslAuthenticate
  v1+ says so in session_lifetime_ms; a SaslHandshake on an authenticated connection whose session has an
  expiry (at most once a second) starts re-authentication with the same mechanism and principal.  The server
  closes a connection whose session expired at its next other request.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pybroker.protocol import codec
from pybroker.protocol.api import REQUESTS, RESPONSES
from pybroker.protocol.errors import ErrorCode
from pybroker.protocol.framing import Frame
from pybroker.security.context import ConnectionSecurity, KafkaPrincipal
from pybroker.security.mechanisms import SaslAuthenticationError, SaslError, SaslServer
from pybroker.security.sasl_config import SaslListenerConfig, ScramLookup, TokenLookup

log = logging.getLogger(__name__)

SASL_HANDSHAKE = 17
API_VERSIONS = 18
SASL_AUTHENTICATE = 36
SASL_HANDSHAKE_VERSIONS = (0, 1)
SASL_AUTHENTICATE_VERSIONS = (0, 2)
MIN_REAUTH_INTERVAL_S = 1.0  # KafkaChannel.MIN_REAUTH_INTERVAL_ONE_SECOND_NANOS


class SaslState(enum.Enum):
    INITIAL_REQUEST = "INITIAL_REQUEST"
    HANDSHAKE_OR_VERSIONS_REQUEST = "HANDSHAKE_OR_VERSIONS_REQUEST"
    HANDSHAKE_REQUEST = "HANDSHAKE_REQUEST"
    AUTHENTICATE = "AUTHENTICATE"
    REAUTH_PROCESS_HANDSHAKE = "REAUTH_PROCESS_HANDSHAKE"
    REAUTH_BAD_MECHANISM = "REAUTH_BAD_MECHANISM"
    COMPLETE = "COMPLETE"
    FAILED = "FAILED"


@dataclass
class Outcome:
    """What the server does with one frame: write ``response`` (api key, version, correlation id, body) or
    ``raw`` (a bare token, size-prefixed by the server), hand the request to its normal handler
    (``passthrough``: ApiVersions), then close the connection if ``close`` says why."""

    response: tuple[int, int, int, dict[str, Any]] | None = None
    raw: bytes | None = None
    passthrough: bool = False
    close: str | None = None


class SaslServerAuthenticator:
    def __init__(
        self,
        config: SaslListenerConfig,
        scram_lookup: ScramLookup,
        security: ConnectionSecurity,
        monotonic: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        token_lookup: TokenLookup | None = None,
    ) -> None:
        self.config = config
        self.scram_lookup = scram_lookup
        self.token_lookup = token_lookup
        self.security = security
        self.monotonic = monotonic
        self.wall_clock = wall_clock
        self.state = SaslState.INITIAL_REQUEST
        self.mechanism: str | None = None
        self.session_expiration: float | None = None  # monotonic seconds; None: the session never expires
        self.client_supports_reauthentication = False
        self._server: SaslServer | None = None
        self._kafka_headers = False  # SaslHandshake v1+: tokens come in SaslAuthenticate requests
        self._last_reauth_start = 0.0
        self._reauth_from: tuple[str, KafkaPrincipal] | None = None  # (mechanism, principal) being renewed
        self._bad_mechanism_message = ""

    @property
    def complete(self) -> bool:
        return self.state is SaslState.COMPLETE

    @property
    def reauthenticating(self) -> bool:
        return self._reauth_from is not None

    def _text(self) -> str:
        return "re-authentication" if self.reauthenticating else "authentication"

    # -- KIP-368 ---------------------------------------------------------------------------------
    def session_expired(self) -> bool:
        return self.session_expiration is not None and self.monotonic() > self.session_expiration

    def maybe_begin_reauthentication(self) -> bool:
        """A SaslHandshake arrived on an authenticated connection: True if it starts re-authentication
        (then the frame goes to ``receive``); False and the request is handled normally (Kafka's
        KafkaApis answers ILLEGAL_SASL_STATE)."""
        if not self.complete or self.session_expiration is None:
            return False
        now = self.monotonic()
        if self._last_reauth_start and now - self._last_reauth_start < MIN_REAUTH_INTERVAL_S:
            return False
        self._last_reauth_start = now
        assert self.mechanism is not None
        self._reauth_from = (self.mechanism, self.security.principal)
        self._server = None
        self.state = SaslState.REAUTH_PROCESS_HANDSHAKE
        log.debug("re-authentication of %s begins", self.security.principal)
        return True

    # -- frames ------------------------------------------------------------------------------------
    def receive(self, frame: Frame | bytes | memoryview) -> Outcome:
        state = self.state
        if state in (
            SaslState.INITIAL_REQUEST,
            SaslState.HANDSHAKE_OR_VERSIONS_REQUEST,
            SaslState.HANDSHAKE_REQUEST,
            SaslState.REAUTH_PROCESS_HANDSHAKE,
        ):
            return self._kafka_request(frame)
        if state is SaslState.REAUTH_BAD_MECHANISM:
            return self._fail(self._bad_mechanism_message)
        if state is SaslState.AUTHENTICATE:
            if self._kafka_headers:
                return self._authenticate_request(frame)
            return self._raw_token(bytes(frame))
        return self._fail(f"request in SASL state {state.value}")

    def _fail(self, reason: str, outcome: Outcome | None = None) -> Outcome:
        self.state = SaslState.FAILED
        out = outcome or Outcome()
        out.close = f"SASL {self._text()} failed: {reason}"
        return out

    def _kafka_request(self, frame: Frame | bytes | memoryview) -> Outcome:
        try:
            header = codec.decode_request_header(frame)
        except Exception:  # noqa: BLE001 - not a Kafka request at all
            header = None
        if header is None or header.api_key not in (API_VERSIONS, SASL_HANDSHAKE):
            if self.state is SaslState.INITIAL_REQUEST:
                return self._fail(
                    "Invalid request, potential reasons: kafka client configured with the wrong security "
                    "protocol, it does not support KIP-43 or it is not a kafka client."
                )
            name = header.api_key if header is not None else "?"
            return self._fail(f"Unexpected Kafka request of type {name} during SASL handshake.")
        if self.state is SaslState.INITIAL_REQUEST:
            self.state = SaslState.HANDSHAKE_OR_VERSIONS_REQUEST
        if header.api_key == API_VERSIONS:
            if self.state is not SaslState.HANDSHAKE_OR_VERSIONS_REQUEST:
                return self._fail(f"Unexpected ApiVersions request received during SASL state {self.state.value}")
            # Answered by the ApiVersions handler; a version it does not know leaves the state as it is,
            # so that the client can retry with the version range the answer gives.
            if header.complete and header.api_version <= 4:
                self.state = SaslState.HANDSHAKE_REQUEST
            return Outcome(passthrough=True)
        version = header.api_version
        if not SASL_HANDSHAKE_VERSIONS[0] <= version <= SASL_HANDSHAKE_VERSIONS[1]:
            return self._fail(f"unsupported SaslHandshake version {version}")
        try:
            request, _ = codec.decode(REQUESTS[SASL_HANDSHAKE], version, frame, header.body_offset)
        except Exception as e:  # noqa: BLE001
            return self._fail(f"unparseable SaslHandshake request: {e}")
        mechanism = request.get("mechanism") or ""
        enabled = self.config.enabled_mechanisms
        if mechanism not in enabled:
            body = {"error_code": ErrorCode.UNSUPPORTED_SASL_MECHANISM, "mechanisms": list(enabled)}
            return self._fail(
                f"Unsupported SASL mechanism {mechanism}",
                Outcome(response=(SASL_HANDSHAKE, version, header.correlation_id, body)),
            )
        self._kafka_headers = version >= 1
        response = Outcome(
            response=(
                SASL_HANDSHAKE,
                version,
                header.correlation_id,
                {"error_code": ErrorCode.NONE, "mechanisms": list(enabled)},
            )
        )
        if self._reauth_from is not None and self._reauth_from[0] != mechanism:
            self._bad_mechanism_message = (
                f"SASL mechanism '{mechanism}' requested by client is not supported for re-authentication of "
                f"mechanism '{self._reauth_from[0]}'"
            )
            self.state = SaslState.REAUTH_BAD_MECHANISM
            return response
        self.mechanism = mechanism
        self._server = self.config.create_server(mechanism, self.scram_lookup, self.token_lookup)
        self.state = SaslState.AUTHENTICATE
        return response

    def _generic_failure(self) -> str:
        return (
            f"Authentication failed during {self._text()} due to invalid credentials with SASL mechanism "
            f"{self.mechanism}"
        )

    def _raw_token(self, token: bytes) -> Outcome:
        """SaslHandshake v0: a bare token in, a bare token out; a failure closes without an answer."""
        assert self._server is not None
        try:
            challenge = self._server.evaluate_response(token)
            if self._server.complete:
                self._check_principal()
        except SaslAuthenticationError as e:
            return self._fail(str(e))
        except SaslError as e:
            log.debug("SASL exchange failed: %s", e)
            return self._fail(self._generic_failure())
        if self._server.complete:
            self._finish()
        return Outcome(raw=challenge)

    def _authenticate_request(self, frame: Frame | bytes | memoryview) -> Outcome:
        assert self._server is not None
        try:
            header = codec.decode_request_header(frame)
        except Exception as e:  # noqa: BLE001
            return self._fail(f"unparseable request header: {e}")
        if header.api_key != SASL_AUTHENTICATE:
            reason = f"Unexpected Kafka request of type {header.api_key} during SASL authentication."
            return self._fail(reason, Outcome(response=_illegal_state_response(header)))
        version = header.api_version
        if not SASL_AUTHENTICATE_VERSIONS[0] <= version <= SASL_AUTHENTICATE_VERSIONS[1]:
            return self._fail(f"Version {version} is not supported for apiKey SASL_AUTHENTICATE")
        try:
            request, _ = codec.decode(REQUESTS[SASL_AUTHENTICATE], version, frame, header.body_offset)
        except Exception as e:  # noqa: BLE001
            return self._fail(f"unparseable SaslAuthenticate request: {e}")
        if version > 0:
            self.client_supports_reauthentication = True
        correlation_id = header.correlation_id

        def failure(message: str) -> Outcome:
            body = {"error_code": ErrorCode.SASL_AUTHENTICATION_FAILED, "error_message": message, "auth_bytes": b""}
            return self._fail(message, Outcome(response=(SASL_AUTHENTICATE, version, correlation_id, body)))

        try:
            challenge = self._server.evaluate_response(bytes(request.get("auth_bytes") or b""))
            if self._server.complete:
                self._check_principal()
        except SaslAuthenticationError as e:
            return failure(str(e))
        except SaslError as e:
            log.debug("SASL exchange failed: %s", e)
            return failure(self._generic_failure())
        lifetime_ms = self._finish() if self._server.complete else 0
        body = {
            "error_code": ErrorCode.NONE,
            "error_message": None,
            "auth_bytes": challenge,
            "session_lifetime_ms": lifetime_ms,
        }
        return Outcome(response=(SASL_AUTHENTICATE, version, correlation_id, body))

    def _check_principal(self) -> None:
        if self._reauth_from is None:
            return
        assert self._server is not None and self._server.authorization_id is not None
        new = self._principal()
        old = self._reauth_from[1]
        if new != old:
            raise SaslAuthenticationError(
                f"Cannot change principals during re-authentication from {old.principal_type}.{old.name}: "
                f"{new.principal_type}.{new.name}"
            )

    def _principal(self) -> KafkaPrincipal:
        assert self._server is not None and self._server.authorization_id is not None
        # DefaultKafkaPrincipalBuilder: User:<authorization id>, marked when a delegation token authenticated it.
        return KafkaPrincipal(
            KafkaPrincipal.USER_TYPE, self._server.authorization_id, token_authenticated=self._server.token_authenticated
        )

    def _finish(self) -> int:
        """The exchange completed: the principal is set and the session lifetime (ms, 0 = none) computed."""
        assert self._server is not None and self._server.authorization_id is not None
        self.security.principal = self._principal()
        now_mono, now_ms = self.monotonic(), int(self.wall_clock() * 1000)
        credential_expiration = self._server.credential_expiration_ms
        max_reauth = self.config.reauth_ms.get(self.mechanism or "", 0)
        lifetime = 0
        if credential_expiration is not None or max_reauth > 0:
            if credential_expiration is None:
                lifetime = max(0, max_reauth)
            elif max_reauth <= 0:
                lifetime = max(0, credential_expiration - now_ms)
            else:
                lifetime = max(0, min(credential_expiration - now_ms, max_reauth))
            self.session_expiration = now_mono + lifetime / 1000
        else:
            self.session_expiration = None
        if self._reauth_from is not None:
            log.debug("re-authentication of %s complete", self.security.principal)
        self._reauth_from = None
        self.state = SaslState.COMPLETE
        return lifetime


def _illegal_state_response(header: Any) -> tuple[int, int, int, dict[str, Any]] | None:
    """The request's own response type carrying ILLEGAL_SASL_STATE (Kafka's ``getErrorResponse``): every
    field at its default, the top-level error code set where the response has one; None (close only) when
    the api or version is not one we can encode."""
    spec = RESPONSES.get(header.api_key)
    if spec is None or not header.complete:
        return None
    body: dict[str, Any] = {}
    if any(f.name == "error_code" and header.api_version in f.versions for f in spec.fields):
        body["error_code"] = ErrorCode.ILLEGAL_SASL_STATE
    try:
        codec.encode(spec, header.api_version, body)
    except Exception:  # noqa: BLE001 - a version the spec does not declare: just close
        return None
    return header.api_key, header.api_version, header.correlation_id, body
