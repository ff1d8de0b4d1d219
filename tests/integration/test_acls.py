"""ACLs against principals from the connection: mTLS client certificates (``User:alice``, the super
user ``User:admin``, mapped by ``ssl.principal.mapping.rules``) and PLAINTEXT's ``User:ANONYMOUS``,
with ``allow.everyone.if.no.acl.found=false``; super.users, host-bound ACLs, and ACLs surviving a
restart.  Real clients (confluent-kafka over TLS) against a real ``python -m pybroker serve``.

(pybroker only: the broker-agnostic cases run on both brokers in compat_tests/scenarios/test_acls.py.)
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from compat_tests.brokers import PyBroker
from pybroker.testing.certs import KEY_PASSWORD, CertificateAuthority
from pybroker.testing.embedded import free_port

from .conftest import against_kafka

pytestmark = pytest.mark.skipif(against_kafka(), reason="pybroker process test (restarts pybroker, mTLS setup)")


class Pki:
    def __init__(self, d: Path) -> None:
        self.ca = CertificateAuthority()
        self.ca_pem = self.ca.write_pem(d)
        self.server = self.ca.issue("localhost", server=True)
        self.users = {
            name: self.ca.issue({"CN": name, "OU": "Users", "O": "Example"}).write_pem(d, name)
            for name in ("alice", "admin")
        }


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


def start_broker(workdir: Path, pki: Pki, port: int, mtls_port: int) -> PyBroker:
    broker = PyBroker(
        workdir,
        port=port,
        overrides={
            "listeners": f"PLAINTEXT://127.0.0.1:{port},MTLS://127.0.0.1:{mtls_port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,MTLS:SSL",
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(pki.ca_pem),
            "ssl.principal.mapping.rules": "RULE:^CN=(.*?),OU=Users,.*$/$1/L,DEFAULT",
            "listener.name.mtls.ssl.client.auth": "required",
            "listener.name.mtls.ssl.keystore.type": "PEM",
            "listener.name.mtls.ssl.keystore.certificate.chain": pki.server.cert_pem(),
            "listener.name.mtls.ssl.keystore.key": pki.server.key_pem(KEY_PASSWORD),
            "listener.name.mtls.ssl.key.password": KEY_PASSWORD,
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": "User:admin",
            "allow.everyone.if.no.acl.found": "false",
            "offsets.topic.num.partitions": "1",
        },
    )
    broker.start()
    return broker


@pytest.fixture
def broker(tmp_path: Path, pki: Pki) -> Iterator[Any]:
    b = start_broker(tmp_path, pki, free_port(), free_port())
    b.mtls_port = int(b.overrides["listeners"].rsplit(":", 1)[1])
    try:
        yield b
    finally:
        b.stop()


def conf(broker: Any, pki: Pki, user: str | None) -> dict:
    if user is None:  # PLAINTEXT: User:ANONYMOUS
        return {"bootstrap.servers": broker.bootstrap}
    cert, key = pki.users[user]
    return {
        "bootstrap.servers": f"127.0.0.1:{broker.mtls_port}",
        "security.protocol": "SSL",
        "ssl.ca.location": str(pki.ca_pem),
        "ssl.certificate.location": str(cert),
        "ssl.key.location": str(key),
    }


def produce_error(broker: Any, pki: Pki, user: str | None, topic: str) -> KafkaError | None:
    results: list[KafkaError | None] = []
    producer = Producer({**conf(broker, pki, user), "message.timeout.ms": 10000, "enable.idempotence": False})
    producer.produce(topic, b"v", on_delivery=lambda err, msg: results.append(err))
    producer.flush(20)
    assert len(results) == 1
    return results[0]


def acl(topic: str, principal: str, op=AclOperation.WRITE, perm=AclPermissionType.ALLOW, host: str = "*") -> AclBinding:
    return AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, principal, host, op, perm)


def create(admin: AdminClient, *acls: AclBinding) -> None:
    for f in admin.create_acls(list(acls)).values():
        f.result(timeout=20)


def test_principals_from_client_certificates_and_the_super_user(broker: Any, pki: Pki) -> None:
    admin = AdminClient(conf(broker, pki, "admin"))
    admin.create_topics([NewTopic("orders", 1, 1)])["orders"].result(timeout=20)  # the super user may
    # alice (her certificate) and ANONYMOUS (PLAINTEXT): no ACL allows them, nothing is allowed by default.
    assert produce_error(broker, pki, "alice", "orders").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert produce_error(broker, pki, None, "orders").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # ANONYMOUS may not manage ACLs either.
    with pytest.raises(Exception) as refused:
        create(AdminClient(conf(broker, pki, None)), acl("orders", "User:ANONYMOUS"))
    assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED

    create(admin, acl("orders", "User:alice"))
    assert produce_error(broker, pki, "alice", "orders") is None
    assert produce_error(broker, pki, None, "orders").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # A DENY naming the super user changes nothing for it.
    create(admin, acl("orders", "User:admin", perm=AclPermissionType.DENY))
    assert produce_error(broker, pki, "admin", "orders") is None


def test_host_bound_acls(broker: Any, pki: Pki) -> None:
    admin = AdminClient(conf(broker, pki, "admin"))
    admin.create_topics([NewTopic("by-host", 1, 1)])["by-host"].result(timeout=20)
    create(admin, acl("by-host", "User:ANONYMOUS", host="10.1.2.3"))
    assert produce_error(broker, pki, None, "by-host").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    create(admin, acl("by-host", "User:ANONYMOUS", host="127.0.0.1"))
    assert produce_error(broker, pki, None, "by-host") is None


def test_acls_survive_a_restart(tmp_path: Path, pki: Pki) -> None:
    port, mtls_port = free_port(), free_port()
    broker = start_broker(tmp_path, pki, port, mtls_port)
    broker.mtls_port = mtls_port
    try:
        admin = AdminClient(conf(broker, pki, "admin"))
        admin.create_topics([NewTopic("kept", 1, 1)])["kept"].result(timeout=20)
        create(admin, acl("kept", "User:alice"), acl("kept", "User:alice", op=AclOperation.READ, perm=AclPermissionType.DENY))
    finally:
        broker.stop()
    broker = start_broker(tmp_path, pki, port, mtls_port)
    broker.mtls_port = mtls_port
    try:
        admin = AdminClient(conf(broker, pki, "admin"))
        everything = AclBindingFilter(
            ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY, AclPermissionType.ANY
        )
        assert {str(b) for b in admin.describe_acls(everything).result(timeout=20)} == {
            str(acl("kept", "User:alice")),
            str(acl("kept", "User:alice", op=AclOperation.READ, perm=AclPermissionType.DENY)),
        }
        assert produce_error(broker, pki, "alice", "kept") is None
        assert produce_error(broker, pki, None, "kept").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        broker.stop()
