"""Cluster-wide security and quota state (issue 11): what one broker is told — SCRAM credentials, ACLs,
client quotas, dynamic broker configs — holds on every broker, through ZooKeeper (Kafka's ZK-mode
layout: /config/<entity>, /kafka-acl, change notifications), including a broker that was down while it
changed. Real ZooKeeper, three broker processes, each with a PLAINTEXT listener (User:ANONYMOUS, a super
user: the brokers' own traffic and the admin here) and a SASL_PLAINTEXT listener with SCRAM-SHA-256."""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient

from compat_tests.brokers import free_port
from tests.cluster.conftest import Cluster, wait_for
from tests.wire import WireClient

pytestmark = pytest.mark.timeout(240)

TOPIC_AUTHORIZATION_FAILED = 29
ALICE_PASSWORD = "alice-secret"
SCRAM_SHA_256 = 1
R_TOPIC, P_LITERAL, O_WRITE, A_DENY = 2, 3, 4, 2
SCRAM_JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule required;"


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(
        tmp_path_factory.mktemp("dynamic-state"),
        zookeeper.connect_string,
        overrides={
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "allow.everyone.if.no.acl.found": "true",
            "super.users": "User:ANONYMOUS",
            "sasl.enabled.mechanisms": "SCRAM-SHA-256",
            "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": SCRAM_JAAS,
            "inter.broker.listener.name": "PLAINTEXT",
        },
    )
    c.sasl_ports = {}  # type: ignore[attr-defined]
    for node, broker in c.brokers.items():
        sasl_port = c.sasl_ports[node] = free_port()  # type: ignore[attr-defined]
        broker.overrides["listeners"] = (
            f"PLAINTEXT://127.0.0.1:{broker.port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}"
        )
    try:
        c.start()
        yield c
    finally:
        c.stop()


def wire(cluster: Cluster, node: int) -> WireClient:
    return WireClient(cluster.brokers[node].bootstrap)


def alice(cluster: Cluster, node: int, password: str = ALICE_PASSWORD) -> dict:
    return {
        "bootstrap.servers": f"127.0.0.1:{cluster.sasl_ports[node]}",  # type: ignore[attr-defined]
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "alice",
        "sasl.password": password,
    }


def authenticates(config: dict) -> bool:
    try:
        AdminClient(config).list_topics(timeout=5)
        return True
    except Exception:  # noqa: BLE001 - librdkafka reports a failed authentication as a timeout or an error
        return False


def produce_error(config: dict, topic: str) -> int | None:
    """The error code of one produced record (None: written)."""
    results: list[KafkaError | None] = []
    producer = Producer({**config, "message.timeout.ms": 10000, "enable.idempotence": False})
    producer.produce(topic, b"v", on_delivery=lambda err, msg: results.append(err))
    producer.flush(20)
    assert len(results) == 1
    return None if results[0] is None else results[0].code()


def set_scram(cluster: Cluster, node: int, password: str) -> None:
    salt, iterations = os.urandom(16), 4096
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    with wire(cluster, node) as w:
        r = w.request(51, 0, {"deletions": [], "upsertions": [{
            "name": "alice", "mechanism": SCRAM_SHA_256, "iterations": iterations, "salt": salt,
            "salted_password": salted}]})  # fmt: skip
    assert r["results"][0]["error_code"] == 0, r


def deny_write(topic: str) -> dict:
    return {"resource_type": R_TOPIC, "resource_name": topic, "resource_pattern_type": P_LITERAL,
            "principal": "User:alice", "host": "*", "operation": O_WRITE, "permission_type": A_DENY}  # fmt: skip


def acl_count(cluster: Cluster, node: int, topic: str) -> int:
    with wire(cluster, node) as w:
        r = w.request(29, 3, {"resource_type_filter": R_TOPIC, "resource_name_filter": topic,
                              "pattern_type_filter": P_LITERAL, "principal_filter": None, "host_filter": None,
                              "operation": 1, "permission_type": 1})  # fmt: skip
    return sum(len(res["acls"]) for res in r["resources"])


