"""SSL listeners, alike on pybroker and on Apache Kafka 4.3.1: each broker of the kind under test is
started here with three client listeners: PLAINTEXT, SSL (server certificate only) and MTLS (SSL with
``ssl.client.auth=required``, set as ``listener.name.mtls.ssl.client.auth``), the same settings on both:
a PKCS12 key store and a PEM trust store, made by the test (a CA, a server certificate for
127.0.0.1/localhost, a client certificate, and a client certificate from another CA).

- stock clients (confluent-kafka, kafka-python, the Java client) produce and consume over SSL, and
  over mTLS with their certificate;
- a client without a certificate, or with one from an untrusted CA, is refused on the mTLS listener,
  and a client that does not trust the broker's CA refuses the broker;
- Metadata answers the endpoint of the listener the client came in on;
- a plaintext request on the SSL port, and a TLS handshake on the PLAINTEXT port, get no answer: the
  connection is closed.
"""

from __future__ import annotations

import socket
import ssl
import struct
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from compat_tests.brokers import PyBroker, free_port
from compat_tests.scenarios.support import CLUSTER_BROKERS, cluster_launcher, confluent_round_trip
from pybroker.testing.certs import STORE_PASSWORD, CertificateAuthority

API_VERSIONS_V0 = struct.pack(">hhih", 18, 0, 7, 1) + b"t"
TLS_CLIENTS = ["confluent", "kafka-python", "java"]


class Tls:
    def __init__(self, d: Path) -> None:
        ca = CertificateAuthority()
        self.ca_pem = ca.write_pem(d)
        self.server_p12 = ca.issue("localhost", server=True).write_pkcs12(d, "server")
        self.client_cert, self.client_key = ca.issue({"CN": "client", "O": "pybroker"}).write_pem(d, "client")
        rogue = CertificateAuthority("rogue CA")
        self.rogue_ca_pem = rogue.write_pem(d, "rogue-ca")
        self.rogue_cert, self.rogue_key = rogue.issue({"CN": "rogue"}).write_pem(d, "rogue")
        # Every broker's port of each listener (one broker, or each node of a cluster).
        self.ports: dict[str, list[int]] = {}

    def bootstrap(self, listener: str) -> str:
        """Bootstrap through every broker of the listener."""
        return ",".join(f"127.0.0.1:{port}" for port in self.ports[listener])

    def port(self, listener: str) -> int:
        """One broker's port of the listener (the first): where raw sockets go."""
        return self.ports[listener][0]


@pytest.fixture(scope="module")
def tls(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tls]:
    if request.config.getoption("--bootstrap"):
        pytest.skip("needs a broker started with SSL listeners")
    tls = Tls(tmp_path_factory.mktemp("tls-pki"))
    ssl_port, mtls_port = free_port(), free_port()
    settings = {
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(tls.server_p12),
        "ssl.keystore.password": STORE_PASSWORD,
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(tls.ca_pem),
        "listener.name.mtls.ssl.client.auth": "required",
        "offsets.topic.num.partitions": "1",
        "group.initial.rebalance.delay.ms": "0",
    }
    workdir = tmp_path_factory.mktemp("tls-broker")
    launcher: Any
    kind = request.config.getoption("--broker")
    if kind in CLUSTER_BROKERS:
        # A 3-node cluster of the kind under test, every node with the same listeners (ports its own).
        launcher = cluster_launcher(kind, workdir, settings, extra_listeners={"SSL": "SSL", "MTLS": "SSL"})
        launcher.start()
        tls.ports = {name: launcher.listener_ports(name) for name in ("PLAINTEXT", "SSL", "MTLS")}
        try:
            yield tls
        finally:
            launcher.stop()
        return
    if kind == "kafka":
        from compat_tests.reference.apache_kafka import ApacheKafka

        launcher = ApacheKafka(
            workdir,
            overrides=settings,
            extra_listeners={"SSL": ("SSL", ssl_port), "MTLS": ("SSL", mtls_port)},
        )
    else:
        port = free_port()
        launcher = PyBroker(
            workdir,
            port=port,
            overrides={
                "listeners": f"PLAINTEXT://127.0.0.1:{port},SSL://127.0.0.1:{ssl_port},MTLS://127.0.0.1:{mtls_port}",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL",
                **settings,
            },
        )
    launcher.start()
    tls.ports = {"PLAINTEXT": [int(launcher.bootstrap.rsplit(":", 1)[1])], "SSL": [ssl_port], "MTLS": [mtls_port]}
    try:
        yield tls
    finally:
        launcher.stop()


