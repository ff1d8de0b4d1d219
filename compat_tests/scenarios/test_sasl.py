"""SASL on a SASL_PLAINTEXT listener, cell for cell on pybroker and Apache Kafka: stock clients (confluent-kafka,
kafka-python) with PLAIN, SCRAM-SHA-256/512 (users made with AlterUserScramCredentials and with Kafka's
kafka-configs tool) and OAUTHBEARER (unsecured JWS), and raw requests for the exact answers of Kafka's
SaslServerAuthenticator: nothing before authentication, UNSUPPORTED_SASL_MECHANISM listing the enabled
mechanisms, SASL_AUTHENTICATION_FAILED messages, v0 raw tokens, KIP-368 session lifetime, re-authentication
and expiry, SCRAM credential validation.

Each broker serves PLAINTEXT (its readiness probe, the tools) and SASL_PLAINTEXT on a second port."""

from __future__ import annotations

import base64
import json
import socket
import struct
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from compat_tests.brokers import PyBroker, free_port, read_response
from compat_tests.kafka_tools import run_tool
from compat_tests.scenarios.support import CLUSTER_BROKERS, cluster_launcher
from tests.wire import WireClient

PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";'
)
SCRAM_JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
OAUTH_JAAS = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
MECHANISMS = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER"
REAUTH_MS = 2000
SASL_HANDSHAKE, SASL_AUTHENTICATE, METADATA, API_VERSIONS = 17, 36, 3, 18
GENERIC_FAILURE = (
    "Authentication failed during authentication due to invalid credentials with SASL mechanism {}"
)
SASL_SETTINGS = {
    "sasl.enabled.mechanisms": MECHANISMS,
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
    "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": SCRAM_JAAS,
    "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": SCRAM_JAAS,
    "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config": OAUTH_JAAS,
    "connections.max.reauth.ms": str(REAUTH_MS),
    "offsets.topic.num.partitions": "1",
    "group.initial.rebalance.delay.ms": "0",
}


class SaslBroker:
    """A broker with PLAINTEXT on ``bootstrap`` and SASL_PLAINTEXT on ``sasl_bootstrap``; on a cluster
    run, a 3-node cluster of the kind under test, every node with both listeners, bootstrapped through
    every node."""

    def __init__(self, kind: str, workdir: Path, settings: dict[str, str] | None = None) -> None:
        self.sasl_port = free_port()
        self.cluster = kind in CLUSTER_BROKERS
        settings = {**SASL_SETTINGS, **(settings or {})}
        if self.cluster:
            self.launcher = cluster_launcher(
                kind, workdir, settings, extra_listeners={"SASL_PLAINTEXT": "SASL_PLAINTEXT"}
            )
        elif kind == "kafka":
            from compat_tests.reference.apache_kafka import ApacheKafka

            self.launcher: Any = ApacheKafka(
                workdir,
                overrides=settings,
                extra_listeners={"SASL_PLAINTEXT": ("SASL_PLAINTEXT", self.sasl_port)},
            )
        else:
            port = free_port()
            listeners = f"PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{self.sasl_port}"
            self.launcher = PyBroker(workdir, port=port, overrides={"listeners": listeners, **settings})

    def start(self) -> None:
        self.launcher.start()

    def stop(self) -> None:
        self.launcher.stop()

    @property
    def bootstrap(self) -> str:
        return self.launcher.bootstrap

    @property
    def sasl_bootstrap(self) -> str:
        if self.cluster:
            return self.launcher.listener_bootstrap("SASL_PLAINTEXT")
        return f"127.0.0.1:{self.sasl_port}"


@pytest.fixture(scope="module")
def broker(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SaslBroker]:
    if request.config.getoption("--bootstrap"):
        pytest.skip("the SASL scenarios start their own broker with a SASL listener")
    b = SaslBroker(request.config.getoption("--broker"), tmp_path_factory.mktemp("sasl"))
    b.start()
    try:
        yield b
    finally:
        b.stop()


