"""A full log directory (issue 12, case 4), for real: the broker's log dir is a 32 MiB tmpfs the
test mounts (root; CI runs as root) and fills.

Found by operator testing: with the disk full, producers had their connection closed with no error
code and an "internal error" traceback, and deleting a topic to free space failed because the
metadata write also hit ENOSPC. Kafka answers KAFKA_STORAGE_ERROR (and then takes the directory
offline — with one log dir, the broker shuts down). pybroker stays up and loses nothing: appends are
answered KAFKA_STORAGE_ERROR (logged once per cause, not per request), reads go on, DeleteRecords
and DeleteTopics still work (the metadata store gives up a reserve file to record a deletion), and
writes resume once space returns.
"""

from __future__ import annotations

import errno
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from compat_tests.brokers import PyBroker
from pybroker.protocol.errors import ErrorCode
from pybroker.records.builder import SimpleRecord, build_batch
from pybroker.records.reader import read_records
from tests.wire import WireClient

MiB = 1024 * 1024
PRODUCE, FETCH, DELETE_RECORDS, CREATE_TOPICS, DELETE_TOPICS = 0, 1, 21, 19, 20
STORAGE_ERROR_LINE = "storage error in log directory"

pytestmark = pytest.mark.timeout(240)


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), capture_output=True, text=True)


@pytest.fixture
def small_log_dir(tmp_path: Path) -> Iterator[Path]:
    """A 32 MiB file system of its own at <tmp>/data: tmpfs, else a loop-mounted ext4 image."""
    mount_point = tmp_path / "data"
    mount_point.mkdir()
    tried = _run("mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", str(mount_point))
    if tried.returncode != 0:
        image = tmp_path / "fs.img"
        with open(image, "wb") as f:
            f.truncate(32 * MiB)
        loop = _run("mkfs.ext4", "-q", "-F", str(image))
        if loop.returncode == 0:
            loop = _run("mount", "-o", "loop", str(image), str(mount_point))
        if loop.returncode != 0:
            pytest.fail(
                "cannot mount a small file system for the log dir (needs root): "
                f"tmpfs: {tried.stderr.strip()}; loop: {loop.stderr.strip()}"
            )
    try:
        yield mount_point
    finally:
        if _run("umount", str(mount_point)).returncode != 0:
            _run("umount", "-l", str(mount_point))


def fill(directory: Path) -> Path:
    """Write a file until the file system refuses another byte."""
    path = directory / "filler.bin"
    chunk = bytes(MiB)
    with open(path, "wb", buffering=0) as f:
        for size in (MiB, 64 * 1024, 4096, 512, 1):
            while True:
                try:
                    f.write(chunk[:size])
                except OSError as e:
                    assert e.errno == errno.ENOSPC, e
                    break
    return path


def produce(client: WireClient, topic: str, value: bytes, records: int = 1) -> dict:
    batch = build_batch([SimpleRecord(b"k", value, timestamp_ms=int(time.time() * 1000)) for _ in range(records)])
    body = {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 10000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}],
    }
    return client.request(PRODUCE, 8, body)["responses"][0]["partition_responses"][0]


def fetch_values(client: WireClient, topic: str, offset: int) -> list[bytes]:
    body = {
        "replica_id": -1,
        "max_wait_ms": 0,
        "min_bytes": 1,
        "max_bytes": 4 * MiB,
        "isolation_level": 0,
        "topics": [
            {"topic": topic, "partitions": [{"partition": 0, "fetch_offset": offset, "partition_max_bytes": 4 * MiB}]}
        ],
    }
    part = client.request(FETCH, 11, body)["responses"][0]["partitions"][0]
    assert part["error_code"] == 0, part
    return [r.value for r in read_records(bytes(part["records"] or b""))]


def create_topic(client: WireClient, topic: str) -> None:
    body = {
        "topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}],
        "timeout_ms": 10000,
        "validate_only": False,
    }
    assert client.request(CREATE_TOPICS, 5, body)["topics"][0]["error_code"] == 0


