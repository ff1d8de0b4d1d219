"""Drive Kafka Streams' word count (compat_tests/streams, kafka-streams 4.3.1 unmodified) from Python.

One ``WordCountInstance`` is one JVM running the topology; ``stop()`` closes it cleanly (it commits
what it processed), ``kill()`` is kill -9.  The helpers around it make the input, compute the counts
the output must reach, and read the output and the internal topics back with read_committed.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import struct
import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from confluent_kafka import Consumer, IsolationLevel, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from compat_tests.reference.maven import build_lock, run_maven

logger = logging.getLogger(__name__)

PROJECT = Path(__file__).resolve().parent
JAR = PROJECT / "target" / "streams-wordcount.jar"
TIMEOUT_S = 60.0
# Java's \W without UNICODE_CHARACTER_CLASS: everything but [a-zA-Z0-9_].
WORD_SPLIT = re.compile(r"\W+", re.ASCII)
WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliett kilo lima".split()


def ensure_jar() -> Path:
    """Build the jar if missing or older than its sources (scripts/install-deps.sh streams-client)."""
    with build_lock("streams-wordcount"):
        sources = [PROJECT / "pom.xml", *(p for p in (PROJECT / "src").rglob("*") if p.is_file())]
        if not JAR.exists() or any(p.stat().st_mtime > JAR.stat().st_mtime for p in sources):
            run_maven(PROJECT, ["package", "-DskipTests"])
    return JAR


def sentences(count: int, seed: int = 7) -> list[str]:
    """A fixed, reproducible set of sentences with a skewed word distribution and some punctuation."""
    out = []
    for i in range(count):
        n = 3 + (i * seed) % 6
        words = [WORDS[(i * (j + 1) + j * j) % len(WORDS)] for j in range(n)]
        if i % 5 == 0:
            words[0] = words[0].capitalize()
        out.append(" ".join(words) + ("." if i % 3 == 0 else ", indeed!"))
    return out


def expected_counts(lines: list[str]) -> dict[str, int]:
    """What the topology computes: lower-case words split on non-word characters, counted."""
    return dict(Counter(w for line in lines for w in WORD_SPLIT.split(line.lower()) if w))


def produce_lines(bootstrap: str, topic: str, lines: list[str], first_index: int = 0) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for i, line in enumerate(lines, start=first_index):
        producer.produce(topic, key=b"line-%d" % i, value=line.encode())
    assert producer.flush(TIMEOUT_S) == 0, "the input was not all acknowledged"


def read_topic(bootstrap: str, topic: str, partitions: int, settle_s: float = 1.0) -> list[tuple[bytes, bytes]]:
    """Every record visible to read_committed now, partition by partition, each in offset order."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"wc-reader-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got: dict[int, list[tuple[bytes, bytes]]] = {p: [] for p in range(partitions)}
        at_eof: set[int] = set()
        deadline = time.monotonic() + TIMEOUT_S
        quiet_since = time.monotonic()
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                if len(at_eof) == partitions and time.monotonic() - quiet_since > settle_s:
                    break
                continue
            if msg.error():
                if msg.error().code() != KafkaError._PARTITION_EOF:
                    raise AssertionError(f"reading {topic}: {msg.error()}")
                at_eof.add(msg.partition())
                continue
            at_eof.discard(msg.partition())
            got[msg.partition()].append((msg.key(), msg.value()))
            quiet_since = time.monotonic()
        else:
            raise AssertionError(f"reading {topic}: no end after {TIMEOUT_S}s")
        return [kv for p in range(partitions) for kv in got[p]]
    finally:
        consumer.close()


def count_sequences(records: list[tuple[bytes, bytes]]) -> dict[str, list[int]]:
    """Per word, the counts in the order the output carries them (one word lives in one partition)."""
    seqs: dict[str, list[int]] = {}
    for key, value in records:
        # The last 8 bytes: the output's Long serde, and the changelog's value (a timestamped
        # store's changelog carries the plain value too; taking the tail is robust either way).
        seqs.setdefault(key.decode(), []).append(struct.unpack(">q", value[-8:])[0])
    return seqs