def client_config(broker: Any, mechanism: str, user: str = "", password: str = "") -> dict[str, Any]:
    config: dict[str, Any] = {
        "bootstrap.servers": broker.sasl_bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
    }
    if mechanism == "OAUTHBEARER":
        config["enable.sasl.oauthbearer.unsecure.jwt"] = True
        config["sasl.oauthbearer.config"] = f"principal={user}"
    else:
        config["sasl.username"] = user
        config["sasl.password"] = password
    return config


def add_scram_user(broker: Any, user: str, password: str, mechanism: ScramMechanism, iterations: int) -> None:
    admin = AdminClient(client_config(broker, "PLAIN", "admin", "admin-secret"))
    futures = admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion(user, ScramCredentialInfo(mechanism, iterations), password.encode())]
    )
    for future in futures.values():
        assert future.result(15) is None


def round_trip(config: dict[str, Any], topic: str, value: bytes, *, group: bool = False) -> None:
    """Produce one record and consume it: in a consumer group (JoinGroup/SyncGroup, commits) when ``group``,
    else by assignment (no join to wait for)."""
    producer = Producer(config)
    producer.produce(topic, value)
    assert producer.flush(30) == 0
    consumer = Consumer(
        dict(config, **{"group.id": f"g-{uuid.uuid4().hex}", "auto.offset.reset": "earliest"})
    )
    if group:
        consumer.subscribe([topic])
    else:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(1)
            if message is not None and message.error() is None:
                assert message.value() == value
                if group:
                    consumer.commit(message, asynchronous=False)
                return
        pytest.fail(f"nothing consumed from {topic}")
    finally:
        consumer.close()


def auth_error(config: dict[str, Any]) -> str:
    """The first error a producer reports when its authentication is refused."""
    errors: list[str] = []
    producer = Producer(dict(config, error_cb=lambda e: errors.append(e.str())))
    deadline = time.monotonic() + 20
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    assert errors, "the broker accepted the credentials"
    return errors[0]


def sasl_wire(broker: Any) -> WireClient:
    return WireClient(broker.sasl_bootstrap)


# -- stock clients ---------------------------------------------------------------------------------------


def test_confluent_kafka_plain(broker: SaslBroker) -> None:
    round_trip(client_config(broker, "PLAIN", "alice", "alice-secret"), "sasl-plain", b"plain", group=True)


@pytest.mark.parametrize("mechanism", [ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512])
def test_confluent_kafka_scram_user_created_by_admin(broker: SaslBroker, mechanism: ScramMechanism) -> None:
    name = "SCRAM-SHA-256" if mechanism == ScramMechanism.SCRAM_SHA_256 else "SCRAM-SHA-512"
    user = f"user-{name.lower()}"
    add_scram_user(broker, user, "s3cret", mechanism, 8192)
    round_trip(client_config(broker, name, user, "s3cret"), f"sasl-{name.lower()}", name.encode(), group=True)
    error = auth_error(client_config(broker, name, user, "wrong"))
    assert GENERIC_FAILURE.format(name) in error


def test_confluent_kafka_oauthbearer_unsecured(broker: SaslBroker) -> None:
    round_trip(client_config(broker, "OAUTHBEARER", "carol"), "sasl-oauth", b"oauth", group=True)


def test_wrong_password_refused_with_kafkas_message(broker: SaslBroker) -> None:
    error = auth_error(client_config(broker, "PLAIN", "alice", "not-her-password"))
    assert "Authentication failed: Invalid username or password" in error
    # The broker keeps serving others.
    round_trip(client_config(broker, "PLAIN", "alice", "alice-secret"), "sasl-after-failure", b"ok")


def test_kafka_python_plain_and_scram(broker: SaslBroker) -> None:
    kafka = pytest.importorskip("kafka")
    add_scram_user(broker, "kp-user", "kp-secret", ScramMechanism.SCRAM_SHA_512, 4096)
    for mechanism, user, password in (
        ("PLAIN", "alice", "alice-secret"),
        ("SCRAM-SHA-512", "kp-user", "kp-secret"),
    ):
        topic = f"sasl-kafka-python-{mechanism.lower()}"
        common = {
            "bootstrap_servers": broker.sasl_bootstrap,
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": mechanism,
            "sasl_plain_username": user,
            "sasl_plain_password": password,
        }
        producer = kafka.KafkaProducer(**common)
        producer.send(topic, mechanism.encode()).get(timeout=20)
        producer.close()
        consumer = kafka.KafkaConsumer(topic, auto_offset_reset="earliest", **common)
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        while not values and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                values += [r.value for r in records]
        consumer.close()
        assert values == [mechanism.encode()]


