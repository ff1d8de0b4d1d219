"""The principal a TLS connection carries into every request (RequestContext.security), observed
in-process on an embedded broker: the mapped subject DN of the client certificate under mTLS,
User:ANONYMOUS without one and on PLAINTEXT; a DN no rule maps is refused (Kafka's NoMatchingRule)."""

from __future__ import annotations

import logging
import socket
import ssl
import struct
from pathlib import Path

import pytest

from pybroker.security.context import ANONYMOUS, KafkaPrincipal
from pybroker.testing.certs import CertificateAuthority
from pybroker.testing.embedded import EmbeddedBroker, free_port

API_VERSIONS_V0 = struct.pack(">hhih", 18, 0, 7, 1) + b"t"


def _api_versions(sock: socket.socket) -> bool:
    sock.sendall(struct.pack(">i", len(API_VERSIONS_V0)) + API_VERSIONS_V0)
    head = b""
    try:
        while len(head) < 8:
            chunk = sock.recv(8 - len(head))
            if not chunk:
                return False
            head += chunk
    except (OSError, ssl.SSLError):
        return False
    return struct.unpack(">ii", head)[1] == 7


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("pki")
    ca = CertificateAuthority()
    server = ca.issue("localhost", server=True)
    files = {"ca": ca.write_pem(d), "server": server.write_keystore_pem(d, "server")}
    for name, subject in (
        ("svc", {"CN": "billing", "OU": "ServiceUsers", "O": "Example"}),
        ("person", {"CN": "Carol", "OU": "People", "O": "Example"}),
        ("odd", {"O": "Nobody"}),
    ):
        files[f"{name}_cert"], files[f"{name}_key"] = ca.issue(subject).write_pem(d, name)
    return files


@pytest.fixture(scope="module")
def broker(pki):
    port, tls_port = free_port(), free_port()
    embedded = EmbeddedBroker(
        port=port,
        overrides={
            "listeners": f"PLAINTEXT://127.0.0.1:{port},CLIENTS://127.0.0.1:{tls_port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CLIENTS:SSL",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(pki["server"]),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(pki["ca"]),
            "ssl.client.auth": "requested",
            "ssl.principal.mapping.rules": "RULE:^CN=(.*?),OU=ServiceUsers,.*$/svc-$1/,"
            "RULE:^CN=(.*?),OU=People,.*$/$1/L",
        },
    )
    embedded.start()
    embedded.tls_port = tls_port
    try:
        yield embedded
    finally:
        embedded.stop()


def _connect(broker, pki, who: str | None) -> ssl.SSLSocket:
    ctx = ssl.create_default_context(cafile=str(pki["ca"]))
    if who is not None:
        ctx.load_cert_chain(str(pki[f"{who}_cert"]), str(pki[f"{who}_key"]))
    return ctx.wrap_socket(
        socket.create_connection(("127.0.0.1", broker.tls_port), timeout=10), server_hostname="localhost"
    )


def _security_of(broker, local_port: int):
    async def find(b):
        for conn in b.connections:
            if conn.security is not None and conn.security.client_port == local_port:
                return conn.security
        return None

    return broker.call(find)


@pytest.mark.parametrize(
    "who, principal, dn",
    [
        ("svc", KafkaPrincipal("User", "svc-billing"), "CN=billing,OU=ServiceUsers,O=Example"),
        ("person", KafkaPrincipal("User", "carol"), "CN=Carol,OU=People,O=Example"),
        (None, ANONYMOUS, None),
    ],
)
def test_principal_of_a_tls_connection(broker, pki, who, principal, dn):
    with _connect(broker, pki, who) as sock:
        assert _api_versions(sock)
        security = _security_of(broker, sock.getsockname()[1])
    assert security is not None
    assert (security.listener_name, security.security_protocol) == ("CLIENTS", "SSL")
    assert security.principal == principal and str(security.principal).startswith("User:")
    assert security.ssl_peer_dn == dn


def test_plaintext_connections_are_anonymous(broker):
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as sock:
        assert _api_versions(sock)
        security = _security_of(broker, sock.getsockname()[1])
    assert (security.listener_name, security.security_protocol, security.principal) == (
        "PLAINTEXT",
        "PLAINTEXT",
        ANONYMOUS,
    )


def test_a_dn_no_rule_maps_is_refused(broker, pki, caplog):
    with caplog.at_level(logging.INFO, logger="pybroker.server"), _connect(broker, pki, "odd") as sock:
        assert not _api_versions(sock)
    lines = [r.getMessage() for r in caplog.records if "Failed authentication" in r.getMessage()]
    assert len(lines) == 1 and "No rules apply to O=Nobody" in lines[0]
    with _connect(broker, pki, "svc") as sock:  # and the listener goes on serving
        assert _api_versions(sock)
