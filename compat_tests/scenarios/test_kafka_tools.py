"""Apache Kafka's own command-line tools (the 4.3.1 jars from Maven Central) against the broker under
test: kafka-topics, kafka-consumer-groups, kafka-configs, kafka-console-producer/-consumer,
kafka-streams-groups, kafka-get-offsets, kafka-delete-records, kafka-log-dirs and kafka-dump-log over the broker's own
segment, index and time-index files. Each scenario passes on pybroker and on Apache Kafka."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from compat_tests.kafka_tools import parse_table, run_tool
from compat_tests.scenarios.test_streams_groups import (
    group_call,
    heartbeat,
    heartbeat_until,
    join_once_source_is_seen,
    streams_coordinator_ready,
    word_count_topology,
)

from .support import first_broker, partition_leader, wait_for

TOOL_TIMEOUT_S = 180


def _produce(
    bootstrap: str, topic: str, values: list[tuple[int, bytes, bytes | None]], **settings: object
) -> None:
    """(partition, value, key) records, acknowledged by all replicas, in order per partition."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, **settings})
    failures: list[str] = []

    def on_delivery(err, _msg) -> None:  # noqa: ANN001 - librdkafka callback
        if err is not None:
            failures.append(str(err))

    for partition, value, key in values:
        producer.produce(topic, value=value, key=key, partition=partition, on_delivery=on_delivery)
    assert producer.flush(60) == 0, "records still in flight after 60 s"
    assert not failures, failures


