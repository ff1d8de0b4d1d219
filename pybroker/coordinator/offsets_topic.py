"""``__consumer_offsets`` as the coordinator's store: creation, group -> partition, append, replay.

Records are appended as the partition leader (as Kafka's coordinator does) and answered once the
high watermark covers them (acks=all).  At start-up every partition is replayed in offset order.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Iterator
from typing import TYPE_CHECKING

from pybroker.records.batch import iter_batch_headers
from pybroker.records.builder import SimpleRecord, build_batch
from pybroker.records.reader import read_records

if TYPE_CHECKING:
    from pybroker.broker import Broker
    from pybroker.coordinator.compaction import CompactionTask

log = logging.getLogger(__name__)

TOPIC = "__consumer_offsets"
# What Kafka gives the topic (GroupCoordinator.offsetsTopicConfigs).
TOPIC_CONFIGS = {"cleanup.policy": "compact", "compression.type": "producer", "segment.bytes": "104857600"}
READ_CHUNK_BYTES = 4 * 1024 * 1024


def java_string_hash(s: str) -> int:
    """java.lang.String.hashCode over UTF-16 code units, as a signed 32-bit int."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(group_id: str, partitions: int) -> int:
    """Kafka's Utils.abs(groupId.hashCode) % partitions (Utils.abs maps MIN_VALUE to 0)."""
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


class OffsetsTopic:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.num_partitions = broker.config.offsets_topic_num_partitions
        self._cleaner_task: CompactionTask | None = None

    def ensure_topic(self) -> None:
        rec = self.broker.topic(TOPIC)
        if rec is None:
            rec = self.broker.create_topic(TOPIC, self.num_partitions, dict(TOPIC_CONFIGS))
            assert rec is not None
            log.info("created %s with %d partitions", TOPIC, self.num_partitions)
        if not rec.internal:
            rec.internal = True
            self.broker.metadata.save()
        # Fixed once created (offsets.topic.num.partitions only applies to a new topic).
        self.num_partitions = rec.partitions

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    def append(self, group_id: str, entries: list[tuple[bytes, bytes | None]]) -> Awaitable[None] | None:
        if not entries:
            return None
        p = self.broker.partition(TOPIC, self.partition_for(group_id))
        if p is None and self.broker.topic(TOPIC) is None:
            self.ensure_topic()  # deleted by an admin: groups keep working on a new one
            p = self.broker.partition(TOPIC, self.partition_for(group_id))
        if p is None:
            raise RuntimeError(f"{TOPIC} partition for group {group_id} is not open")
        now_ms = int(time.time() * 1000)
        buf = bytearray(build_batch([SimpleRecord(k, v, timestamp_ms=now_ms) for k, v in entries]))
        info = p.append_as_leader(buf, list(iter_batch_headers(buf)), now_ms)
        return p.wait_replicated(info.last_offset)

    def replay(self) -> Iterator[tuple[bytes, bytes | None]]:
        """Every (key, value) of every partition, each partition in offset order."""
        for index in range(self.num_partitions):
            p = self.broker.partition(TOPIC, index)
            if p is None:
                continue
            offset = p.log_start_offset
            end = p.log_end_offset
            while offset < end:
                file_slice = p.log.read(offset, READ_CHUNK_BYTES, end)
                if file_slice is None:
                    break
                data = file_slice.read()
                headers = list(iter_batch_headers(data))
                if not headers:
                    break
                for r in read_records(data):
                    if r.offset >= offset and r.key is not None:
                        yield r.key, r.value
                # A compacted batch keeps its last offset even when its last records are gone.
                offset = max(headers[-1].last_offset + 1, offset + 1)

    # -- compaction -----------------------------------------------------------------------------------
    def start_cleaner(self) -> None:
        from pybroker.coordinator.compaction import CompactionTask

        self._cleaner_task = CompactionTask(self.broker)
        self._cleaner_task.start()

    def stop_cleaner(self) -> None:
        if self._cleaner_task is not None:
            self._cleaner_task.stop()
            self._cleaner_task = None
