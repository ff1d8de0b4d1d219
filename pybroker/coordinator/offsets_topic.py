"""``__consumer_offsets`` as the coordinator's store: creation, group -> partition, append, replay.

The same machinery (``InternalTopic``) keeps the transaction coordinator's ``__transaction_state``.

Records are appended as the partition leader (as Kafka's coordinator does) and answered once the
high watermark covers them (acks=all).  At start-up every partition is replayed in offset order.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from pybroker.protocol.errors import ErrorCode
from pybroker.records.batch import iter_batch_headers, whole_batches
from pybroker.records.builder import SimpleRecord, build_batch
from pybroker.records.control import COMMIT, control_type
from pybroker.records.reader import decode_batch_records

if TYPE_CHECKING:
    from pybroker.coordinator.compaction import CompactionTask
    from pybroker.coordinator.services import CoordinatorServices

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


class InternalTopic:
    """A compacted internal topic a coordinator keeps its state in (``__consumer_offsets``,
    ``__transaction_state``): created on first start, keyed to a partition by a Java string hash,
    written as the partition leader and replayed in offset order.

    Records written inside a transaction (TxnOffsetCommit's offsets) are replayed only once their
    COMMIT marker is met, and dropped at an ABORT marker; those still open at the end of the log are
    left in ``open_transactions`` (producer id -> records) for the coordinator to hold as pending."""

    def __init__(
        self, services: CoordinatorServices, name: str, num_partitions: int, configs: dict[str, str]
    ) -> None:
        self.services = services
        self.name = name
        self.num_partitions = num_partitions
        self.configs = configs
        self.open_transactions: dict[int, list[tuple[bytes, bytes | None]]] = {}
        # False in cluster mode: the topic is created through ZooKeeper, never by this broker alone.
        self.local_creation = True
        self.last_append = (-1, -1)  # (partition, offset) of the last record appended

    def ensure_topic(self) -> None:
        rec = self.services.topic(self.name)
        if rec is None:
            rec = self.services.create_topic(self.name, self.num_partitions, dict(self.configs))
            assert rec is not None
            log.info("created %s with %d partitions", self.name, self.num_partitions)
        if not rec.internal:
            self.services.mark_internal(self.name)
        # Fixed once created (the num.partitions setting only applies to a new topic).
        self.num_partitions = rec.partitions

    def partition_for(self, key: str) -> int:
        return partition_for(key, self.num_partitions)

    def exists(self) -> bool:
        rec = self.services.topic(self.name)
        if rec is not None:
            self.num_partitions = rec.partitions
        return rec is not None

    def delete_records_before(self, index: int, offset: int) -> None:
        """Move a partition's log start offset up to ``offset`` (at most its high watermark), as the leader
        (the share coordinator prunes the records its snapshots made redundant)."""
        p = self.services.partition(self.name, index)
        if p is None or not p.is_leader:
            return
        offset = min(offset, p.high_watermark)
        if offset > p.log_start_offset:
            p.log.delete_records_before(offset)

    def leads(self, key: str) -> bool:
        """Whether this broker leads ``key``'s partition (and so coordinates the key)."""
        p = self.services.partition(self.name, self.partition_for(key))
        return p is not None and p.is_leader

    def append(
        self,
        key: str,
        entries: list[tuple[bytes, bytes | None]],
        *,
        producer_id: int = -1,
        producer_epoch: int = -1,
    ) -> Awaitable[ErrorCode] | None:
        """Append ``entries`` to ``key``'s partition; a producer id makes it a transactional batch.
        None when it is replicated already; else what the replication ends with (Partition.wait_replicated)."""
        if not entries:
            return None
        p = self.services.partition(self.name, self.partition_for(key))
        if p is None and self.local_creation and self.services.topic(self.name) is None:
            self.ensure_topic()  # deleted by an admin: the coordinator keeps working on a new one
            p = self.services.partition(self.name, self.partition_for(key))
        if p is None:
            raise RuntimeError(f"{self.name} partition for {key} is not open")
        now_ms = int(time.time() * 1000)
        buf = bytearray(
            build_batch(
                [SimpleRecord(k, v, timestamp_ms=now_ms) for k, v in entries],
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                is_transactional=producer_id >= 0,
            )
        )
        info = p.append_as_leader(buf, list(iter_batch_headers(buf)), now_ms)
        self.last_append = (p.index, info.last_offset)
        return p.wait_replicated(info.last_offset)

    def replay(
        self, partitions: Iterable[int] | None = None, at: Callable[[int, int], None] | None = None
    ) -> Iterator[tuple[bytes, bytes | None]]:
        """Every (key, value) of every partition (or of ``partitions``), each partition in offset order;
        ``at(partition, offset)`` is told where each non-transactional record is before it is yielded."""
        self.open_transactions = {}
        for index in range(self.num_partitions) if partitions is None else partitions:
            p = self.services.partition(self.name, index)
            if p is None:
                continue
            offset = p.log_start_offset
            end = p.log_end_offset
            while offset < end:
                file_slice = p.log.read(offset, READ_CHUNK_BYTES, end)
                if file_slice is None:
                    break
                # A chunk ends at READ_CHUNK_BYTES, maybe inside a batch: that batch starts the next chunk.
                data = whole_batches(file_slice.read())
                headers = list(iter_batch_headers(data))
                if not headers:
                    break
                view = memoryview(data)
                for header in headers:
                    batch = view[header.position : header.end_position]
                    if header.is_control:
                        pending = self.open_transactions.pop(header.producer_id, [])
                        if control_type(batch) == COMMIT:
                            yield from pending
                        continue
                    for r in decode_batch_records(batch, header):
                        if r.offset < offset or r.key is None:
                            continue
                        if header.is_transactional:
                            self.open_transactions.setdefault(header.producer_id, []).append((r.key, r.value))
                        else:
                            if at is not None:
                                at(index, r.offset)
                            yield r.key, r.value
                # A compacted batch keeps its last offset even when its last records are gone.
                offset = max(headers[-1].last_offset + 1, offset + 1)


class OffsetsTopic(InternalTopic):
    def __init__(self, services: CoordinatorServices) -> None:
        super().__init__(services, TOPIC, services.config.offsets_topic_num_partitions, TOPIC_CONFIGS)
        self._cleaner_task: CompactionTask | None = None

    # -- compaction -----------------------------------------------------------------------------------
    def start_cleaner(self) -> None:
        from pybroker.coordinator.compaction import CompactionTask

        self._cleaner_task = CompactionTask(self.services)
        self._cleaner_task.start()

    def stop_cleaner(self) -> None:
        if self._cleaner_task is not None:
            self._cleaner_task.stop()
            self._cleaner_task = None
