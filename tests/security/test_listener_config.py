"""Listener settings: several named listeners, per-listener ssl.* (listener.name.<l>.*), the
inter-broker listener checks, and the SSL context each listener's settings make (or the one-line
reason they cannot)."""

from __future__ import annotations

import ssl
from functools import partial
from pathlib import Path

import pytest

from pybroker.config import BrokerConfig, ConfigError
from pybroker.security.context import ANONYMOUS, KafkaPrincipal
from pybroker.security.ssl_factory import ServerSslFactory, SslConfigError
from pybroker.testing.certs import KEY_PASSWORD, STORE_PASSWORD, CertificateAuthority

LISTENERS = "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093,INTERNAL://:9094"
PROTOCOLS = "PLAINTEXT:PLAINTEXT,SSL:SSL,INTERNAL:SSL"


def test_several_listeners_each_with_its_protocol_and_advertised_address():
    config = BrokerConfig(
        {
            "listeners": LISTENERS,
            "listener.security.protocol.map": PROTOCOLS,
            "advertised.listeners": "PLAINTEXT://h1:9092,SSL://h1:9093,INTERNAL://h2:19094",
            "inter.broker.listener.name": "INTERNAL",
        }
    )
    assert [(e.listener_name, e.security_protocol, e.port) for e in config.listener_endpoints] == [
        ("PLAINTEXT", "PLAINTEXT", 9092),
        ("SSL", "SSL", 9093),
        ("INTERNAL", "SSL", 9094),
    ]
    assert config.advertised_host_port("INTERNAL") == ("h2", 19094)
    assert config.advertised_host_port("SSL") == ("h1", 9093)
    assert config.inter_broker_listener_name == "INTERNAL"


def test_the_default_is_one_plaintext_listener():
    config = BrokerConfig()
    assert [str(e) for e in config.listener_endpoints] == ["PLAINTEXT://127.0.0.1:9092"]
    assert config.inter_broker_listener_name == "PLAINTEXT"


def test_listener_prefixed_ssl_settings_override_the_global_ones():
    config = BrokerConfig(
        {
            "listeners": LISTENERS,
            "listener.security.protocol.map": PROTOCOLS,
            "ssl.client.auth": "none",
            "listener.name.internal.ssl.client.auth": "required",
            "listener.name.INTERNAL.ssl.enabled.protocols": "TLSv1.3",
        }
    )
    assert config.listener_value("INTERNAL", "ssl.client.auth") == "required"
    assert config.listener_value("INTERNAL", "ssl.enabled.protocols") == ["TLSv1.3"]
    assert config.listener_value("SSL", "ssl.client.auth") == "none"
    assert config.listener_value("SSL", "ssl.enabled.protocols") == ["TLSv1.2", "TLSv1.3"]


@pytest.mark.parametrize(
    "props, fragments",
    [
        ({"listener.name.ssl.ssl.client.auth": "sometimes"}, ["sometimes", "ssl.client.auth"]),
        ({"listener.name.ssl.ssl.bogus": "1"}, ["listener.name.ssl.ssl.bogus", "Unknown broker config"]),
        (
            {"inter.broker.listener.name": "NOPE"},
            ["inter.broker.listener.name must be a listener name defined in advertised.listeners"],
        ),
        (
            {"inter.broker.listener.name": "SSL", "security.inter.broker.protocol": "SSL"},
            ["Only one of inter.broker.listener.name and security.inter.broker.protocol"],
        ),
        ({"security.inter.broker.protocol": "SASL_SSL"}, ["inter.broker.listener.name must be"]),
        ({"listeners": "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9092"}, ["different port"]),
    ],
)
def test_bad_listener_settings(props, fragments):
    base = {"listeners": "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093"}
    with pytest.raises(ConfigError) as e:
        BrokerConfig({**base, **props})
    for fragment in fragments:
        assert fragment in str(e.value)


def test_an_unknown_listener_prefix_only_warns():
    config = BrokerConfig({"listener.name.other.ssl.client.auth": "required"})
    assert any("listener.name.other.ssl.client.auth" in w for w in config.warnings)


