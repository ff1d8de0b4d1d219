"""Every client of the suite over every secured listener, alike on pybroker and on Apache Kafka 4.3.1.

The broker under test is started here with four listeners and the same settings on both kinds:
PLAINTEXT (readiness, topic set-up), SSL, SASL_PLAINTEXT and SASL_SSL, with SASL mechanisms PLAIN,
SCRAM-SHA-256, SCRAM-SHA-512 and OAUTHBEARER (Kafka's unsecured-JWS default) on both SASL listeners.
Certificates are made by the test (pybroker.testing.certs: a CA and a server certificate for
127.0.0.1/localhost); the PLAIN user comes from the JAAS config, the SCRAM credentials are created with
AlterUserScramCredentials, as an operator would.

Each cell: the client (its own TLS and SASL code, configured the way its documentation says —
compat_tests/clients/security.py) produces five records to a fresh topic and reads them back as a
member of a consumer group (kcat, whose adapter has no group consumer, reads them with assign()).
Debian's kcat links librdkafka 2.0.2, whose SCRAM is refused by Kafka 4.x (see _old_librdkafka): those
cells assert the refusal, on both brokers.
"""

from __future__ import annotations

import re
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from compat_tests.brokers import PyBroker, free_port
from compat_tests.clients.base import ClientError, Record
from compat_tests.clients.security import ClientSecurity
from compat_tests.scenarios.support import CLUSTER_BROKERS, cluster_launcher, expressible
from pybroker.testing.certs import STORE_PASSWORD, CertificateAuthority

USER, PASSWORD = "alice", "alice-secret"
JAAS = {
    "plain": (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="admin" password="admin-secret" user_admin="admin-secret" user_{USER}="{PASSWORD}";'
    ),
    "scram-sha-256": "org.apache.kafka.common.security.scram.ScramLoginModule required;",
    "scram-sha-512": "org.apache.kafka.common.security.scram.ScramLoginModule required;",
    "oauthbearer": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
}
CASES = [
    ("SSL", None),
    *[(protocol, mechanism) for protocol in ("SASL_PLAINTEXT", "SASL_SSL") for mechanism in
      ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")],
]  # fmt: skip
RECORDS = 5


def _old_librdkafka() -> bool:
    """Whether kcat links a librdkafka older than 2.6.1 (Debian 12 ships 2.0.2)."""
    from compat_tests.clients.kcat import kcat_binary

    found = re.search(
        r"librdkafka (\d+)\.(\d+)\.(\d+)",
        subprocess.run([kcat_binary(), "-V"], capture_output=True, text=True).stdout,
    )
    return found is not None and tuple(int(n) for n in found.groups()) < (2, 6, 1)


class SecuredBroker:
    def __init__(self, ca_pem: Path, bootstraps: dict[str, str], launcher: Any) -> None:
        self.ca_pem = ca_pem
        self.bootstraps = bootstraps  # listener -> bootstrap (every broker's port of it)
        self.launcher = launcher

    @property
    def plaintext(self) -> str:
        return self.launcher.bootstrap


@pytest.fixture(scope="module")
def secured(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SecuredBroker]:
    if request.config.getoption("--bootstrap"):
        pytest.skip("the secured-listener scenarios start their own broker")
    pki = tmp_path_factory.mktemp("security-pki")
    ca = CertificateAuthority()
    ca_pem = ca.write_pem(pki)
    server_p12 = ca.issue("localhost", server=True).write_pkcs12(pki, "server")
    ports = {name: free_port() for name in ("SSL", "SASL_PLAINTEXT", "SASL_SSL")}
    settings = {
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(server_p12),
        "ssl.keystore.password": STORE_PASSWORD,
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
        "offsets.topic.num.partitions": "1",
        "group.initial.rebalance.delay.ms": "0",
    }
    for listener in ("sasl_plaintext", "sasl_ssl"):
        for mechanism, jaas in JAAS.items():
            settings[f"listener.name.{listener}.{mechanism}.sasl.jaas.config"] = jaas
    workdir = tmp_path_factory.mktemp("security-broker")
    launcher: Any
    kind = request.config.getoption("--broker")
    if kind in CLUSTER_BROKERS:
        # A 3-node cluster of the kind under test, every node with the same listeners (ports its own).
        launcher = cluster_launcher(kind, workdir, settings, extra_listeners={name: name for name in ports})
    elif kind == "kafka":
        from compat_tests.reference.apache_kafka import ApacheKafka

        launcher = ApacheKafka(
            workdir, overrides=settings, extra_listeners={name: (name, port) for name, port in ports.items()}
        )
    else:
        port = free_port()
        listeners = ",".join(
            [f"PLAINTEXT://127.0.0.1:{port}", *(f"{name}://127.0.0.1:{p}" for name, p in ports.items())]
        )
        launcher = PyBroker(workdir, port=port, overrides={"listeners": listeners, **settings})
    launcher.start()
    if kind in CLUSTER_BROKERS:
        bootstraps = {name: launcher.listener_bootstrap(name) for name in ports}
    else:
        bootstraps = {name: f"127.0.0.1:{port}" for name, port in ports.items()}
    try:
        admin = AdminClient({"bootstrap.servers": launcher.bootstrap})
        # One request per mechanism: a request naming a user twice is refused (DUPLICATE_RESOURCE).
        for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):
            upsert = UserScramCredentialUpsertion(
                USER, ScramCredentialInfo(mechanism, 4096), PASSWORD.encode()
            )
            for future in admin.alter_user_scram_credentials([upsert]).values():
                future.result(30)
        yield SecuredBroker(ca_pem, bootstraps, launcher)
    finally:
        launcher.stop()


