"""How a client reaches a secured listener: one description, spelt in each library's own settings.

A scenario sets ``client.security = ClientSecurity(...)`` on an adapter; every client the adapter then
builds (producer, consumer, group member) connects with it. Each function below turns the description
into the configuration the library documents, so what is exercised is the library's own TLS and SASL
code: librdkafka's ``security.protocol``/``sasl.*``/``ssl.ca.location``, the Java client's
``sasl.jaas.config`` and PEM trust store, kafka-python's and aiokafka's keyword arguments (aiokafka
through an ``ssl.SSLContext``), and the Go program's flags (franz-go's sasl packages, sarama's config).

OAUTHBEARER uses Kafka's development default, an unsecured JWS (``alg: none``) naming the principal in
``sub``; the Java client makes its own from ``unsecuredLoginStringClaim_sub``, librdkafka from
``sasl.oauthbearer.config``, and the others are handed one made by ``unsecured_jws``.
"""

from __future__ import annotations

import base64
import json
import time
from dataclasses import dataclass
from typing import Any

PROTOCOLS = ("SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
_JAAS_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


@dataclass(frozen=True)
class ClientSecurity:
    protocol: str  # SSL, SASL_PLAINTEXT or SASL_SSL
    mechanism: str | None = None  # for SASL_*: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER
    username: str = ""
    password: str = ""
    ca_pem: str | None = None  # the PEM CA certificate the client trusts, for SSL and SASL_SSL

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"unknown security protocol {self.protocol}")
        if self.uses_sasl and self.mechanism not in MECHANISMS:
            raise ValueError(f"{self.protocol} needs a SASL mechanism, got {self.mechanism}")
        if self.uses_tls and not self.ca_pem:
            raise ValueError(f"{self.protocol} needs the CA certificate to trust")

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def label(self) -> str:
        return f"{self.protocol}/{self.mechanism}" if self.uses_sasl else self.protocol


def unsecured_jws(principal: str, lifetime_s: int = 3600) -> str:
    """An unsecured JWS as Kafka's OAuthBearerUnsecuredJws accepts it: alg none, ``sub``, ``iat``, ``exp``."""

    def part(obj: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()

    now = int(time.time())
    return f"{part({'alg': 'none'})}.{part({'sub': principal, 'iat': now, 'exp': now + lifetime_s})}."


def librdkafka_config(security: ClientSecurity | None) -> dict[str, str]:
    """confluent-kafka and kcat (-X) settings."""
    if security is None:
        return {}
    config = {"security.protocol": security.protocol}
    if security.uses_tls:
        config["ssl.ca.location"] = str(security.ca_pem)
    if security.uses_sasl:
        config["sasl.mechanism"] = str(security.mechanism)
        if security.mechanism == "OAUTHBEARER":
            config["enable.sasl.oauthbearer.unsecure.jwt"] = "true"
            config["sasl.oauthbearer.config"] = f"principal={security.username}"
        else:
            config["sasl.username"] = security.username
            config["sasl.password"] = security.password
    return config


def java_properties(security: ClientSecurity | None) -> dict[str, str]:
    """The Java client's configs (kafka-clients 3.9 and 4.x alike)."""
    if security is None:
        return {}
    props = {"security.protocol": security.protocol}
    if security.uses_tls:
        props["ssl.truststore.type"] = "PEM"
        props["ssl.truststore.location"] = str(security.ca_pem)
    if security.uses_sasl:
        props["sasl.mechanism"] = str(security.mechanism)
        if security.mechanism == "OAUTHBEARER":
            props["sasl.jaas.config"] = (
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
                f'unsecuredLoginStringClaim_sub="{security.username}";'
            )
        else:
            module = _JAAS_MODULES[str(security.mechanism)]
            props["sasl.jaas.config"] = (
                f'{module} required username="{security.username}" password="{security.password}";'
            )
    return props


def kafka_python_kwargs(security: ClientSecurity | None) -> dict[str, Any]:
    if security is None:
        return {}
    kwargs: dict[str, Any] = {"security_protocol": security.protocol}
    if security.uses_tls:
        kwargs["ssl_cafile"] = str(security.ca_pem)
        kwargs["ssl_check_hostname"] = True
    if security.uses_sasl:
        kwargs["sasl_mechanism"] = security.mechanism
        if security.mechanism == "OAUTHBEARER":
            from kafka.net.sasl.oauth import AbstractTokenProvider as KafkaPythonTokenProvider

            class SyncTokenProvider(KafkaPythonTokenProvider):
                def token(self) -> str:
                    return unsecured_jws(security.username)

            kwargs["sasl_oauth_token_provider"] = SyncTokenProvider()
        else:
            kwargs["sasl_plain_username"] = security.username
            kwargs["sasl_plain_password"] = security.password
    return kwargs


def aiokafka_kwargs(security: ClientSecurity | None) -> dict[str, Any]:
    if security is None:
        return {}
    kwargs: dict[str, Any] = {"security_protocol": security.protocol}
    if security.uses_tls:
        from aiokafka.helpers import create_ssl_context

        kwargs["ssl_context"] = create_ssl_context(cafile=str(security.ca_pem))
    if security.uses_sasl:
        kwargs["sasl_mechanism"] = security.mechanism
        if security.mechanism == "OAUTHBEARER":
            from aiokafka.abc import AbstractTokenProvider

            class TokenProvider(AbstractTokenProvider):
                async def token(self) -> str:
                    return unsecured_jws(security.username)

            kwargs["sasl_oauth_token_provider"] = TokenProvider()
        else:
            kwargs["sasl_plain_username"] = security.username
            kwargs["sasl_plain_password"] = security.password
    return kwargs


def go_options(security: ClientSecurity | None) -> list[str]:
    """Flags of the Go compat program (compat_tests/go/security.go), for franz-go and sarama alike."""
    if security is None:
        return []
    options = ["--security-protocol", security.protocol]
    if security.uses_tls:
        options += ["--ssl-ca", str(security.ca_pem)]
    if security.uses_sasl:
        options += ["--sasl-mechanism", str(security.mechanism)]
        if security.mechanism == "OAUTHBEARER":
            options += ["--sasl-oauth-token", unsecured_jws(security.username)]
        else:
            options += ["--sasl-username", security.username, "--sasl-password", security.password]
    return options
