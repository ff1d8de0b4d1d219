"""KIP-534 on a compacted transactional topic, through real clients: the log cleaner removes the
transaction markers whose transaction has no record left, and the tombstones, once their delete
horizon has passed, in Kafka's two passes.

A transactional producer (confluent-kafka) commits a=a1,b=b1, aborts c=c1, then commits a=a2 and a
tombstone for b, on a topic with ``cleanup.policy=compact``, a small ``delete.retention.ms``,
``segment.ms`` and ``min.cleanable.dirty.ratio``.  Each cleaning round is driven by one plain record
("filler", always the same key, raw Produce) produced after ``segment.ms``: it rolls the segment, so the log has
something new to clean (a round never cleans the active segment).  Observed with raw Fetch requests
(every batch: markers, emptied batches, the delete-horizon attribute bit):

- round 1: the aborted and the superseded records go; both markers stay as they are (their
  transactions' batches were still there in this round); the tombstone's batch is stamped;
- round 2: the two markers now have no batch of their transaction left: they are stamped with
  their delete horizon (round 2's time + delete.retention.ms), not removed;
- round 3, past that horizon: they are gone, and so is the tombstone; the last transaction's COMMIT
  stays (its record a2 is still there).

read_committed and read_uncommitted consumers then see exactly the same records.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from pybroker.records import iter_batch_headers, read_records
from pybroker.records.batch import DELETE_HORIZON_MASK
from pybroker.records.builder import SimpleRecord, build_batch
from pybroker.records.control import ABORT, COMMIT, control_type

from .test_newest_versions import NONE, PRODUCE, call, to_partition_leader

LEDGER_COLUMN = "confluent"
FETCH = 1
SEGMENT_MS = 1000
DELETE_RETENTION_MS = 3000
# A cleaning round is at most log.cleaner.backoff.ms (15 s by default, on both brokers) away.
ROUND_TIMEOUT_S = 60


def fetch_batches(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    """Every batch of partition 0 from offset 0, read_uncommitted: what a dump of the log shows (the
    leader's log: a consumer's Fetch goes to the partition's leader)."""
    out: list[dict[str, Any]] = []
    offset = 0
    while True:
        body = {
            "replica_id": -1,
            "max_wait_ms": 0,
            "min_bytes": 0,
            "max_bytes": 1 << 20,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {
                    "topic": topic,
                    "partitions": [
                        {
                            "partition": 0,
                            "current_leader_epoch": -1,
                            "fetch_offset": offset,
                            "last_fetched_epoch": -1,
                            "log_start_offset": -1,
                            "partition_max_bytes": 1 << 20,
                        }
                    ],
                }
            ],
            "forgotten_topics_data": [],
            "rack_id": "",
        }
        answer = to_partition_leader(
            bootstrap,
            topic,
            lambda leader, body=body: call(leader, FETCH, 12, body),
            lambda answer: answer["responses"][0]["partitions"][0]["error_code"],
        )
        part = answer["responses"][0]["partitions"][0]
        assert part["error_code"] == NONE, part
        data = part["records"] or b""
        headers = [h for h in iter_batch_headers(data) if h.base_offset + h.last_offset_delta >= offset]
        for h in headers:
            chunk = data[h.position : h.end_position]
            kind = "data"
            if h.is_control:
                kind = {COMMIT: "COMMIT", ABORT: "ABORT"}.get(control_type(chunk), "control")  # type: ignore[arg-type]
            out.append(
                {
                    "base": h.base_offset,
                    "kind": kind,
                    "horizon": bool(h.attributes & DELETE_HORIZON_MASK),
                    "records": []
                    if h.is_control
                    else [(r.offset, r.key, r.value) for r in read_records(chunk) if r.offset >= offset],
                }
            )
        if not headers or headers[-1].next_offset >= part["high_watermark"]:
            return out
        offset = headers[-1].next_offset


def markers(batches: list[dict[str, Any]]) -> dict[int, tuple[str, bool]]:
    return {b["base"]: (b["kind"], b["horizon"]) for b in batches if b["kind"] != "data"}


def data_records(batches: list[dict[str, Any]]) -> list[tuple[int, bytes | None, bytes | None]]:
    return [r for b in batches if b["kind"] == "data" for r in b["records"]]


def consume_all(bootstrap: str, topic: str, isolation: str) -> list[tuple[int, bytes | None, bytes | None]]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex[:8]}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        got: list[tuple[int, bytes | None, bytes | None]] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == -191:  # _PARTITION_EOF: everything read
                    return got
                continue
            got.append((msg.offset(), msg.key(), msg.value()))
        raise AssertionError(f"{isolation} consumer never reached the end of {topic}: {got}")
    finally:
        consumer.close()