@pytest.mark.parametrize(
    ("protocol", "mechanism"), CASES, ids=[p if m is None else f"{p}-{m}" for p, m in CASES]
)
def test_produce_and_consume_in_a_group(
    secured: SecuredBroker, client_name: str, client: Any, admin: Any, protocol: str, mechanism: str | None
) -> None:
    topic = f"secured-{client_name}-{uuid.uuid4().hex[:8]}"
    admin.create_topic(secured.plaintext, topic, partitions=1)
    client.security = ClientSecurity(
        protocol,
        mechanism,
        USER if mechanism else "",
        PASSWORD if mechanism else "",
        str(secured.ca_pem) if "SSL" in protocol else None,
    )
    bootstrap = secured.bootstraps[protocol]
    values = [f"{client_name}-{protocol}-{mechanism}-{i}".encode() for i in range(RECORDS)]
    if (
        client_name == "kcat"
        and mechanism is not None
        and mechanism.startswith("SCRAM")
        and _old_librdkafka()
    ):
        # librdkafka before 2.6.1 repeats the client nonce in its SCRAM client-final-message
        # (confluentinc/librdkafka#4895); Kafka 4.x checks the nonce as RFC 5802 says and refuses it.
        with pytest.raises(ClientError, match="invalid credentials"):
            client.produce(bootstrap, topic, [Record(None, b"refused")])
        return
    with expressible(client_name):
        deliveries = client.produce(bootstrap, topic, [Record(None, v) for v in values])
        assert [d.offset for d in deliveries] == list(range(RECORDS))
        if client_name == "kcat":
            consumed = client.consume(bootstrap, topic, 0, start="beginning", count=RECORDS)
            assert [r.value for r in consumed] == values
            return
        got: list[bytes | None] = []
        deadline = time.monotonic() + 60

        def on_record(partition: int, offset: int, value: bytes | None) -> bool:
            got.append(value)
            return len(got) >= RECORDS

        client.group_consume(
            bootstrap,
            topic,
            f"g-{topic}",
            on_assign=lambda partitions: None,
            on_record=on_record,
            should_stop=lambda: time.monotonic() > deadline,
        )
        assert got == values
