"""Delegation tokens (KIP-48, KIP-373), cell for cell on pybroker and Apache Kafka 4.3.1.

Tokens are created, described, renewed and expired by Apache Kafka's own ``kafka-delegation-tokens`` tool
(DelegationTokenCommand: Java AdminClient createDelegationToken / describeDelegationToken /
renewDelegationToken / expireDelegationToken), authenticated as PLAIN users over SASL_PLAINTEXT; a client
then authenticates with a token through SCRAM with the ``tokenauth`` extension (the Java 4.3.1 client,
``ScramLoginModule required username="<token id>" password="<base64 HMAC>" tokenauth="true"``).
librdkafka (confluent-kafka, kcat) and kafka-python send no SCRAM extensions: they cannot authenticate with
a token (a token is no SCRAM user: test_token_is_no_scram_user_without_tokenauth), so the Java client is the
one that does here.

Each broker serves PLAINTEXT (readiness, topic set-up) and SASL_PLAINTEXT on a second port, with
``delegation.token.secret.key`` set (one more broker without it answers DELEGATION_TOKEN_AUTH_DISABLED) and an
expiry check every second, so that an expired token is removed while the test waits.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.clients.java43 import java43_command
from compat_tests.kafka_tools import ToolResult, run_tool
from compat_tests.scenarios.test_sasl import SaslBroker

SECRET = "delegation-secret-of-the-compat-suite"
PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret" '
    'user_bob="bob-secret" user_carol="carol-secret";'
)
SCRAM_JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
SETTINGS = {
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
    "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": SCRAM_JAAS,
    "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": SCRAM_JAAS,
    "delegation.token.expiry.check.interval.ms": "1000",
    "offsets.topic.num.partitions": "1",
    "group.initial.rebalance.delay.ms": "0",
}


class Listeners(Protocol):
    @property
    def bootstrap(self) -> str: ...  # PLAINTEXT

    @property
    def sasl_bootstrap(self) -> str: ...  # SASL_PLAINTEXT


TOKEN_ID = re.compile(r"^[A-Za-z0-9_-]{22}$|^[0-9a-f-]{36}$")


def _start(request: pytest.FixtureRequest, workdir: Path, settings: dict[str, str]) -> SaslBroker:
    if request.config.getoption("--bootstrap"):
        pytest.skip("the delegation-token scenarios start their own broker with a SASL listener")
    broker = SaslBroker(request.config.getoption("--broker"), workdir, settings)
    # SaslBroker's defaults (OAUTHBEARER, a reauth interval) are test_sasl's: these settings replace them.
    launcher = broker.launcher
    launcher.overrides = {
        k: v
        for k, v in launcher.overrides.items()
        if "oauthbearer" not in k and k != "connections.max.reauth.ms"
    }
    broker.start()
    return broker


@pytest.fixture(scope="module")
def broker(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SaslBroker]:
    b = _start(request, tmp_path_factory.mktemp("dtokens"), {**SETTINGS, "delegation.token.secret.key": SECRET})
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="module")
def configs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("dtoken-configs")


def command_config(directory: Path, **settings: str) -> Path:
    path = directory / f"{uuid.uuid4().hex}.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    return path


def plain_user(directory: Path, user: str) -> Path:
    jaas = f'org.apache.kafka.common.security.plain.PlainLoginModule required username="{user}" password="{user}-secret";'
    return command_config(
        directory, **{"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.jaas.config": jaas}
    )


def token_jaas(token_id: str, hmac_b64: str) -> str:
    return (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{token_id}" password="{hmac_b64}" tokenauth="true";'
    )


@dataclass(frozen=True)
class Token:
    token_id: str
    hmac: str  # base64, as the tool prints it
    owner: str
    requester: str
    renewers: str


def tool(bootstrap: str, config: Path, *args: str) -> ToolResult:
    return run_tool(
        "kafka-delegation-tokens", "--bootstrap-server", bootstrap, "--command-config", str(config), *args,
        timeout_s=90,
    )  # fmt: skip


def tokens_printed(stdout: str) -> list[Token]:
    """The rows of the tool's token table (TOKENID HMAC OWNER REQUESTER RENEWERS ISSUEDATE EXPIRYDATE MAXDATE)."""
    rows = []
    for line in stdout.splitlines():
        parts = line.split()
        if len(parts) >= 8 and parts[0] != "TOKENID" and TOKEN_ID.match(parts[0]):
            renewers = " ".join(parts[4:-3])
            rows.append(Token(parts[0], parts[1], parts[2], parts[3], renewers))
    return rows