# -- the SSL context of a listener -------------------------------------------------------------------


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    d = tmp_path_factory.mktemp("stores")
    ca = CertificateAuthority()
    server = ca.issue("localhost", server=True)
    client = ca.issue({"CN": "bob", "OU": "Ops", "O": "Example"})
    return {
        "dir": d,
        "ca": ca,
        "server": server,
        "client": client,
        "ca_pem": ca.write_pem(d),
        "ca_p12": ca.write_truststore_pkcs12(d),
        "p12": server.write_pkcs12(d, "server"),
        "pem_file": server.write_keystore_pem(d, "server", KEY_PASSWORD),
        "pem_plain": server.write_keystore_pem(d, "server-plain"),
        "client_pem": client.write_pem(d, "client"),
    }


def _factory(**settings: str) -> ServerSslFactory:
    props = {"listeners": "SSL://127.0.0.1:9093", **settings}
    config = BrokerConfig(props)
    return ServerSslFactory("SSL", partial(config.listener_value, "SSL"))


def _handshake(factory: ServerSslFactory, stores: dict, cert: bool) -> tuple[KafkaPrincipal, str | None]:
    """A TLS handshake in memory between a client and the factory's context; the server's principal."""
    client_ctx = ssl.create_default_context(cafile=str(stores["ca_pem"]))
    if cert:
        client_ctx.load_cert_chain(*map(str, stores["client_pem"]))
    c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    client = client_ctx.wrap_bio(c_in, c_out, server_hostname="localhost")
    server = factory.context.wrap_bio(s_in, s_out, server_side=True)
    for _ in range(10):
        for side in (client, server):
            try:
                side.do_handshake()
            except ssl.SSLWantReadError:
                pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
    # TLS 1.3: the client's certificate is checked once the server has read the client's Finished.
    client.write(b"x")
    s_in.write(c_out.read())
    server.read(1)
    return factory.principal(server)


def test_pkcs12_key_store_and_no_client_auth(stores):
    factory = _factory(
        **{
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(stores["p12"]),
            "ssl.keystore.password": STORE_PASSWORD,
        }
    )
    assert factory.context.verify_mode == ssl.CERT_NONE
    assert _handshake(factory, stores, cert=False) == (ANONYMOUS, None)


def test_a_jks_typed_store_that_is_pkcs12_is_read_as_java_does(stores):
    factory = _factory(
        **{"ssl.keystore.location": str(stores["p12"]), "ssl.keystore.password": STORE_PASSWORD}
    )  # ssl.keystore.type defaults to JKS
    assert _handshake(factory, stores, cert=False)[0] == ANONYMOUS


def test_pem_file_and_pkcs12_trust_store_with_mtls_principal(stores):
    factory = _factory(
        **{
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(stores["pem_file"]),
            "ssl.key.password": KEY_PASSWORD,
            "ssl.truststore.type": "PKCS12",
            "ssl.truststore.location": str(stores["ca_p12"]),
            "ssl.truststore.password": STORE_PASSWORD,
            "ssl.client.auth": "required",
            "ssl.principal.mapping.rules": "RULE:^CN=([^,]*),OU=Ops,.*$/ops-$1/U,DEFAULT",
        }
    )
    principal, dn = _handshake(factory, stores, cert=True)
    assert dn == "CN=bob,OU=Ops,O=Example"
    assert principal == KafkaPrincipal("User", "OPS-BOB")


def test_inline_pem_key_store_with_continuation_lines_and_default_mapping(stores):
    server = stores["server"]
    # A properties file value continued with backslashes arrives with the newlines turned to spaces.
    factory = _factory(
        **{
            "ssl.keystore.type": "PEM",
            "ssl.keystore.certificate.chain": server.cert_pem().replace("\n", " "),
            "ssl.keystore.key": server.key_pem().replace("\n", " "),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.certificates": stores["ca"].cert_pem(),
            "ssl.client.auth": "requested",
        }
    )
    assert _handshake(factory, stores, cert=True)[0] == KafkaPrincipal("User", "CN=bob,OU=Ops,O=Example")
    assert _handshake(factory, stores, cert=False)[0] == ANONYMOUS


