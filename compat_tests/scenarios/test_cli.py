"""`pybroker topic|group|config|cluster|produce|consume` (pybroker/cli) against the broker under test.

The CLI speaks the wire protocol through pybroker's own codec, so it must work against Apache Kafka
exactly as against pybroker; `pybroker group describe` must show the numbers Kafka's own
`kafka-consumer-groups --describe` shows, on either broker.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from compat_tests.brokers import free_port
from compat_tests.kafka_tools import parse_table, run_tool

from .support import first_broker, wait_for

REPO = Path(__file__).resolve().parents[2]


def cli(
    bootstrap: str, *args: str, input_text: str | None = None, check: bool = True
) -> subprocess.CompletedProcess:
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    )
    env.pop("PYBROKER_BROKERS", None)
    done = subprocess.run(
        [sys.executable, "-m", "pybroker", *args, "--brokers", bootstrap],
        input=input_text,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    if check:
        assert done.returncode == 0, f"pybroker {' '.join(args)} exited {done.returncode}:\n{done.stderr}"
        assert "Traceback" not in done.stderr, done.stderr
    return done


def cli_json(bootstrap: str, *args: str, input_text: str | None = None):
    return json.loads(cli(bootstrap, *args, "--format", "json", input_text=input_text).stdout)


def default_replication_factor(bootstrap: str) -> int:
    resource = ConfigResource(ResourceType.BROKER, str(first_broker(bootstrap)[0]))
    client = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the future resolves
    (future,) = client.describe_configs([resource]).values()
    return int(future.result(timeout=30)["default.replication.factor"].value)


def test_cli_cluster_info(bootstrap) -> None:
    info = cli_json(bootstrap, "cluster", "info")
    assert info["cluster_id"]
    ports = [int(address.rsplit(":", 1)[1]) for address in bootstrap.split(",")]
    port = ports[0]
    assert sorted(b["port"] for b in info["brokers"]) == sorted(ports)  # every broker of a cluster
    assert info["controller"] in [b["id"] for b in info["brokers"]] or info["controller"] >= 0
    text = cli(bootstrap, "cluster", "info").stdout
    assert info["cluster_id"] in text and str(port) in text


def test_cli_topic_create_list_describe_alter_add_partitions_delete(bootstrap, unique_topic) -> None:
    topic = unique_topic
    created = cli_json(bootstrap, "topic", "create", topic, "-p", "2", "-c", "retention.ms=3600000")
    assert created == [{"topic": topic, "status": "OK"}]
    again = cli(bootstrap, "topic", "create", topic, check=False)
    assert again.returncode == 1 and "TOPIC_ALREADY_EXISTS" in again.stdout

    # No -r: the broker's default.replication.factor (1 on one broker, 3 on the clusters of this suite).
    listed = {t["name"]: t for t in cli_json(bootstrap, "topic", "list")}
    assert listed[topic] == {"name": topic, "partitions": 2, "replicas": default_replication_factor(bootstrap)}
    assert topic in cli(bootstrap, "topic", "list").stdout

    described = cli_json(bootstrap, "topic", "describe", topic)
    assert [p["partition"] for p in described["partitions"]] == [0, 1]
    assert all(p["log_start_offset"] == 0 and p["high_watermark"] == 0 for p in described["partitions"])
    configs = {c["name"]: c for c in described["configs"]}
    assert (configs["retention.ms"]["value"], configs["retention.ms"]["source"]) == (
        "3600000",
        "DYNAMIC_TOPIC_CONFIG",
    )
    assert configs["cleanup.policy"]["source"] == "DEFAULT_CONFIG"

    cli(
        bootstrap,
        "topic",
        "alter-config",
        topic,
        "--set",
        "cleanup.policy=compact",
        "--delete",
        "retention.ms",
    )
    configs = {c["name"]: c for c in cli_json(bootstrap, "topic", "describe", topic)["configs"]}
    assert (configs["cleanup.policy"]["value"], configs["cleanup.policy"]["source"]) == (
        "compact",
        "DYNAMIC_TOPIC_CONFIG",
    )
    assert configs["retention.ms"]["source"] == "DEFAULT_CONFIG"

    assert cli_json(bootstrap, "topic", "add-partitions", topic, "-n", "1") == [
        {"topic": topic, "status": "OK"}
    ]
    assert len(cli_json(bootstrap, "topic", "describe", topic)["partitions"]) == 3

    assert cli_json(bootstrap, "topic", "delete", topic) == [{"topic": topic, "status": "OK"}]
    wait_for(
        lambda: topic not in {t["name"] for t in cli_json(bootstrap, "topic", "list")},
        timeout_s=60,
        what=f"{topic} to leave the topic list",
    )


def test_cli_produce_and_consume(bootstrap, make_topic) -> None:
    topic = make_topic(partitions=2)
    before = int(time.time() * 1000)
    produced = cli(
        bootstrap,
        "produce",
        topic,
        "-k",
        "user-7",
        "-H",
        "trace=abc",
        "-H",
        "src=cli",
        "-p",
        "1",
        input_text="first\nsecond\nthird\n",
    ).stdout
    assert produced.splitlines() == [f"Produced to partition 1 at offset {i}" for i in range(3)]
    cli(
        bootstrap, "produce", topic, "-p", "0", "--key-separator", ":", input_text="k0:v0\nk1:v1:with-colon\n"
    )

    got = [
        json.loads(line)
        for line in cli(
            bootstrap, "consume", topic, "-p", "1", "-n", "3", "--format", "json"
        ).stdout.splitlines()
    ]
    assert [(r["partition"], r["offset"], r["key"], r["value"]) for r in got] == [
        (1, 0, "user-7", "first"),
        (1, 1, "user-7", "second"),
        (1, 2, "user-7", "third"),
    ]
    assert got[0]["headers"] == [{"key": "trace", "value": "abc"}, {"key": "src", "value": "cli"}]
    assert all(before <= r["timestamp"] <= int(time.time() * 1000) for r in got)

    zero = cli(bootstrap, "consume", topic, "-p", "0", "-n", "2", "--print-keys").stdout
    assert zero.splitlines() == ["k0\tv0", "k1\tv1:with-colon"]
    from_one = cli(bootstrap, "consume", topic, "-p", "1", "-o", "1", "-e").stdout
    assert from_one.splitlines() == ["second", "third"]
    last = cli(bootstrap, "consume", topic, "-p", "1", "-o", "-1", "-e").stdout
    assert last.splitlines() == ["third"]
    at_time = cli(bootstrap, "consume", topic, "-o", f"@{got[2]['timestamp']}", "-p", "1", "-e").stdout
    assert at_time.splitlines()[-1] == "third"
    nothing = cli(bootstrap, "consume", topic, "-o", "end", "-e")
    assert nothing.stdout == "" and "no records" in nothing.stderr
    everything = cli(bootstrap, "consume", topic, "-e", "--format", "json").stdout.splitlines()
    assert len(everything) == 5

    # --group: start from the group's committed offsets and commit where it stopped.
    group = f"{topic}-cli-group"
    first = cli(bootstrap, "consume", topic, "-p", "1", "-n", "2", "-g", group).stdout.splitlines()
    rest = cli(bootstrap, "consume", topic, "-p", "1", "-g", group, "-e").stdout.splitlines()
    assert (first, rest) == (["first", "second"], ["third"])


def _kafka_describe(bootstrap: str, group: str) -> dict[int, tuple[str, str, str, str]]:
    out = run_tool(
        "kafka-consumer-groups", "--bootstrap-server", bootstrap, "--group", group, "--describe"
    ).check()
    return {
        int(r["PARTITION"]): (r["CURRENT-OFFSET"], r["LOG-END-OFFSET"], r["LAG"], r["CONSUMER-ID"])
        for r in parse_table(out.stdout, "GROUP")
    }


def _cli_describe(bootstrap: str, group: str) -> dict[int, tuple[str, str, str, str]]:
    described = cli_json(bootstrap, "group", "describe", group)

    def show(value: object) -> str:
        return "-" if value is None else str(value)

    return {
        r["partition"]: (
            show(r["current_offset"]),
            show(r["log_end_offset"]),
            show(r["lag"]),
            show(r["member_id"]),
        )
        for r in described["partitions"]
    }


def test_cli_group_describe_matches_kafka_consumer_groups_and_resets_offsets(
    bootstrap, make_topic, admin
) -> None:
    from compat_tests.clients.base import Record

    topic = make_topic(partitions=2)
    group = f"{topic}-group"
    admin.produce(
        bootstrap, topic, [Record(None, b"a", partition=0)] * 6 + [Record(None, b"b", partition=1)] * 3
    )

    with live_member(bootstrap, topic, group, {0: 2, 1: 1}):
        _check_live_group(bootstrap, topic, group)
        busy = cli(bootstrap, "group", "reset-offsets", group, "--topic", topic, "--to-earliest", check=False)
        assert busy.returncode == 1
        assert f"Assignments can only be reset if the group '{group}' is inactive" in busy.stderr

    wait_for(
        lambda: cli_json(bootstrap, "group", "describe", group)["state"] == "Empty",
        timeout_s=60,
        what="the group to be empty",
    )
    assert _cli_describe(bootstrap, group) == _kafka_describe(bootstrap, group)

    dry = cli_json(bootstrap, "group", "reset-offsets", group, "--topic", topic, "--to-earliest")
    assert dry["executed"] is False and [r["new_offset"] for r in dry["offsets"]] == [0, 0]
    assert {p: r[0] for p, r in _kafka_describe(bootstrap, group).items()} == {0: "2", 1: "1"}

    shifted = cli_json(
        bootstrap, "group", "seek", group, "--topic", f"{topic}:0", "--shift-by", "3", "--execute"
    )
    assert [(r["partition"], r["new_offset"]) for r in shifted["offsets"]] == [(0, 5)]
    clamped = cli_json(
        bootstrap, "group", "reset-offsets", group, "--topic", f"{topic}:1", "--to-offset", "99", "--execute"
    )
    assert [(r["partition"], r["new_offset"]) for r in clamped["offsets"]] == [(1, 3)]
    kafka_rows = _kafka_describe(bootstrap, group)
    assert {p: r[:3] for p, r in kafka_rows.items()} == {0: ("5", "6", "1"), 1: ("3", "3", "0")}
    assert _cli_describe(bootstrap, group) == kafka_rows

    latest = cli_json(
        bootstrap,
        "group",
        "reset-offsets",
        group,
        "--all-topics",
        "--to-datetime",
        "2100-01-01T00:00:00Z",
        "--execute",
    )
    assert [r["new_offset"] for r in latest["offsets"]] == [6, 3]
    earliest = cli_json(
        bootstrap, "group", "reset-offsets", group, "--all-topics", "--to-timestamp", "0", "--execute"
    )
    assert [r["new_offset"] for r in earliest["offsets"]] == [0, 0]
    assert {p: r[2] for p, r in _kafka_describe(bootstrap, group).items()} == {0: "6", 1: "3"}

    assert cli_json(bootstrap, "group", "delete", group) == [{"group": group, "status": "OK"}]
    gone = cli(bootstrap, "group", "describe", group, check=False)
    assert gone.returncode == 1 and "GROUP_ID_NOT_FOUND" in gone.stderr


@contextmanager
def live_member(
    bootstrap: str, topic: str, group: str, commit: dict[int, int], protocol: str = "classic"
) -> Iterator[None]:
    """A confluent-kafka member of ``group`` subscribed to ``topic`` that commits ``commit``
    ({partition: offset}) once assigned and keeps polling (heartbeating) until the block ends."""
    assigned = threading.Event()
    committed = threading.Event()
    stop = threading.Event()
    errors: list[BaseException] = []
    settings: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "client.id": "lag-checker",
    }
    if protocol == "consumer":
        settings["group.protocol"] = "consumer"  # KIP-848: the broker owns timeouts and assignment
    else:
        settings["session.timeout.ms"] = 10000
    consumer = Consumer(settings)

    def member() -> None:
        try:
            consumer.subscribe([topic], on_assign=lambda c, parts: parts and assigned.set())
            while not stop.is_set():
                consumer.poll(0.2)
                if assigned.is_set() and not committed.is_set():
                    # From the polling thread: librdkafka serves the commit's reply on it.
                    offsets = [TopicPartition(topic, p, o) for p, o in commit.items()]
                    consumer.commit(offsets=offsets, asynchronous=False)
                    committed.set()
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            errors.append(exc)

    thread = threading.Thread(target=member, daemon=True)
    thread.start()
    try:
        wait_for(lambda: committed.is_set() or errors, timeout_s=60, what="the member's commit")
        assert not errors, errors
        yield
    finally:
        stop.set()
        thread.join(30)
        consumer.close()
    assert not errors, errors


def _check_live_group(bootstrap: str, topic: str, group: str) -> None:
    """6 and 3 records, committed 2 and 1, one member holding both partitions: CLI == Kafka's tool."""

    def settled() -> bool:
        rows = _cli_describe(bootstrap, group)
        return len(rows) == 2 and all(row[3] != "-" for row in rows.values())

    wait_for(settled, timeout_s=60, what="both partitions assigned to the member")
    cli_rows = _cli_describe(bootstrap, group)
    kafka_rows = _kafka_describe(bootstrap, group)
    assert cli_rows == kafka_rows
    assert {p: row[:3] for p, row in cli_rows.items()} == {0: ("2", "6", "4"), 1: ("1", "3", "2")}
    assert cli_rows[0][3] == cli_rows[1][3]
    described = cli_json(bootstrap, "group", "describe", group)
    assert described["state"] == "Stable" and described["total_lag"] == 6
    [m] = described["members"]
    assert m["client_id"] == "lag-checker"
    assert sorted((a["topic"], a["partition"]) for a in m["assignment"]) == [(topic, 0), (topic, 1)]
    assert group in {g["group"] for g in cli_json(bootstrap, "group", "list")}


