"""SSL listeners through real clients against a real `python -m pybroker serve`, with certificates made
by the test (a CA, a server certificate for 127.0.0.1/localhost, client certificates).

One broker, four listeners: PLAINTEXT, SSL (PKCS12 key store, no client auth), MTLS (inline PEM key
store, PEM trust store, ssl.client.auth=required through listener.name.mtls.*) and WANT (a PEM key store
file, ssl.client.auth=requested).
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

from compat_tests.brokers import PyBroker
from compat_tests.scenarios.support import confluent_round_trip
from pybroker.testing.certs import KEY_PASSWORD, STORE_PASSWORD, CertificateAuthority
from pybroker.testing.embedded import free_port

# ApiVersions v0, correlation id 7, client id "t": answered by any Kafka broker.
API_VERSIONS_V0 = struct.pack(">hhih", 18, 0, 7, 1) + b"t"


class Pki:
    def __init__(self, d: Path) -> None:
        self.dir = d
        self.ca = CertificateAuthority()
        self.ca_pem = self.ca.write_pem(d)
        server = self.ca.issue("localhost", server=True)
        self.server = server
        self.server_p12 = server.write_pkcs12(d, "server")
        self.server_pem_file = server.write_keystore_pem(d, "server", KEY_PASSWORD)
        alice = self.ca.issue({"CN": "alice", "OU": "Users", "O": "Example"})
        self.alice_cert, self.alice_key = alice.write_pem(d, "alice")
        self.rogue_ca = CertificateAuthority("rogue CA")
        self.rogue_ca_pem = self.rogue_ca.write_pem(d, "rogue-ca")
        mallory = self.rogue_ca.issue({"CN": "mallory", "OU": "Users", "O": "Example"})
        self.mallory_cert, self.mallory_key = mallory.write_pem(d, "mallory")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[Any]:
    port, ssl_port, mtls_port, want_port = free_port(), free_port(), free_port(), free_port()
    broker = PyBroker(
        tmp_path_factory.mktemp("broker"),
        port=port,
        overrides={
            "listeners": f"PLAINTEXT://127.0.0.1:{port},SSL://127.0.0.1:{ssl_port},"
            f"MTLS://127.0.0.1:{mtls_port},WANT://localhost:{want_port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL,WANT:SSL",
            "listener.name.ssl.ssl.keystore.type": "PKCS12",
            "listener.name.ssl.ssl.keystore.location": str(pki.server_p12),
            "listener.name.ssl.ssl.keystore.password": STORE_PASSWORD,
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(pki.ca_pem),
            "ssl.principal.mapping.rules": "RULE:^CN=(.*?),OU=Users,.*$/$1/L,DEFAULT",
            "listener.name.mtls.ssl.client.auth": "required",
            "listener.name.mtls.ssl.keystore.type": "PEM",
            "listener.name.mtls.ssl.keystore.certificate.chain": pki.server.cert_pem(),
            "listener.name.mtls.ssl.keystore.key": pki.server.key_pem(KEY_PASSWORD),
            "listener.name.mtls.ssl.key.password": KEY_PASSWORD,
            "listener.name.want.ssl.client.auth": "requested",
            "listener.name.want.ssl.keystore.type": "PEM",
            "listener.name.want.ssl.keystore.location": str(pki.server_pem_file),
            "listener.name.want.ssl.key.password": KEY_PASSWORD,
            "offsets.topic.num.partitions": "1",
            "group.initial.rebalance.delay.ms": "0",
        },
    )
    broker.start()
    broker.ports = {"PLAINTEXT": port, "SSL": ssl_port, "MTLS": mtls_port, "WANT": want_port}
    try:
        yield broker
    finally:
        broker.stop()


def _confluent(pki: Pki, port: int, *, cert: bool = False, ca: Path | None = None, **extra: Any) -> dict:
    conf = {
        "bootstrap.servers": f"127.0.0.1:{port}",
        "security.protocol": "SSL",
        "ssl.ca.location": str(ca or pki.ca_pem),
        **extra,
    }
    if cert:
        conf["ssl.certificate.location"] = str(pki.alice_cert)
        conf["ssl.key.location"] = str(pki.alice_key)
    return conf


def _produce_consume_confluent(conf: dict) -> None:
    values = [f"v{i}".encode() * 100 for i in range(20)]
    assert confluent_round_trip(conf, f"tls-{uuid.uuid4().hex[:8]}", values) == values


def _metadata_ports(conf: dict) -> set[int]:
    from confluent_kafka.admin import AdminClient

    md = AdminClient(conf).list_topics(timeout=20)
    return {b.port for b in md.brokers.values()}


def _log(broker: Any) -> str:
    return broker.log_path.read_text(errors="replace")


def _wait_for_log(broker: Any, needle: str, count: int, timeout_s: float = 20) -> str:
    deadline = time.monotonic() + timeout_s
    while True:
        text = _log(broker)
        if text.count(needle) >= count or time.monotonic() > deadline:
            return text
        time.sleep(0.05)


def test_confluent_over_ssl_produces_and_consumes_in_a_group(tls_broker, pki):
    _produce_consume_confluent(_confluent(pki, tls_broker.ports["SSL"]))


def test_metadata_answers_the_listener_the_client_came_in_on(tls_broker, pki):
    ports = tls_broker.ports
    assert _metadata_ports(_confluent(pki, ports["SSL"])) == {ports["SSL"]}
    assert _metadata_ports(_confluent(pki, ports["MTLS"], cert=True)) == {ports["MTLS"]}
    assert _metadata_ports({"bootstrap.servers": tls_broker.bootstrap}) == {ports["PLAINTEXT"]}


def test_confluent_over_mtls_with_a_client_certificate(tls_broker, pki):
    _produce_consume_confluent(_confluent(pki, tls_broker.ports["MTLS"], cert=True))
    # the requested-auth listener takes a certificate too, and a client without one
    _produce_consume_confluent(_confluent(pki, tls_broker.ports["WANT"], cert=True))
    _produce_consume_confluent(_confluent(pki, tls_broker.ports["WANT"]))


def _tls_socket(port: int, ca: Path, cert: tuple[Path, Path] | None = None) -> ssl.SSLSocket:
    ctx = ssl.create_default_context(cafile=str(ca))
    if cert is not None:
        ctx.load_cert_chain(str(cert[0]), str(cert[1]))
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    return ctx.wrap_socket(sock, server_hostname="localhost")


def _api_versions_answered(sock: socket.socket) -> bool:
    sock.sendall(struct.pack(">i", len(API_VERSIONS_V0)) + API_VERSIONS_V0)
    head = b""
    try:
        while len(head) < 8:
            chunk = sock.recv(8 - len(head))
            if not chunk:
                return False
            head += chunk
    except (ssl.SSLError, ConnectionError, TimeoutError):
        return False
    return struct.unpack(">ii", head)[1] == 7


def test_mtls_refuses_a_client_without_a_certificate_or_with_an_untrusted_one(tls_broker, pki):
    before = _log(tls_broker).count("Failed authentication")
    for cert in (None, (pki.mallory_cert, pki.mallory_key)):
        try:
            sock = _tls_socket(tls_broker.ports["MTLS"], pki.ca_pem, cert)
        except (ssl.SSLError, ConnectionError):
            continue  # refused during the handshake (TLS 1.2)
        with sock:
            # TLS 1.3: the server checks the client's certificate after the client has finished
            assert not _api_versions_answered(sock)
    text = _wait_for_log(tls_broker, "Failed authentication", before + 2)
    failures = text.split("\n")[-200:]
    assert sum("Failed authentication" in line for line in failures) >= 2
    assert "CERTIFICATE" in text[-4000:]
    # a real client with no certificate cannot get metadata either
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.error import KafkaException

    with pytest.raises(KafkaException):
        AdminClient(_confluent(pki, tls_broker.ports["MTLS"])).list_topics(timeout=3)
    # the broker goes on serving a client with a certificate
    with _tls_socket(tls_broker.ports["MTLS"], pki.ca_pem, (pki.alice_cert, pki.alice_key)) as sock:
        assert _api_versions_answered(sock)


def test_a_client_trusting_another_ca_refuses_the_broker(tls_broker, pki):
    with pytest.raises(ssl.SSLCertVerificationError):
        _tls_socket(tls_broker.ports["SSL"], pki.rogue_ca_pem)
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.error import KafkaException

    with pytest.raises(KafkaException):
        AdminClient(_confluent(pki, tls_broker.ports["SSL"], ca=pki.rogue_ca_pem)).list_topics(timeout=3)


def test_plaintext_on_a_tls_port_and_tls_on_a_plaintext_port_are_closed(tls_broker, pki):
    before = _log(tls_broker)
    with socket.create_connection(("127.0.0.1", tls_broker.ports["SSL"]), timeout=10) as sock:
        assert not _api_versions_answered(sock)
    with pytest.raises((ssl.SSLError, ConnectionError)):
        _tls_socket(tls_broker.ports["PLAINTEXT"], pki.ca_pem)
    text = _wait_for_log(tls_broker, "a TLS handshake on a plaintext listener", 1)
    new = text[len(before) :]
    assert "SSL handshake failed" in new
    assert "Traceback" not in text
    # both listeners still serve
    with socket.create_connection(("127.0.0.1", tls_broker.ports["PLAINTEXT"]), timeout=10) as sock:
        assert _api_versions_answered(sock)
    with _tls_socket(tls_broker.ports["SSL"], pki.ca_pem) as sock:
        assert _api_versions_answered(sock)


def test_kafka_python_over_ssl(tls_broker, pki):
    from kafka import KafkaConsumer, KafkaProducer

    bootstrap = f"127.0.0.1:{tls_broker.ports['SSL']}"
    topic = f"kp-{uuid.uuid4().hex[:8]}"
    common = {"bootstrap_servers": bootstrap, "security_protocol": "SSL", "ssl_cafile": str(pki.ca_pem)}
    producer = KafkaProducer(**common)
    for i in range(10):
        producer.send(topic, f"m{i}".encode()).get(timeout=30)
    producer.close()
    consumer = KafkaConsumer(topic, group_id=f"g-{topic}", auto_offset_reset="earliest", **common)
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < 10 and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            got.extend(r.value for r in records)
    consumer.close()
    assert got == [f"m{i}".encode() for i in range(10)]


def test_kafka_python_over_mtls(tls_broker, pki):
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=f"127.0.0.1:{tls_broker.ports['MTLS']}",
        security_protocol="SSL",
        ssl_cafile=str(pki.ca_pem),
        ssl_certfile=str(pki.alice_cert),
        ssl_keyfile=str(pki.alice_key),
    )
    meta = producer.send(f"kpm-{uuid.uuid4().hex[:8]}", b"x").get(timeout=30)
    producer.close()
    assert meta.offset == 0


def test_java_client_over_ssl_and_mtls(tls_broker, pki):
    from compat_tests.clients.base import Record
    from compat_tests.clients.java import JavaClient

    topic = f"java-{uuid.uuid4().hex[:8]}"
    ssl_client = JavaClient(
        properties={
            "security.protocol": "SSL",
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(pki.ca_pem),
        }
    )
    records = [Record(key=f"k{i}".encode(), value=f"v{i}".encode()) for i in range(5)]
    ssl_client.produce(f"127.0.0.1:{tls_broker.ports['SSL']}", topic, records)
    mtls_client = JavaClient(
        properties={
            "security.protocol": "SSL",
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(pki.ca_pem),
            "ssl.keystore.type": "PEM",
            "ssl.keystore.certificate.chain": pki.alice_cert.read_text(),
            "ssl.keystore.key": pki.alice_key.read_text(),
        }
    )
    got = mtls_client.consume(f"127.0.0.1:{tls_broker.ports['MTLS']}", topic, 0, start="beginning", count=5)
    assert [(r.key, r.value) for r in got] == [(r.key, r.value) for r in records]


def test_aiokafka_over_mtls(tls_broker, pki):
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context

    async def run() -> list[bytes]:
        context = create_ssl_context(
            cafile=str(pki.ca_pem), certfile=str(pki.alice_cert), keyfile=str(pki.alice_key)
        )
        common = {
            "bootstrap_servers": f"127.0.0.1:{tls_broker.ports['MTLS']}",
            "security_protocol": "SSL",
            "ssl_context": context,
        }
        topic = f"aio-{uuid.uuid4().hex[:8]}"
        producer = AIOKafkaProducer(**common)
        await producer.start()
        try:
            for i in range(5):
                await producer.send_and_wait(topic, f"a{i}".encode())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, group_id=f"g-{topic}", auto_offset_reset="earliest", **common)
        await consumer.start()
        got: list[bytes] = []
        try:
            async with asyncio.timeout(30):
                async for m in consumer:
                    got.append(m.value)
                    if len(got) == 5:
                        break
        finally:
            await consumer.stop()
        return got

    assert asyncio.run(run()) == [f"a{i}".encode() for i in range(5)]


def test_fetches_larger_than_the_sendfile_threshold_over_ssl(tls_broker, pki):
    """Slices of 64 KiB and more go out by sendfile on plaintext; under TLS they must be encrypted."""
    conf = _confluent(pki, tls_broker.ports["SSL"])
    values = [bytes([i % 251]) * 4096 + i.to_bytes(4, "big") for i in range(256)]  # ~1 MiB
    got = confluent_round_trip(conf, f"big-{uuid.uuid4().hex[:8]}", values, producer_extra={"linger.ms": 50})
    assert got == values


def test_ssl_listener_on_the_asyncio_event_loop(tmp_path, pki):
    port, ssl_port = free_port(), free_port()
    broker = PyBroker(
        tmp_path,
        port=port,
        extra_args=["--event-loop", "asyncio"],
        overrides={
            "listeners": f"PLAINTEXT://127.0.0.1:{port},SSL://127.0.0.1:{ssl_port}",
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(pki.server_p12),
            "ssl.keystore.password": STORE_PASSWORD,
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(pki.ca_pem),
            "ssl.client.auth": "required",
            "offsets.topic.num.partitions": "1",
        },
    )
    broker.start()
    try:
        with socket.create_connection(("127.0.0.1", ssl_port), timeout=10) as sock:
            assert not _api_versions_answered(sock)
        try:
            with _tls_socket(ssl_port, pki.ca_pem, (pki.mallory_cert, pki.mallory_key)) as sock:
                assert not _api_versions_answered(sock)
        except (ssl.SSLError, ConnectionError):
            pass
        _produce_consume_confluent(_confluent(pki, ssl_port, cert=True))
        text = _wait_for_log(broker, "Failed authentication", 2)
    finally:
        broker.stop()
    assert text.count("Failed authentication") == 2, text
    assert "Traceback" not in text and "ERROR" not in text, text