def create(broker: Listeners, config: Path, *args: str, max_life_ms: int = -1) -> Token:
    result = tool(broker.sasl_bootstrap, config, "--create", "--max-life-time-period", str(max_life_ms), *args).check()
    (token,) = tokens_printed(result.stdout)
    return token


def describe(broker: Listeners, config: Path, *owners: str) -> list[Token]:
    args = [a for owner in owners for a in ("--owner-principal", owner)]
    return tokens_printed(tool(broker.sasl_bootstrap, config, "--describe", *args).check().stdout)


def described_eventually(broker: Listeners, config: Path, token_id: str, *owners: str) -> list[Token]:
    """Describe until the token shows: Apache Kafka's brokers learn of a token when the controller's record
    reaches their metadata (DelegationTokenPublisher), a moment after CreateDelegationToken is answered."""
    deadline = time.monotonic() + 15
    while True:
        tokens = describe(broker, config, *owners)
        if token_id in {t.token_id for t in tokens} or time.monotonic() > deadline:
            return tokens
        time.sleep(0.5)


def failure(result: ToolResult) -> str:
    """The exception the tool reports (it prints the cause's message and exits 1)."""
    assert result.returncode != 0, f"the tool succeeded:\n{result.stdout}"
    return result.stdout + result.stderr


def produce_with_token(broker: Listeners, topic: str, token: Token, mechanism: str, value: bytes) -> dict:
    line = json.dumps({"key": None, "value": base64.b64encode(value).decode()})
    done = subprocess.run(
        java43_command(
            "produce", "--bootstrap", broker.sasl_bootstrap, "--topic", topic, "--acks", "all",
            "--timeout-ms", "20000",
            "--property", "security.protocol=SASL_PLAINTEXT",
            "--property", f"sasl.mechanism={mechanism}",
            "--property", f"sasl.jaas.config={token_jaas(token.token_id, token.hmac)}",
        ),
        input=line + "\n", capture_output=True, text=True, timeout=90, check=False,
    )  # fmt: skip
    out = [json.loads(x) for x in done.stdout.splitlines() if x.strip()]
    assert out, done.stderr[-2000:]
    return out[-1]


def consume_with_token(broker: Listeners, topic: str, token: Token, mechanism: str) -> list[bytes]:
    done = subprocess.run(
        java43_command(
            "consume", "--bootstrap", broker.sasl_bootstrap, "--topic", topic, "--partition", "0",
            "--start", "beginning", "--count", "1", "--timeout-ms", "20000",
            "--property", "security.protocol=SASL_PLAINTEXT",
            "--property", f"sasl.mechanism={mechanism}",
            "--property", f"sasl.jaas.config={token_jaas(token.token_id, token.hmac)}",
        ),
        capture_output=True, text=True, timeout=90, check=False,
    )  # fmt: skip
    out = [json.loads(x) for x in done.stdout.splitlines() if x.strip()]
    assert done.returncode == 0, out or done.stderr[-2000:]
    return [base64.b64decode(r["value"]) for r in out]


def new_topic(broker: Listeners) -> str:
    topic = f"dtoken-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(30)
    return topic


# -- the life of a token ------------------------------------------------------------------------------------


