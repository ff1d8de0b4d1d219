"""Brokers that authenticate to each other: a SASL_PLAINTEXT inter-broker listener with
sasl.mechanism.inter.broker.protocol=PLAIN, as Kafka's brokers do when an authorizer is on. The peers'
authorizer sees the broker's own principal (a super user), so replication keeps working when clients
are allowed nothing (allow.everyone.if.no.acl.found=false): without the login a follower's Fetch comes
in as User:ANONYMOUS and is refused ClusterAction."""

from __future__ import annotations

import pytest

from pybroker.cluster_mode import inter_broker_login
from pybroker.config import BrokerConfig
from pybroker.replication.leader_endpoint import SaslPlainLogin
from pybroker.security.sasl_config import SaslConfigError

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="broker" password="broker-secret" user_broker="broker-secret";'
)
LISTENERS = {
    "listeners": "PLAINTEXT://127.0.0.1:9092,INTERNAL://127.0.0.1:9093",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_PLAINTEXT",
    "inter.broker.listener.name": "INTERNAL",
    "sasl.enabled.mechanisms": "PLAIN",
}


def test_the_login_comes_from_the_inter_broker_listeners_jaas_config() -> None:
    config = BrokerConfig(
        {
            **LISTENERS,
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "listener.name.internal.plain.sasl.jaas.config": JAAS,
        }
    )
    assert inter_broker_login(config, "INTERNAL") == SaslPlainLogin("broker", "broker-secret")
    assert SaslPlainLogin("broker", "broker-secret").initial_response() == b"\0broker\0broker-secret"


def test_no_login_on_a_plaintext_inter_broker_listener() -> None:
    assert inter_broker_login(BrokerConfig({}), "PLAINTEXT") is None


@pytest.mark.parametrize(
    "settings",
    [
        # Kafka's default mechanism, GSSAPI, which pybroker does not speak
        {"listener.name.internal.plain.sasl.jaas.config": JAAS},
        # no client credentials in the listener's JAAS options
        {
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "listener.name.internal.plain.sasl.jaas.config": JAAS.replace('username="broker" ', ""),
        },
    ],
)
def test_a_login_pybroker_cannot_make_stops_the_start(settings: dict[str, str]) -> None:
    with pytest.raises(SaslConfigError):
        inter_broker_login(BrokerConfig({**LISTENERS, **settings}), "INTERNAL")


def test_replication_over_an_authenticated_inter_broker_listener(tmp_path) -> None:
    """Three brokers, an authorizer that allows nothing without an ACL, the brokers' principal a super
    user: an acks=all write to an RF 3 topic is acknowledged (every follower fetched it) and the ISR
    stays whole."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from compat_tests.pybroker_cluster import PyBrokerCluster

    admin_jaas = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="admin" password="admin-secret" user_admin="admin-secret";'
    )
    cluster = PyBrokerCluster(
        tmp_path,
        nodes=3,
        overrides={
            "allow.everyone.if.no.acl.found": "false",
            "super.users": "User:broker;User:admin",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": admin_jaas,
            "zookeeper.session.timeout.ms": "6000",
        },
        extra_listeners={"SASL_PLAINTEXT": "SASL_PLAINTEXT"},
        authorizer=True,
    )
    cluster.start()
    try:
        conf = {
            "bootstrap.servers": cluster.listener_bootstrap("SASL_PLAINTEXT"),
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "admin",
            "sasl.password": "admin-secret",
        }
        admin = AdminClient(conf)
        admin.create_topics([NewTopic("replicated", 1, 3)])["replicated"].result(30)
        errors: list[object] = []
        producer = Producer({**conf, "acks": "all", "message.timeout.ms": 20000})
        for i in range(10):
            producer.produce("replicated", f"v{i}".encode(), on_delivery=lambda err, msg: errors.append(err))
        assert producer.flush(30) == 0
        assert errors == [None] * 10
        (partition,) = _partitions(admin, "replicated")
        assert sorted(partition.isrs) == [1, 2, 3]
    finally:
        cluster.stop()


def _partitions(admin, topic: str) -> list:
    metadata = admin.list_topics(topic, timeout=20)
    return [metadata.topics[topic].partitions[p] for p in sorted(metadata.topics[topic].partitions)]
