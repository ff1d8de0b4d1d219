"""The checker: read every partition from the start to its high watermark and compare with the acks.

Reported per run:
- ``lost``: acknowledged records that are not in the log (the one thing acks=all must never allow);
- ``duplicated``: a (writer, partition, seq) present more than once;
- ``reordered``: within a partition, a writer's record whose seq is below one of the same writer's
  earlier records in offset order;
- ``offset_mismatch``: an acknowledged record found at another offset than the ack said (the offset it
  was acknowledged at was given to another record: what a truncation after an unclean or acks=1 loss
  looks like);
- ``unacknowledged_present``: records whose produce failed or was never answered but that are in the
  log (allowed: the outcome of a timed-out write is unknown).
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from tools.chaos.workload import WriterLog, decode

logger = logging.getLogger(__name__)


@dataclass
class LogRecord:
    partition: int
    offset: int
    writer: str
    written_partition: int
    seq: int


def read_partitions(
    bootstrap: str, topic: str, partitions: int, timeout_s: float = 120, start: dict[int, int] | None = None
) -> list[LogRecord]:
    """Every record of every partition, from the log start offset (or ``start[partition]``) to the high
    watermark."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"chaos-checker-{time.time_ns()}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "logger": logging.getLogger("librdkafka.checker"),
        }
    )
    records: list[LogRecord] = []
    try:
        deadline = time.monotonic() + timeout_s
        ends: dict[int, int] = {}
        for partition in range(partitions):
            while True:
                try:
                    _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
                    ends[partition] = high
                    break
                except KafkaException:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)  # a partition without a leader yet: ask again
        first = {p: (start or {}).get(p, OFFSET_BEGINNING) for p in range(partitions)}
        consumer.assign([TopicPartition(topic, p, first[p]) for p in range(partitions)])
        positions = {p: -1 for p in range(partitions)}
        remaining = {p for p in range(partitions) if ends[p] > max(first[p], 0)}
        while remaining and time.monotonic() < deadline:
            for message in consumer.consume(1000, timeout=1.0):
                if message.error():
                    continue  # partition EOF and transient errors: the loop condition decides
                partition, offset = message.partition(), message.offset()
                writer, written_partition, seq = decode(message.value())
                records.append(LogRecord(partition, offset, writer, written_partition, seq))
                positions[partition] = offset
                if offset + 1 >= ends[partition]:
                    remaining.discard(partition)
        if remaining:
            raise TimeoutError(f"checker could not read partitions {sorted(remaining)} to their end in time")
    finally:
        consumer.close()
    return records


@dataclass
class CheckResult:
    acknowledged: int = 0
    failed: int = 0
    in_log: int = 0
    lost: int = 0
    duplicated: int = 0
    reordered: int = 0
    offset_mismatch: int = 0
    wrong_partition: int = 0
    unacknowledged_present: int = 0
    lost_examples: list[str] = field(default_factory=list)
    per_writer: dict[str, dict[str, int]] = field(default_factory=dict)

    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.reordered or self.offset_mismatch or self.wrong_partition)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def check(
    logs: list[WriterLog], records: list[LogRecord], acked_before: float | None = None, acked_after: float = 0.0
) -> CheckResult:
    """Judge the records acknowledged in [``acked_after``, ``acked_before``) (monotonic times; default:
    all): a check taken while writers still run must leave out later acks (not readable yet), and a check
    of a window must be given the records from that window's offsets on."""
    result = CheckResult(in_log=len(records))
    seen: dict[tuple[str, int, int], list[LogRecord]] = defaultdict(list)
    last_seq: dict[tuple[str, int], int] = {}
    for record in sorted(records, key=lambda r: (r.partition, r.offset)):
        key = (record.writer, record.written_partition, record.seq)
        seen[key].append(record)
        if record.partition != record.written_partition:
            result.wrong_partition += 1
        stream = (record.writer, record.partition)
        if stream in last_seq and record.seq <= last_seq[stream]:
            if len(seen[key]) == 1:  # a repeat is counted as a duplicate, not again as a reorder
                result.reordered += 1
        last_seq[stream] = max(record.seq, last_seq.get(stream, -1))
    result.duplicated = sum(len(found) - 1 for found in seen.values() if len(found) > 1)
    for log in logs:
        counts = {"acknowledged": 0, "failed": 0, "lost": 0}
        with log.lock:
            acked = {
                key: value
                for key, value in log.acked.items()
                if acked_after <= value[0] and (acked_before is None or value[0] < acked_before)
            }
            failed = dict(log.failed)
            unacknowledged = set(log.sent) - set(log.acked)
        for (partition, seq), (_, offset) in acked.items():
            counts["acknowledged"] += 1
            found = seen.get((log.name, partition, seq))
            if not found:
                counts["lost"] += 1
                if len(result.lost_examples) < 10:
                    result.lost_examples.append(f"{log.name} p{partition} seq {seq} acked at offset {offset}")
            elif offset >= 0 and all(r.offset != offset for r in found):
                result.offset_mismatch += 1
        for partition, seq in unacknowledged:
            if (log.name, partition, seq) in seen:
                result.unacknowledged_present += 1
        counts["failed"] = len(failed)
        result.acknowledged += counts["acknowledged"]
        result.failed += counts["failed"]
        result.lost += counts["lost"]
        result.per_writer[log.name] = counts
    return result


def produce_stall(logs: list[WriterLog], at: float, partitions: set[int] | None) -> float | None:
    """Seconds from ``at`` until every partition of ``partitions`` (None: any partition) had a record
    *sent at or after* ``at`` acknowledged; None if that never happened."""
    firsts: dict[int, float] = {}
    for log in logs:
        for t_ack, t_sent, partition in log.ack_times():
            if t_sent >= at and (partitions is None or partition in partitions):
                if partition not in firsts or t_ack < firsts[partition]:
                    firsts[partition] = t_ack
    if not partitions:
        return (min(firsts.values()) - at) if firsts else None
    if not partitions <= set(firsts):
        return None
    return max(firsts[p] for p in partitions) - at


def acks_in_window(
    logs: list[WriterLog], records: list[LogRecord], partitions: set[int], since: float, until: float
) -> dict[str, int]:
    """Of the records acknowledged on ``partitions`` in [``since``, ``until``] (monotonic times), how many
    the final log lacks (lost) or holds at another offset than acknowledged (offset mismatch)."""
    found: dict[tuple[str, int, int], list[int]] = defaultdict(list)
    for record in records:
        if record.partition in partitions:
            found[(record.writer, record.written_partition, record.seq)].append(record.offset)
    counts = {"acknowledged": 0, "lost": 0, "offset_mismatch": 0}
    for log in logs:
        with log.lock:
            acked = [(key, offset) for key, (t_ack, offset) in log.acked.items() if since <= t_ack <= until]
        for (partition, seq), offset in acked:
            if partition not in partitions:
                continue
            counts["acknowledged"] += 1
            offsets = found.get((log.name, partition, seq))
            if not offsets:
                counts["lost"] += 1
            elif offset >= 0 and offset not in offsets:
                counts["offset_mismatch"] += 1
    return counts