def test_cli_group_describe_kip848_member_matches_kafka_consumer_groups(bootstrap, make_topic, admin) -> None:
    from compat_tests.clients.base import Record

    topic = make_topic(partitions=2)
    group = f"{topic}-group"
    admin.produce(
        bootstrap, topic, [Record(None, b"a", partition=0)] * 6 + [Record(None, b"b", partition=1)] * 3
    )
    with live_member(bootstrap, topic, group, {0: 2, 1: 1}, protocol="consumer"):
        _check_live_group(bootstrap, topic, group)
        assert cli_json(bootstrap, "group", "describe", group)["type"] == "consumer"


def test_cli_config_describe_and_alter(bootstrap, make_topic) -> None:
    topic = make_topic()
    cli(
        bootstrap,
        "config",
        "alter",
        "--topic",
        topic,
        "--set",
        "retention.ms=7200000",
        "--set",
        "max.message.bytes=200000",
    )
    overrides = {
        c["name"]: c for c in cli_json(bootstrap, "config", "describe", "--topic", topic, "--only-overrides")
    }
    assert {k: (v["value"], v["source"]) for k, v in overrides.items()} == {
        "max.message.bytes": ("200000", "DYNAMIC_TOPIC_CONFIG"),
        "retention.ms": ("7200000", "DYNAMIC_TOPIC_CONFIG"),
    }
    cli(bootstrap, "config", "alter", "--topic", topic, "--delete", "max.message.bytes")
    overrides = {
        c["name"] for c in cli_json(bootstrap, "config", "describe", "--topic", topic, "--only-overrides")
    }
    assert overrides == {"retention.ms"}

    node = cli_json(bootstrap, "cluster", "info")["brokers"][0]["id"]
    broker_configs = {c["name"]: c for c in cli_json(bootstrap, "config", "describe", "--broker", str(node))}
    assert int(broker_configs["log.segment.bytes"]["value"]) > 0
    assert "log.retention.hours" in broker_configs

    bad = cli(bootstrap, "config", "alter", "--topic", topic, "--set", "no.such.config=1", check=False)
    assert bad.returncode == 1 and "INVALID_CONFIG" in bad.stderr and "Traceback" not in bad.stderr