def test_create_describe_renew_expire(broker: SaslBroker, configs: Path) -> None:
    alice, bob, carol = (plain_user(configs, u) for u in ("alice", "bob", "carol"))
    token = create(broker, alice, "--renewer-principal", "User:bob")
    assert (token.owner, token.requester, token.renewers) == ("User:alice", "User:alice", "[User:bob]")
    # The HMAC is HmacSHA512 of the token id under delegation.token.secret.key.
    expected = hmac.new(SECRET.encode(), token.token_id.encode(), hashlib.sha512).digest()
    assert base64.b64decode(token.hmac) == expected

    # Described by owner or renewer.  The tool without --owner-principal sends an empty owner list, which
    # Kafka answers with no tokens at all (KafkaApis: ownersListEmpty).
    assert token.token_id in {t.token_id for t in described_eventually(broker, alice, token.token_id, "User:alice")}
    (described,) = [t for t in describe(broker, bob, "User:bob") if t.token_id == token.token_id]
    assert described == token
    assert token.token_id not in {t.token_id for t in describe(broker, alice, "User:carol")}
    assert describe(broker, alice) == []

    # The renewer may renew; someone else may neither renew nor expire it.
    renewed = tool(broker.sasl_bootstrap, bob, "--renew", "--hmac", token.hmac, "--renew-time-period", "-1").check()
    assert "Completed renew operation" in renewed.stdout
    for action, period in (("--renew", "--renew-time-period"), ("--expire", "--expiry-time-period")):
        refused = failure(tool(broker.sasl_bootstrap, carol, action, "--hmac", token.hmac, period, "-1"))
        assert "DelegationTokenOwnerMismatchException" in refused, refused

    # The owner expires it at once: it is gone.
    expired = tool(broker.sasl_bootstrap, alice, "--expire", "--hmac", token.hmac, "--expiry-time-period", "-1")
    assert "Completed expire operation" in expired.check().stdout
    assert token.token_id not in {t.token_id for t in describe(broker, alice, "User:alice")}
    gone = failure(tool(broker.sasl_bootstrap, alice, "--renew", "--hmac", token.hmac, "--renew-time-period", "-1"))
    assert "DelegationTokenNotFoundException" in gone, gone


def test_unknown_hmac_is_not_found(broker: SaslBroker, configs: Path) -> None:
    unknown = base64.b64encode(b"\x01" * 64).decode()
    refused = failure(
        tool(broker.sasl_bootstrap, plain_user(configs, "alice"), "--renew", "--hmac", unknown, "--renew-time-period", "-1")
    )
    assert "DelegationTokenNotFoundException" in refused, refused


def test_token_for_another_owner(broker: SaslBroker, configs: Path) -> None:
    """KIP-373: alice asks for a token owned by carol; carol is its owner, alice its requester."""
    alice, carol = plain_user(configs, "alice"), plain_user(configs, "carol")
    token = create(broker, alice, "--owner-principal", "User:carol")
    assert (token.owner, token.requester) == ("User:carol", "User:alice")
    assert token.token_id in {t.token_id for t in described_eventually(broker, carol, token.token_id, "User:carol")}
    # The requester may describe it too (TokenInformation.ownerOrRenewer).
    assert token.token_id in {t.token_id for t in describe(broker, alice, "User:alice")}
    # The requester is not a renewer.
    refused = failure(tool(broker.sasl_bootstrap, alice, "--renew", "--hmac", token.hmac, "--renew-time-period", "-1"))
    assert "DelegationTokenOwnerMismatchException" in refused, refused
    tool(broker.sasl_bootstrap, carol, "--renew", "--hmac", token.hmac, "--renew-time-period", "-1").check()


# -- authenticating with a token ------------------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_java_client_authenticates_with_the_token(broker: SaslBroker, configs: Path, mechanism: str) -> None:
    alice = plain_user(configs, "alice")
    token = create(broker, alice)
    described_eventually(broker, alice, token.token_id, "User:alice")
    topic = new_topic(broker)
    value = f"by-token-{mechanism}".encode()
    delivered = produce_with_token(broker, topic, token, mechanism, value)
    assert delivered.get("offset") == 0, delivered
    assert consume_with_token(broker, topic, token, mechanism) == [value]
    # A wrong HMAC is refused at authentication.
    forged = Token(token.token_id, base64.b64encode(b"\x02" * 64).decode(), token.owner, token.requester, "")
    refused = produce_with_token(broker, topic, forged, mechanism, value)
    assert refused.get("error") == "SaslAuthenticationException", refused


