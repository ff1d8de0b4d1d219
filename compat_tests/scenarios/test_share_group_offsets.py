"""A share group's offsets as a user manages them (KIP-932): Apache Kafka 4.3.1's own ``kafka-share-groups``
tool (ShareGroupCommand, over the Admin client's listShareGroupOffsets / alterShareGroupOffsets /
deleteShareGroupOffsets / deleteShareGroups) against the broker under test, with Kafka's
``KafkaShareConsumer`` consuming between the commands.

The broker runs with the share-group settings of ``test_share_groups`` (on a cluster run, a 3-node cluster of
the kind under test with those settings, topics with RF 3). The group coordinator answers the three offsets
APIs through the share coordinators that keep the share-partition state (in a cluster, possibly on other
brokers). Each case starts its groups from the earliest offset (``share.auto.offset.reset=earliest``).

START-OFFSET is the start offset of the share partition's last state write (WriteShareGroupState), which
Apache Kafka's SharePartition makes with the start offset it had before the change it writes: records it
acknowledged stay in that state, counted as delivered (LAG is the high watermark - START-OFFSET - those
records). So after records 0-3 are accepted one acknowledgement each, START-OFFSET is 3 (LAG 0); after one
acknowledgement of 0-4, 0. A partition of a subscribed topic the group has never written state for is
listed with "-" (the group initialized it when an assignment covered its topic).
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Iterator
from datetime import datetime

import pytest

from compat_tests.kafka_tools import ToolResult, parse_table, run_tool
from compat_tests.scenarios.support import CLUSTER_BROKERS, started_bootstrap, wait_for
from compat_tests.scenarios.test_share_groups import ShareConsumer, _java, _launcher, produce

TOOL_TIMEOUT_S = 180


@pytest.fixture(scope="module")
def share_bootstrap(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from started_bootstrap(request, tmp_path_factory.mktemp("share-offsets"), _launcher)


@pytest.fixture
def consumers() -> Iterator[list[ShareConsumer]]:
    started: list[ShareConsumer] = []
    yield started
    for c in started:
        c.stop()


@pytest.fixture
def make_topic(request: pytest.FixtureRequest, share_bootstrap: str) -> Iterator[object]:
    rf = "3" if request.config.getoption("--broker") in CLUSTER_BROKERS else "1"

    def make(partitions: int = 1) -> str:
        topic = f"sgo-{uuid.uuid4().hex[:8]}"
        _java("create-topic", "--bootstrap", share_bootstrap, "--topic", topic, "--partitions", str(partitions),
              "--replication-factor", rf)  # fmt: skip
        return topic

    yield make


def _group(bootstrap: str) -> str:
    group = f"sgo-g-{uuid.uuid4().hex[:8]}"
    _java("alter-configs", "--bootstrap", bootstrap, "--group", group, "--set", "share.auto.offset.reset=earliest")
    return group


def _tool(bootstrap: str, group: str, *args: str) -> ToolResult:
    return run_tool("kafka-share-groups", "--bootstrap-server", bootstrap, "--group", group, *args,
                    timeout_s=TOOL_TIMEOUT_S)  # fmt: skip


def _consume_accept(bootstrap: str, topic: str, group: str, consumers: list[ShareConsumer], count: int) -> list[int]:
    """A share consumer accepts ``count`` records, one by one, then leaves the group (its other records
    are released). The offsets it accepted, in delivery order."""
    c = ShareConsumer(bootstrap, topic, group)
    consumers.append(c)
    got = []
    for _ in range(count):
        offset, _delivery, _value = c.next_record()
        got.append(offset)
        c.acknowledge("accept")
    c.stop()
    return got


def _offsets(bootstrap: str, group: str) -> dict[tuple[str, int], tuple[str, str]]:
    """``--describe --offsets``: (topic, partition) -> (START-OFFSET, LAG)."""
    out = _tool(bootstrap, group, "--describe", "--offsets").check().stdout
    return {(r["TOPIC"], int(r["PARTITION"])): (r["START-OFFSET"], r["LAG"]) for r in parse_table(out, "GROUP")}


def _reset(bootstrap: str, group: str, *args: str) -> dict[tuple[str, int], str]:
    """``--reset-offsets ...``: (topic, partition) -> NEW-OFFSET."""
    out = _tool(bootstrap, group, "--reset-offsets", *args).check().stdout
    return {(r["TOPIC"], int(r["PARTITION"])): r["NEW-OFFSET"] for r in parse_table(out, "GROUP")}


def _delete_offsets(bootstrap: str, group: str, *topics: str) -> tuple[str, dict[str, str]]:
    """``--delete-offsets``: the tool's output and, from its table, topic -> STATUS."""
    args = [a for t in topics for a in ("--topic", t)]
    out = _tool(bootstrap, group, "--delete-offsets", *args).check().stdout
    rows = {}
    for line in out.splitlines():
        topic, _, status = line.partition(" ")
        if topic in topics:
            rows[topic] = status.strip()
    return out, rows


