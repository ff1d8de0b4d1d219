"""Authorization (KIP-801 StandardAuthorizer semantics) through stock clients and raw requests, on a
broker of this module's own started with ``authorizer.class.name`` and
``allow.everyone.if.no.acl.found=true``.

Every client here connects over PLAINTEXT, so its principal is ``User:ANONYMOUS`` (as in Kafka); ACLs
for other principals (``User:alice``) make a resource "have ACLs", which is what refuses ANONYMOUS.
With ``allow.everyone.if.no.acl.found`` the cluster itself has no ACLs to begin with, so ANONYMOUS may
manage ACLs. Apache Kafka's own traffic (controller channel, inter-broker requests) runs as a SASL
super user on listeners of its own (``ApacheKafka(authorizer=True)``).

Kafka applies an ACL change on the broker when it replays the metadata log, a moment after CreateAcls
answers: assertions after a change wait for the new decision (pybroker applies it at once).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
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
from compat_tests.kafka_tools import run_tool
from pybroker.records.builder import SimpleRecord, build_batch
from tests.wire import WireClient

from .support import CLUSTER_BROKERS, cluster_launcher, coordinator_address, leader_address, wait_for

SETTINGS = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "allow.everyone.if.no.acl.found": "true",
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "1",
}
ANONYMOUS, ALICE = "User:ANONYMOUS", "User:alice"
# Kafka's codes (org.apache.kafka.common.{resource,acl}) for raw requests.
R_ANY, R_TOPIC, R_GROUP, R_CLUSTER = 1, 2, 3, 4
P_ANY, P_MATCH, P_LITERAL, P_PREFIXED = 1, 2, 3, 4
O_ANY, O_ALL, O_READ, O_WRITE, O_DESCRIBE, O_ALTER, O_ALTER_CONFIGS = 1, 2, 3, 4, 8, 7, 11
A_ANY, A_DENY, A_ALLOW = 1, 2, 3
NONE, TOPIC_AUTHZ, GROUP_AUTHZ, CLUSTER_AUTHZ, INVALID_REQUEST = 0, 29, 30, 31, 42


@pytest.fixture(scope="module")
def acl_bootstrap(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if request.config.getoption("--bootstrap"):
        pytest.skip("needs a broker started with an authorizer, not --bootstrap")
    workdir: Path = tmp_path_factory.mktemp("acls")
    launcher: Any
    kind = request.config.getoption("--broker")
    if kind in CLUSTER_BROKERS:
        # A 3-node cluster of the kind under test, the authorizer on every node; the nodes' own traffic
        # is a super user's on a listener of its own, as Kafka's single node below.
        launcher = cluster_launcher(kind, workdir, SETTINGS, authorizer=True)
    elif kind == "kafka":
        from compat_tests.reference.apache_kafka import ApacheKafka

        launcher = ApacheKafka(workdir, authorizer=True, overrides=SETTINGS)
    else:
        launcher = PyBroker(workdir, overrides=SETTINGS)
    launcher.start()
    try:
        yield launcher.bootstrap
    finally:
        launcher.stop()


@pytest.fixture(scope="module")
def admin(acl_bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": acl_bootstrap})


@pytest.fixture
def name() -> str:
    return f"acl-{uuid.uuid4().hex[:10]}"


def topic_acl(topic: str, principal: str, op: AclOperation, permission=AclPermissionType.ALLOW, pattern=None):
    return AclBinding(
        ResourceType.TOPIC, topic, pattern or ResourcePatternType.LITERAL, principal, "*", op, permission
    )


def create_acls(admin: AdminClient, *acls: AclBinding) -> None:
    for future in admin.create_acls(list(acls)).values():
        future.result(timeout=30)


def create_topic(admin: AdminClient, topic: str) -> None:
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)


RETRIABLE = (3, 6)  # UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER


def produce_code(bootstrap: str, topic: str) -> int:
    """The error code of one raw Produce v9 of a record to partition 0 of ``topic``, sent as a client
    sends it: to the leader Metadata names, or to the first broker when it names none."""
    batch = build_batch([SimpleRecord(None, b"v")])
    with WireClient(bootstrap) as lookup:
        leader = leader_address(lookup, topic) or bootstrap
    with WireClient(leader) as wire:
        response = wire.request(
            0,
            9,
            {
                "acks": 1,
                "timeout_ms": 10000,
                "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}],
            },
        )
    return response["responses"][0]["partition_responses"][0]["error_code"]


def metadata_topic(bootstrap: str, topic: str, *, operations: bool = False) -> dict:
    with WireClient(bootstrap) as wire:
        response = wire.request(
            3,
            12,
            {
                "topics": [{"name": topic}],
                "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": operations,
            },
        )
    (entry,) = response["topics"]
    return entry


def test_acls_created_described_and_deleted_with_confluent_admin(admin: AdminClient, name: str) -> None:
    literal = topic_acl(name, ALICE, AclOperation.READ)
    prefixed = topic_acl(name[:8], ALICE, AclOperation.WRITE, pattern=ResourcePatternType.PREFIXED)
    deny = topic_acl(name, "User:bob", AclOperation.DESCRIBE, AclPermissionType.DENY)
    create_acls(admin, literal, prefixed, deny)

    def described(pattern: ResourcePatternType) -> set[str]:
        f = AclBindingFilter(
            ResourceType.TOPIC, name, pattern, None, None, AclOperation.ANY, AclPermissionType.ANY
        )
        return {str(b) for b in admin.describe_acls(f).result(timeout=30)}

    # LITERAL: exactly the literal name; MATCH: every ACL that applies to a topic of that name.
    wait_for(
        lambda: described(ResourcePatternType.MATCH) == {str(literal), str(prefixed), str(deny)}, what="MATCH"
    )
    assert described(ResourcePatternType.LITERAL) == {str(literal), str(deny)}
    assert described(ResourcePatternType.PREFIXED) == set()

    only_alice = AclBindingFilter(
        ResourceType.TOPIC,
        None,
        ResourcePatternType.ANY,
        ALICE,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    got = {str(b) for b in admin.describe_acls(only_alice).result(timeout=30)}
    assert {str(literal), str(prefixed)} <= got and str(deny) not in got

    everything_here = AclBindingFilter(
        ResourceType.TOPIC,
        name,
        ResourcePatternType.MATCH,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    (deleted,) = admin.delete_acls([everything_here]).values()
    assert {str(b) for b in deleted.result(timeout=30)} == {str(literal), str(prefixed), str(deny)}
    wait_for(lambda: described(ResourcePatternType.MATCH) == set(), what="the ACLs gone")


def test_acls_through_kafka_acls_tool(acl_bootstrap: str, name: str) -> None:
    add = run_tool(
        "kafka-acls", "--bootstrap-server", acl_bootstrap, "--add", "--allow-principal", ALICE,
        "--operation", "Read", "--operation", "Describe", "--topic", name, "--group", name,
    )  # fmt: skip
    add.check()
    listed = run_tool("kafka-acls", "--bootstrap-server", acl_bootstrap, "--list", "--topic", name).check()
    assert f"resourceType=TOPIC, name={name}, patternType=LITERAL" in listed.stdout
    assert "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)" in listed.stdout
    assert "(principal=User:alice, host=*, operation=DESCRIBE, permissionType=ALLOW)" in listed.stdout
    removed = run_tool(
        "kafka-acls", "--bootstrap-server", acl_bootstrap, "--remove", "--force", "--topic", name, "--group", name
    )  # fmt: skip
    removed.check()
    after = run_tool("kafka-acls", "--bootstrap-server", acl_bootstrap, "--list", "--topic", name).check()
    assert "User:alice" not in after.stdout


def test_create_and_delete_acls_validation(acl_bootstrap: str, name: str) -> None:
    def creation(rtype: int, rname: str, ptype: int, op: int, perm: int = A_ALLOW) -> dict:
        return {
            "resource_type": rtype,
            "resource_name": rname,
            "resource_pattern_type": ptype,
            "principal": ALICE,
            "host": "*",
            "operation": op,
            "permission_type": perm,
        }

    with WireClient(acl_bootstrap) as wire:
        response = wire.request(
            30,
            3,
            {
                "creations": [
                    creation(R_CLUSTER, "not-kafka-cluster", P_LITERAL, O_ALTER),
                    creation(R_TOPIC, "", P_LITERAL, O_READ),
                    creation(99, name, P_LITERAL, O_READ),  # a type this version does not know
                    creation(R_TOPIC, name, 99, O_READ),
                    creation(R_TOPIC, name, P_LITERAL, 99),
                    {**creation(R_TOPIC, name, P_LITERAL, O_READ), "principal": "alice"},
                    creation(R_TOPIC, name, P_LITERAL, O_READ),
                ]
            },
        )
        got = [(r["error_code"], r["error_message"]) for r in response["results"]]
        assert got == [
            (INVALID_REQUEST, "The only valid name for the CLUSTER resource is kafka-cluster"),
            (INVALID_REQUEST, "Invalid empty resource name"),
            (INVALID_REQUEST, "Invalid resourceType UNKNOWN"),
            (INVALID_REQUEST, "Invalid patternType UNKNOWN"),
            (INVALID_REQUEST, "Invalid operation UNKNOWN"),
            (
                INVALID_REQUEST,
                "Could not parse principal from `alice` (no colon is present separating the principal type "
                "from the principal name)",
            ),
            (NONE, ""),
        ]
        # A filter value (ANY, MATCH) in a creation: Kafka cannot build the binding and the whole request
        # fails, every entry UNKNOWN_SERVER_ERROR.
        for bad in (
            creation(R_TOPIC, name, P_MATCH, O_READ),
            creation(R_TOPIC, name, P_LITERAL, O_ANY),
            creation(R_TOPIC, name, P_LITERAL, O_READ, A_ANY),
            creation(R_ANY, name, P_LITERAL, O_READ),
        ):
            response = wire.request(30, 3, {"creations": [creation(R_TOPIC, name, P_LITERAL, O_WRITE), bad]})
            assert [(r["error_code"], r["error_message"]) for r in response["results"]] == [(-1, None)] * 2
        # A filter naming a resource type this version does not know (code 99) deletes nothing.
        deleted = wire.request(
            31,
            3,
            {
                "filters": [
                    {
                        "resource_type_filter": 99,
                        "resource_name_filter": None,
                        "pattern_type_filter": P_ANY,
                        "principal_filter": None,
                        "host_filter": None,
                        "operation": O_ANY,
                        "permission_type": A_ANY,
                    },
                    {
                        "resource_type_filter": R_TOPIC,
                        "resource_name_filter": name,
                        "pattern_type_filter": P_LITERAL,
                        "principal_filter": ALICE,
                        "host_filter": "*",
                        "operation": O_READ,
                        "permission_type": A_ALLOW,
                    },
                ]
            },
        )
        first, second = deleted["filter_results"]
        assert first["error_code"] == INVALID_REQUEST and first["matching_acls"] == []
        assert second["error_code"] == NONE
        assert [(m["resource_name"], m["operation"]) for m in second["matching_acls"]] == [(name, O_READ)]


def test_producer_refused_then_allowed(acl_bootstrap: str, admin: AdminClient, name: str) -> None:
    create_topic(admin, name)
    # Kafka answers CreateTopics before its broker has the new leader: wait as a client would (it
    # retries NOT_LEADER_OR_FOLLOWER and UNKNOWN_TOPIC_OR_PARTITION), then no ACL applies:
    # allow.everyone.if.no.acl.found.
    codes: list[int] = []
    wait_for(
        lambda: codes.append(produce_code(acl_bootstrap, name)) or codes[-1] not in RETRIABLE, what="a leader"
    )
    assert codes[-1] == NONE
    create_acls(admin, topic_acl(name, ALICE, AclOperation.WRITE))
    wait_for(lambda: produce_code(acl_bootstrap, name) == TOPIC_AUTHZ, what="Produce refused")

    # A stock producer: the delivery report carries TOPIC_AUTHORIZATION_FAILED.
    errors: list[KafkaError] = []
    producer = Producer(
        {"bootstrap.servers": acl_bootstrap, "message.timeout.ms": 10000, "enable.idempotence": False}
    )
    producer.produce(name, b"refused", on_delivery=lambda err, msg: errors.append(err))
    producer.flush(20)
    assert errors and errors[0] is not None and errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    create_acls(admin, topic_acl(name, ANONYMOUS, AclOperation.WRITE))
    wait_for(lambda: produce_code(acl_bootstrap, name) == NONE, what="Produce allowed")
    delivered: list[Any] = []
    producer = Producer({"bootstrap.servers": acl_bootstrap, "message.timeout.ms": 10000})
    producer.produce(name, b"allowed", on_delivery=lambda err, msg: delivered.append(err))
    producer.flush(20)
    assert delivered == [None]


def test_consumer_needs_read_on_its_group(acl_bootstrap: str, admin: AdminClient, name: str) -> None:
    create_topic(admin, name)
    group = f"{name}-group"
    create_acls(
        admin,
        topic_acl(name, ANONYMOUS, AclOperation.ALL),
        AclBinding(
            ResourceType.GROUP,
            group,
            ResourcePatternType.LITERAL,
            ALICE,
            "*",
            AclOperation.READ,
            AclPermissionType.ALLOW,
        ),
    )
    wait_for(lambda: produce_code(acl_bootstrap, name) == NONE, what="Produce allowed")

    def first_poll() -> Any:
        consumer = Consumer(
            {
                "bootstrap.servers": acl_bootstrap,
                "group.id": group,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 6000,
            }
        )
        try:
            consumer.subscribe([name])
            for _ in range(30):
                message = consumer.poll(1)
                if message is not None:
                    return message
            return None
        finally:
            consumer.close()

    refused = first_poll()
    assert refused is not None and refused.error() is not None
    assert refused.error().code() == KafkaError.GROUP_AUTHORIZATION_FAILED

    create_acls(
        admin,
        AclBinding(
            ResourceType.GROUP,
            group,
            ResourcePatternType.LITERAL,
            ANONYMOUS,
            "*",
            AclOperation.READ,
            AclPermissionType.ALLOW,
        ),
    )
    message = wait_for(
        lambda: (m := first_poll()) is not None and m.error() is None and m, what="a record consumed"
    )
    assert message.value() == b"v"


def test_metadata_hides_topics_the_principal_may_not_describe(
    acl_bootstrap: str, admin: AdminClient, name: str
) -> None:
    hidden, visible = f"{name}-hidden", f"{name}-visible"
    create_topic(admin, hidden)
    create_topic(admin, visible)
    create_acls(admin, topic_acl(hidden, ALICE, AclOperation.DESCRIBE))

    def listed() -> set[str]:
        return set(admin.list_topics(timeout=20).topics)

    wait_for(lambda: hidden not in listed(), what="the topic hidden from the topic list")
    assert visible in listed()
    # The first broker, which the list above may not have come from: on a cluster each broker applies
    # the ACL as it replays the metadata log (Kafka), so the refusal is waited for there too.
    refused = wait_for(
        lambda: (m := metadata_topic(acl_bootstrap, hidden))["error_code"] == TOPIC_AUTHZ and m,
        what="Metadata refusing the hidden topic",
    )
    assert refused["partitions"] == []
    # A topic that does not exist but that the principal may describe: UNKNOWN_TOPIC_OR_PARTITION;
    # one it may not describe is refused whether it exists or not (nothing is disclosed).
    create_acls(admin, topic_acl(f"{name}-ghost", ALICE, AclOperation.READ))
    wait_for(
        lambda: metadata_topic(acl_bootstrap, f"{name}-ghost")["error_code"] == TOPIC_AUTHZ,
        what="ghost refused",
    )
    assert metadata_topic(acl_bootstrap, f"{name}-nothing")["error_code"] == 3


def test_deny_beats_allow_and_implied_describe(acl_bootstrap: str, admin: AdminClient, name: str) -> None:
    create_topic(admin, name)
    create_acls(
        admin,
        topic_acl(name, ANONYMOUS, AclOperation.ALL),
        topic_acl(name, "User:*", AclOperation.WRITE, AclPermissionType.DENY),
        topic_acl(name, ANONYMOUS, AclOperation.READ, AclPermissionType.DENY),
    )
    wait_for(lambda: produce_code(acl_bootstrap, name) == TOPIC_AUTHZ, what="DENY Write wins")
    # A DENY of Read or Write does not deny Describe (only ALLOW ACLs imply it): Metadata answers.
    entry = metadata_topic(acl_bootstrap, name, operations=True)
    assert entry["error_code"] == NONE
    # Topic operations bitfield: everything ALL allows (bit = Kafka's operation code) but Read and Write.
    expected = sum(
        1 << op for op in (5, 6, 7, 8, 10, 11)
    )  # CREATE DELETE ALTER DESCRIBE DESCRIBE_CONFIGS ALTER_CONFIGS
    assert entry["topic_authorized_operations"] == expected


def test_prefixed_acls(acl_bootstrap: str, admin: AdminClient, name: str) -> None:
    inside, outside = f"{name}-in-a", f"{name}-out"
    create_topic(admin, inside)
    create_topic(admin, outside)
    create_acls(
        admin, topic_acl(f"{name}-in-", ALICE, AclOperation.WRITE, pattern=ResourcePatternType.PREFIXED)
    )
    wait_for(lambda: produce_code(acl_bootstrap, inside) == TOPIC_AUTHZ, what="the prefix applies")
    assert produce_code(acl_bootstrap, outside) == NONE
    create_acls(
        admin, topic_acl(f"{name}-in", ANONYMOUS, AclOperation.WRITE, pattern=ResourcePatternType.PREFIXED)
    )
    wait_for(lambda: produce_code(acl_bootstrap, inside) == NONE, what="a shorter ALLOW prefix applies too")


def test_cluster_acls(acl_bootstrap: str, admin: AdminClient) -> None:
    cluster = [
        AclBinding(
            ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, ANONYMOUS, "*", op, perm
        )
        for op, perm in (
            (AclOperation.ALTER, AclPermissionType.ALLOW),  # keeps ACL management open to ANONYMOUS
            (AclOperation.DESCRIBE, AclPermissionType.ALLOW),
            (AclOperation.ALTER_CONFIGS, AclPermissionType.DENY),
        )
    ]
    create_acls(admin, *cluster)
    try:
        with WireClient(acl_bootstrap) as wire:

            def alter_code() -> int:
                response = wire.request(
                    44,
                    1,
                    {
                        "resources": [
                            {
                                "resource_type": 4,
                                "resource_name": "",
                                "configs": [
                                    {"name": "log.retention.ms", "config_operation": 0, "value": "604800000"}
                                ],
                            }
                        ],
                        "validate_only": True,
                    },
                )
                return response["responses"][0]["error_code"]

            wait_for(lambda: alter_code() == CLUSTER_AUTHZ, what="AlterConfigs on the broker refused")

            def describe_cluster() -> dict:
                return wire.request(60, 1, {"include_cluster_authorized_operations": True, "endpoint_type": 1})

            # ALTER (7) and DESCRIBE (8) allowed; the rest has ACLs on the cluster, none for ANONYMOUS.
            # Waited for: on Kafka's cluster AlterConfigs is decided by the controller (forwarded), and
            # this broker applies the same ACLs when it replays the metadata log, a moment apart.
            described = wait_for(
                lambda: (d := describe_cluster())["cluster_authorized_operations"] == (1 << 7) | (1 << 8) and d,
                what="DescribeCluster answering the cluster ACLs' operations",
            )
            assert described["error_code"] == NONE
            logs = wire.request(35, 4, {"topics": None})
            assert logs["error_code"] == NONE
    finally:
        delete_cluster_acls(admin)


def test_describe_acls_without_describe_on_the_cluster(acl_bootstrap: str, admin: AdminClient) -> None:
    cluster = [
        AclBinding(
            ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, ANONYMOUS, "*", op, perm
        )
        for op, perm in (
            (AclOperation.ALTER, AclPermissionType.ALLOW),  # to delete these ACLs again
            (AclOperation.DESCRIBE, AclPermissionType.DENY),
        )
    ]
    create_acls(admin, *cluster)
    try:
        with WireClient(acl_bootstrap) as wire:

            def describe_code() -> int:
                return wire.request(
                    29,
                    3,
                    {
                        "resource_type_filter": R_ANY,
                        "resource_name_filter": None,
                        "pattern_type_filter": P_ANY,
                        "principal_filter": None,
                        "host_filter": None,
                        "operation": O_ANY,
                        "permission_type": A_ANY,
                    },
                )["error_code"]

            wait_for(lambda: describe_code() == CLUSTER_AUTHZ, what="DescribeAcls refused")
    finally:
        delete_cluster_acls(admin)


def delete_cluster_acls(admin: AdminClient) -> None:
    everything = AclBindingFilter(
        ResourceType.BROKER,
        None,
        ResourcePatternType.ANY,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    for future in admin.delete_acls([everything]).values():
        future.result(timeout=30)


def test_unknown_acl_elements_close_the_connection(acl_bootstrap: str) -> None:
    with WireClient(acl_bootstrap) as wire:
        wire.send(
            29,
            3,
            {
                "resource_type_filter": 0,
                "pattern_type_filter": P_ANY,
                "operation": O_ANY,
                "permission_type": A_ANY,
            },
        )
        with pytest.raises((ConnectionError, OSError)):
            wire.sock.settimeout(15)
            data = wire.sock.recv(4)
            if not data:
                raise ConnectionError("closed")
    # The broker goes on serving others.
    with WireClient(acl_bootstrap) as wire:
        assert (
            wire.request(18, 3, {"client_software_name": "t", "client_software_version": "1"})["error_code"]
            == 0
        )


def group_acl(group: str, principal: str, op: AclOperation, permission=AclPermissionType.ALLOW) -> AclBinding:
    return AclBinding(ResourceType.GROUP, group, ResourcePatternType.LITERAL, principal, "*", op, permission)


def test_topic_administration_refused(acl_bootstrap: str, admin: AdminClient, name: str) -> None:
    create_topic(admin, name)
    denied_new = f"{name}-new"
    create_acls(
        admin,
        topic_acl(name, ALICE, AclOperation.ALL),  # the topic has ACLs, none for ANONYMOUS
        topic_acl(denied_new, ALICE, AclOperation.CREATE),
        # Create on the cluster would allow any topic: the cluster gets ACLs too (Alter, to manage ACLs).
        AclBinding(
            ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, ANONYMOUS, "*",
            AclOperation.ALTER, AclPermissionType.ALLOW,
        ),
    )  # fmt: skip
    try:
        _refused_topic_administration(acl_bootstrap, name, denied_new)
    finally:
        delete_cluster_acls(admin)


def _refused_topic_administration(acl_bootstrap: str, name: str, denied_new: str) -> None:
    with WireClient(acl_bootstrap) as wire:

        def create_code() -> tuple[int, str | None]:
            response = wire.request(
                19,
                7,
                {
                    "topics": [
                        {
                            "name": denied_new,
                            "num_partitions": 1,
                            "replication_factor": 1,
                            "assignments": [],
                            "configs": [],
                        }
                    ],
                    "timeout_ms": 10000,
                    "validate_only": True,
                },
            )
            (topic,) = response["topics"]
            return topic["error_code"], topic["error_message"]

        wait_for(lambda: create_code() == (TOPIC_AUTHZ, "Authorization failed."), what="CreateTopics refused")
        deleted = wire.request(20, 6, {"topics": [{"name": name}], "timeout_ms": 10000})
        assert [(t["name"], t["error_code"]) for t in deleted["responses"]] == [(name, TOPIC_AUTHZ)]
        grown = wire.request(
            37,
            3,
            {
                "topics": [{"name": name, "count": 2, "assignments": None}],
                "timeout_ms": 10000,
                "validate_only": True,
            },
        )
        assert [(r["name"], r["error_code"]) for r in grown["results"]] == [(name, TOPIC_AUTHZ)]
        purged = wire.request(
            21,
            2,
            {
                "topics": [{"name": name, "partitions": [{"partition_index": 0, "offset": -1}]}],
                "timeout_ms": 10000,
            },
        )
        assert purged["topics"][0]["partitions"][0]["error_code"] == TOPIC_AUTHZ
        described = wire.request(
            32,
            4,
            {
                "resources": [{"resource_type": 2, "resource_name": name, "configuration_keys": None}],
                "include_synonyms": False,
                "include_documentation": False,
            },
        )
        (result,) = described["results"]
        assert (result["error_code"], result["error_message"], result["configs"]) == (
            TOPIC_AUTHZ,
            "Topic authorization failed.",
            [],
        )
        offsets = wire.request(
            2,
            8,
            {
                "replica_id": -1,
                "isolation_level": 0,
                "topics": [{"name": name, "partitions": [{"partition_index": 0, "timestamp": -1}]}],
                "timeout_ms": 10000,
            },
        )
        assert offsets["topics"][0]["partitions"][0]["error_code"] == TOPIC_AUTHZ


def test_transactional_id_acls(acl_bootstrap: str, admin: AdminClient, name: str) -> None:
    txn = f"{name}-txn"
    create_acls(
        admin,
        AclBinding(
            ResourceType.TRANSACTIONAL_ID,
            txn,
            ResourcePatternType.LITERAL,
            ALICE,
            "*",
            AclOperation.WRITE,
            AclPermissionType.ALLOW,
        ),
    )
    with WireClient(acl_bootstrap) as wire:

        def init_code() -> int:
            return wire.request(
                22,
                5,
                {
                    "transactional_id": txn,
                    "transaction_timeout_ms": 60000,
                    "producer_id": -1,
                    "producer_epoch": -1,
                },
            )["error_code"]

        wait_for(
            lambda: init_code() == 53, what="InitProducerId refused (TRANSACTIONAL_ID_AUTHORIZATION_FAILED)"
        )
        found = wire.request(10, 4, {"key_type": 1, "coordinator_keys": [txn]})
        assert [(c["key"], c["error_code"], c["node_id"]) for c in found["coordinators"]] == [(txn, 53, -1)]
        ended = wire.request(
            26, 4, {"transactional_id": txn, "producer_id": 1, "producer_epoch": 0, "committed": True}
        )
        assert ended["error_code"] == 53


def test_group_offsets_need_group_and_topic_rights(acl_bootstrap: str, admin: AdminClient, name: str) -> None:
    readable, secret = f"{name}-readable", f"{name}-secret"
    group = f"{name}-group"
    create_topic(admin, readable)
    create_topic(admin, secret)
    create_acls(
        admin,
        topic_acl(readable, ANONYMOUS, AclOperation.READ),
        topic_acl(secret, ALICE, AclOperation.READ),
        group_acl(group, ANONYMOUS, AclOperation.READ),
    )
    commit_body = {
        "group_id": group,
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "group_instance_id": None,
        "topics": [
            {
                "name": t,
                "partitions": [
                    {
                        "partition_index": 0,
                        "committed_offset": 0,
                        "committed_leader_epoch": -1,
                        "committed_metadata": "",
                    }
                ],
            }
            for t in (readable, secret)
        ],
    }
    # Group requests go to the group's coordinator, as a client sends them (on a cluster another broker
    # answers NOT_COORDINATOR); with one __consumer_offsets partition it coordinates every group here.
    with WireClient(acl_bootstrap) as lookup:
        coordinator = coordinator_address(lookup, group)
    with WireClient(coordinator) as wire:

        def commit_codes() -> dict[str, int]:
            response = wire.request(8, 9, commit_body)
            return {t["name"]: t["partitions"][0]["error_code"] for t in response["topics"]}

        wait_for(
            lambda: commit_codes() == {readable: NONE, secret: TOPIC_AUTHZ}, what="per-topic commit rights"
        )
        fetched = wire.request(
            9,
            8,
            {
                "groups": [
                    {
                        "group_id": group,
                        "topics": [{"name": t, "partition_indexes": [0]} for t in (readable, secret)],
                    }
                ],
                "require_stable": False,
            },
        )
        (g,) = fetched["groups"]
        assert g["error_code"] == NONE
        assert {t["name"]: t["partitions"][0]["error_code"] for t in g["topics"]} == {
            readable: NONE,
            secret: TOPIC_AUTHZ,
        }
        everything = wire.request(
            9, 8, {"groups": [{"group_id": group, "topics": None}], "require_stable": False}
        )
        # All of the group's offsets: the topic the principal may not describe is left out.
        assert [t["name"] for t in everything["groups"][0]["topics"]] == [readable]
        # Describe on the group is implied by Read: DescribeGroups answers, with the operations allowed.
        described = wire.request(15, 5, {"groups": [group], "include_authorized_operations": True})
        (d,) = described["groups"]
        assert d["error_code"] == NONE and d["authorized_operations"] == (1 << 3) | (1 << 8)  # READ, DESCRIBE
        other = wire.request(
            15, 5, {"groups": [f"{name}-other-group"], "include_authorized_operations": True}
        )
        assert (
            other["groups"][0]["error_code"] == NONE
        )  # no ACL on that group: allow.everyone.if.no.acl.found
        create_acls(admin, group_acl(f"{name}-hidden-group", ALICE, AclOperation.READ))
        wait_for(
            lambda: (
                wire.request(
                    15, 5, {"groups": [f"{name}-hidden-group"], "include_authorized_operations": False}
                )["groups"][0]["error_code"]
                == GROUP_AUTHZ
            ),
            what="DescribeGroups refused",
        )
        found = wire.request(10, 4, {"key_type": 0, "coordinator_keys": [f"{name}-hidden-group"]})
        assert found["coordinators"][0]["error_code"] == GROUP_AUTHZ
        refused_commit = wire.request(8, 9, {**commit_body, "group_id": f"{name}-hidden-group"})
        assert {p["error_code"] for t in refused_commit["topics"] for p in t["partitions"]} == {GROUP_AUTHZ}


# -- principals from SASL: super.users and default-deny ------------------------------------------------
SASL_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";'
)


@pytest.fixture(scope="module")
def sasl_acl_broker(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict]:
    """A broker with PLAINTEXT (User:ANONYMOUS) and SASL_PLAINTEXT/PLAIN (User:admin, User:alice)
    listeners, the authorizer on, User:admin a super user and nothing allowed without an ACL."""
    if request.config.getoption("--bootstrap"):
        pytest.skip("needs a broker started with an authorizer, not --bootstrap")
    from compat_tests.brokers import free_port

    workdir: Path = tmp_path_factory.mktemp("acls-sasl")
    sasl_port = free_port()
    settings = {
        **SETTINGS,
        "allow.everyone.if.no.acl.found": "false",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": SASL_JAAS,
    }
    launcher: Any
    kind = request.config.getoption("--broker")
    if kind in CLUSTER_BROKERS:
        from compat_tests.reference.apache_kafka import INTERNAL_PRINCIPAL

        settings["super.users"] = f"{INTERNAL_PRINCIPAL};User:admin"  # and the brokers' own principal
        launcher = cluster_launcher(
            kind, workdir, settings, extra_listeners={"SASL_PLAINTEXT": "SASL_PLAINTEXT"}, authorizer=True
        )
        launcher.start()
        try:
            yield {"plaintext": launcher.bootstrap, "sasl": launcher.listener_bootstrap("SASL_PLAINTEXT")}
        finally:
            launcher.stop()
        return
    if kind == "kafka":
        from compat_tests.reference.apache_kafka import INTERNAL_PRINCIPAL, ApacheKafka

        settings["super.users"] = f"{INTERNAL_PRINCIPAL};User:admin"  # and the broker's own principal
        launcher = ApacheKafka(
            workdir,
            authorizer=True,
            overrides=settings,
            extra_listeners={"SASL_PLAINTEXT": ("SASL_PLAINTEXT", sasl_port)},
        )
    else:
        port = free_port()
        settings["super.users"] = "User:admin"
        listeners = f"PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}"
        launcher = PyBroker(workdir, port=port, overrides={"listeners": listeners, **settings})
    launcher.start()
    try:
        yield {"plaintext": launcher.bootstrap, "sasl": f"127.0.0.1:{sasl_port}"}
    finally:
        launcher.stop()


def sasl_config(broker: dict, user: str | None) -> dict:
    if user is None:
        return {"bootstrap.servers": broker["plaintext"]}
    return {
        "bootstrap.servers": broker["sasl"],
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": f"{user}-secret",
    }


def delivery_error(config: dict, topic: str) -> int | None:
    results: list[KafkaError | None] = []
    producer = Producer({**config, "message.timeout.ms": 10000, "enable.idempotence": False})
    producer.produce(topic, b"v", on_delivery=lambda err, msg: results.append(err))
    producer.flush(20)
    assert len(results) == 1
    return None if results[0] is None else results[0].code()


def test_super_user_and_sasl_principals(sasl_acl_broker: dict, name: str) -> None:
    admin = AdminClient(sasl_config(sasl_acl_broker, "admin"))
    create_topic(admin, name)  # User:admin is a super user: no ACL needed
    alice, anonymous = sasl_config(sasl_acl_broker, "alice"), sasl_config(sasl_acl_broker, None)
    # Nothing is allowed without an ACL (allow.everyone.if.no.acl.found=false).
    assert delivery_error(alice, name) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert delivery_error(anonymous, name) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    with pytest.raises(Exception) as refused:  # not even ACL management
        create_acls(AdminClient(anonymous), topic_acl(name, ANONYMOUS, AclOperation.WRITE))
    assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED

    create_acls(admin, topic_acl(name, ALICE, AclOperation.WRITE))
    wait_for(lambda: delivery_error(alice, name) is None, what="alice allowed to write")
    assert delivery_error(anonymous, name) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # A DENY for everyone, the super user included: super users are not subject to ACLs.
    create_acls(admin, topic_acl(name, "User:*", AclOperation.WRITE, AclPermissionType.DENY))
    wait_for(
        lambda: delivery_error(alice, name) == KafkaError.TOPIC_AUTHORIZATION_FAILED, what="DENY for User:*"
    )
    assert delivery_error(sasl_config(sasl_acl_broker, "admin"), name) is None


def test_leadership_apis_need_the_cluster(sasl_acl_broker: dict, name: str) -> None:
    """ElectLeaders and AlterPartitionReassignments need Alter on the cluster, ListPartitionReassignments
    Describe: refused to User:ANONYMOUS, which has no ACL (the super user may)."""
    create_topic(AdminClient(sasl_config(sasl_acl_broker, "admin")), name)
    with WireClient(sasl_acl_broker["plaintext"]) as wire:
        elected = wire.request(
            43,
            2,
            {
                "election_type": 0,
                "timeout_ms": 30000,
                "topic_partitions": [{"topic": name, "partitions": [0]}],
            },
        )
        assert elected["error_code"] == CLUSTER_AUTHZ
        assert [
            (r["topic"], [(p["partition_id"], p["error_code"]) for p in r["partition_result"]])
            for r in elected["replica_election_results"]
        ] == [(name, [(0, CLUSTER_AUTHZ)])]
        altered = wire.request(
            45,
            0,
            {
                "timeout_ms": 30000,
                "topics": [{"name": name, "partitions": [{"partition_index": 0, "replicas": None}]}],
            },
        )
        assert altered["error_code"] == CLUSTER_AUTHZ
        assert [
            (t["name"], [(p["partition_index"], p["error_code"]) for p in t["partitions"]])
            for t in altered["responses"]
        ] == [(name, [(0, CLUSTER_AUTHZ)])]
        listed = wire.request(46, 0, {"timeout_ms": 30000, "topics": None})
        assert (listed["error_code"], listed["topics"]) == (CLUSTER_AUTHZ, [])