# -- raw requests ------------------------------------------------------------------------------------------


def assert_closed(sock: socket.socket) -> None:
    sock.settimeout(10)
    try:
        data = sock.recv(4096)
    except ConnectionResetError:
        return
    assert data == b"", f"expected the broker to close the connection, got {data!r}"


def plain_token(user: str, password: str) -> bytes:
    return f"\x00{user}\x00{password}".encode()


def authenticate_plain(
    c: WireClient, user: str = "alice", password: str = "alice-secret", version: int = 2
) -> dict:
    handshake = c.request(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
    assert handshake["error_code"] == 0
    return c.request(SASL_AUTHENTICATE, version, {"auth_bytes": plain_token(user, password)})


def test_request_before_authentication_closes_the_connection(broker: SaslBroker) -> None:
    with sasl_wire(broker) as c:
        c.send(METADATA, 1, {"topics": None})
        assert_closed(c.sock)
    # ApiVersions first is served, then a request other than SaslHandshake still closes.
    with sasl_wire(broker) as c:
        assert (
            c.request(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})[
                "error_code"
            ]
            == 0
        )
        c.send(METADATA, 1, {"topics": None})
        assert_closed(c.sock)
    # After a handshake, anything but SaslAuthenticate is answered in its own response type (Metadata v1 with
    # nothing in it: no brokers, controller -1, no topics), then the connection closes.
    with sasl_wire(broker) as c:
        assert c.request(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})["error_code"] == 0
        c.send(METADATA, 1, {"topics": None})
        frame = read_response(c.sock)
        assert frame == struct.pack(">iiii", c.correlation_id, 0, -1, 0)
        assert_closed(c.sock)


def test_unsupported_mechanism_lists_the_enabled_ones(broker: SaslBroker) -> None:
    with sasl_wire(broker) as c:
        response = c.request(SASL_HANDSHAKE, 1, {"mechanism": "GSSAPI"})
        assert response["error_code"] == 33  # UNSUPPORTED_SASL_MECHANISM
        assert sorted(response["mechanisms"]) == sorted(MECHANISMS.split(","))
        assert_closed(c.sock)


def test_failed_authentication_answers_then_closes(broker: SaslBroker) -> None:
    with sasl_wire(broker) as c:
        response = authenticate_plain(c, password="nope")
        assert response["error_code"] == 58  # SASL_AUTHENTICATION_FAILED
        assert response["error_message"] == "Authentication failed: Invalid username or password"
        assert_closed(c.sock)
    with sasl_wire(broker) as c:
        response = authenticate_plain(c, password="")
        assert response["error_message"] == "Authentication failed: password not specified"
    with sasl_wire(broker) as c:
        assert c.request(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})["error_code"] == 0
        response = c.request(SASL_AUTHENTICATE, 2, {"auth_bytes": b"alice\x00alice-secret"})
        assert response["error_code"] == 58
        assert response["error_message"] == "Invalid SASL/PLAIN response: expected 3 tokens, got 2"


def test_authenticated_connection_is_served_and_sasl_requests_get_illegal_state(broker: SaslBroker) -> None:
    with sasl_wire(broker) as c:
        response = authenticate_plain(c)
        assert response["error_code"] == 0
        assert response["session_lifetime_ms"] == REAUTH_MS
        metadata = c.request(METADATA, 1, {"topics": None})
        assert metadata["brokers"]
        again = c.request(SASL_AUTHENTICATE, 2, {"auth_bytes": plain_token("alice", "alice-secret")})
        assert again["error_code"] == 34  # ILLEGAL_SASL_STATE
        assert again["error_message"] == "SaslAuthenticate request received after successful authentication"