def test_full_log_dir_is_answered_survived_and_freed(small_log_dir: Path, tmp_path: Path) -> None:
    broker = PyBroker(
        tmp_path,
        overrides={
            "log.segment.bytes": str(MiB),
            "log.retention.check.interval.ms": "200",
            "log.segment.delete.delay.ms": "0",
            "offsets.topic.num.partitions": "1",
            "auto.create.topics.enable": "false",
        },
    )
    assert broker.data_dir == small_log_dir
    bootstrap = broker.start()
    try:
        with WireClient(bootstrap) as client:
            create_topic(client, "keep")
            create_topic(client, "bulk")
            acked_keep = []
            r = produce(client, "keep", b"before")
            assert r["error_code"] == 0
            acked_keep.append(b"before")

            # Fill the disk through the broker until appends are refused: an error code, not a close.
            value = b"B" * (256 * 1024)
            acked_bulk = 0
            for _ in range(200):
                r = produce(client, "bulk", value)
                if r["error_code"] != 0:
                    break
                acked_bulk += 1
            assert r["error_code"] == ErrorCode.KAFKA_STORAGE_ERROR, r
            assert "No space left on device" in (r["error_message"] or ""), r
            assert acked_bulk > 50
            filler = fill(small_log_dir)  # not one byte left, not even for a small metadata write

            # Every append is refused the same way, the connection stays, and it is logged once.
            for i in range(20):
                topic = "keep" if i % 2 else "bulk"
                # (more than a page: tmpfs would still take a few bytes into a file's last page)
                assert produce(client, topic, b"x" * 8192)["error_code"] == ErrorCode.KAFKA_STORAGE_ERROR
            log_text = broker.log_text()
            assert log_text.count(STORAGE_ERROR_LINE) == 1, broker.log_tail()
            assert "internal error" not in log_text and "Traceback" not in log_text, broker.log_tail()

            # A group's offset commit (a write to __consumer_offsets) gets an error code too, never a
            # closed connection (NOT_COORDINATOR, as Kafka maps a KAFKA_STORAGE_ERROR append; it may
            # also fit into the tail of a page tmpfs already holds).
            body = {
                "group_id": "g",
                "generation_id_or_member_epoch": -1,
                "member_id": "",
                "retention_time_ms": -1,
                "topics": [
                    {
                        "name": "keep",
                        "partitions": [
                            {"partition_index": 0, "committed_offset": 1, "committed_metadata": "m" * 4000}
                        ],
                    }
                ],
            }
            committed = client.request(8, 2, body)["topics"][0]["partitions"][0]
            assert committed["error_code"] in (0, ErrorCode.NOT_COORDINATOR), committed

            # Reads are still served.
            assert fetch_values(client, "keep", 0) == acked_keep
            assert fetch_values(client, "bulk", 0)[0] == value

            # DeleteRecords frees whole segments on a full disk; then writes resume.
            body = {"topics": [{"name": "bulk", "partitions": [{"partition_index": 0, "offset": acked_bulk}]}], "timeout_ms": 10000}
            deleted = client.request(DELETE_RECORDS, 1, body)["topics"][0]["partitions"][0]
            assert deleted["error_code"] == 0 and deleted["low_watermark"] == acked_bulk, deleted
            r = produce(client, "keep", b"after-delete-records")
            assert r["error_code"] == 0, r
            acked_keep.append(b"after-delete-records")
            assert "writes again" in broker.log_text()

            # Full again: DeleteTopics still succeeds (the metadata write uses the reserve) ...
            os.unlink(filler)
            filler = fill(small_log_dir)
            assert produce(client, "keep", b"x" * 8192)["error_code"] == ErrorCode.KAFKA_STORAGE_ERROR
            body = {"topic_names": ["bulk"], "timeout_ms": 10000}
            assert client.request(DELETE_TOPICS, 4, body)["responses"][0]["error_code"] == 0
            # ... and once its files are purged, writes resume.
            deadline = time.monotonic() + 30
            while True:
                r = produce(client, "keep", b"after-delete-topic")
                if r["error_code"] == 0 or time.monotonic() > deadline:
                    break
                time.sleep(0.2)  # waiting for the retention task to purge the deleted topic
            assert r["error_code"] == 0, r
            acked_keep.append(b"after-delete-topic")
        os.unlink(filler)
        # Nothing acknowledged is lost, the deletion is durable, and nothing was an internal error.
        broker.restart()
        with WireClient(bootstrap) as client:
            assert fetch_values(client, "keep", 0) == acked_keep
            body = {"topics": [{"name": "bulk"}], "allow_auto_topic_creation": False}
            topics = client.request(3, 9, body)["topics"]
            assert topics[0]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        log_text = broker.log_text()
        assert "internal error" not in log_text and "Traceback" not in log_text, broker.log_tail()
    finally:
        broker.stop()