def _commit(bootstrap: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    """Commit offsets for ``group`` as a manually assigned consumer would, leaving the group Empty."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(
            offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False
        )
    finally:
        consumer.close()


def _topic_names(bootstrap: str) -> set[str]:
    listed = run_tool("kafka-topics", "--bootstrap-server", bootstrap, "--list").check()
    return {line.strip() for line in listed.stdout.splitlines() if line.strip()}


def test_kafka_topics_create_list_describe_alter_delete(bootstrap, unique_topic) -> None:
    topic = unique_topic
    common = ["--bootstrap-server", bootstrap]
    created = run_tool(
        "kafka-topics",
        *common,
        "--create",
        "--topic",
        topic,
        "--partitions",
        "2",
        "--replication-factor",
        "1",
        "--config",
        "retention.ms=3600000",
    ).check()
    assert f"Created topic {topic}." in created.stdout
    assert topic in _topic_names(bootstrap)

    described = run_tool("kafka-topics", *common, "--describe", "--topic", topic).check().stdout
    assert re.search(
        rf"Topic: {re.escape(topic)}\s+TopicId: \S+\s+PartitionCount: 2\s+ReplicationFactor: 1", described
    )
    assert "retention.ms=3600000" in described
    assert len(re.findall(r"Partition: \d+\s+Leader: \d+\s+Replicas: \d+\s+Isr: \d+", described)) == 2

    run_tool("kafka-topics", *common, "--alter", "--topic", topic, "--partitions", "3").check()
    described = run_tool("kafka-topics", *common, "--describe", "--topic", topic).check().stdout
    assert "PartitionCount: 3" in described

    again = run_tool("kafka-topics", *common, "--create", "--topic", topic, "--partitions", "1")
    assert again.returncode != 0
    assert "already exists" in again.stdout + again.stderr

    run_tool("kafka-topics", *common, "--delete", "--topic", topic).check()
    wait_for(lambda: topic not in _topic_names(bootstrap), timeout_s=60, what=f"{topic} to leave --list")


def test_kafka_consumer_groups_describe_lag_and_reset_offsets(bootstrap, make_topic, unique_topic) -> None:
    topic = make_topic(partitions=2)
    group = f"{unique_topic}-group"
    _produce(bootstrap, topic, [(0, f"a{i}".encode(), None) for i in range(7)] + [(1, b"b", None)] * 4)
    _commit(bootstrap, group, {(topic, 0): 2, (topic, 1): 4})
    common = ["--bootstrap-server", bootstrap, "--group", group]

    result = run_tool("kafka-consumer-groups", *common, "--describe").check()
    assert f"Consumer group '{group}' has no active members." in result.stdout + result.stderr
    described = result.stdout
    rows = {int(r["PARTITION"]): r for r in parse_table(described, "GROUP")}
    assert {p: (r["CURRENT-OFFSET"], r["LOG-END-OFFSET"], r["LAG"]) for p, r in rows.items()} == {
        0: ("2", "7", "5"),
        1: ("4", "4", "0"),
    }

    listed = run_tool("kafka-consumer-groups", "--bootstrap-server", bootstrap, "--list").check().stdout
    assert group in listed.split()

    # A dry run (the default) shows the new offsets and commits nothing.
    dry = run_tool("kafka-consumer-groups", *common, "--reset-offsets", "--to-earliest", "--topic", topic)
    new = {int(r["PARTITION"]): r["NEW-OFFSET"] for r in parse_table(dry.check().stdout, "GROUP")}
    assert new == {0: "0", 1: "0"}
    described = run_tool("kafka-consumer-groups", *common, "--describe").check().stdout
    assert {int(r["PARTITION"]): r["CURRENT-OFFSET"] for r in parse_table(described, "GROUP")} == {
        0: "2",
        1: "4",
    }

    shifted = run_tool(
        "kafka-consumer-groups",
        *common,
        "--reset-offsets",
        "--shift-by",
        "-3",
        "--topic",
        f"{topic}:0",
        "--execute",
    ).check()
    assert {int(r["PARTITION"]): r["NEW-OFFSET"] for r in parse_table(shifted.stdout, "GROUP")} == {0: "0"}
    latest = run_tool(
        "kafka-consumer-groups",
        *common,
        "--reset-offsets",
        "--to-latest",
        "--topic",
        f"{topic}:1",
        "--execute",
    ).check()
    assert {int(r["PARTITION"]): r["NEW-OFFSET"] for r in parse_table(latest.stdout, "GROUP")} == {1: "4"}
    described = run_tool("kafka-consumer-groups", *common, "--describe").check().stdout
    rows = {int(r["PARTITION"]): r for r in parse_table(described, "GROUP")}
    assert {p: (r["CURRENT-OFFSET"], r["LAG"]) for p, r in rows.items()} == {0: ("0", "7"), 1: ("4", "0")}

    run_tool("kafka-consumer-groups", *common, "--delete").check()
    wait_for(
        lambda: (
            group
            not in run_tool("kafka-consumer-groups", "--bootstrap-server", bootstrap, "--list")
            .check()
            .stdout.split()
        ),
        timeout_s=60,
        what=f"group {group} to be deleted",
    )


def test_kafka_configs_topic_alter_describe_and_broker_describe(bootstrap, broker, make_topic) -> None:
    topic = make_topic()
    common = ["--bootstrap-server", bootstrap]
    entity = ["--entity-type", "topics", "--entity-name", topic]
    run_tool(
        "kafka-configs",
        *common,
        *entity,
        "--alter",
        "--add-config",
        "retention.ms=7200000,max.message.bytes=200000",
    ).check()
    described = run_tool("kafka-configs", *common, *entity, "--describe").check().stdout
    assert f"Dynamic configs for topic {topic} are:" in described
    assert "retention.ms=7200000 sensitive=false" in described
    assert "max.message.bytes=200000 sensitive=false" in described

    run_tool("kafka-configs", *common, *entity, "--alter", "--delete-config", "max.message.bytes").check()
    described = run_tool("kafka-configs", *common, *entity, "--describe").check().stdout
    assert "retention.ms=7200000" in described
    assert "max.message.bytes=" not in described

    node = _broker_id(bootstrap)
    every = (
        run_tool(
            "kafka-configs",
            *common,
            "--entity-type",
            "brokers",
            "--entity-name",
            str(node),
            "--describe",
            "--all",
        )
        .check()
        .stdout
    )
    assert f"All configs for broker {node} are:" in every
    assert re.search(r"^\s+log\.segment\.bytes=\d+ sensitive=false", every, re.MULTILINE)


def _broker_id(bootstrap: str) -> int:
    from confluent_kafka.admin import AdminClient

    brokers = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30).brokers
    return sorted(brokers)[0]


def test_kafka_console_producer_and_consumer(bootstrap, make_topic) -> None:
    topic = make_topic()
    lines = [f"key-{i}:value {i} \u00e9" for i in range(5)]
    run_tool(
        "kafka-console-producer",
        "--bootstrap-server",
        bootstrap,
        "--topic",
        topic,
        "--reader-property",
        "parse.key=true",
        "--reader-property",
        "key.separator=:",
        input_text="\n".join(lines) + "\n",
    ).check()
    consumed = run_tool(
        "kafka-console-consumer",
        "--bootstrap-server",
        bootstrap,
        "--topic",
        topic,
        "--from-beginning",
        "--max-messages",
        "5",
        "--formatter-property",
        "print.key=true",
        "--formatter-property",
        "key.separator=|",
        "--formatter-property",
        "print.offset=true",
        "--timeout-ms",
        "60000",
    ).check()
    got = [line for line in consumed.stdout.splitlines() if line.startswith("Offset:")]
    assert got == [f"Offset:{i}|key-{i}|value {i} \u00e9" for i in range(5)]
    assert "Processed a total of 5 messages" in consumed.stderr


def test_kafka_get_offsets_and_delete_records(bootstrap, make_topic, tmp_path) -> None:
    topic = make_topic(partitions=2)
    _produce(bootstrap, topic, [(0, b"x", None)] * 5 + [(1, b"y", None)] * 3)
    common = ["--bootstrap-server", bootstrap]

    def offsets(*extra: str) -> dict[str, str]:
        out = run_tool("kafka-get-offsets", *common, "--topic", topic, *extra).check().stdout
        return dict(line.rsplit(":", 1) for line in out.split())

    assert offsets() == {f"{topic}:0": "5", f"{topic}:1": "3"}
    assert offsets("--time", "-2") == {f"{topic}:0": "0", f"{topic}:1": "0"}
    assert offsets("--partitions", "1", "--time", "latest") == {f"{topic}:1": "3"}

    plan = tmp_path / "delete.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "offset": 3}]}))
    deleted = run_tool("kafka-delete-records", *common, "--offset-json-file", str(plan)).check().stdout
    assert re.search(rf"partition: {re.escape(topic)}-0\s+low_watermark: 3", deleted), deleted
    assert offsets("--time", "earliest") == {f"{topic}:0": "3", f"{topic}:1": "0"}

    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 1, "offset": 9}]}))
    beyond = run_tool("kafka-delete-records", *common, "--offset-json-file", str(plan)).check().stdout
    assert re.search(rf"partition: {re.escape(topic)}-1\s+error: .*OffsetOutOfRangeException", beyond), beyond


def data_dirs(broker, bootstrap: str) -> dict[int, Path]:
    """Each broker's log directory by node id: the one broker, or every node of a cluster launcher."""
    if hasattr(broker, "node_ids"):
        return {node: Path(broker.data_dir(node)) for node in broker.node_ids()}
    return {first_broker(bootstrap)[0]: Path(broker.data_dir)}


def test_kafka_log_dirs_describe(bootstrap, broker, make_topic) -> None:
    if broker is None:
        pytest.skip("kafka-log-dirs reports the broker's own directory: needs a broker this run started")
    topic = make_topic(partitions=2)
    _produce(bootstrap, topic, [(0, b"z" * 100, None)] * 10)
    out = run_tool(
        "kafka-log-dirs", "--bootstrap-server", bootstrap, "--describe", "--topic-list", topic
    ).check()
    document = json.loads(next(line for line in out.stdout.splitlines() if line.startswith("{")))
    # Every broker reports its own directory; the topic's replication factor is the broker count (1, or
    # 3 on the clusters of this suite), so each holds both partitions, with the records acks=all wrote.
    dirs = data_dirs(broker, bootstrap)
    assert sorted(entry["broker"] for entry in document["brokers"]) == sorted(dirs)
    for entry in document["brokers"]:
        [log_dir] = entry["logDirs"]
        assert log_dir["error"] is None
        assert Path(log_dir["logDir"]).resolve() == dirs[entry["broker"]].resolve()
        sizes = {p["partition"]: p for p in log_dir["partitions"]}
        assert set(sizes) == {f"{topic}-0", f"{topic}-1"}
        assert sizes[f"{topic}-0"]["size"] > 1000  # ten 100-byte values and their batch overhead
        assert sizes[f"{topic}-1"]["size"] == 0
        assert all(p["offsetLag"] == 0 and p["isFuture"] is False for p in sizes.values())


def test_kafka_dump_log_reads_segment_index_and_timeindex(bootstrap, broker, make_topic) -> None:
    if broker is None:
        pytest.skip("kafka-dump-log reads the broker's segment files: needs a broker this run started")
    # 1 MiB segments (Kafka's minimum segment.bytes) and an index entry every 4 KiB: 1.5 MiB of records
    # roll the first segment, whose .index and .timeindex are then complete and trimmed.
    topic = make_topic(configs={"segment.bytes": "1048576", "index.interval.bytes": "4096"})
    values = [(0, f"record-{i:05d}-".encode() + b"v" * 1000, f"k{i}".encode()) for i in range(1500)]
    # Batches of 4 records (~4 KiB): the broker indexes batches, so small ones give many index entries.
    _produce(bootstrap, topic, values, **{"batch.num.messages": 4})
    # The leader's copy (a cluster's followers roll their own segments).
    partition_dir = data_dirs(broker, bootstrap)[partition_leader(bootstrap, topic)[0]] / f"{topic}-0"
    first = partition_dir / "00000000000000000000"
    wait_for(lambda: len(list(partition_dir.glob("*.log"))) >= 2, timeout_s=60, what="a second segment")
    files = [first.with_suffix(s) for s in (".log", ".index", ".timeindex")]
    for path in files:
        assert path.exists(), (
            f"{path.name} missing; directory holds {sorted(p.name for p in partition_dir.iterdir())}"
        )
    # The active segment's .log as well: the records go on there, offsets continuing.
    files += sorted(set(partition_dir.glob("*.log")) - {files[0]})

    dumped = run_tool(
        "kafka-dump-log",
        "--deep-iteration",
        "--print-data-log",
        "--files",
        ",".join(str(f) for f in files),
        timeout_s=TOOL_TIMEOUT_S,
    ).check()
    text = dumped.stdout
    assert "Exception" not in text + dumped.stderr, dumped.stderr[-3000:]
    assert "mismatch" not in text.lower()
    batches = re.findall(
        r"^baseOffset: (\d+) lastOffset: (\d+) count: (\d+).*isvalid: (\w+)", text, re.MULTILINE
    )
    assert batches and all(valid == "true" for *_, valid in batches)
    records = re.findall(
        r"^\| offset: (\d+) CreateTime: \d+ keySize: \d+ valueSize: \d+ .* key: (k\d+) payload: (record-\d+)",
        text,
        re.MULTILINE,
    )
    assert len(records) >= 500
    for offset, key, payload in records:
        assert key == f"k{offset}" and payload == f"record-{int(offset):05d}"
    assert [int(o) for o, _, _ in records] == list(range(len(records)))
    index_entries = re.findall(r"^offset: (\d+) position: (\d+)$", text, re.MULTILINE)
    assert len(index_entries) >= 100, "the offset index has an entry every 4 KiB of a 1 MiB segment"
    time_entries = re.findall(r"^timestamp: (\d+) offset: (\d+)$", text, re.MULTILINE)
    assert time_entries, "the time index has entries"
    assert int(time_entries[-1][1]) <= len(records) - 1


def test_kafka_streams_groups_list_describe_and_delete(bootstrap, make_topic, unique_topic) -> None:
    """kafka-streams-groups (KIP-1071) on a streams group made with raw StreamsGroupHeartbeats."""
    source = make_topic(partitions=2)
    group = f"{unique_topic}-streams"
    streams_coordinator_ready(bootstrap, group)
    member = str(uuid.uuid4())
    joined = join_once_source_is_seen(bootstrap, group, member, word_count_topology(group, source))
    every = {(s, p) for s in ("0", "1") for p in range(2)}
    epoch, owned = heartbeat_until(
        bootstrap, group, member, joined["member_epoch"], set(), lambda o: o == every
    )
    # The member commits (OffsetCommit v9 with its member id and epoch, as Kafka Streams does).
    committed = group_call(
        bootstrap,
        group,
        8,
        9,
        {
            "group_id": group,
            "generation_id_or_member_epoch": epoch,
            "member_id": member,
            "group_instance_id": None,
            "topics": [
                {
                    "name": source,
                    "partitions": [
                        {
                            "partition_index": 0,
                            "committed_offset": 0,
                            "committed_leader_epoch": -1,
                            "committed_metadata": "",
                        }
                    ],
                }
            ],
        },
    )
    assert committed["topics"][0]["partitions"][0]["error_code"] == 0, committed
    common = ["--bootstrap-server", bootstrap, "--group", group]

    listed = run_tool("kafka-streams-groups", "--bootstrap-server", bootstrap, "--list").check().stdout
    assert group in listed.split()
    # --describe: the offsets and lag of every partition the topology reads (source and repartition).
    rows = parse_table(run_tool("kafka-streams-groups", *common, "--describe").check().stdout, "GROUP")
    repartition = f"{group}-words-repartition"
    assert {(r["TOPIC"], r["PARTITION"], r["OFFSET-LAG"]) for r in rows} == {
        (t, str(p), "0") for t in (source, repartition) for p in (0, 1)
    }
    state = parse_table(
        run_tool("kafka-streams-groups", *common, "--describe", "--state").check().stdout, "GROUP"
    )
    assert [(r["STATE"], r["#MEMBERS"]) for r in state] == [("Stable", "1")]
    members = run_tool("kafka-streams-groups", *common, "--describe", "--members").check().stdout
    (line,) = [row for row in members.splitlines() if member in row]
    assert line.split()[1:4] == [member, line.split()[2], "compat"]
    assert line.split("ACTIVE:")[1].split() == ["0:[0,1];", "1:[0,1];"]

    # Not while it has a member; once the member left, the group goes.
    refused = run_tool("kafka-streams-groups", *common, "--delete")
    assert "was successful" not in refused.stdout
    assert heartbeat(bootstrap, group, member, -1)["error_code"] == 0
    deleted = run_tool("kafka-streams-groups", *common, "--delete").check()
    assert f"Deletion of requested streams groups ('{group}') was successful." in deleted.stdout
    listed = run_tool("kafka-streams-groups", "--bootstrap-server", bootstrap, "--list").check().stdout
    assert group not in listed.split()