# -- the clients ---------------------------------------------------------------------------------------


def _produce_consume(client: str, tls: Tls, listener: str, *, cert: bool) -> None:
    """Produce ten records over the listener and read them back with the same client."""
    topic = f"compat-tls-{client}-{uuid.uuid4().hex[:8]}"
    values = [f"{client}-{i}".encode() * 10 for i in range(10)]
    bootstrap = tls.bootstrap(listener)
    if client == "confluent":
        got = confluent_round_trip(_confluent_conf(tls, listener, cert=cert), topic, values)
    elif client == "kafka-python":
        from kafka import KafkaConsumer, KafkaProducer

        common: dict[str, Any] = {
            "bootstrap_servers": bootstrap,
            "security_protocol": "SSL",
            "ssl_cafile": str(tls.ca_pem),
        }
        if cert:
            common.update(ssl_certfile=str(tls.client_cert), ssl_keyfile=str(tls.client_key))
        kp = KafkaProducer(**common)
        for v in values:
            kp.send(topic, v).get(timeout=30)
        kp.close()
        kc = KafkaConsumer(topic, group_id=f"g-{topic}", auto_offset_reset="earliest", **common)
        got = []
        deadline = time.monotonic() + 30
        while len(got) < len(values) and time.monotonic() < deadline:
            for records in kc.poll(timeout_ms=500).values():
                got.extend(r.value for r in records)
        kc.close()
    else:
        from compat_tests.clients.base import Record
        from compat_tests.clients.java import JavaClient

        java = JavaClient(properties=_java_props(tls, cert=cert))
        java.produce(bootstrap, topic, [Record(key=None, value=v) for v in values])
        got = [r.value for r in java.consume(bootstrap, topic, 0, start="beginning", count=len(values))]
    assert got == values


def _confluent_conf(tls: Tls, listener: str, *, cert: bool, ca: Path | None = None) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "bootstrap.servers": tls.bootstrap(listener),
        "security.protocol": "SSL",
        "ssl.ca.location": str(ca or tls.ca_pem),
    }
    if cert:
        conf.update(
            {"ssl.certificate.location": str(tls.client_cert), "ssl.key.location": str(tls.client_key)}
        )
    return conf


def _java_props(tls: Tls, *, cert: bool) -> dict[str, str]:
    props = {
        "security.protocol": "SSL",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(tls.ca_pem),
    }
    if cert:
        props.update(
            {
                "ssl.keystore.type": "PEM",
                "ssl.keystore.certificate.chain": tls.client_cert.read_text(),
                "ssl.keystore.key": tls.client_key.read_text(),
            }
        )
    return props


def _tls_socket(port: int, ca: Path, cert: tuple[Path, Path] | None = None) -> ssl.SSLSocket:
    ctx = ssl.create_default_context(cafile=str(ca))
    if cert is not None:
        ctx.load_cert_chain(str(cert[0]), str(cert[1]))
    return ctx.wrap_socket(
        socket.create_connection(("127.0.0.1", port), timeout=15), server_hostname="localhost"
    )


def _answered(sock: socket.socket) -> bool:
    """Whether an ApiVersions v0 request gets its answer (False: the connection was closed)."""
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


# -- the scenarios -------------------------------------------------------------------------------------


