"""__consumer_offsets through a real (in-process) Broker: creation, partitioning, replay, compaction."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

from pybroker.broker import Broker
from pybroker.config import BrokerConfig
from pybroker.coordinator.compaction import CompactionTask
from pybroker.coordinator.offsets_topic import TOPIC, java_string_hash, partition_for
from pybroker.protocol.errors import ErrorCode


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_config(data: Path, port: int) -> BrokerConfig:
    return BrokerConfig(
        {
            "listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "log.dirs": str(data),
            "offsets.topic.num.partitions": "3",
        },
        event_loop="asyncio",
    )


def test_java_hash_and_partition_match_kafka() -> None:
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("") == 0
    assert java_string_hash("polygenelubricants") == -(2**31)  # Integer.MIN_VALUE: Utils.abs gives 0
    assert partition_for("polygenelubricants", 50) == 0
    assert partition_for("my-group", 50) == abs(java_string_hash("my-group")) % 50


def commit(broker: Broker, group: str, offset: int, topic: str = "t") -> None:
    coordinator = broker.group_coordinator
    assert coordinator is not None
    errors, wait = coordinator.commit_offsets(
        group_id=group,
        generation_id=-1,
        member_id="",
        group_instance_id=None,
        retention_time_ms=-1,
        offsets=[(topic, 0, offset, -1, f"m{offset}")],
    )
    assert wait is None and errors == {(topic, 0): ErrorCode.NONE}


def test_offsets_survive_restart_and_compaction(tmp_path: Path) -> None:
    async def run() -> None:
        port = free_port()
        broker = Broker(make_config(tmp_path, port))
        await broker.start()
        try:
            rec = broker.topic(TOPIC)
            assert rec is not None and rec.internal and rec.partitions == 3
            assert rec.configs["cleanup.policy"] == "compact"
            # OffsetCommit only accepts offsets of existing topics (and the coordinator drops a
            # missing topic's offsets at start-up), so the committed topic exists.
            broker.create_topic("t", 1, {})
            for i in range(50):
                commit(broker, "g1", i)
            commit(broker, "g2", 7)
            # The group's records all went to its partition.
            p = broker.partition(TOPIC, partition_for("g1", 3))
            assert p is not None and p.log_end_offset >= 50
            p.log.roll(0)
            commit(broker, "g1", 50)
            removed = await CompactionTask(broker.coordinator_services).run_once_in_thread()  # as the broker runs it
            assert removed >= 49
            assert broker.group_coordinator.delete_groups(["g2"])[0] == [("g2", ErrorCode.NONE)]
        finally:
            await broker.stop()

        broker = Broker(make_config(tmp_path, port))
        await broker.start()
        try:
            coordinator = broker.group_coordinator
            _, found = coordinator.fetch_offsets("g1", [("t", [0])])
            om = found[0][1][0][1]
            assert (om.offset, om.metadata) == (50, "m50")
            assert "g2" not in coordinator.groups
        finally:
            await broker.stop()

    asyncio.run(run())


def test_replay_reads_chunks_that_end_inside_a_batch(tmp_path: Path, monkeypatch) -> None:
    """Replay reads the offsets partition in byte-limited chunks; a chunk that ends inside a batch must not
    fail the load (it once raised CorruptRecordError once a partition outgrew one 4 MiB chunk)."""
    from pybroker.coordinator import offsets_topic

    async def run() -> None:
        port = free_port()
        broker = Broker(make_config(tmp_path, port))
        await broker.start()
        try:
            broker.create_topic("t", 1, {})
            for i in range(40):
                commit(broker, "g1", i)
        finally:
            await broker.stop()
        # Small chunks: almost every read now ends inside a batch.
        monkeypatch.setattr(offsets_topic, "READ_CHUNK_BYTES", 150)
        broker = Broker(make_config(tmp_path, port))
        await broker.start()
        try:
            _, found = broker.group_coordinator.fetch_offsets("g1", [("t", [0])])
            om = found[0][1][0][1]
            assert (om.offset, om.metadata) == (39, "m39")
        finally:
            await broker.stop()

    asyncio.run(run())