def test_sasl_requests_on_a_plaintext_listener_get_illegal_state(broker: SaslBroker) -> None:
    with WireClient(broker.bootstrap) as c:
        assert c.request(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}) == {"error_code": 34, "mechanisms": []}
        response = c.request(SASL_AUTHENTICATE, 2, {"auth_bytes": plain_token("alice", "alice-secret")})
        assert response["error_code"] == 34
        assert c.request(METADATA, 1, {"topics": None})["brokers"]  # still served


def test_handshake_v0_raw_tokens(broker: SaslBroker) -> None:
    """KIP-43's original framing: after SaslHandshake v0 the token is a bare size-prefixed frame."""
    with sasl_wire(broker) as c:
        assert c.request(SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"})["error_code"] == 0
        token = plain_token("alice", "alice-secret")
        c.sock.sendall(struct.pack(">i", len(token)) + token)
        assert read_response(c.sock) == b""  # PLAIN's empty final challenge
        assert c.request(METADATA, 1, {"topics": None})["brokers"]
    with sasl_wire(broker) as c:
        assert c.request(SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"})["error_code"] == 0
        token = plain_token("alice", "bad")
        c.sock.sendall(struct.pack(">i", len(token)) + token)
        assert_closed(c.sock)  # no SaslAuthenticate to carry an error: Kafka just closes


def test_session_expires_without_reauthentication(broker: SaslBroker) -> None:
    with sasl_wire(broker) as c:
        assert authenticate_plain(c)["session_lifetime_ms"] == REAUTH_MS
        assert c.request(METADATA, 1, {"topics": None})["brokers"]
        time.sleep(REAUTH_MS / 1000 + 0.5)  # the session's lifetime is the thing under test
        c.send(METADATA, 1, {"topics": None})
        assert_closed(c.sock)


def test_reauthentication_extends_the_session(broker: SaslBroker) -> None:
    with sasl_wire(broker) as c:
        assert authenticate_plain(c)["error_code"] == 0
        time.sleep(1.1)  # Kafka allows one re-authentication per second
        response = authenticate_plain(c)
        assert response["error_code"] == 0 and response["session_lifetime_ms"] == REAUTH_MS
        time.sleep(REAUTH_MS / 1000 - 0.6)  # past the first session's end, within the second's
        assert c.request(METADATA, 1, {"topics": None})["brokers"]


def test_reauthentication_cannot_change_principal(broker: SaslBroker) -> None:
    with sasl_wire(broker) as c:
        assert authenticate_plain(c)["error_code"] == 0
        time.sleep(1.1)
        response = authenticate_plain(c, "admin", "admin-secret")
        assert response["error_code"] == 58
        assert response["error_message"] == (
            "Cannot change principals during re-authentication from User.alice: User.admin"
        )
        assert_closed(c.sock)


# -- OAUTHBEARER --------------------------------------------------------------------------------------------


def unsecured_jws(claims: dict[str, Any]) -> str:
    def b64(d: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()

    return f"{b64({'alg': 'none'})}.{b64(claims)}."


def oauth_exchange(c: WireClient, token: str) -> dict:
    assert c.request(SASL_HANDSHAKE, 1, {"mechanism": "OAUTHBEARER"})["error_code"] == 0
    first = f"n,,\x01auth=Bearer {token}\x01\x01".encode()
    return c.request(SASL_AUTHENTICATE, 2, {"auth_bytes": first})


def test_oauthbearer_unsecured_token_lifetime_bounds_the_session(broker: SaslBroker) -> None:
    now = time.time()
    with sasl_wire(broker) as c:
        response = oauth_exchange(c, unsecured_jws({"sub": "dave", "iat": now, "exp": now + 1}))
        assert response["error_code"] == 0
        assert (
            0 < response["session_lifetime_ms"] <= 1000
        )  # the token expires before connections.max.reauth.ms


def test_oauthbearer_expired_token_refused(broker: SaslBroker) -> None:
    now = time.time()
    with sasl_wire(broker) as c:
        response = oauth_exchange(c, unsecured_jws({"sub": "dave", "iat": now - 100, "exp": now - 10}))
        # RFC 7628: the error comes as a challenge; the client answers %x01 and the exchange fails with it.
        assert response["error_code"] == 0
        assert json.loads(response["auth_bytes"]) == {"status": "invalid_token"}
        final = c.request(SASL_AUTHENTICATE, 2, {"auth_bytes": b"\x01"})
        assert final["error_code"] == 58
        assert final["error_message"] == '{"status":"invalid_token"}'
        assert_closed(c.sock)


# -- SCRAM credentials ------------------------------------------------------------------------------------


def test_scram_credential_admin_errors(broker: SaslBroker) -> None:
    admin = AdminClient(client_config(broker, "PLAIN", "admin", "admin-secret"))
    add_scram_user(broker, "frank", "pw", ScramMechanism.SCRAM_SHA_256, 4096)
    described = admin.describe_user_scram_credentials(["frank"])["frank"].result(15)
    assert [(i.mechanism, i.iterations) for i in described.scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_256, 4096)
    ]
    futures = admin.alter_user_scram_credentials(
        [
            UserScramCredentialUpsertion(
                "few", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 1000), b"pw"
            ),
            UserScramCredentialUpsertion(
                "many", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 20000), b"pw"
            ),
            UserScramCredentialDeletion("nobody", ScramMechanism.SCRAM_SHA_256),
        ]
    )
    for user, message in (
        ("few", "Too few iterations"),
        ("many", "Too many iterations"),
        ("nobody", "Attempt to delete a user credential that does not exist"),
    ):
        with pytest.raises(Exception) as info:
            futures[user].result(15)
        assert message in str(info.value)
    with pytest.raises(Exception) as info:
        admin.describe_user_scram_credentials(["nobody"])["nobody"].result(15)
    assert "Attempt to describe a user credential that does not exist: nobody" in str(info.value)
    for future in admin.alter_user_scram_credentials(
        [UserScramCredentialDeletion("frank", ScramMechanism.SCRAM_SHA_256)]
    ).values():
        assert future.result(15) is None
    assert "SCRAM-SHA-256" in auth_error(client_config(broker, "SCRAM-SHA-256", "frank", "pw"))