class WordCountInstance:
    """One Kafka Streams JVM running the word count."""

    def __init__(
        self,
        bootstrap: str,
        *,
        application_id: str,
        input_topic: str,
        output_topic: str,
        state_dir: Path,
        guarantee: str,
        log_path: Path,
        group_protocol: str = "classic",
    ) -> None:
        argv = ["java", "-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]
        # STREAMS_LOG_LEVEL=info (or debug) for Kafka Streams' own account of a run; warn by default.
        argv += [f"-Dorg.slf4j.simpleLogger.defaultLogLevel={os.environ.get('STREAMS_LOG_LEVEL', 'warn')}"]
        argv += ["-jar", str(ensure_jar())]
        argv += ["--bootstrap", bootstrap, "--application-id", application_id, "--input", input_topic]
        argv += ["--output", output_topic, "--state-dir", str(state_dir), "--guarantee", guarantee]
        argv += ["--group-protocol", group_protocol]
        self.log_path = log_path
        self._log: IO[str] = open(log_path, "a")  # noqa: SIM115 - closed in stop()/kill()
        self.process = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, text=True
        )
        self.states: list[str] = []
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read_events, daemon=True)
        self._reader.start()

    def _read_events(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            try:
                event: dict[str, Any] = json.loads(line)
            except ValueError:
                continue
            with self._changed:
                if event.get("event") == "state":
                    self.states.append(event["state"])
                self._changed.notify_all()

    def wait_running(self, timeout_s: float = TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while not self.states or self.states[-1] != "RUNNING":
                left = deadline - time.monotonic()
                if left <= 0 or self.process.poll() is not None:
                    raise AssertionError(f"Kafka Streams not RUNNING (states {self.states}); {self.log_tail()}")
                self._changed.wait(min(left, 0.5))

    def stop(self, timeout_s: float = TIMEOUT_S + 30) -> int:
        """Close cleanly ("stop" on stdin); returns the exit status (0: closed in time)."""
        try:
            assert self.process.stdin is not None
            self.process.stdin.write("stop\n")
            self.process.stdin.flush()
        except (BrokenPipeError, OSError):
            pass
        try:
            return self.process.wait(timeout_s)
        finally:
            self.kill()

    def kill(self) -> None:
        """kill -9 (by pid) if it still runs."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(30)
        self._log.close()

    def log_tail(self, lines: int = 40) -> str:
        self._log.flush()
        text = self.log_path.read_text(errors="replace").splitlines()
        return "Kafka Streams log tail:\n" + "\n".join(text[-lines:])


def wait_for_counts(bootstrap: str, topic: str, partitions: int, want: dict[str, int], timeout_s: float) -> None:
    """Until every word's latest count in the output reaches ``want``."""
    deadline = time.monotonic() + timeout_s
    while True:
        latest = {w: s[-1] for w, s in count_sequences(read_topic(bootstrap, topic, partitions, 0.3)).items()}
        if all(latest.get(w, 0) >= n for w, n in want.items()):
            return
        if time.monotonic() > deadline:
            short = {w: (latest.get(w), n) for w, n in want.items() if latest.get(w, 0) < n}
            raise AssertionError(f"output counts still short after {timeout_s}s (got, want): {short}")
        time.sleep(0.5)  # poll interval; the deadline bounds the wait


def repartition_log_starts(bootstrap: str, application_id: str, partitions: int) -> list[int]:
    client = AdminClient({"bootstrap.servers": bootstrap})  # referenced until its futures resolve
    tps = [TopicPartition(f"{application_id}-words-repartition", p) for p in range(partitions)]
    earliest = client.list_offsets({tp: OffsetSpec.earliest() for tp in tps})
    return [earliest[tp].result(TIMEOUT_S).offset for tp in tps]


def wait_for_purge(bootstrap: str, application_id: str, partitions: int, timeout_s: float) -> None:
    """Until the running instance has purged (DeleteRecords) every repartition partition. Streams purges
    a partition at a commit, once repartition.purge.interval.ms has passed, up to what it consumed: a
    partition whose last records were processed just before the instance stopped may be purged at a
    commit that never comes, on any broker. Waiting while it runs makes the check deterministic."""
    deadline = time.monotonic() + timeout_s
    while True:
        starts = repartition_log_starts(bootstrap, application_id, partitions)
        if all(start > 0 for start in starts):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"repartition topic not purged after {timeout_s}s: log start offsets {starts}")
        time.sleep(0.5)  # poll interval; the deadline bounds the wait


@dataclass
class WordCountRun:
    sequences: dict[str, list[int]]  # per word, its counts in the output as read_committed sees them
    killed_in_flight: bool  # the first instance was killed with output not yet committed (run_word_count)


def output_ends(bootstrap: str, topic: str, partitions: int) -> tuple[list[int], list[int]]:
    """(high watermarks, last stable offsets) of the topic's partitions."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    tps = [TopicPartition(topic, p) for p in range(partitions)]

    def ends(level: IsolationLevel) -> list[int]:
        result = admin.list_offsets({tp: OffsetSpec.latest() for tp in tps}, isolation_level=level)
        return [result[tp].result(TIMEOUT_S).offset for tp in tps]

    return ends(IsolationLevel.READ_UNCOMMITTED), ends(IsolationLevel.READ_COMMITTED)


def run_word_count(
    bootstrap: str,
    admin: Any,
    workdir: Path,
    *,
    guarantee: str,
    input_topic: str,
    output_topic: str,
    partitions: int,
    lines: list[str],
    while_running: Callable[[], None] | None = None,
) -> WordCountRun:
    """The word count through a kill -9 of its instance.  The first 30% of ``lines`` go in and an
    instance runs until the output holds their counts.  With ``while_running`` (e.g. a broker
    restart), more lines go in, a few at a time, up to 50%, and it runs as soon as the instance has
    output it has not committed (see below); the instance must then go on to count everything
    produced so far.  Then more lines go in the same way, up to 70%, and the instance is killed -9 as
    soon as it has uncommitted output: under exactly_once_v2 an open transaction on an output
    partition (high watermark past the last stable offset), under at_least_once output past what was
    there before.  The rest of the lines go in and a second instance (same state directory, so the
    same process id and transactional ids) runs until the output reaches the expected counts and
    closes cleanly."""
    application_id = f"wc-{guarantee.replace('_', '-')}-{uuid.uuid4().hex[:8]}"
    want = expected_counts(lines)
    common: dict[str, Any] = {
        "application_id": application_id,
        "input_topic": input_topic,
        "output_topic": output_topic,
        "state_dir": workdir / "state",
        "guarantee": guarantee,
        "log_path": workdir / "streams.log",
    }
    produced = len(lines) * 3 // 10
    produce_lines(bootstrap, input_topic, lines[:produced])
    first = WordCountInstance(bootstrap, **common)

    def counted_so_far(timeout_s: float) -> None:
        try:
            wait_for_counts(bootstrap, output_topic, partitions, expected_counts(lines[:produced]), timeout_s)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; {first.log_tail()}") from None

    def until_in_flight(limit: int) -> bool:
        """Produce lines 10 at a time (up to ``limit``) until the instance has uncommitted output."""
        nonlocal produced
        settled = sum(output_ends(bootstrap, output_topic, partitions)[0])
        while produced < limit:
            chunk = lines[produced : min(produced + 10, limit)]
            produce_lines(bootstrap, input_topic, chunk, first_index=produced)
            produced += len(chunk)
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                high, stable = output_ends(bootstrap, output_topic, partitions)
                if guarantee == "exactly_once_v2":
                    if any(h > s for h, s in zip(high, stable, strict=True)):
                        return True
                elif sum(high) > settled:
                    return True
        return False

    in_flight = False
    try:
        first.wait_running()
        counted_so_far(TIMEOUT_S)
        if while_running is not None:
            assert until_in_flight(len(lines) // 2), "no uncommitted output to restart the broker under"
            while_running()
            # The instance rides through it (under EOS: its open transaction is completed or aborted,
            # and redone) and counts everything so far.
            counted_so_far(TIMEOUT_S * 2)
        in_flight = until_in_flight(len(lines) * 7 // 10)
    finally:
        first.kill()
    produce_lines(bootstrap, input_topic, lines[produced:], first_index=produced)
    second = WordCountInstance(bootstrap, **common)
    try:
        second.wait_running(TIMEOUT_S * 2)
        try:
            wait_for_counts(bootstrap, output_topic, partitions, want, TIMEOUT_S * 2)
            wait_for_purge(bootstrap, application_id, partitions, TIMEOUT_S)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; {second.log_tail()}") from None
        status = second.stop()
        assert status == 0, f"the second instance did not close cleanly (exit {status}); {second.log_tail()}"
    finally:
        second.kill()
    check_internal_topics(bootstrap, admin, application_id, partitions, guarantee, want)
    return WordCountRun(count_sequences(read_topic(bootstrap, output_topic, partitions)), in_flight)


def check_internal_topics(
    bootstrap: str, admin: Any, application_id: str, partitions: int, guarantee: str, want: dict[str, int]
) -> None:
    """Streams created its repartition topic (delete policy) and its changelog (compacted), each with
    the input's partition count, and the changelog holds the counts (exactly them under EOS)."""
    repartition = f"{application_id}-words-repartition"
    changelog = f"{application_id}-counts-changelog"
    assert admin.describe_topic(bootstrap, repartition).partitions == partitions
    assert admin.describe_topic(bootstrap, changelog).partitions == partitions
    # The configs Streams creates them with (RepartitionTopicConfig, UnwindowedUnversionedChangelogTopicConfig).
    repartition_configs = admin.describe_configs(bootstrap, repartition)
    assert repartition_configs["cleanup.policy"] == "delete"
    assert repartition_configs["retention.ms"] == "-1"
    assert repartition_configs["message.timestamp.type"] == "CreateTime"
    changelog_configs = admin.describe_configs(bootstrap, changelog)
    assert changelog_configs["cleanup.policy"] == "compact"
    assert changelog_configs["message.timestamp.type"] == "CreateTime"
    # The repartition topic carried the words, and Streams purged (DeleteRecords) what it committed.
    starts = repartition_log_starts(bootstrap, application_id, partitions)
    assert all(start > 0 for start in starts), f"repartition topic not purged: log start offsets {starts}"
    stored = {w: s[-1] for w, s in count_sequences(read_topic(bootstrap, changelog, partitions)).items()}
    if guarantee == "exactly_once_v2":
        assert stored == want
    else:
        assert set(stored) == set(want) and all(stored[w] >= n for w, n in want.items())