@pytest.mark.parametrize("tls_client", TLS_CLIENTS)
def test_produce_and_consume_over_ssl(tls: Tls, tls_client: str) -> None:
    _produce_consume(tls_client, tls, "SSL", cert=False)


@pytest.mark.parametrize("tls_client", TLS_CLIENTS)
def test_produce_and_consume_over_mtls_with_a_client_certificate(tls: Tls, tls_client: str) -> None:
    _produce_consume(tls_client, tls, "MTLS", cert=True)


def test_mtls_refuses_a_client_without_a_certificate(tls: Tls) -> None:
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.error import KafkaException

    with pytest.raises(KafkaException):
        AdminClient(_confluent_conf(tls, "MTLS", cert=False)).list_topics(timeout=5)
    try:
        sock = _tls_socket(tls.port("MTLS"), tls.ca_pem)
    except (ssl.SSLError, OSError):
        return  # refused in the handshake itself
    with sock:
        assert not _answered(sock)


def test_mtls_refuses_a_certificate_from_an_untrusted_ca(tls: Tls) -> None:
    try:
        sock = _tls_socket(tls.port("MTLS"), tls.ca_pem, (tls.rogue_cert, tls.rogue_key))
    except (ssl.SSLError, OSError):
        return
    with sock:
        assert not _answered(sock)


def test_a_client_that_does_not_trust_the_broker_refuses_it(tls: Tls) -> None:
    with pytest.raises(ssl.SSLCertVerificationError):
        _tls_socket(tls.port("SSL"), tls.rogue_ca_pem)


def test_the_broker_keeps_serving_after_refused_handshakes(tls: Tls) -> None:
    for _ in range(3):
        try:
            _tls_socket(tls.port("MTLS"), tls.ca_pem, (tls.rogue_cert, tls.rogue_key)).close()
        except (ssl.SSLError, OSError):
            pass
    with _tls_socket(tls.port("MTLS"), tls.ca_pem, (tls.client_cert, tls.client_key)) as sock:
        assert _answered(sock)
    with _tls_socket(tls.port("SSL"), tls.ca_pem) as sock:
        assert _answered(sock)


def test_metadata_answers_the_endpoint_of_the_clients_listener(tls: Tls) -> None:
    from confluent_kafka.admin import AdminClient

    def ports(conf: dict[str, Any]) -> list[tuple[str, int]]:
        md = AdminClient(conf).list_topics(timeout=20)
        return sorted((b.host, b.port) for b in md.brokers.values())

    def endpoints(listener: str) -> list[tuple[str, int]]:
        return sorted(("127.0.0.1", port) for port in tls.ports[listener])

    assert ports(_confluent_conf(tls, "SSL", cert=False)) == endpoints("SSL")
    assert ports(_confluent_conf(tls, "MTLS", cert=True)) == endpoints("MTLS")
    assert ports({"bootstrap.servers": tls.bootstrap("PLAINTEXT")}) == endpoints("PLAINTEXT")


def test_describe_cluster_answers_the_endpoint_of_the_clients_listener(tls: Tls) -> None:
    from compat_tests.clients.java import JavaClient

    cluster = JavaClient(properties=_java_props(tls, cert=False)).describe_cluster(tls.bootstrap("SSL"))
    assert sorted((n["host"], n["port"]) for n in cluster["nodes"]) == sorted(
        ("127.0.0.1", port) for port in tls.ports["SSL"]
    )


def test_a_plaintext_request_on_the_ssl_port_is_not_answered(tls: Tls) -> None:
    with socket.create_connection(("127.0.0.1", tls.port("SSL")), timeout=15) as sock:
        assert not _answered(sock)


def test_a_tls_handshake_on_the_plaintext_port_fails(tls: Tls) -> None:
    with pytest.raises((ssl.SSLError, OSError)):
        _tls_socket(tls.port("PLAINTEXT"), tls.ca_pem)