def test_scram_user_made_with_kafka_configs_tool(broker: SaslBroker) -> None:
    run_tool(
        "kafka-configs", "--bootstrap-server", broker.bootstrap, "--alter", "--entity-type", "users",
        "--entity-name", "hank", "--add-config", "SCRAM-SHA-256=[iterations=8192,password=hank-pw]",
    ).check()  # fmt: skip
    # (kafka-configs --describe of users also asks for client quotas: the admin API shows the credential.)
    admin = AdminClient(client_config(broker, "PLAIN", "admin", "admin-secret"))
    described = admin.describe_user_scram_credentials(["hank"])["hank"].result(15)
    assert [(i.mechanism, i.iterations) for i in described.scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_256, 8192)
    ]
    round_trip(client_config(broker, "SCRAM-SHA-256", "hank", "hank-pw"), "sasl-kafka-configs", b"tool")


def java_sasl_properties(mechanism: str, user: str, password: str) -> dict[str, str]:
    if mechanism == "OAUTHBEARER":  # the Java client's default login: an unsecured JWS for the user
        jaas = (
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
            f'unsecuredLoginStringClaim_sub="{user}";'
        )
    else:
        module = (
            "org.apache.kafka.common.security.plain.PlainLoginModule"
            if mechanism == "PLAIN"
            else "org.apache.kafka.common.security.scram.ScramLoginModule"
        )
        jaas = f'{module} required username="{user}" password="{password}";'
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism, "sasl.jaas.config": jaas}


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"])
def test_java_client(broker: SaslBroker, mechanism: str) -> None:
    from compat_tests.clients.base import Record
    from compat_tests.clients.java import JavaClient

    user, password = (
        ("alice", "alice-secret") if mechanism == "PLAIN" else (f"java-{mechanism.lower()}", "jpw")
    )
    if mechanism.startswith("SCRAM"):
        scram = ScramMechanism.SCRAM_SHA_256 if mechanism == "SCRAM-SHA-256" else ScramMechanism.SCRAM_SHA_512
        add_scram_user(broker, user, password, scram, 4096)
    java = JavaClient(properties=java_sasl_properties(mechanism, user, password))
    topic = f"sasl-java-{mechanism.lower()}"
    deliveries = java.produce(broker.sasl_bootstrap, topic, [Record(b"k", mechanism.encode())])
    assert len(deliveries) == 1
    got = java.consume(broker.sasl_bootstrap, topic, 0, start="beginning", count=1)
    assert [r.value for r in got] == [mechanism.encode()]
    if mechanism == "OAUTHBEARER":
        return  # no password to get wrong
    refused = JavaClient(properties=java_sasl_properties(mechanism, user, "wrong"), timeout_s=20)
    with pytest.raises(Exception) as info:
        refused.produce(broker.sasl_bootstrap, topic, [Record(b"k", b"never")])
    expected = (
        "Authentication failed: Invalid username or password"
        if mechanism == "PLAIN"
        else GENERIC_FAILURE.format(mechanism)
    )
    assert expected in str(info.value)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_aiokafka(broker: SaslBroker, mechanism: str) -> None:
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    user, password = ("alice", "alice-secret") if mechanism == "PLAIN" else ("aio-user", "aio-pw")
    if mechanism != "PLAIN":
        add_scram_user(broker, user, password, ScramMechanism.SCRAM_SHA_256, 4096)
    common = {
        "bootstrap_servers": broker.sasl_bootstrap,
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": mechanism,
        "sasl_plain_username": user,
        "sasl_plain_password": password,
    }
    topic = f"sasl-aiokafka-{mechanism.lower()}"

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(**common)
        await producer.start()
        try:
            await producer.send_and_wait(topic, mechanism.encode())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, auto_offset_reset="earliest", **common)
        await consumer.start()
        try:
            message = await asyncio.wait_for(consumer.getone(), 30)
            return [message.value]
        finally:
            await consumer.stop()

    assert asyncio.run(run()) == [mechanism.encode()]