def test_token_is_no_scram_user_without_tokenauth(broker: SaslBroker, configs: Path) -> None:
    """librdkafka (confluent-kafka here) sends no SCRAM extensions, so it cannot use a token: the token id and
    HMAC as a plain SCRAM username and password are refused like any unknown user."""
    from compat_tests.scenarios.test_sasl import GENERIC_FAILURE, auth_error, client_config

    alice = plain_user(configs, "alice")
    token = create(broker, alice)
    described_eventually(broker, alice, token.token_id, "User:alice")
    error = auth_error(client_config(broker, "SCRAM-SHA-256", token.token_id, token.hmac))
    assert GENERIC_FAILURE.format("SCRAM-SHA-256") in error


def test_token_authenticated_connection_may_not_manage_tokens(broker: SaslBroker, configs: Path) -> None:
    alice = plain_user(configs, "alice")
    token = create(broker, alice)
    described_eventually(broker, alice, token.token_id, "User:alice")
    as_token = command_config(
        configs,
        **{
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.jaas.config": token_jaas(token.token_id, token.hmac),
        },
    )
    for args in (("--create", "--max-life-time-period", "-1"), ("--describe", "--owner-principal", "User:alice"),
                 ("--renew", "--hmac", token.hmac, "--renew-time-period", "-1")):  # fmt: skip
        refused = failure(tool(broker.sasl_bootstrap, as_token, *args))
        assert "UnsupportedByAuthenticationException" in refused, (args, refused)


def test_plaintext_connection_may_not_create_tokens(broker: SaslBroker, configs: Path) -> None:
    plaintext = command_config(configs, **{"security.protocol": "PLAINTEXT"})
    refused = failure(tool(broker.bootstrap, plaintext, "--create", "--max-life-time-period", "-1"))
    assert "UnsupportedByAuthenticationException" in refused, refused
    refused = failure(tool(broker.bootstrap, plaintext, "--describe", "--owner-principal", "User:alice"))
    assert "UnsupportedByAuthenticationException" in refused, refused


def test_expired_token_is_removed_and_refused_at_authentication(broker: SaslBroker, configs: Path) -> None:
    alice = plain_user(configs, "alice")
    token = create(broker, alice, max_life_ms=8000)
    described_eventually(broker, alice, token.token_id, "User:alice")
    topic = new_topic(broker)
    assert produce_with_token(broker, topic, token, "SCRAM-SHA-256", b"before").get("offset") == 0
    # Past its max lifetime the expiry check (every second) removes it.
    deadline = time.monotonic() + 30
    while token.token_id in {t.token_id for t in describe(broker, alice, "User:alice")}:
        assert time.monotonic() < deadline, "the expired token was never removed"
        time.sleep(1)
    refused = produce_with_token(broker, topic, token, "SCRAM-SHA-256", b"after")
    assert refused.get("error") == "SaslAuthenticationException", refused
    gone = failure(tool(broker.sasl_bootstrap, alice, "--renew", "--hmac", token.hmac, "--renew-time-period", "-1"))
    assert "DelegationTokenNotFoundException" in gone, gone


def test_disabled_without_a_secret_key(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, configs: Path
) -> None:
    b = _start(request, tmp_path_factory.mktemp("dtokens-off"), SETTINGS)
    try:
        alice = plain_user(configs, "alice")
        for args in (("--create", "--max-life-time-period", "-1"), ("--describe", "--owner-principal", "User:alice")):
            refused = failure(tool(b.sasl_bootstrap, alice, *args))
            assert "DelegationTokenDisabledException" in refused, (args, refused)
    finally:
        b.stop()


# -- with an authorizer: KIP-373's CREATE_TOKENS, and the token's owner as the principal ACLs see --------------


@dataclass(frozen=True)
class AclBroker:
    bootstrap: str
    sasl_bootstrap: str


ACL_SETTINGS = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "allow.everyone.if.no.acl.found": "true",
    # The SASL listener's own mechanisms: Apache Kafka's internal listeners (authorizer=True) keep PLAIN only.
    "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
    "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": SCRAM_JAAS,
    "delegation.token.secret.key": SECRET,
    "offsets.topic.num.partitions": "1",
}
R_TOPIC, R_USER, P_LITERAL, O_WRITE, O_CREATE_TOKENS, A_ALLOW = 2, 7, 3, 4, 13, 3