def test_cli_errors_are_one_line_with_a_non_zero_exit(bootstrap) -> None:
    unreachable = cli(f"127.0.0.1:{free_port()}", "topic", "list", check=False)
    assert unreachable.returncode == 1
    assert unreachable.stderr.startswith("pybroker: error: cannot connect to broker 127.0.0.1:")
    assert len(unreachable.stderr.strip().splitlines()) == 1

    for args in (("topic", "describe", "no-such-topic-here"), ("consume", "no-such-topic-here", "-e")):
        missing = cli(bootstrap, *args, check=False)
        assert missing.returncode == 1, args
        assert "UNKNOWN_TOPIC_OR_PARTITION" in missing.stderr and "Traceback" not in missing.stderr


def test_cli_group_describe_and_list_a_streams_group(bootstrap, make_topic) -> None:
    """A streams group (KIP-1071, made with raw StreamsGroupHeartbeats): `pybroker group describe` shows
    its type, state and the partitions the member's active tasks read; `group list` lists it."""
    from compat_tests.scenarios.test_streams_groups import (
        heartbeat_until,
        join_once_source_is_seen,
        streams_coordinator_ready,
        word_count_topology,
    )

    topic = make_topic(partitions=2)
    group = f"{topic}-streams"
    streams_coordinator_ready(bootstrap, group)
    member = str(uuid.uuid4())
    joined = join_once_source_is_seen(bootstrap, group, member, word_count_topology(group, topic))
    every = {(s, p) for s in ("0", "1") for p in range(2)}
    heartbeat_until(bootstrap, group, member, joined["member_epoch"], set(), lambda owned: owned == every)
    described = cli_json(bootstrap, "group", "describe", group)
    assert (described["type"], described["state"]) == ("streams", "Stable")
    (m,) = described["members"]
    assert m["member_id"] == member
    repartition = f"{group}-words-repartition"
    assigned = sorted((a["topic"], a["partition"]) for a in m["assignment"])
    assert assigned == sorted([(repartition, 0), (repartition, 1), (topic, 0), (topic, 1)])
    listed = {g["group"]: g for g in cli_json(bootstrap, "group", "list")}
    assert (listed[group]["type"], listed[group]["protocol_type"], listed[group]["state"]) == (
        "streams",
        "streams",
        "Stable",
    )