# kcat 1.7.1 here bundles librdkafka 2.0.2, whose SCRAM client-final message carries a nonce other than the
# one the server sent: Apache Kafka 4.3.1 and pybroker both refuse it (scramp: "Server nonce doesn't match"),
# so kcat is exercised with PLAIN only; SCRAM through librdkafka is covered by confluent-kafka above.
@pytest.mark.parametrize("mechanism", ["PLAIN"])
def test_kcat(broker: SaslBroker, mechanism: str) -> None:
    import subprocess

    from compat_tests.clients.kcat import kcat_binary

    user, password = ("alice", "alice-secret") if mechanism == "PLAIN" else ("kcat-user", "kcat-pw")
    if mechanism != "PLAIN":
        add_scram_user(broker, user, password, ScramMechanism.SCRAM_SHA_512, 4096)
    topic = f"sasl-kcat-{mechanism.lower()}"

    def kcat(*args: str, pw: str = password, stdin: bytes = b"") -> subprocess.CompletedProcess:
        sasl = ["-X", "security.protocol=SASL_PLAINTEXT", "-X", f"sasl.mechanisms={mechanism}"]
        sasl += ["-X", f"sasl.username={user}", "-X", f"sasl.password={pw}"]
        command = [kcat_binary(), "-b", broker.sasl_bootstrap, *sasl, "-t", topic, *args]
        return subprocess.run(command, input=stdin, capture_output=True, timeout=60, check=False)

    produced = kcat("-P", stdin=b"from kcat\n")
    assert produced.returncode == 0, produced.stderr
    consumed = kcat("-C", "-o", "beginning", "-c", "1", "-e")
    assert consumed.returncode == 0 and consumed.stdout == b"from kcat\n", consumed.stderr
    refused = kcat("-L", "-m", "5", pw="wrong")
    expected = (
        "Authentication failed: Invalid username or password"
        if mechanism == "PLAIN"
        else GENERIC_FAILURE.format(mechanism)
    )
    assert refused.returncode != 0 and expected in refused.stderr.decode()