def client_quota(cluster: Cluster, node: int, client_id: str) -> dict[str, float]:
    with wire(cluster, node) as w:
        r = w.request(48, 1, {"components": [{"entity_type": "client-id", "match_type": 0, "match": client_id}],
                              "strict": True})  # fmt: skip
    return {v["key"]: v["value"] for e in r["entries"] for v in e["values"]}


def alter_quota(cluster: Cluster, node: int, client_id: str, value: float | None) -> None:
    with wire(cluster, node) as w:
        r = w.request(49, 1, {"validate_only": False, "entries": [{
            "entity": [{"entity_type": "client-id", "entity_name": client_id}],
            "ops": [{"key": "producer_byte_rate", "value": value or 0.0, "remove": value is None}]}]})  # fmt: skip
    assert r["entries"][0]["error_code"] == 0, r


def broker_config(cluster: Cluster, node: int, key: str) -> tuple[str | None, int]:
    """(value, config source) of ``key`` as broker ``node`` describes its own config."""
    with wire(cluster, node) as w:
        r = w.request(32, 4, {"resources": [{"resource_type": 4, "resource_name": str(node),
                                             "configuration_keys": [key]}],
                              "include_synonyms": False, "include_documentation": False})  # fmt: skip
    (entry,) = r["results"][0]["configs"]
    return entry["value"], entry["config_source"]


def test_scram_credentials_made_on_one_broker_authenticate_on_every_broker(cluster: Cluster) -> None:
    set_scram(cluster, 1, ALICE_PASSWORD)
    for node in (1, 2, 3):
        wait_for(lambda node=node: authenticates(alice(cluster, node)), 30, f"alice authenticated on {node}")
        assert not authenticates(alice(cluster, node, "wrong"))
    with wire(cluster, 3) as w:
        described = w.request(50, 0, {"users": [{"name": "alice"}]})
    assert [c["mechanism"] for c in described["results"][0]["credential_infos"]] == [SCRAM_SHA_256]


def test_acls_made_on_one_broker_apply_on_every_broker(cluster: Cluster) -> None:
    topic = "acl-everywhere"
    with wire(cluster, 1) as w:
        w.request(19, 5, {"timeout_ms": 30000, "validate_only": False, "topics": [
            {"name": topic, "num_partitions": 3, "replication_factor": 3, "assignments": [], "configs": []}]})  # fmt: skip
    set_scram(cluster, 1, ALICE_PASSWORD)
    for node in (1, 2, 3):
        wait_for(lambda node=node: produce_error(alice(cluster, node), topic) is None, 60, f"alice writes via {node}")
    with wire(cluster, 2) as w:
        created = w.request(30, 3, {"creations": [deny_write(topic)]})
    assert created["results"][0]["error_code"] == 0, created
    for node in (1, 2, 3):
        wait_for(lambda node=node: acl_count(cluster, node, topic) == 1, 30, f"the ACL listed by broker {node}")
        wait_for(lambda node=node: produce_error(alice(cluster, node), topic) == TOPIC_AUTHORIZATION_FAILED, 30,
                 f"alice refused via broker {node}")  # fmt: skip
    with wire(cluster, 3) as w:
        filters = [{k + "_filter" if k in ("resource_type", "resource_name", "principal", "host") else
                    ("pattern_type_filter" if k == "resource_pattern_type" else k): v
                    for k, v in deny_write(topic).items()}]  # fmt: skip
        deleted = w.request(31, 3, {"filters": filters})
    assert [len(f["matching_acls"]) for f in deleted["filter_results"]] == [1], deleted
    for node in (1, 2, 3):
        wait_for(lambda node=node: acl_count(cluster, node, topic) == 0, 30, f"the ACL gone from broker {node}")
        wait_for(lambda node=node: produce_error(alice(cluster, node), topic) is None, 30, f"alice writes via {node}")


