"""The SASL server side of each mechanism, one ``evaluate_response`` step per client token, with Kafka's
outcomes: ``SaslAuthenticationError`` carries a message the client may see (PlainSaslServer's "Authentication
failed: Invalid username or password"); ``SaslError`` is answered with the authenticator's generic
"Authentication failed during authentication due to invalid credentials with SASL mechanism X", so that
nothing about the user's existence leaks (Kafka's SaslException)."""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable

import scramp

from pybroker.security.delegation_token import TokenCredential
from pybroker.security.scram import ScramCredential, ScramMechanism, unescape_sasl_name

log = logging.getLogger(__name__)

PLAIN = "PLAIN"
OAUTHBEARER = "OAUTHBEARER"
GSSAPI = "GSSAPI"


class SaslError(Exception):
    """A failure whose detail stays on the server (Kafka's javax.security.sasl.SaslException)."""


class SaslAuthenticationError(Exception):
    """A failure whose message goes to the client (Kafka's SaslAuthenticationException)."""


class SaslServer:
    mechanism: str = ""
    complete: bool = False
    authorization_id: str | None = None
    # Milliseconds since the epoch after which the credential is no longer valid (an OAuth token's exp).
    credential_expiration_ms: int | None = None
    # KIP-48: the client authenticated with a delegation token (SCRAM's tokenauth extension).
    token_authenticated: bool = False

    def evaluate_response(self, response: bytes) -> bytes:
        raise NotImplementedError


class PlainSaslServer(SaslServer):
    """RFC 4616 ``[authzid] NUL authcid NUL passwd`` against the JAAS ``user_<name>="<password>"`` options
    (Kafka's PlainSaslServer with PlainServerCallbackHandler)."""

    mechanism = PLAIN

    def __init__(self, users: dict[str, str]) -> None:
        self._users = users

    def evaluate_response(self, response: bytes) -> bytes:
        text = response.decode("utf-8", errors="replace")
        # Kafka's PlainSaslServer.extractTokens: at most four NUL-separated pieces, exactly three wanted.
        tokens = text.split("\x00", 3)
        if len(tokens) != 3:
            raise SaslAuthenticationError(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(tokens)}")
        authzid, username, password = tokens
        if not username:
            raise SaslAuthenticationError("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationError("Authentication failed: password not specified")
        expected = self._users.get(username)
        # Constant-time comparison, as PlainServerCallbackHandler uses MessageDigest.isEqual.
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
            raise SaslAuthenticationError("Authentication failed: Invalid username or password")
        if authzid and authzid != username:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is different from username"
            )
        self.authorization_id = username
        self.complete = True
        return b""


class ScramSaslServer(SaslServer):
    """RFC 5802 through ``scramp``: client-first, server-first (salt, iterations), client-final with the
    proof, server-final with the signature.  ``lookup(user, mechanism)`` gives the stored credential.

    KIP-48: a client-first message with the extension ``tokenauth=true`` (Kafka's ScramExtensions) names a
    delegation token: ``token_lookup(token id, mechanism)`` gives its credential, and the client is then
    the token's owner until the token's expiry (ScramSaslServer with DelegationTokenCredentialCallback)."""

    def __init__(
        self,
        mechanism: ScramMechanism,
        lookup: Callable[[str, ScramMechanism], ScramCredential | None],
        token_lookup: Callable[[str, ScramMechanism], TokenCredential | None] | None = None,
    ) -> None:
        self.mechanism = mechanism.mechanism_name
        self._scram_mechanism = mechanism
        self._lookup = lookup
        self._token_lookup = token_lookup
        self._server = scramp.ScramMechanism(mechanism.mechanism_name).make_server(self._auth_info)
        self._username: str | None = None
        self._state = 0

    def _auth_info(self, sasl_name) -> tuple[bytes, bytes, bytes, int]:
        username = unescape_sasl_name(str(sasl_name))
        if self.token_authenticated:
            token = self._token_lookup(username, self._scram_mechanism) if self._token_lookup else None
            if token is None:
                raise SaslError(f"Token Authentication failed: Invalid tokenId : {username}")
            credential = token.credential
            self._username = token.owner.name  # the client is the token's owner (DelegationTokenCache.owner)
            self.credential_expiration_ms = token.expiry_timestamp
        else:
            found = self._lookup(username, self._scram_mechanism)
            if found is None:
                raise SaslError("Authentication failed: Invalid user credentials")
            credential = found
            self._username = username
        if credential.iterations < self._scram_mechanism.min_iterations:
            raise SaslError(
                f"Iterations {credential.iterations} is less than the minimum "
                f"{self._scram_mechanism.min_iterations} for {self.mechanism}"
            )
        return credential.salt, credential.stored_key, credential.server_key, credential.iterations

    def _set_client_first(self, text: str) -> None:
        """scramp knows no extensions: it is given the message without them, and then the message as sent
        (its AuthMessage, which the client's proof signs, covers the extensions)."""
        header, bare = _split_client_first(text)
        attributes = bare.split(",")
        extensions = dict(a.split("=", 1) for a in attributes[2:] if "=" in a)
        self.token_authenticated = extensions.get("tokenauth", "").lower() == "true"
        if len(attributes) <= 2:
            self._server.set_client_first(text)
            return
        self._server.set_client_first(header + ",".join(attributes[:2]))
        self._server.client_first_bare = bare

    def evaluate_response(self, response: bytes) -> bytes:
        try:
            text = response.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslError("Invalid SCRAM message: not UTF-8") from None
        try:
            if self._state == 0:
                self._state = 1
                authzid = _scram_authzid(text)
                self._set_client_first(text)
                if authzid and authzid != self._username:
                    raise SaslAuthenticationError(
                        "Authentication failed: Client requested an authorization id that is different from username"
                    )
                return self._server.get_server_first().encode()
            if self._state == 1:
                self._state = 2
                self._server.set_client_final(text)
                final = self._server.get_server_final()
                self.authorization_id = self._username
                self.complete = True
                return final.encode()
        except scramp.ScramException as e:
            raise SaslError(f"SCRAM exchange failed: {e}") from None
        raise SaslError("Unexpected challenge in Sasl server state COMPLETE")


def _split_client_first(client_first: str) -> tuple[str, str]:
    """The GS2 header (``n,,`` or ``n,a=alice,``) and the client-first-message-bare."""
    first = client_first.find(",")
    second = client_first.find(",", first + 1) if first >= 0 else -1
    if second < 0:
        return "", client_first
    return client_first[: second + 1], client_first[second + 1 :]


def _scram_authzid(client_first: str) -> str:
    """The ``a=`` of the GS2 header (``n,a=alice,n=alice,r=...``), empty if none."""
    parts = client_first.split(",", 2)
    if len(parts) >= 2 and parts[1].startswith("a="):
        return unescape_sasl_name(parts[1][2:])
    return ""