def _wait_empty(bootstrap: str, group: str) -> None:
    """The consumer left: the group is Empty (the tool refuses to reset a group that is not)."""
    wait_for(
        lambda: "Empty" in _tool(bootstrap, group, "--describe", "--state").check().stdout,
        timeout_s=60,
        what=f"share group {group} to be empty",
    )


def _listed(bootstrap: str) -> set[str]:
    return set(run_tool("kafka-share-groups", "--bootstrap-server", bootstrap, "--list").check().stdout.split())


def test_describe_offsets_after_consuming_part_of_a_topic(
    share_bootstrap: str, make_topic, consumers: list[ShareConsumer]
) -> None:
    topic = make_topic()
    group = _group(share_bootstrap)
    produce(share_bootstrap, topic, [f"v{i}" for i in range(5)])
    assert _consume_accept(share_bootstrap, topic, group, consumers, 3) == [0, 1, 2]
    _wait_empty(share_bootstrap, group)
    # the first three accepted: the share partition starts at 3, two records are left to deliver
    assert _offsets(share_bootstrap, group) == {(topic, 0): ("3", "2")}
    verbose = _tool(share_bootstrap, group, "--describe", "--offsets", "--verbose").check().stdout
    [row] = parse_table(verbose, "GROUP")
    assert (row["TOPIC"], row["PARTITION"], row["START-OFFSET"], row["LAG"]) == (topic, "0", "3", "2")
    assert int(row["LEADER-EPOCH"]) >= 0
    # the next consumer starts where the first stopped
    c = ShareConsumer(share_bootstrap, topic, group)
    consumers.append(c)
    # the first consumer had acquired 3 and 4 too (one fetch) and released them when it closed: a second
    # delivery at least (a share consumer's background fetches may have acquired them again meanwhile)
    offset, delivery, value = c.next_record()
    assert (offset, value) == (3, "v3") and delivery >= 2


def test_reset_to_earliest_and_latest_then_a_consumer_starts_there(
    share_bootstrap: str, make_topic, consumers: list[ShareConsumer]
) -> None:
    topic = make_topic()
    group = _group(share_bootstrap)
    produce(share_bootstrap, topic, ["a", "b", "c", "d"])
    assert _consume_accept(share_bootstrap, topic, group, consumers, 4) == [0, 1, 2, 3]
    _wait_empty(share_bootstrap, group)
    # the last acknowledgement (of 3) was written with the start offset before it
    assert _offsets(share_bootstrap, group) == {(topic, 0): ("3", "0")}

    # a dry run shows the new offsets and changes nothing
    assert _reset(share_bootstrap, group, "--to-earliest", "--topic", topic, "--dry-run") == {(topic, 0): "0"}
    assert _offsets(share_bootstrap, group) == {(topic, 0): ("3", "0")}
    assert _reset(share_bootstrap, group, "--to-earliest", "--topic", topic, "--execute") == {(topic, 0): "0"}
    assert _offsets(share_bootstrap, group) == {(topic, 0): ("0", "4")}
    # every record again, each on a first delivery (the reset started the share partition afresh)
    c = ShareConsumer(share_bootstrap, topic, group)
    consumers.append(c)
    for offset, value in enumerate(["a", "b", "c", "d"]):
        assert c.next_record() == (offset, 1, value)
        c.acknowledge("accept")
    c.stop()
    _wait_empty(share_bootstrap, group)

    produce(share_bootstrap, topic, ["e", "f"])
    assert _offsets(share_bootstrap, group) == {(topic, 0): ("3", "2")}
    assert _reset(share_bootstrap, group, "--to-latest", "--all-topics", "--execute") == {(topic, 0): "6"}
    assert _offsets(share_bootstrap, group) == {(topic, 0): ("6", "0")}
    later = ShareConsumer(share_bootstrap, topic, group)
    consumers.append(later)
    produce(share_bootstrap, topic, ["g"])
    assert later.next_record() == (6, 1, "g")  # e and f were skipped