def test_one_create_acls_and_one_delete_acls_apply_at_once_on_another_broker(cluster: Cluster) -> None:
    """Kafka 4.x writes one CreateAcls's (or DeleteAcls's) ACL records as one atomic batch of the metadata
    log, and a broker applies the batch at once: a client never sees part of one request applied (an ACL
    on a topic applied, the one on its group not yet). Broker 3 is watched without a pause while broker 1
    creates, then deletes, ACLs on 40 resources in one request each: it lists none or all of them."""
    topics = [f"atomic-{i}" for i in range(40)]
    bindings = [{**deny_write(t), "principal": "User:atomic"} for t in topics]
    seen: list[int] = [0]  # the counts broker 3 listed, in order
    stop = threading.Event()

    def watch() -> None:
        with wire(cluster, 3) as w:
            while not stop.is_set():
                r = w.request(29, 3, {"resource_type_filter": R_TOPIC, "resource_name_filter": None,
                                      "pattern_type_filter": 1, "principal_filter": "User:atomic",
                                      "host_filter": None, "operation": 1, "permission_type": 1})  # fmt: skip
                seen.append(sum(len(res["acls"]) for res in r["resources"]))

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        with wire(cluster, 1) as w:
            created = w.request(30, 3, {"creations": bindings})
            assert [c["error_code"] for c in created["results"]] == [0] * len(topics), created
            wait_for(lambda: seen[-1] == len(topics), 30, "every ACL listed by broker 3")
            filters = [{"resource_type_filter": R_TOPIC, "resource_name_filter": t, "pattern_type_filter": P_LITERAL,
                        "principal_filter": "User:atomic", "host_filter": None, "operation": 1,
                        "permission_type": 1} for t in topics]  # fmt: skip
            deleted = w.request(31, 3, {"filters": filters})
            assert [len(f["matching_acls"]) for f in deleted["filter_results"]] == [1] * len(topics), deleted
            wait_for(lambda: seen[-1] == 0, 30, "every ACL gone from broker 3")
    finally:
        stop.set()
        watcher.join()
    partial = sorted(set(seen) - {0, len(topics)})
    assert not partial, f"broker 3 listed {partial} of the {len(topics)} ACLs of one request, in {len(seen)} reads"


def test_quotas_and_broker_configs_reach_every_broker_and_one_that_was_down(cluster: Cluster) -> None:
    alter_quota(cluster, 2, "limited", 1048576.0)
    for node in (1, 2, 3):
        wait_for(lambda node=node: client_quota(cluster, node, "limited") == {"producer_byte_rate": 1048576.0}, 30,
                 f"the quota on broker {node}")  # fmt: skip
    with wire(cluster, 3) as w:
        r = w.request(44, 1, {"validate_only": False, "resources": [{
            "resource_type": 4, "resource_name": "",
            "configs": [{"name": "log.retention.ms", "config_operation": 0, "value": "3600000"}]}]})  # fmt: skip
    assert r["responses"][0]["error_code"] == 0, r
    dynamic_default = 3  # DescribeConfigs: DYNAMIC_DEFAULT_BROKER_CONFIG
    for node in (1, 2, 3):
        wait_for(lambda node=node: broker_config(cluster, node, "log.retention.ms") == ("3600000", dynamic_default),
                 30, f"the cluster default on broker {node}")  # fmt: skip

    # Broker 2 is down while the quota goes and the ACL and the default change: it learns at start.
    cluster.brokers[2].stop()
    alter_quota(cluster, 1, "limited", None)
    alter_quota(cluster, 1, "other", 2048.0)
    with wire(cluster, 1) as w:
        assert w.request(30, 3, {"creations": [deny_write("while-down")]})["results"][0]["error_code"] == 0
        w.request(44, 1, {"validate_only": False, "resources": [{
            "resource_type": 4, "resource_name": "",
            "configs": [{"name": "log.retention.ms", "config_operation": 0, "value": "7200000"}]}]})  # fmt: skip
    cluster.brokers[2].start(timeout_s=60)
    assert client_quota(cluster, 2, "limited") == {}
    assert client_quota(cluster, 2, "other") == {"producer_byte_rate": 2048.0}
    assert acl_count(cluster, 2, "while-down") == 1
    assert broker_config(cluster, 2, "log.retention.ms") == ("7200000", dynamic_default)
