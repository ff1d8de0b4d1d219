"""End-to-end check of the Java compat client against real Apache Kafka (not part of the pytest run).

    python -m compat_tests.java.check_against_apache_kafka [--bootstrap HOST:PORT]

Without ``--bootstrap`` it starts Apache Kafka with the reference launcher in a temporary directory.
Every command of the jar runs at least once, every codec is produced and read back, and each
result is asserted; it exits non-zero on the first mismatch.  Point ``--bootstrap`` at pybroker to
run the same checks against it.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
import uuid
from pathlib import Path

from compat_tests.clients.base import ClientError, Record
from compat_tests.clients.java import JavaClient, ensure_jar
from compat_tests.reference.apache_kafka import ApacheKafka

logger = logging.getLogger("check_against_apache_kafka")

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def recent_ms(seconds_ago: int = 600) -> int:
    """A record timestamp inside retention: Kafka's retention check (every 5 minutes, 30 s after
    start) deletes even the active segment once every record in it is older than retention.ms, so
    fixed timestamps from years ago vanish mid-run."""
    return int(time.time() * 1000) - seconds_ago * 1000


def expect(condition: bool, what: str) -> None:
    if not condition:
        raise AssertionError(what)
    logger.info("ok: %s", what)


def expect_equal(got: object, want: object, what: str) -> None:
    expect(got == want, f"{what}: got {got!r}, want {want!r}" if got != want else what)


def expect_error(kafka_error: str, action) -> None:  # noqa: ANN001
    try:
        action()
    except ClientError as error:
        expect_equal(error.error, kafka_error, f"error ({error.native}: {error.detail})")
        return
    raise AssertionError(f"expected {kafka_error}, got success")


def sample_records(base_ts: int) -> list[Record]:
    return [
        Record(b"k0", b"v0", (("h1", b"x"), ("h1", None), ("h2", b"\x00\xff")), base_ts, 0),
        Record(None, b"value with null key", (), base_ts + 1, 0),
        Record(b"tombstone", None, (), base_ts + 2, 0),
        Record(b"", b"", (("empty", b""),), base_ts + 3, 0),
        Record(b"big", bytes(range(256)) * 400, (), base_ts + 4, 0),
    ]


def check_produce_consume(client: JavaClient, bootstrap: str) -> None:
    for codec in CODECS:
        for idempotent in (False, True):
            topic = f"java-{codec}-{'idem' if idempotent else 'plain'}-{uuid.uuid4().hex[:6]}"
            client.create_topic(bootstrap, topic, partitions=1)
            base_ts = recent_ms()
            records = sample_records(base_ts)
            deliveries = client.produce(
                bootstrap, topic, records, compression=codec, idempotent=idempotent, acks="all"
            )
            expect(
                [d.offset for d in deliveries] == list(range(len(records))),
                f"{topic}: offsets 0..{len(records) - 1}",
            )
            expect(
                [d.timestamp_ms for d in deliveries] == [r.timestamp_ms for r in records],
                f"{topic}: CreateTime echoed",
            )
            consumed = client.consume(bootstrap, topic, 0, start="beginning", count=len(records))
            got = [(c.offset, c.key, c.value, c.headers, c.timestamp_ms, c.timestamp_type) for c in consumed]
            want = [
                (i, r.key, r.value, r.headers, r.timestamp_ms, "CreateTime") for i, r in enumerate(records)
            ]
            for got_one, want_one in zip(got, want, strict=False):
                expect_equal(got_one, want_one, f"{topic}: record {want_one[0]} read back byte for byte")
            expect_equal(len(got), len(want), f"{topic}: {len(want)} records read back")


def check_acks_and_positions(client: JavaClient, bootstrap: str) -> None:
    topic = f"java-acks-{uuid.uuid4().hex[:6]}"
    client.create_topic(bootstrap, topic, partitions=1)
    one = client.produce(bootstrap, topic, [Record(b"a", b"1")], acks="1")
    expect_equal(one[0].offset, 0, "acks=1 returns offset 0")
    zero = client.produce(bootstrap, topic, [Record(b"b", b"2")], acks="0")
    expect_equal(zero[0].offset, -1, "acks=0 returns offset -1 (no response)")
    # acks=0 gives no acknowledgement: wait on the log end offset rather than on time.
    deadline = time.monotonic() + 30
    while client.list_offsets(bootstrap, topic, 0, "latest").offset < 2:
        expect(time.monotonic() < deadline, "acks=0 record became visible")
    later = client.consume(bootstrap, topic, 0, start=1, count=1)
    expect_equal([c.value for c in later], [b"2"], "consume from an explicit offset")
    nothing = client.consume(bootstrap, topic, 0, start="end", count=1, timeout_s=2)
    expect_equal(nothing, [], "consume from end returns nothing within the timeout")


def check_time_lookups(client: JavaClient, bootstrap: str) -> None:
    topic = f"java-time-{uuid.uuid4().hex[:6]}"
    client.create_topic(bootstrap, topic, partitions=1)
    base = recent_ms()
    client.produce(bootstrap, topic, [Record(None, b"t", timestamp_ms=base + 1000 * i) for i in range(3)])
    expect_equal(
        client.offset_for_time(bootstrap, topic, 0, base + 500), 1, "offsetsForTimes(between 0 and 1)"
    )
    expect(
        client.offset_for_time(bootstrap, topic, 0, base + 99_999) is None,
        "offsetsForTimes past the end is None",
    )
    expect_equal(client.list_offsets(bootstrap, topic, 0, "earliest").offset, 0, "list-offsets earliest")
    expect_equal(client.list_offsets(bootstrap, topic, 0, "latest").offset, 3, "list-offsets latest")
    max_ts = client.list_offsets(bootstrap, topic, 0, "max-timestamp")
    expect_equal((max_ts.offset, max_ts.timestamp_ms), (2, base + 2000), "list-offsets max-timestamp")
    expect_equal(client.list_offsets(bootstrap, topic, 0, base + 1000).offset, 1, "list-offsets by timestamp")
    expect_equal(
        client.list_offsets(bootstrap, topic, 0, base + 99_999).offset, -1, "list-offsets past the end is -1"
    )
    expect_equal(client.delete_records(bootstrap, topic, 0, 2), 2, "delete-records low watermark")
    expect(
        client.list_offsets(bootstrap, topic, 0, "earliest").offset == 2, "earliest follows delete-records"
    )
    log_append = f"java-lat-{uuid.uuid4().hex[:6]}"
    client.create_topic(bootstrap, log_append, configs={"message.timestamp.type": "LogAppendTime"})
    client.produce(bootstrap, log_append, [Record(None, b"x", timestamp_ms=recent_ms())])
    (record,) = client.consume(bootstrap, log_append, 0, start="beginning", count=1)
    expect(
        record.timestamp_type == "LogAppendTime" and record.timestamp_ms > recent_ms(60),
        "LogAppendTime topic stamps time",
    )


def check_admin(client: JavaClient, bootstrap: str) -> None:
    topic = f"java-admin-{uuid.uuid4().hex[:6]}"
    client.create_topic(bootstrap, topic, partitions=2, configs={"retention.ms": "3600000"})
    expect(topic in client.list_topics(bootstrap), "list-topics shows the new topic")
    expect_error("TOPIC_ALREADY_EXISTS", lambda: client.create_topic(bootstrap, topic))
    detail = client.describe_topic_detailed(bootstrap, topic)
    expect_equal(len(detail["partitions"]), 2, "describe-topic partitions")
    expect(detail["partitions"][0]["leader"] is not None, "describe-topic leader")
    expect_equal(client.describe_topic(bootstrap, topic).partitions, 2, "describe_topic partitions")
    configs = client.describe_configs_detailed(bootstrap, topic)
    expect_equal(configs["retention.ms"]["value"], "3600000", "describe-configs value")
    expect_equal(configs["retention.ms"]["source"], "DYNAMIC_TOPIC_CONFIG", "describe-configs source")
    expect(configs["segment.bytes"]["source"] != "DYNAMIC_TOPIC_CONFIG", "describe-configs default source")
    client.alter_configs(bootstrap, topic, {"cleanup.policy": "compact"}, delete=["retention.ms"])
    configs = client.describe_configs(bootstrap, topic)
    expect_equal(configs["cleanup.policy"], "compact", "alter-configs SET")
    expect_equal(configs["retention.ms"], "604800000", "alter-configs DELETE reverts to the default")
    client.create_partitions(bootstrap, topic, 3)
    expect_equal(client.describe_topic(bootstrap, topic).partitions, 3, "create-partitions")
    expect_error("INVALID_PARTITIONS", lambda: client.create_partitions(bootstrap, topic, 2))
    cluster = client.describe_cluster(bootstrap)
    expect_equal(len(cluster["nodes"]), 1, "describe-cluster nodes")
    expect(bool(cluster["cluster_id"]), "describe-cluster cluster id")
    client.delete_topic(bootstrap, topic)
    expect_error("UNKNOWN_TOPIC_OR_PARTITION", lambda: client.delete_topic(bootstrap, topic))
    expect_error("UNKNOWN_TOPIC_OR_PARTITION", lambda: client.describe_topic(bootstrap, "no-such-topic"))


def run_checks(bootstrap: str) -> None:
    client = JavaClient()
    for check in (check_admin, check_time_lookups, check_acks_and_positions, check_produce_consume):
        started = time.monotonic()
        check(client, bootstrap)
        logger.info("%s passed in %.1fs", check.__name__, time.monotonic() - started)


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", help="run against this broker instead of a fresh Apache Kafka")
    args = parser.parse_args()
    ensure_jar()
    if args.bootstrap:
        run_checks(args.bootstrap)
        return 0
    with tempfile.TemporaryDirectory(prefix="apache-kafka-") as workdir, ApacheKafka(Path(workdir)) as kafka:
        run_checks(kafka.bootstrap)
    return 0


if __name__ == "__main__":
    sys.exit(main())
