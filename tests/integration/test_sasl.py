"""SASL behaviour of pybroker that the compat scenario (compat_tests/scenarios/test_sasl.py, run on both
brokers) does not cover: OAUTHBEARER signed tokens against a JWKS file, SCRAM credentials across a restart
(salted and hashed in the metadata store), and the start-up refusal of Kafka's default GSSAPI."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from compat_tests.brokers import PyBroker, free_port
from compat_tests.scenarios.test_sasl import (
    METADATA,
    SASL_AUTHENTICATE,
    SaslBroker,
    add_scram_user,
    auth_error,
    client_config,
    oauth_exchange,
    round_trip,
    unsecured_jws,
)
from tests.wire import WireClient


def test_oauthbearer_signed_tokens_checked_against_a_jwks_file(tmp_path: Path) -> None:
    jwt = pytest.importorskip("jwt")
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ec_key = ec.generate_private_key(ec.SECP256R1())
    keys = []
    for kid, key, alg in (("rsa1", rsa_key, "RS256"), ("ec1", ec_key, "ES256")):
        jwk = json.loads(jwt.algorithms.get_default_algorithms()[alg].to_jwk(key.public_key()))
        keys.append(dict(jwk, kid=kid, use="sig", alg=alg))
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps({"keys": keys}))
    b = SaslBroker(
        "pybroker",
        tmp_path / "broker",
        {
            "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class": (
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
            ),
            "sasl.oauthbearer.jwks.endpoint.url": jwks.as_uri(),
            "sasl.oauthbearer.expected.audience": "kafka",
            "sasl.oauthbearer.expected.issuer": "https://issuer.example",
        },
    )
    b.start()
    try:
        now = int(time.time())
        good = {"sub": "erin", "iat": now, "exp": now + 600, "aud": "kafka", "iss": "https://issuer.example"}
        for kid, key, alg in (("rsa1", rsa_key, "RS256"), ("ec1", ec_key, "ES256")):
            with WireClient(b.sasl_bootstrap) as c:
                token = jwt.encode(good, key, algorithm=alg, headers={"kid": kid})
                assert oauth_exchange(c, token)["error_code"] == 0
                assert c.request(METADATA, 1, {"topics": None})["brokers"]
        other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        refused = [
            jwt.encode(good, other_key, algorithm="RS256", headers={"kid": "rsa1"}),  # not the JWKS's key
            jwt.encode(dict(good, aud="other"), rsa_key, algorithm="RS256", headers={"kid": "rsa1"}),
            jwt.encode(dict(good, iss="https://evil.example"), rsa_key, algorithm="RS256", headers={"kid": "rsa1"}),
            jwt.encode(dict(good, exp=now - 120), rsa_key, algorithm="RS256", headers={"kid": "rsa1"}),
            unsecured_jws(good),  # alg none is never accepted by the signed-token validator
        ]
        for token in refused:
            with WireClient(b.sasl_bootstrap) as c:
                response = oauth_exchange(c, token)
                assert json.loads(response["auth_bytes"]) == {"status": "invalid_token"}, token
                final = c.request(SASL_AUTHENTICATE, 2, {"auth_bytes": b"\x01"})
                assert final["error_code"] == 58
    finally:
        b.stop()


def test_scram_credentials_survive_a_restart(tmp_path: Path) -> None:
    b = SaslBroker("pybroker", tmp_path)
    b.start()
    try:
        add_scram_user(b, "grace", "grace-pw", ScramMechanism.SCRAM_SHA_512, 4096)
        b.stop()
        stored = (b.launcher.data_dir / "pybroker-metadata.json").read_text()
        assert "grace-pw" not in stored and "grace" in stored  # salted and hashed, never the password
        b.start()
        round_trip(client_config(b, "SCRAM-SHA-512", "grace", "grace-pw"), "sasl-restart", b"after restart")
    finally:
        b.stop()


def test_gssapi_default_refused_at_start_up(tmp_path: Path) -> None:
    port = free_port()
    b = PyBroker(tmp_path, port=port, overrides={"listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}"})
    with pytest.raises(Exception) as info:
        b.start(timeout_s=20)
    assert "GSSAPI" in str(info.value)


def test_java_client_reauthenticates_before_its_session_ends(tmp_path: Path) -> None:
    """KIP-368 with the Java client: a consumer connected across several connections.max.reauth.ms periods
    re-authenticates on the same connections (the broker logs each completion at DEBUG) and is never cut off
    for an expired session."""
    import threading

    from compat_tests.clients.java import JavaClient
    from compat_tests.scenarios.test_sasl import java_sasl_properties

    b = SaslBroker("pybroker", tmp_path, {"connections.max.reauth.ms": "1500"})
    b.launcher.extra_args = ["--log-level", "DEBUG"]
    b.start()
    try:
        producer = Producer(client_config(b, "PLAIN", "admin", "admin-secret"))
        java = JavaClient(properties=java_sasl_properties("PLAIN", "alice", "alice-secret"))
        got: list = []
        consumer = threading.Thread(
            target=lambda: got.extend(
                java.consume(b.sasl_bootstrap, "sasl-reauth", 0, start="beginning", count=3, timeout_s=40)
            )
        )
        producer.produce("sasl-reauth", b"0")
        assert producer.flush(20) == 0
        consumer.start()
        for i in (1, 2):
            time.sleep(2.5)  # the consumer must stay connected across session lifetimes: that is the test
            producer.produce("sasl-reauth", str(i).encode())
            assert producer.flush(20) == 0
        consumer.join(60)
        assert [r.value for r in got] == [b"0", b"1", b"2"]
        log = b.launcher.log_path.read_text()
        assert "re-authentication of User:alice complete" in log
        assert "the SASL session of User:alice expired" not in log
    finally:
        b.stop()


def test_sasl_ssl_listener(tmp_path: Path) -> None:
    """SASL over TLS: the h/tls listener's handshake first, then the same SASL exchange; the principal is
    SASL's (SCRAM and PLAIN users), and a wrong password is refused as on SASL_PLAINTEXT."""
    from pybroker.testing.certs import STORE_PASSWORD, CertificateAuthority

    ca = CertificateAuthority()
    ca_pem = ca.write_pem(tmp_path)
    keystore = ca.issue("localhost", server=True).write_pkcs12(tmp_path, "server")
    port, sasl_ssl_port = free_port(), free_port()
    b = PyBroker(
        tmp_path / "broker",
        port=port,
        overrides={
            "listeners": f"PLAINTEXT://127.0.0.1:{port},SASL_SSL://127.0.0.1:{sasl_ssl_port}",
            "listener.name.sasl_ssl.ssl.keystore.type": "PKCS12",
            "listener.name.sasl_ssl.ssl.keystore.location": str(keystore),
            "listener.name.sasl_ssl.ssl.keystore.password": STORE_PASSWORD,
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
            "listener.name.sasl_ssl.plain.sasl.jaas.config": (
                "org.apache.kafka.common.security.plain.PlainLoginModule required "
                'user_alice="alice-secret" user_admin="admin-secret";'
            ),
            "offsets.topic.num.partitions": "1",
            "group.initial.rebalance.delay.ms": "0",
        },
    )
    b.start()
    try:
        b.sasl_bootstrap = f"127.0.0.1:{sasl_ssl_port}"  # what client_config() connects to

        def tls(config: dict) -> dict:
            return dict(config, **{"security.protocol": "SASL_SSL", "ssl.ca.location": str(ca_pem)})

        admin_config = tls(client_config(b, "PLAIN", "admin", "admin-secret"))
        admin = AdminClient(admin_config)
        futures = admin.alter_user_scram_credentials(
            [UserScramCredentialUpsertion("ivy", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"ivy-pw")]
        )
        assert all(f.result(15) is None for f in futures.values())
        round_trip(tls(client_config(b, "PLAIN", "alice", "alice-secret")), "sasl-ssl-plain", b"plain over tls")
        round_trip(tls(client_config(b, "SCRAM-SHA-512", "ivy", "ivy-pw")), "sasl-ssl-scram", b"scram over tls")
        error = auth_error(tls(client_config(b, "PLAIN", "alice", "nope")))
        assert "Authentication failed: Invalid username or password" in error
    finally:
        b.stop()