@pytest.fixture(scope="module")
def acl_broker(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AclBroker]:
    if request.config.getoption("--bootstrap"):
        pytest.skip("needs a broker started with an authorizer, not --bootstrap")
    from compat_tests.brokers import PyBroker, free_port

    workdir = tmp_path_factory.mktemp("dtokens-acl")
    sasl_port = free_port()
    launcher: Any
    if request.config.getoption("--broker") == "kafka":
        from compat_tests.reference.apache_kafka import ApacheKafka

        launcher = ApacheKafka(
            workdir, authorizer=True, overrides=ACL_SETTINGS,
            extra_listeners={"SASL_PLAINTEXT": ("SASL_PLAINTEXT", sasl_port)},
        )  # fmt: skip
    else:
        port = free_port()
        listeners = f"PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}"
        launcher = PyBroker(workdir, port=port, overrides={"listeners": listeners, **ACL_SETTINGS})
    launcher.start()
    try:
        yield AclBroker(launcher.bootstrap, f"127.0.0.1:{sasl_port}")
    finally:
        launcher.stop()


def allow(bootstrap: str, resource_type: int, name: str, principal: str, operation: int) -> None:
    from tests.wire import WireClient

    with WireClient(bootstrap) as wire:
        r = wire.request(30, 3, {"creations": [{
            "resource_type": resource_type, "resource_name": name, "resource_pattern_type": P_LITERAL,
            "principal": principal, "host": "*", "operation": operation, "permission_type": A_ALLOW}]})  # fmt: skip
    assert r["results"][0]["error_code"] == 0, r


def test_create_for_another_owner_needs_create_tokens_on_the_owner(acl_broker: AclBroker, configs: Path) -> None:
    # Once User:carol has an ACL, only bob may create tokens owned by carol.
    allow(acl_broker.bootstrap, R_USER, "User:carol", "User:bob", O_CREATE_TOKENS)
    time.sleep(1)  # the ACL reaches the authorizer (Apache Kafka: through the metadata log)
    alice, bob = plain_user(configs, "alice"), plain_user(configs, "bob")
    args = ("--create", "--max-life-time-period", "-1", "--owner-principal", "User:carol")
    refused = failure(tool(acl_broker.sasl_bootstrap, alice, *args))
    assert "DelegationTokenAuthorizationException" in refused, refused
    made = tool(acl_broker.sasl_bootstrap, bob, *args).check()
    (token,) = tokens_printed(made.stdout)
    assert (token.owner, token.requester) == ("User:carol", "User:bob")
    # Anyone may create a token for themself.
    assert create(acl_broker, alice).owner == "User:alice"


def test_token_client_is_its_owner_for_acls(acl_broker: AclBroker, configs: Path) -> None:
    """A topic only carol may write: carol's token (made by bob, KIP-373) writes to it, alice's may not."""
    topic = f"dtoken-acl-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": acl_broker.bootstrap})
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(30)
    allow(acl_broker.bootstrap, R_TOPIC, topic, "User:carol", O_WRITE)
    alice, bob = plain_user(configs, "alice"), plain_user(configs, "bob")
    made = tool(acl_broker.sasl_bootstrap, bob, "--create", "--max-life-time-period", "-1",
                "--owner-principal", "User:carol").check()  # fmt: skip
    (carols,) = tokens_printed(made.stdout)
    alices = create(acl_broker, alice)
    described_eventually(acl_broker, alice, alices.token_id, "User:alice")
    described_eventually(acl_broker, bob, carols.token_id, "User:carol")
    written = produce_with_token(acl_broker, topic, carols, "SCRAM-SHA-256", b"by carol's token")
    assert written.get("offset") == 0, written
    refused = produce_with_token(acl_broker, topic, alices, "SCRAM-SHA-256", b"by alice's token")
    assert refused.get("error") == "TopicAuthorizationException", refused