def _control(bootstrap: str, topic: str, group: str, consumers: list[ShareConsumer], answers: list[str]) -> list[tuple[int, int]]:
    """A share consumer answers each record it is given with the next of ``answers`` (accept, release or
    reject, each acknowledged and committed at once; ``stop``: leave, releasing what it holds); the
    (offset, delivery count) of each record it was given."""
    c = ShareConsumer(bootstrap, topic, group)
    consumers.append(c)
    given = []
    for answer in answers:
        offset, delivery, _value = c.next_record()
        given.append((offset, delivery))
        if answer == "stop":
            break
        c.acknowledge(answer)
    c.stop()
    _wait_empty(bootstrap, group)
    return given


def test_start_offset_is_the_one_the_last_state_write_carried(
    share_bootstrap: str, make_topic, consumers: list[ShareConsumer]
) -> None:
    b = share_bootstrap
    # accepted and rejected one by one: the last write (accepting 4) carried start offset 4
    topic, group = make_topic(), _group(b)
    produce(b, topic, [f"v{i}" for i in range(5)])
    answers = ["accept", "reject", "accept", "accept", "accept"]
    assert _control(b, topic, group, consumers, answers) == [(0, 1), (1, 1), (2, 1), (3, 1), (4, 1)]
    assert _offsets(b, group) == {(topic, 0): ("4", "0")}

    # 1 released, 2-4 accepted: the start offset stays at 1 and 2-4 count as delivered; 1 comes again and
    # goes back when the consumer leaves (lag 1) ...
    topic, group = make_topic(), _group(b)
    produce(b, topic, [f"v{i}" for i in range(5)])
    answers = ["accept", "release", "accept", "accept", "accept", "stop"]
    assert _control(b, topic, group, consumers, answers) == [(0, 1), (1, 1), (2, 1), (3, 1), (4, 1), (1, 2)]
    assert _offsets(b, group) == {(topic, 0): ("1", "1")}
    # ... and once accepted, the write that accepted it still carried start offset 1
    assert _control(b, topic, group, consumers, ["accept"]) == [(1, 3)]
    assert _offsets(b, group) == {(topic, 0): ("1", "0")}

    # implicit acknowledgement: the five records of one poll accepted by one acknowledgement at start offset 0
    topic, group = make_topic(), _group(b)
    produce(b, topic, [f"v{i}" for i in range(5)])
    c = ShareConsumer(b, topic, group, ack="implicit")
    consumers.append(c)
    assert [c.next_record()[:2] for _ in range(5)] == [(i, 1) for i in range(5)]
    c.stop()
    _wait_empty(b, group)
    assert _offsets(b, group) == {(topic, 0): ("0", "0")}
    # two more records, on the next consumer's first poll: a write at start offset 5
    produce(b, topic, ["v5", "v6"])
    c = ShareConsumer(b, topic, group, ack="implicit")
    consumers.append(c)
    assert [c.next_record()[:2] for _ in range(2)] == [(5, 1), (6, 1)]
    c.stop()
    _wait_empty(b, group)
    assert _offsets(b, group) == {(topic, 0): ("5", "0")}


