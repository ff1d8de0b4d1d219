"""What a SASL listener accepts, from Kafka's keys (read once at start-up, per listener):

- ``listener.name.<l>.sasl.enabled.mechanisms`` or ``sasl.enabled.mechanisms``;
- per mechanism ``listener.name.<l>.<mechanism>.sasl.jaas.config`` (Kafka's broker form), falling back to
  ``sasl.jaas.config``: PlainLoginModule's ``user_<name>="<password>"`` options are the PLAIN users;
  OAuthBearerLoginModule's ``unsecuredValidator*`` options configure the unsecured validator;
- ``listener.name.<l>.oauthbearer.sasl.server.callback.handler.class``: Kafka's
  OAuthBearerValidatorCallbackHandler switches OAUTHBEARER to signed tokens checked against
  ``sasl.oauthbearer.jwks.endpoint.url`` (``sasl.oauthbearer.*``, listener-prefixable);
- ``[listener.name.<l>.<mechanism>.]connections.max.reauth.ms``.
SCRAM users live in the metadata store (AlterUserScramCredentials), not in the JAAS options.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from pybroker.config import BrokerConfig
from pybroker.security.delegation_token import TokenCredential
from pybroker.security.jaas import JaasConfigError, LoginModule, parse_jaas_config
from pybroker.security.mechanisms import (
    GSSAPI,
    OAUTHBEARER,
    PLAIN,
    PlainSaslServer,
    SaslServer,
    ScramSaslServer,
)
from pybroker.security.oauthbearer import (
    SECURED_HANDLER_CLASS,
    SECURED_HANDLER_CLASS_OLD,
    UNSECURED_HANDLER_CLASS,
    JwksValidator,
    OAuthBearerSaslServer,
    UnsecuredJwsValidator,
)
from pybroker.security.scram import ScramCredential, ScramMechanism
from pybroker.topic_config import ConfigError

SUPPORTED_MECHANISMS = (PLAIN, "SCRAM-SHA-256", "SCRAM-SHA-512", OAUTHBEARER)


class SaslConfigError(ConfigError):
    """A SASL listener that cannot be served as configured: start-up stops with this one line."""

    def __init__(self, message: str) -> None:
        super().__init__("sasl.enabled.mechanisms", message)


ScramLookup = Callable[[str, ScramMechanism], ScramCredential | None]
# A delegation token's SCRAM credential by token id (KIP-48), None when tokens are off or it is unknown.
TokenLookup = Callable[[str, ScramMechanism], TokenCredential | None]


@dataclass
class SaslListenerConfig:
    listener_name: str
    enabled_mechanisms: list[str]
    plain_users: dict[str, str] = field(default_factory=dict)
    reauth_ms: dict[str, int] = field(default_factory=dict)  # connections.max.reauth.ms per mechanism
    oauth_validator: UnsecuredJwsValidator | JwksValidator | None = None
    max_receive_size: int = 524288

    def create_server(
        self, mechanism: str, scram_lookup: ScramLookup, token_lookup: TokenLookup | None = None
    ) -> SaslServer:
        if mechanism == PLAIN:
            return PlainSaslServer(self.plain_users)
        if mechanism == OAUTHBEARER:
            assert self.oauth_validator is not None
            return OAuthBearerSaslServer(self.oauth_validator)
        scram = ScramMechanism.from_name(mechanism)
        assert scram is not None, mechanism
        return ScramSaslServer(scram, scram_lookup, token_lookup)


def listener_config(config: BrokerConfig, key: str, listener: str, mechanism: str | None = None) -> object:
    if mechanism is None:
        return config.listener_value(listener, key)
    return config.sasl_value(listener, mechanism, key)


def _jaas(config: BrokerConfig, listener: str, mechanism: str) -> LoginModule | None:
    text = listener_config(config, "sasl.jaas.config", listener, mechanism)
    if not text:
        return None
    try:
        modules = parse_jaas_config(str(text))
    except JaasConfigError as e:
        raise SaslConfigError(f"sasl.jaas.config of listener {listener}, mechanism {mechanism}: {e}") from None
    if len(modules) != 1:
        raise SaslConfigError(
            f"sasl.jaas.config of listener {listener}, mechanism {mechanism}: must contain exactly one login "
            f"module, found {len(modules)}"
        )
    return modules[0]


def _int(value: object) -> int:
    """A numeric setting: typed by the config, or a string as a listener or mechanism override gives it."""
    if isinstance(value, int | float | str):
        return int(value)
    raise TypeError(f"not a number: {value!r}")


def _as_list(value: object) -> list[str]:
    if isinstance(value, list):
        return [str(v).strip() for v in value if str(v).strip()]
    return [v.strip() for v in str(value or "").split(",") if v.strip()]


def build_listener_config(config: BrokerConfig, listener: str) -> SaslListenerConfig:
    mechanisms = list(dict.fromkeys(_as_list(listener_config(config, "sasl.enabled.mechanisms", listener))))
    if not mechanisms:
        raise SaslConfigError(f"No SASL mechanisms are enabled for listener {listener}")
    unsupported = [m for m in mechanisms if m not in SUPPORTED_MECHANISMS]
    if unsupported:
        hint = " (Kafka's default; set sasl.enabled.mechanisms)" if unsupported == [GSSAPI] else ""
        raise SaslConfigError(
            f"SASL mechanism {', '.join(unsupported)} of listener {listener} is not supported by pybroker{hint}; "
            f"supported: {', '.join(SUPPORTED_MECHANISMS)}"
        )
    cfg = SaslListenerConfig(listener, mechanisms)
    cfg.max_receive_size = _int(listener_config(config, "sasl.server.max.receive.size", listener))
    for mechanism in mechanisms:
        cfg.reauth_ms[mechanism] = _int(listener_config(config, "connections.max.reauth.ms", listener, mechanism) or 0)
    if PLAIN in mechanisms:
        module = _jaas(config, listener, PLAIN)
        if module is None:
            raise SaslConfigError(
                f"listener {listener} enables PLAIN but no listener.name.{listener.lower()}.plain.sasl.jaas.config "
                "(or sasl.jaas.config) is set"
            )
        cfg.plain_users = {k[len("user_") :]: v for k, v in module.options.items() if k.startswith("user_")}
    if OAUTHBEARER in mechanisms:
        module = _jaas(config, listener, OAUTHBEARER)
        handler = listener_config(config, "sasl.server.callback.handler.class", listener, OAUTHBEARER)
        if handler in (SECURED_HANDLER_CLASS, SECURED_HANDLER_CLASS_OLD):

            def get(key: str) -> object:
                return listener_config(config, key, listener, OAUTHBEARER)

            url = get("sasl.oauthbearer.jwks.endpoint.url")
            if not url:
                raise SaslConfigError(
                    f"listener {listener}: {handler} needs sasl.oauthbearer.jwks.endpoint.url (a file: URL)"
                )
            try:
                cfg.oauth_validator = JwksValidator(
                    str(url),
                    _as_list(get("sasl.oauthbearer.expected.audience")),
                    str(get("sasl.oauthbearer.expected.issuer") or "") or None,
                    str(get("sasl.oauthbearer.sub.claim.name") or "sub"),
                    _int(get("sasl.oauthbearer.clock.skew.seconds") or 30),
                )
            except (OSError, ValueError) as e:
                raise SaslConfigError(f"listener {listener}: {e}") from None
        elif handler in (None, "", UNSECURED_HANDLER_CLASS):
            cfg.oauth_validator = UnsecuredJwsValidator(module.options if module is not None else {})
        else:
            raise SaslConfigError(f"listener {listener}: OAUTHBEARER server callback handler {handler} is not supported")
    return cfg


def client_login(config: BrokerConfig, listener: str, mechanism: str) -> tuple[str, str]:
    """(username, password) this broker itself logs in with on ``listener`` (the inter-broker one), from
    the ``username``/``password`` options of that listener's JAAS config for ``mechanism``, as Kafka's
    broker-side client reads them."""
    module = _jaas(config, listener, mechanism)
    options = module.options if module is not None else {}
    if "username" not in options or "password" not in options:
        raise SaslConfigError(
            f"the inter-broker listener {listener} needs username and password in "
            f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config (or sasl.jaas.config)"
        )
    return options["username"], options["password"]