def test_protocols_and_cipher_suites(stores):
    base = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(stores["pem_plain"])}
    factory = _factory(
        **base,
        **{
            "ssl.enabled.protocols": "TLSv1.2",
            "ssl.cipher.suites": "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
        },
    )
    assert factory.context.maximum_version == ssl.TLSVersion.TLSv1_2
    assert [c["name"] for c in factory.context.get_ciphers() if c["protocol"] == "TLSv1.2"] == [
        "ECDHE-ECDSA-AES128-GCM-SHA256"
    ]


@pytest.mark.parametrize(
    "settings, key, fragment",
    [
        ({}, "ssl.keystore.location", "needs a key store"),
        ({"ssl.keystore.type": "PEM"}, "ssl.keystore.certificate.chain", "needs ssl.keystore.location"),
        (
            {"ssl.keystore.type": "PEM", "ssl.keystore.location": "@pem", "ssl.keystore.password": "x"},
            "ssl.keystore.password",
            "cannot be specified with PEM",
        ),
        (
            {"ssl.keystore.type": "PEM", "ssl.keystore.location": "@pem"},
            "ssl.key.password",
            "cannot read the private key",
        ),
        (
            {
                "ssl.keystore.type": "PKCS12",
                "ssl.keystore.location": "@p12",
                "ssl.keystore.password": "wrong",
            },
            "ssl.keystore.location",
            "cannot read PKCS12",
        ),
        (
            {"ssl.keystore.location": "/nonexistent/ks.p12"},
            "ssl.keystore.location",
            "cannot read /nonexistent",
        ),
        ({"ssl.keystore.location": "@jks"}, "ssl.keystore.location", "JKS key store"),
        (
            {
                "ssl.keystore.location": "@p12",
                "ssl.keystore.password": STORE_PASSWORD,
                "ssl.enabled.protocols": "TLSv1.4",
            },
            "ssl.enabled.protocols",
            "unsupported TLS protocol",
        ),
        (
            {
                "ssl.keystore.location": "@p12",
                "ssl.keystore.password": STORE_PASSWORD,
                "ssl.cipher.suites": "TLS_BOGUS",
            },
            "ssl.cipher.suites",
            "unsupported cipher suite",
        ),
        (
            {
                "ssl.keystore.location": "@p12",
                "ssl.keystore.password": STORE_PASSWORD,
                "ssl.principal.mapping.rules": "RULE:x",
            },
            "ssl.principal.mapping.rules",
            "Invalid rule",
        ),
    ],
)
def test_unusable_ssl_settings_name_the_key(stores, settings, key, fragment):
    d: Path = stores["dir"]
    jks = d / "store.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed" + b"\0" * 32)
    paths = {"@pem": str(stores["pem_file"]), "@p12": str(stores["p12"]), "@jks": str(jks)}
    with pytest.raises(SslConfigError) as e:
        _factory(**{k: paths.get(v, v) for k, v in settings.items()})
    assert e.value.key == key
    assert fragment in e.value.message


def test_sasl_ssl_listeners_check_a_client_certificate_but_do_not_map_it(stores):
    config = BrokerConfig(
        {
            "listeners": "SSL://127.0.0.1:9093",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(stores["pem_plain"]),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(stores["ca_pem"]),
            "ssl.client.auth": "required",
        }
    )
    factory = ServerSslFactory("SSL", partial(config.listener_value, "SSL"), "SASL_SSL")
    assert _handshake(factory, stores, cert=True) == (ANONYMOUS, None)  # SASL will set the principal


def test_a_broker_registration_answers_per_listener():
    from types import MappingProxyType

    from pybroker.metadata.image import BrokerRegistration

    reg = BrokerRegistration(1, "h", 9092, None, MappingProxyType({"PLAINTEXT": ("h", 9092), "SSL": ("h2", 9093)}))
    assert reg.endpoint("SSL") == ("h2", 9093)
    assert reg.endpoint("PLAINTEXT") == ("h", 9092)
    assert reg.endpoint("OTHER") is None  # Metadata leaves such a broker out, as Kafka does
    assert BrokerRegistration(2, "x", 1).endpoint("ANY") == ("x", 1)  # registered without listeners