def _produce_to(bootstrap: str, topic: str, partition: int, values: list[str]) -> list[int]:
    lines = "".join(json.dumps({"value": base64.b64encode(v.encode()).decode(), "partition": partition}) + "\n" for v in values)
    return [d["offset"] for d in _java("produce", "--bootstrap", bootstrap, "--topic", topic, stdin=lines)]


def test_every_partition_of_a_subscribed_topic_is_listed(
    share_bootstrap: str, make_topic, consumers: list[ShareConsumer]
) -> None:
    topic, group = make_topic(3), _group(share_bootstrap)
    assert _produce_to(share_bootstrap, topic, 1, ["a", "b"]) == [0, 1]
    assert _produce_to(share_bootstrap, topic, 2, ["x"]) == [0]
    given = _control(share_bootstrap, topic, group, consumers, ["accept"] * 3)
    assert sorted(given) == [(0, 1), (0, 1), (1, 1)]
    # partition 0 has no record: never written, it has no start offset yet, but it is the group's
    assert _offsets(share_bootstrap, group) == {(topic, 0): ("-", "-"), (topic, 1): ("1", "0"), (topic, 2): ("0", "0")}
    verbose = _tool(share_bootstrap, group, "--describe", "--offsets", "--verbose").check().stdout
    rows = {r["PARTITION"]: (r["LEADER-EPOCH"], r["START-OFFSET"], r["LAG"]) for r in parse_table(verbose, "GROUP")}
    assert rows["0"] == ("-", "-", "-")
    # a topic the group subscribes to with no record at all: every partition listed without offsets
    empty, group = make_topic(2), _group(share_bootstrap)
    c = ShareConsumer(share_bootstrap, empty, group)
    consumers.append(c)
    wait_for(
        lambda: len(_offsets(share_bootstrap, group)) == 2, timeout_s=60, what="the subscribed topic's partitions listed"
    )
    c.stop()
    _wait_empty(share_bootstrap, group)
    assert _offsets(share_bootstrap, group) == {(empty, 0): ("-", "-"), (empty, 1): ("-", "-")}


def test_reset_to_datetime(share_bootstrap: str, make_topic, consumers: list[ShareConsumer]) -> None:
    topic = make_topic()
    group = _group(share_bootstrap)
    produce(share_bootstrap, topic, ["old0", "old1", "old2"])
    time.sleep(1.5)
    cut = datetime.now()  # the tool reads a datetime without a zone in the local zone, as this is
    time.sleep(1.5)
    produce(share_bootstrap, topic, ["new3", "new4"])
    assert _consume_accept(share_bootstrap, topic, group, consumers, 1) == [0]
    _wait_empty(share_bootstrap, group)
    stamp = cut.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]
    assert _reset(share_bootstrap, group, "--to-datetime", stamp, "--topic", topic, "--execute") == {(topic, 0): "3"}
    assert _offsets(share_bootstrap, group) == {(topic, 0): ("3", "2")}
    c = ShareConsumer(share_bootstrap, topic, group)
    consumers.append(c)
    assert c.next_record() == (3, 1, "new3")


