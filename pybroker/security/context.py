"""Who is on the other end of a connection, and how it arrived (Kafka's ``KafkaPrincipal``, the
``listenerName``/``securityProtocol``/``clientAddress``/``principal`` of its ``RequestContext``).

One ``ConnectionSecurity`` per connection, made by the server when the connection is accepted
(after the TLS handshake on an SSL listener) and shared by every request of that connection through
``RequestContext.security``.  The principal is ``User:ANONYMOUS`` until something authenticates the
connection: the client certificate on an mTLS listener (set here, from the subject DN mapped by
``ssl.principal.mapping.rules``) or SASL (which replaces it after SaslAuthenticate).
"""

from __future__ import annotations

from dataclasses import dataclass, field

PLAINTEXT = "PLAINTEXT"
SSL = "SSL"
SASL_PLAINTEXT = "SASL_PLAINTEXT"
SASL_SSL = "SASL_SSL"
SECURITY_PROTOCOLS = (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    """``User:alice``: the type and name ACLs are written against (Kafka's ``KafkaPrincipal``)."""

    principal_type: str
    name: str
    # KIP-48: authenticated by a delegation token.  Not part of equality, as in Kafka's KafkaPrincipal.equals:
    # a token's owner is the same principal however it authenticated.
    token_authenticated: bool = field(default=False, compare=False)

    USER_TYPE = "User"

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"

    @classmethod
    def user(cls, name: str) -> KafkaPrincipal:
        return cls(cls.USER_TYPE, name)

    @classmethod
    def parse(cls, text: str) -> KafkaPrincipal:
        """``"User:alice"`` -> KafkaPrincipal("User", "alice") (``SecurityUtils.parseKafkaPrincipal``)."""
        principal_type, sep, name = text.partition(":")
        if not sep or not principal_type:
            raise ValueError(f"expected a string in format principalType:principalName but got {text}")
        return cls(principal_type, name)


ANONYMOUS = KafkaPrincipal(KafkaPrincipal.USER_TYPE, "ANONYMOUS")


def uses_ssl(security_protocol: str) -> bool:
    return security_protocol in (SSL, SASL_SSL)


def uses_sasl(security_protocol: str) -> bool:
    return security_protocol in (SASL_PLAINTEXT, SASL_SSL)


@dataclass(slots=True)
class ConnectionSecurity:
    """The security state of one connection, shared by all of its requests.

    ``principal`` is mutable: the SASL authenticator sets it once the client has authenticated
    (and KIP-368 re-authentication must keep it the same)."""

    listener_name: str
    security_protocol: str
    client_host: str  # the peer's address as text ("127.0.0.1", "::1"), "" if unknown
    client_port: int = -1
    principal: KafkaPrincipal = ANONYMOUS
    # The TLS peer certificate's subject DN in RFC 2253 form (Java's X500Principal.getName()), when the
    # client presented a certificate that was verified; None otherwise.
    ssl_peer_dn: str | None = None

    @property
    def client_address(self) -> str:
        return f"{self.client_host}:{self.client_port}" if self.client_port >= 0 else self.client_host


def plaintext_context(
    client_host: str = "", client_port: int = -1, listener_name: str = PLAINTEXT
) -> ConnectionSecurity:
    """An anonymous PLAINTEXT connection (the default listener's, and what in-process callers use)."""
    return ConnectionSecurity(listener_name, PLAINTEXT, client_host, client_port)
