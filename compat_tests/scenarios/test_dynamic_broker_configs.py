"""Dynamic broker configs (KIP-226): IncrementalAlterConfigs / AlterConfigs on the BROKER resource,
per broker (its node id) and cluster-wide (resource name ""), DescribeConfigs' sources and synonyms for
the broker and for a topic that inherits the value, the effect on that topic, Kafka's errors for keys
that cannot change at runtime, and the BROKER_LOGGER resource (KIP-412).

The per-broker changes go through confluent-kafka's AdminClient; the cluster default, which librdkafka
cannot name (it refuses an empty resource name), and the exact synonym lists go through raw requests
encoded by pybroker's protocol package. Every change is undone at the end of its test: the broker is
shared by the session.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from compat_tests.clients.base import ClientError, Record
from compat_tests.kafka_tools import run_tool
from compat_tests.reference import kafka_probe
from tests.wire import WireClient

from .support import first_broker, partition_leader, wait_for

TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8
SET, DELETE, APPEND = 0, 1, 2
DYNAMIC_BROKER, DYNAMIC_DEFAULT, STATIC, DEFAULT, DYNAMIC_LOGGER = 2, 3, 4, 5, 6
INVALID_CONFIG, INVALID_REQUEST = 40, 42


@pytest.fixture
def wire(bootstrap: str) -> Iterator[WireClient]:
    """Raw requests go to the first bootstrap broker (on a cluster: one of them, named by ``node``)."""
    with WireClient(first_broker(bootstrap)[1]) as client:
        yield client


@pytest.fixture
def node(bootstrap: str) -> str:
    """The node id of the broker ``wire`` talks to: a BROKER resource is described and altered by the
    broker it names (Kafka answers INVALID_REQUEST for another broker's id)."""
    return str(first_broker(bootstrap)[0])


def describe(wire: WireClient, rtype: int, name: str, keys: list[str] | None) -> tuple[int, str | None, dict]:
    response = wire.request(
        32,
        4,
        {
            "resources": [{"resource_type": rtype, "resource_name": name, "configuration_keys": keys}],
            "include_synonyms": True,
            "include_documentation": False,
        },
    )
    (result,) = response["results"]
    configs = {
        c["name"]: (
            c["value"],
            c["config_source"],
            c["read_only"],
            [(s["name"], s["value"], s["source"]) for s in c["synonyms"]],
        )
        for c in result["configs"]
    }
    return result["error_code"], result["error_message"] or None, configs


def alter(
    wire: WireClient,
    rtype: int,
    name: str,
    ops: list[tuple[str, str | None, int]],
    validate_only: bool = False,
) -> tuple[int, str | None]:
    response = wire.request(
        44,
        1,
        {
            "resources": [
                {
                    "resource_type": rtype,
                    "resource_name": name,
                    "configs": [{"name": k, "value": v, "config_operation": op} for k, v, op in ops],
                }
            ],
            "validate_only": validate_only,
        },
    )
    (result,) = response["responses"]
    return result["error_code"], result["error_message"]


def confluent_alter(
    bootstrap: str, node: str, entries: list[tuple[str, str | None, AlterConfigOpType]]
) -> None:
    resource = ConfigResource(
        ResourceType.BROKER,
        node,
        incremental_configs=[ConfigEntry(k, v, incremental_operation=op) for k, v, op in entries],
    )
    client = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the futures resolve
    for future in client.incremental_alter_configs([resource]).values():
        future.result(timeout=30)


def confluent_describe(
    bootstrap: str, rtype: ResourceType, name: str
) -> dict[str, tuple[str | None, int, bool]]:
    resource = ConfigResource(rtype, name)
    client = AdminClient({"bootstrap.servers": bootstrap})
    (future,) = client.describe_configs([resource]).values()
    return {k: (e.value, int(e.source), e.is_read_only) for k, e in future.result(timeout=30).items()}


def test_per_broker_message_max_bytes_applies_to_topics_without_an_override(
    bootstrap: str, make_topic, admin
) -> None:
    inherits = make_topic("-inherits")
    overrides = make_topic("-overrides", configs={"max.message.bytes": "100000"})
    big = Record(b"big", os.urandom(8000))  # random: compression cannot shrink it
    # A partition's leader checks a batch against its own broker config: the per-broker value goes to the
    # leaders of both topics (on one broker, that broker), and the topic is described by its leader.
    leader, address = partition_leader(bootstrap, inherits)
    node = str(leader)
    nodes = sorted({node, str(partition_leader(bootstrap, overrides)[0])})
    for n in nodes:
        confluent_alter(bootstrap, n, [("message.max.bytes", "4000", AlterConfigOpType.SET)])
    try:
        # Apache Kafka applies a change once its metadata log has it: wait for it, then compare exactly.
        described = wait_for(
            lambda: (
                (d := confluent_describe(bootstrap, ResourceType.BROKER, node))["message.max.bytes"][0]
                == "4000"
                and d
            ),
            what="the per-broker value",
        )
        assert described["message.max.bytes"] == ("4000", DYNAMIC_BROKER, False)
        assert described["num.partitions"][2] is True  # read-only

        def topic_inherits() -> bool:
            with WireClient(address) as wire:
                got = describe(wire, TOPIC, inherits, ["max.message.bytes"])[2]["max.message.bytes"]
            return got[:3] == ("4000", DYNAMIC_BROKER, False)

        wait_for(topic_inherits, what="the topic to show the dynamic broker value")

        def refused() -> ClientError | None:
            try:
                admin.produce(bootstrap, inherits, [big], compression="none")
            except ClientError as e:
                return e
            return None

        assert wait_for(refused, what="the new limit to apply").error == "MESSAGE_TOO_LARGE"
        # The topic's own override still wins over the broker's dynamic value.
        assert admin.produce(bootstrap, overrides, [big], compression="none")[0].offset == 0
    finally:
        for n in nodes:
            confluent_alter(bootstrap, n, [("message.max.bytes", None, AlterConfigOpType.DELETE)])

    def back_to_default() -> bool:
        return all(
            confluent_describe(bootstrap, ResourceType.BROKER, n)["message.max.bytes"] == ("1048588", DEFAULT, False)
            for n in nodes
        )

    wait_for(back_to_default, what="message.max.bytes to return to its default")
    deliveries = wait_for(
        lambda: _try_produce(admin, bootstrap, inherits, big), what="the default limit again"
    )
    assert deliveries[0].offset == 0


def _try_produce(admin, bootstrap: str, topic: str, record: Record):  # noqa: ANN001, ANN202
    try:
        return admin.produce(bootstrap, topic, [record], compression="none")
    except ClientError:
        return None


def test_cluster_default_and_per_broker_sources_and_synonyms(wire: WireClient, node: str, make_topic) -> None:
    topic = make_topic()
    assert alter(wire, BROKER, "", [("log.retention.ms", "3600000", SET)]) == (0, None)
    try:
        # Apache Kafka applies a change once its metadata log has it: wait for it, then compare exactly.
        wait_for(lambda: describe(wire, BROKER, "", ["log.retention.ms"])[2], what="the cluster default")
        code, _, default = describe(wire, BROKER, "", ["log.retention.ms"])
        assert (code, default) == (
            0,
            {
                "log.retention.ms": (
                    "3600000",
                    DYNAMIC_DEFAULT,
                    False,
                    [("log.retention.ms", "3600000", DYNAMIC_DEFAULT)],
                )
            },
        )

        def topic_retention() -> tuple:
            return describe(wire, TOPIC, topic, ["retention.ms"])[2]["retention.ms"]

        wait_for(lambda: topic_retention()[0] == "3600000", what="the topic to inherit the cluster default")
        assert topic_retention() == (
            "3600000",
            DYNAMIC_DEFAULT,
            False,
            [("log.retention.ms", "3600000", DYNAMIC_DEFAULT), ("log.retention.hours", "168", DEFAULT)],
        )

        assert alter(wire, BROKER, node, [("log.retention.ms", "7200000", SET)]) == (0, None)
        wait_for(lambda: topic_retention()[0] == "7200000", what="the per-broker value to win")
        retention_synonyms = [
            ("log.retention.ms", "7200000", DYNAMIC_BROKER),
            ("log.retention.ms", "3600000", DYNAMIC_DEFAULT),
            ("log.retention.hours", "168", DEFAULT),
        ]
        assert topic_retention() == ("7200000", DYNAMIC_BROKER, False, retention_synonyms)
        broker = describe(wire, BROKER, node, ["log.retention.ms", "log.retention.hours"])[2]
        assert broker["log.retention.ms"] == ("7200000", DYNAMIC_BROKER, False, retention_synonyms)
        assert broker["log.retention.hours"] == (
            "168",
            DEFAULT,
            True,
            [("log.retention.hours", "168", DEFAULT)],
        )

        # A list config APPENDs to its effective value; the result is the cluster-wide default.
        assert alter(wire, BROKER, "", [("log.cleanup.policy", "compact", APPEND)]) == (0, None)
        wait_for(
            lambda: (
                describe(wire, TOPIC, topic, ["cleanup.policy"])[2]["cleanup.policy"][:2]
                == ("delete,compact", DYNAMIC_DEFAULT)
            ),
            what="the appended cleanup policy",
        )
    finally:
        assert alter(wire, BROKER, node, [("log.retention.ms", None, DELETE)]) == (0, None)
        assert alter(
            wire, BROKER, "", [("log.retention.ms", None, DELETE), ("log.cleanup.policy", None, DELETE)]
        ) == (
            0,
            None,
        )
    # Value and source only: once a dynamic log.retention.ms has come and gone, Apache Kafka 4.3.1 lists no
    # synonyms for the topic's retention.ms (before, it listed log.retention.hours' default); pybroker
    # lists log.retention.hours' default both times.
    wait_for(
        lambda: (
            describe(wire, TOPIC, topic, ["retention.ms"])[2]["retention.ms"][:2] == ("604800000", DEFAULT)
        ),
        what="retention.ms to return to the default",
    )
    assert wait_for(
        lambda: describe(wire, BROKER, "", ["log.retention.ms", "log.cleanup.policy"]) == (0, None, {}),
        what="the cluster defaults to be gone",
    )


def test_cluster_default_timestamp_type_changes_what_consumers_see(
    wire: WireClient, make_topic, admin, bootstrap: str
) -> None:
    topic = make_topic()
    old = 1_600_000_000_000
    assert alter(wire, BROKER, "", [("log.message.timestamp.type", "LogAppendTime", SET)]) == (0, None)
    try:
        wait_for(
            lambda: (
                describe(wire, TOPIC, topic, ["message.timestamp.type"])[2]["message.timestamp.type"][:2]
                == ("LogAppendTime", DYNAMIC_DEFAULT)
            ),
            what="the topic to inherit LogAppendTime",
        )
        (delivery,) = admin.produce(bootstrap, topic, [Record(b"k", b"v", timestamp_ms=old)])
        (record,) = admin.consume(bootstrap, topic, 0, start=delivery.offset, count=1)
        assert record.timestamp_ms != old and record.timestamp_type == "LogAppendTime", record
    finally:
        assert alter(wire, BROKER, "", [("log.message.timestamp.type", None, DELETE)]) == (0, None)


@pytest.mark.parametrize("resource", ["default", "node"])
def test_keys_that_cannot_change_at_runtime_are_refused(wire: WireClient, node: str, resource: str) -> None:
    name = "" if resource == "default" else node
    assert alter(wire, BROKER, name, [("num.partitions", "3", SET)]) == (
        INVALID_REQUEST,
        "Cannot update these configs dynamically: [num.partitions]",
    )
    # Only log.retention.ms, not its secondary spellings, is dynamic.
    assert alter(wire, BROKER, name, [("log.retention.hours", "3", SET)]) == (
        INVALID_REQUEST,
        "Cannot update these configs dynamically: [log.retention.hours]",
    )
    assert alter(wire, BROKER, name, [("log.segment.bytes", "10", SET)]) == (
        INVALID_REQUEST,
        "Invalid value 10 for configuration log.segment.bytes: Value must be at least 1048576",
    )
    assert alter(wire, BROKER, name, [("message.max.bytes", "abc", SET)]) == (
        INVALID_REQUEST,
        "Invalid value abc for configuration message.max.bytes: Not a number of type INT",
    )
    # validate_only checks without changing anything.
    assert alter(wire, BROKER, name, [("log.segment.bytes", "2097152", SET)], validate_only=True) == (0, None)
    assert describe(wire, BROKER, node, ["log.segment.bytes"])[2]["log.segment.bytes"][:2] == (
        "1073741824",
        DEFAULT,
    )


def test_read_only_key_through_confluent_admin(bootstrap: str, node: str) -> None:
    with pytest.raises(KafkaException) as raised:
        confluent_alter(bootstrap, node, [("num.partitions", "3", AlterConfigOpType.SET)])
    error = raised.value.args[0]
    assert (error.name(), error.str()) == (
        "INVALID_REQUEST",
        "Cannot update these configs dynamically: [num.partitions]",
    )


def test_broker_resource_names(wire: WireClient, node: str) -> None:
    other = str(int(node) + 6)
    assert describe(wire, BROKER, other, None)[:2] == (
        INVALID_REQUEST,
        f"Unexpected broker id, expected {node} or empty string, but received {other}",
    )
    assert describe(wire, BROKER, "abc", None)[:2] == (
        INVALID_REQUEST,
        "Broker id must be an integer, but it is: abc",
    )
    assert alter(wire, BROKER, other, [("log.retention.ms", "5", SET)]) == (
        INVALID_REQUEST,
        f"Unexpected broker id, expected {node}, but received {other}",
    )
    assert alter(wire, BROKER, "abc", [("log.retention.ms", "5", SET)]) == (
        INVALID_REQUEST,
        "Node id must be an integer, but it is: abc",
    )
    assert alter(wire, BROKER_LOGGER, "", [("root", "DEBUG", SET)]) == (
        INVALID_REQUEST,
        "Node id must be an integer, but it is: ",
    )


def test_broker_logger_levels(wire: WireClient, node: str) -> None:
    code, _, loggers = describe(wire, BROKER_LOGGER, node, None)
    assert code == 0 and loggers["root"] == ("INFO", DYNAMIC_LOGGER, False, [])
    name = next(n for n in sorted(loggers) if n != "root")
    assert alter(wire, BROKER_LOGGER, node, [(name, "DEBUG", SET)]) == (0, None)
    try:
        wait_for(lambda: describe(wire, BROKER_LOGGER, node, [name])[2][name][0] == "DEBUG", what="DEBUG")
        assert describe(wire, BROKER_LOGGER, node, [name])[2] == {name: ("DEBUG", DYNAMIC_LOGGER, False, [])}
        assert alter(wire, BROKER_LOGGER, node, [(name, "LOUD", SET)]) == (
            INVALID_CONFIG,
            f"Cannot set the log level of {name} to LOUD as it is not a supported log level. "
            "Valid log levels are DEBUG, ERROR, FATAL, INFO, TRACE, WARN",
        )
    finally:
        assert alter(wire, BROKER_LOGGER, node, [(name, None, DELETE)]) == (0, None)
    wait_for(lambda: describe(wire, BROKER_LOGGER, node, [name])[2][name][0] == "INFO", what="INFO again")


def legacy_alter(wire: WireClient, name: str, configs: dict[str, str]) -> tuple[int, str | None]:
    response = wire.request(
        33,
        2,
        {
            "resources": [
                {
                    "resource_type": BROKER,
                    "resource_name": name,
                    "configs": [{"name": k, "value": v} for k, v in configs.items()],
                }
            ],
            "validate_only": False,
        },
    )
    (result,) = response["responses"]
    return result["error_code"], result["error_message"]


def test_legacy_alter_configs_replaces_a_brokers_whole_set(wire: WireClient, node: str) -> None:
    keys = ["log.retention.ms", "message.max.bytes"]

    def node_sources() -> dict[str, tuple]:
        return {k: v[:2] for k, v in describe(wire, BROKER, node, keys)[2].items()}

    assert alter(
        wire, BROKER, node, [("log.retention.ms", "7200000", SET), ("message.max.bytes", "2000000", SET)]
    ) == (
        0,
        None,
    )
    try:
        wait_for(
            lambda: node_sources()["message.max.bytes"] == ("2000000", DYNAMIC_BROKER), what="the node values"
        )
        # AlterConfigs (not incremental) sets exactly what it is given: message.max.bytes goes back.
        assert legacy_alter(wire, node, {"log.retention.ms": "1000000"}) == (0, None)
        expected = {
            "log.retention.ms": ("1000000", DYNAMIC_BROKER),
            "message.max.bytes": ("1048588", DEFAULT),
        }
        wait_for(lambda: node_sources() == expected, what=f"only the legacy set to remain: {expected}")
        assert legacy_alter(wire, node, {"num.partitions": "4"}) == (
            INVALID_REQUEST,
            "Cannot update these configs dynamically: [num.partitions]",
        )
    finally:
        assert legacy_alter(wire, node, {}) == (0, None)
    expected = {"log.retention.ms": (None, DEFAULT), "message.max.bytes": ("1048588", DEFAULT)}
    wait_for(lambda: node_sources() == expected, what="no dynamic config left on the broker")


def test_append_to_a_config_that_is_not_a_list(wire: WireClient, node: str) -> None:
    assert alter(wire, BROKER, node, [("message.max.bytes", "5", APPEND)]) == (
        INVALID_CONFIG,
        "Config value append is not allowed for config key: message.max.bytes",
    )


def kafka_configs(bootstrap: str, *args: str) -> str:
    """Apache Kafka's own kafka-configs (kafka.admin.ConfigCommand, from the reference jars)."""
    return run_tool("kafka-configs", "--bootstrap-server", bootstrap, *args).check().stdout


def test_cluster_default_through_kafka_configs(bootstrap: str, wire: WireClient, make_topic) -> None:
    topic = make_topic()
    default = ["--entity-type", "brokers", "--entity-default"]
    out = kafka_configs(bootstrap, *default, "--alter", "--add-config", "log.retention.bytes=123456789")
    assert "Completed updating default config for brokers in the cluster." in out
    try:
        wait_for(
            lambda: (
                describe(wire, TOPIC, topic, ["retention.bytes"])[2]["retention.bytes"][:2]
                == ("123456789", DYNAMIC_DEFAULT)
            ),
            what="the topic to inherit the cluster default",
        )
        # (Apache Kafka also lists the min.insync.replicas default its storage format sets for KIP-966.)
        lines = kafka_configs(bootstrap, *default, "--describe").splitlines()
        assert lines[0] == "Default configs for brokers in the cluster are:"
        assert (
            "  log.retention.bytes=123456789 sensitive=false "
            "synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.bytes=123456789}"
        ) in lines[1:]
    finally:
        kafka_configs(bootstrap, *default, "--alter", "--delete-config", "log.retention.bytes")
    wait_for(
        lambda: (
            describe(wire, TOPIC, topic, ["retention.bytes"])[2]["retention.bytes"][:2] == ("-1", DEFAULT)
        ),
        what="retention.bytes to return to its default",
    )


def test_malformed_incremental_requests(wire: WireClient, node: str, make_topic) -> None:
    topic = make_topic()
    for rtype, name, key in ((BROKER, node, "log.retention.ms"), (TOPIC, topic, "retention.ms")):
        assert alter(wire, rtype, name, [(key, "1000", SET), (key, "2000", SET)]) == (
            INVALID_REQUEST,
            "Error due to duplicate config keys",
        )
        assert alter(wire, rtype, name, [(key, None, SET)]) == (
            INVALID_REQUEST,
            f"Null value not supported for : {key}",
        )
    assert alter(wire, BROKER_LOGGER, node, [("root", "DEBUG", APPEND)]) == (
        INVALID_REQUEST,
        "APPEND operation is not allowed for the BROKER_LOGGER resource",
    )
    assert alter(wire, BROKER_LOGGER, node, [("root", None, DELETE)]) == (
        INVALID_REQUEST,
        "Removing the log level of the root logger is not allowed",
    )
    assert alter(wire, BROKER_LOGGER, node, [("no.such.logger", "DEBUG", SET)]) == (
        INVALID_CONFIG,
        "Logger no.such.logger does not exist!",
    )
    response = wire.request(
        33,
        2,
        {
            "resources": [
                {
                    "resource_type": BROKER_LOGGER,
                    "resource_name": node,
                    "configs": [{"name": "root", "value": "DEBUG"}],
                }
            ],
            "validate_only": False,
        },
    )
    (result,) = response["responses"]
    assert (result["error_code"], result["error_message"]) == (INVALID_REQUEST, "Unknown resource type 8")
    # Nothing of the above changed the topic.
    assert describe(wire, TOPIC, topic, ["retention.ms"])[2]["retention.ms"][:2] == ("604800000", DEFAULT)


def test_another_brokers_config_goes_through_that_broker(bootstrap: str) -> None:
    """Issue 11's "dynamic configs addressed to another broker's id", on a 3-broker cluster. Apache Kafka
    4.3.1 (KRaft) validates a BROKER resource on the broker that receives it, before it forwards the
    change to the controller (ConfigAdminManager.preprocess, validateResourceNameIsCurrentNodeId): sent
    to broker A, broker B's id is INVALID_REQUEST, for IncrementalAlterConfigs, AlterConfigs and
    DescribeConfigs alike, and nothing changes. A client names B's resource and its admin sends the
    request to B itself (librdkafka and the Java admin look B up in Metadata): bootstrapped through A,
    the change takes effect on B only, and a client bootstrapped through any broker describes it."""
    host, _, port = bootstrap.split(",")[0].rpartition(":")
    endpoints, _ = kafka_probe.topic_metadata(host, int(port), None)
    if len(endpoints) < 3:
        pytest.skip(
            "needs 3 brokers (--broker pybroker-cluster or kafka-cluster): a single broker has no other "
            "broker's id to address"
        )
    address = {n: f"{h}:{p}" for n, (h, p) in endpoints.items()}
    a, b, c = sorted(endpoints)[:3]
    key, value = "message.max.bytes", "2000000"

    def own_value(n: int) -> tuple:
        with WireClient(address[n]) as wire:
            return describe(wire, BROKER, str(n), [key])[2][key][:2]

    with WireClient(address[a]) as wire:
        assert alter(wire, BROKER, str(b), [(key, value, SET)]) == (
            INVALID_REQUEST,
            f"Unexpected broker id, expected {a}, but received {b}",
        )
        assert legacy_alter(wire, str(b), {key: value}) == (
            INVALID_REQUEST,
            f"Unexpected broker id, expected {a}, but received {b}",
        )
        assert describe(wire, BROKER, str(b), [key])[:2] == (
            INVALID_REQUEST,
            f"Unexpected broker id, expected {a} or empty string, but received {b}",
        )
    assert [own_value(n) for n in (a, b, c)] == [("1048588", DEFAULT)] * 3

    confluent_alter(address[a], str(b), [(key, value, AlterConfigOpType.SET)])
    try:
        wait_for(lambda: own_value(b) == (value, DYNAMIC_BROKER), what=f"broker {b} to apply its new value")
        assert own_value(a) == own_value(c) == ("1048588", DEFAULT)
        for through in (a, b, c):
            assert confluent_describe(address[through], ResourceType.BROKER, str(b))[key] == (
                value,
                DYNAMIC_BROKER,
                False,
            )
        out = kafka_configs(address[c], "--entity-type", "brokers", "--entity-name", str(b), "--describe")
        assert f"  {key}={value} sensitive=false synonyms={{DYNAMIC_BROKER_CONFIG:{key}={value}, " in out
    finally:
        confluent_alter(address[c], str(b), [(key, None, AlterConfigOpType.DELETE)])
    wait_for(lambda: own_value(b) == ("1048588", DEFAULT), what=f"broker {b} to return to the default")