def produce_plain(bootstrap: str, topic: str, key: bytes, value: bytes) -> int:
    """One plain record (no producer id), acks=all, to the partition's leader; its offset."""
    body = {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 30000,
        "topic_data": [
            {"name": topic, "partition_data": [{"index": 0, "records": build_batch([SimpleRecord(key, value)])}]}
        ],
    }
    answer = to_partition_leader(
        bootstrap,
        topic,
        lambda leader: call(leader, PRODUCE, 9, body),
        lambda answer: answer["responses"][0]["partition_responses"][0]["error_code"],
    )
    part = answer["responses"][0]["partition_responses"][0]
    assert part["error_code"] == NONE, part
    return part["base_offset"]


class Rounds:
    """Drives the cleaner one round at a time: a "filler" record (always the same key) produced
    after segment.ms rolls the segment, so the log has something new to clean."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.fillers: list[int] = []

    def next(self) -> None:
        time.sleep(SEGMENT_MS / 1000 + 0.3)
        self.fillers.append(produce_plain(self.bootstrap, self.topic, b"filler", b"%d" % (len(self.fillers) + 1)))

    def wait(self, done: Any, what: str) -> list[dict[str, Any]]:
        return wait_for_round(self.bootstrap, self.topic, done, what)


COMPACTED = {
    "cleanup.policy": "compact",
    "delete.retention.ms": str(DELETE_RETENTION_MS),
    "min.cleanable.dirty.ratio": "0.01",
    "segment.ms": str(SEGMENT_MS),
}


def wait_for_round(
    bootstrap: str, topic: str, done: Any, what: str
) -> list[dict[str, Any]]:
    deadline = time.monotonic() + ROUND_TIMEOUT_S
    while True:
        batches = fetch_batches(bootstrap, topic)
        if done(batches):
            return batches
        assert time.monotonic() < deadline, f"{what} never happened: {batches}"
        time.sleep(0.5)


def test_markers_and_tombstones_go_past_the_delete_horizon(bootstrap: str, make_topic) -> None:
    topic = make_topic(configs=COMPACTED)
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"kip534-{uuid.uuid4().hex[:8]}", "linger.ms": 5}
    )
    producer.init_transactions(30)
    for pairs, commit in (
        ([(b"a", b"a1"), (b"b", b"b1")], True),
        ([(b"c", b"c1")], False),
        ([(b"a", b"a2"), (b"b", None)], True),
    ):
        producer.begin_transaction()
        for key, value in pairs:
            producer.produce(topic, key=key, value=value, partition=0)
        producer.flush(30)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    before = fetch_batches(bootstrap, topic)
    assert [(o, k, v) for o, k, v in data_records(before)] == [
        (0, b"a", b"a1"),
        (1, b"b", b"b1"),
        (3, b"c", b"c1"),
        (5, b"a", b"a2"),
        (6, b"b", None),
    ]
    assert markers(before) == {2: ("COMMIT", False), 4: ("ABORT", False), 7: ("COMMIT", False)}

    rounds = Rounds(bootstrap, topic)
    fillers = rounds.fillers

    # Round 1: the aborted c1 and the superseded a1, b1 go; the markers stay as they are; the
    # tombstone is stamped with its delete horizon.
    rounds.next()
    batches = rounds.wait(lambda bs: (3, b"c", b"c1") not in data_records(bs), "round 1")
    assert data_records(batches) == [(5, b"a", b"a2"), (6, b"b", None), (fillers[0], b"filler", b"1")]
    assert markers(batches) == {2: ("COMMIT", False), 4: ("ABORT", False), 7: ("COMMIT", False)}
    assert [b["horizon"] for b in batches if (6, b"b", None) in b["records"]] == [True]
    assert consume_all(bootstrap, topic, "read_committed") == data_records(batches)

    # Round 2: the first two markers have no batch of their transaction left: stamped, not removed.
    rounds.next()
    batches = rounds.wait(lambda bs: markers(bs).get(2) == ("COMMIT", True), "round 2")
    assert markers(batches) == {2: ("COMMIT", True), 4: ("ABORT", True), 7: ("COMMIT", False)}

    # Round 3, past their horizon: the two markers and the tombstone are gone; the last COMMIT stays.
    time.sleep(DELETE_RETENTION_MS / 1000 + 0.5)
    rounds.next()
    batches = rounds.wait(lambda bs: 2 not in markers(bs), "round 3")
    assert markers(batches) == {7: ("COMMIT", False)}
    expected = [(5, b"a", b"a2"), (fillers[1], b"filler", b"2"), (fillers[2], b"filler", b"3")]
    assert data_records(batches) == expected
    assert consume_all(bootstrap, topic, "read_committed") == expected
    assert consume_all(bootstrap, topic, "read_uncommitted") == expected