def test_refused_while_a_member_is_active(share_bootstrap: str, make_topic, consumers: list[ShareConsumer]) -> None:
    topic = make_topic()
    group = _group(share_bootstrap)
    produce(share_bootstrap, topic, ["a"])
    c = ShareConsumer(share_bootstrap, topic, group)
    consumers.append(c)
    assert c.next_record() == (0, 1, "a")
    c.acknowledge("accept")  # the member stays, polling, holding no record
    # the broker refuses to delete the offsets of a group with a member (NON_EMPTY_GROUP) ...
    deleted = _tool(share_bootstrap, group, "--delete-offsets", "--topic", topic).check().stdout
    assert "Error: The group is not empty." in deleted
    # ... and the tool itself refuses to reset it or delete it
    reset = _tool(share_bootstrap, group, "--reset-offsets", "--to-earliest", "--topic", topic, "--execute")
    assert reset.returncode != 0 and f"Share group '{group}' is not empty." in reset.stderr
    removed = _tool(share_bootstrap, group, "--delete").check().stdout
    assert f"Share group '{group}' is not EMPTY." in removed
    c.stop()
    _wait_empty(share_bootstrap, group)
    # nothing changed: the accepted record stays accepted (deleted offsets would start again at earliest)
    assert _offsets(share_bootstrap, group) == {(topic, 0): ("0", "0")}
    produce(share_bootstrap, topic, ["b"])
    again = ShareConsumer(share_bootstrap, topic, group)
    consumers.append(again)
    assert again.next_record() == (1, 1, "b")


def test_delete_offsets_of_one_topic_then_the_group(
    share_bootstrap: str, make_topic, consumers: list[ShareConsumer]
) -> None:
    first, second, untouched = make_topic(), make_topic(), make_topic()
    group = _group(share_bootstrap)
    produce(share_bootstrap, first, ["x0", "x1"])
    produce(share_bootstrap, second, ["y0", "y1"])
    assert _consume_accept(share_bootstrap, first, group, consumers, 2) == [0, 1]
    assert _consume_accept(share_bootstrap, second, group, consumers, 1) == [0]
    _wait_empty(share_bootstrap, group)
    # second: y1 was released when the consumer left, a write at start offset 1
    assert _offsets(share_bootstrap, group) == {(first, 0): ("1", "0"), (second, 0): ("1", "1")}

    out, status = _delete_offsets(share_bootstrap, group, first)
    assert status == {first: "Successful"}, out
    assert _offsets(share_bootstrap, group) == {(second, 0): ("1", "1")}
    # a topic the group has no state for, and one that does not exist
    missing = f"sgo-missing-{uuid.uuid4().hex[:8]}"
    out, status = _delete_offsets(share_bootstrap, group, untouched, missing)
    assert status == {
        untouched: "Error: There is no offset information to delete.",
        missing: "Error: This server does not host this topic-partition.",
    }, out
    # the first topic's share partition starts afresh, at share.auto.offset.reset (earliest)
    c = ShareConsumer(share_bootstrap, first, group)
    consumers.append(c)
    assert c.next_record() == (0, 1, "x0")
    c.acknowledge("accept")
    c.stop()
    _wait_empty(share_bootstrap, group)

    assert group in _listed(share_bootstrap)
    removed = _tool(share_bootstrap, group, "--delete").check().stdout
    assert f"Deletion of requested share groups ('{group}') was successful." in removed
    assert group not in _listed(share_bootstrap)
    gone = _tool(share_bootstrap, group, "--describe", "--offsets")
    assert f"GroupIdNotFoundException: Group {group} not found." in gone.stdout


def test_unknown_group(share_bootstrap: str, make_topic) -> None:
    topic = make_topic()
    produce(share_bootstrap, topic, ["u0", "u1"])
    group = f"sgo-none-{uuid.uuid4().hex[:8]}"
    described = _tool(share_bootstrap, group, "--describe", "--offsets").check().stdout
    assert f"GroupIdNotFoundException: Group {group} not found." in described
    out, status = _delete_offsets(share_bootstrap, group, topic)
    assert f"Error: Group {group} not found." in out
    assert status == {topic: f"Error: Group {group} not found."}
    assert group not in _listed(share_bootstrap)
    # resetting the offsets of a group that does not exist makes it, empty, with those offsets
    assert _reset(share_bootstrap, group, "--to-latest", "--topic", topic, "--execute") == {(topic, 0): "2"}
    assert group in _listed(share_bootstrap)
    assert _offsets(share_bootstrap, group) == {(topic, 0): ("2", "0")}
    removed = _tool(share_bootstrap, group, "--delete").check().stdout
    assert f"Deletion of requested share groups ('{group}') was successful." in removed
