"""Log compaction for ``cleanup.policy=compact``: keep the latest record of every key.

One pass over a log (Kafka's LogCleaner/Cleaner, scaled down to one node and one thread):

1. the round cleans up to Kafka's first uncleanable offset (``cleanable_upper_bound``): below the
   active segment and below the last stable offset (no open transaction is ever cleaned);
2. build the offset map, key -> offset of its latest record below that bound (a transactional
   record counts once its transaction committed, an aborted one never);
3. rewrite every inactive segment below the bound keeping only records that are the latest of
   their key.  Records keep their offsets (a rewritten batch keeps its base offset and offset
   span); records without a key are kept.  Transactions and deletes as in Kafka (KIP-534):

   - an aborted transaction's batches are removed;
   - a transaction marker whose transaction has no batch left in the log is "discardable"; the
     first pass that finds it so stamps the batch's delete horizon (``now + delete.retention.ms``,
     in the base timestamp, with the ``deleteHorizonMs`` attribute bit), a later pass past the
     horizon removes it.  An ABORT marker keeps its ``.txnindex`` entry only while its
     transaction's batches are still seen;
   - a tombstone (null value) is kept until its batch's delete horizon has passed; the first pass
     that keeps it stamps the horizon, so a consumer reading the topic sees the deletion first;
   - the last data batch of every active producer (or its last marker, when the producer has no
     data batch left in its current epoch) and the last batch below the bound are kept, emptied of
     their records if need be, so that the producer's sequence and epoch and the log's offsets
     survive a rebuild from the log.

   A compressed batch is decompressed in chunks and only up to RECOMPRESSION_EXPANSION x
   max.message.bytes; one that expands further is kept as it is (the cleaner's memory stays
   bounded whatever a producer managed to store).
4. swap the cleaned segment in: the new ``.log`` is written beside the old one as
   ``<base>.log.cleaned``, the old indexes are removed, then it replaces the old file with one
   atomic rename and its indexes are rebuilt.  A crash at any point leaves either the old or the
   new segment (``.cleaned`` leftovers are deleted when the log is opened); readers holding a
   FileSlice of the old file keep reading the old inode.

A segment left with no record is deleted, except the first one (kept empty, so the log start
offset does not move).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pybroker.records.batch import (
    CONTROL_MASK,
    DELETE_HORIZON_MASK,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    rewrite_crc,
)
from pybroker.records.builder import SimpleRecord, encode_record
from pybroker.records.compression import compress
from pybroker.records.control import ABORT, COMMIT, control_type
from pybroker.records.errors import DecompressedSizeLimitError
from pybroker.records.reader import Record, decode_batch_records
from pybroker.records.validator import RECOMPRESSION_EXPANSION
from pybroker.storage.file_slice import FileSlice, SegmentFile
from pybroker.storage.log import Log
from pybroker.storage.segment import LogSegment, iter_headers_in, segment_file_name
from pybroker.storage.txn_index import AbortedTxn

logger = logging.getLogger(__name__)


@dataclass
class CleanStats:
    segments_rewritten: int = 0
    segments_deleted: int = 0
    records_removed: int = 0
    bytes_before: int = 0
    bytes_after: int = 0


@dataclass(frozen=True)
class SegmentSnapshot:
    """A segment as it was when a cleaning pass started: its open file and its size then.

    The cleaner's thread reads only snapshots, never the live ``LogSegment`` fields the event loop
    changes; holding the ``SegmentFile`` keeps the descriptor valid even if the loop deletes the
    segment meanwhile (the result is then discarded when it is applied)."""

    segment: LogSegment
    file: SegmentFile
    size: int
    aborted: tuple[AbortedTxn, ...] = ()  # its transaction index then

    def headers(self) -> Iterator[BatchHeader]:
        return iter_headers_in(self.file, self.size, self.segment.log_path)

    def read_batch(self, header: BatchHeader) -> bytes:
        return FileSlice(self.file, header.position, header.size).read()


@dataclass(frozen=True)
class LastRecord:
    """Kafka's LastRecord: an active producer's last data offset (None when its current epoch has
    no data batch, e.g. after a transaction version 2 marker bumped it) and its epoch."""

    last_data_offset: int | None
    producer_epoch: int


@dataclass
class CleanedSegment:
    """The outcome of filtering one inactive segment: its cleaned copy written beside it, and its
    transaction index after the pass (None: unchanged)."""

    source: SegmentSnapshot
    tmp_path: Path
    size: int
    aborted: list[AbortedTxn] | None = None


def snapshot_segments(log: Log) -> list[SegmentSnapshot]:
    """Taken on the event loop: every segment, the active one last."""
    return [SegmentSnapshot(seg, seg.file, seg.size, tuple(seg.txn_index.entries)) for seg in log.segments]


def cleanable_upper_bound(log: Log) -> int:
    """Kafka's first uncleanable offset: a round cleans below the active segment and below the last
    stable offset (taken on the event loop, with the snapshots)."""
    bound = log.active_segment.base_offset
    unstable = log.first_unstable_offset()
    return bound if unstable is None else min(bound, unstable)


def last_records_of_active_producers(log: Log) -> dict[int, LastRecord]:
    """Kafka's lastRecordsOfActiveProducers (taken on the event loop): the batches the cleaner keeps,
    emptied if need be, so a producer state rebuilt from the log still knows each producer."""
    return {
        pid: LastRecord(entry.batches[-1].last_offset if entry.batches else None, entry.epoch)
        for pid, entry in log.producer_state.producers.items()
    }


def _decode_bounded(snap: SegmentSnapshot, header: BatchHeader, data: bytes) -> list[Record] | None:
    """The batch's records, or None when they expand beyond what the cleaner decompresses: such a
    batch is kept as it is and its keys are not mapped (older copies of them then survive too: the
    pass cleans less, it never drops a record it has not read)."""
    limit = RECOMPRESSION_EXPANSION * max(snap.segment.config.max_message_bytes, 1)
    try:
        return decode_batch_records(data, header, max_bytes=limit)
    except DecompressedSizeLimitError:
        logger.warning(
            "%s: batch at offset %d expands beyond %d bytes; the cleaner keeps it as it is",
            snap.segment.log_path,
            header.base_offset,
            limit,
        )
        return None


@dataclass
class LogScan:
    """What one read of the log tells the cleaner: each key's latest committed offset below the
    round's bound, and the transactional batches (by base offset) whose transaction was aborted or
    is still open."""

    latest: dict[bytes, int]
    aborted: set[int]
    open: set[int]


def scan_log(snapshots: list[SegmentSnapshot], upper_bound: int | None = None) -> LogScan:
    """A transactional record counts only once its COMMIT marker is met: an aborted or still open
    transaction's record must never make the cleaner drop the committed record it would supersede
    (Kafka leaves aborted records out of its offset map too).  Only records below ``upper_bound``
    (default: the whole log) are mapped, as Kafka maps only the round's range; the outcome of a
    transaction is read from its marker wherever it is."""
    bound = upper_bound if upper_bound is not None else 1 << 63
    latest: dict[bytes, int] = {}
    aborted: set[int] = set()
    pending: dict[int, tuple[list[int], list[tuple[bytes, int]]]] = {}  # pid -> (batches, keys)
    for snap in snapshots:
        for header in snap.headers():
            if header.is_control:
                batches, entries = pending.pop(header.producer_id, ([], []))
                if control_type(snap.read_batch(header)) == COMMIT:
                    for key, offset in entries:  # a later plain record of the key may be mapped already
                        if offset > latest.get(key, -1):
                            latest[key] = offset
                else:
                    aborted.update(batches)
                continue
            records = _decode_bounded(snap, header, snap.read_batch(header))
            mapped = [(r.key, r.offset) for r in records or () if r.key is not None and r.offset < bound]
            if header.is_transactional:
                batches, entries = pending.setdefault(header.producer_id, ([], []))
                batches.append(header.base_offset)
                entries.extend(mapped)
                continue
            latest.update(mapped)
    return LogScan(latest, aborted, {b for batches, _ in pending.values() for b in batches})


def build_offset_map(snapshots: list[SegmentSnapshot]) -> dict[bytes, int]:
    """key -> offset of its latest committed record (see ``scan_log``)."""
    return scan_log(snapshots).latest


def delete_horizon_ms(header: BatchHeader) -> int | None:
    """Kafka's RecordBatch.deleteHorizonMs: stamped by the cleaner into the base timestamp."""
    return header.base_timestamp if header.attributes & DELETE_HORIZON_MASK else None


def _rebuild_batch(header: BatchHeader, kept: list[Record], horizon_ms: int | None) -> bytes:
    """The batch with only ``kept`` records, as Kafka's MemoryRecordsBuilder writes it: same base
    offset, offset span, producer fields and attributes; the base timestamp is the delete horizon
    when there is one (with its attribute bit), else the first record's; the max timestamp is the
    records' (a log-append-time batch keeps its own)."""
    log_append_time = header.is_log_append_time
    if horizon_ms is not None:
        base_timestamp = horizon_ms
    else:
        base_timestamp = header.base_timestamp if log_append_time else kept[0].timestamp
    max_timestamp = header.max_timestamp if log_append_time else max(r.timestamp for r in kept)
    body = bytearray()
    for record in kept:
        delta = 0 if log_append_time and horizon_ms is None else record.timestamp - base_timestamp
        encode_record(
            SimpleRecord(record.key, record.value, record.headers),
            record.offset - header.base_offset,
            delta,
            body,
        )
    payload = compress(header.compression, body) if header.compression else bytes(body)
    attributes = header.attributes & ~DELETE_HORIZON_MASK
    if horizon_ms is not None:
        attributes |= DELETE_HORIZON_MASK
    batch = bytearray(HEADER_STRUCT.size + len(payload))
    HEADER_STRUCT.pack_into(
        batch,
        0,
        header.base_offset,
        len(batch) - LOG_OVERHEAD,
        header.partition_leader_epoch,
        header.magic,
        0,
        attributes,
        header.last_offset_delta,  # kept: offsets (and the last sequence) stay where they were
        base_timestamp,
        max_timestamp,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        len(kept),
    )
    batch[HEADER_STRUCT.size :] = payload
    rewrite_crc(batch, 0)
    return bytes(batch)


def _empty_batch(header: BatchHeader) -> bytes:
    """Kafka's DefaultRecordBatch.writeEmptyHeader: the batch's offsets and producer fields with no
    record (uncompressed, no base timestamp, no delete horizon)."""
    attributes = header.attributes & (TIMESTAMP_TYPE_MASK | TRANSACTIONAL_MASK | CONTROL_MASK)
    batch = bytearray(HEADER_STRUCT.size)
    HEADER_STRUCT.pack_into(
        batch,
        0,
        header.base_offset,
        len(batch) - LOG_OVERHEAD,
        header.partition_leader_epoch,
        header.magic,
        0,
        attributes,
        header.last_offset_delta,
        NO_TIMESTAMP,
        header.max_timestamp,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        0,
    )
    rewrite_crc(batch, 0)
    return bytes(batch)


class CleanedTransactions:
    """Kafka's CleanedTransactionMetadata, carried across the segments of one pass: which producers
    had a batch of their current transaction traversed since their last marker.  A marker whose
    transaction had none is discardable (its transaction's data is all gone)."""

    def __init__(self) -> None:
        self._traversed: set[int] = set()

    def on_batch_read(self, header: BatchHeader, aborted: bool) -> bool:
        """A data batch; True when it may be discarded (its transaction was aborted)."""
        if header.is_transactional:
            self._traversed.add(header.producer_id)
        return aborted

    def on_control_batch_read(self, header: BatchHeader, kind: int | None) -> bool:
        """A marker; True when it may be discarded.  An empty control batch was cleaned already."""
        traversed = header.producer_id in self._traversed
        self._traversed.discard(header.producer_id)
        if header.records_count == 0:
            return True
        if kind not in (ABORT, COMMIT):
            return False
        return not traversed


@dataclass
class _Round:
    """What a pass over every segment shares (Kafka's cleaner state for one round)."""

    scan: LogScan
    upper_bound: int
    now_ms: int
    delete_retention_ms: int
    last_records: dict[int, LastRecord]
    txns: CleanedTransactions

    def is_last_batch_of_producer(self, header: BatchHeader) -> bool:
        """Kafka's isBatchLastRecordOfProducer: the batch holding an active producer's last data
        offset, or its last marker when its current epoch has no data batch."""
        last = self.last_records.get(header.producer_id)
        if last is None:
            return False
        if last.last_data_offset is not None:
            return header.last_offset == last.last_data_offset
        return header.is_control and header.producer_epoch == last.producer_epoch

    def retain_record(self, header: BatchHeader, horizon: int | None, record: Record) -> bool:
        """Kafka's shouldRetainRecord: the latest record of its key, and a tombstone only until the
        batch's delete horizon has passed (a batch with none has not been cleaned yet)."""
        if record.offset >= self.upper_bound or record.key is None:
            return True
        if record.offset < self.scan.latest.get(record.key, -1):
            return False
        return record.value is not None or horizon is None or self.now_ms < horizon


def _filter_segment(
    snap: SegmentSnapshot, rnd: _Round, stats: CleanStats
) -> tuple[bytearray, list[AbortedTxn]] | None:
    """The cleaned contents of a segment and its transaction index, or None when nothing would
    change (Kafka's cleanInto with its RecordFilter and MemoryRecords.filterTo; see the module
    docstring)."""
    out = bytearray()
    changed = False
    kept_markers: set[int] = set()  # markers whose transaction's batches are still seen
    for header in snap.headers():
        data = snap.read_batch(header)
        if header.base_offset >= rnd.upper_bound:  # beyond this round: as it is
            out += data
            continue
        horizon = delete_horizon_ms(header)
        if header.is_control:
            can_discard = rnd.txns.on_control_batch_read(header, control_type(data))
            if not can_discard:
                kept_markers.add(header.base_offset)
            # A marker goes only once its delete horizon has passed (KIP-534).
            discard_records = can_discard and horizon is not None and horizon <= rnd.now_ms
        else:
            aborted = header.is_transactional and header.base_offset in rnd.scan.aborted
            can_discard = discard_records = rnd.txns.on_batch_read(header, aborted)
        # Kept even when emptied: an active producer's last batch (its sequence and epoch) and the
        # round's last batch (the offsets below the bound).
        retain_empty = (
            header.has_producer_id and rnd.is_last_batch_of_producer(header)
        ) or header.next_offset == rnd.upper_bound
        if discard_records and not retain_empty:
            changed = True
            stats.records_removed += header.records_count
            continue
        kept: list[Record] | None  # None: all the batch's records
        if discard_records:
            kept = []
            stats.records_removed += header.records_count
        elif header.is_control:
            kept = None if header.records_count else []
        else:
            records = _decode_bounded(snap, header, data)
            if records is None:
                out += data
                continue
            kept = [r for r in records if rnd.retain_record(header, horizon, r)]
            stats.records_removed += len(records) - len(kept)
        if kept == []:
            if not retain_empty:
                changed = True
            elif header.records_count == 0:
                out += data
            else:
                changed = True
                out += _empty_batch(header)
            continue
        # A first clean stamps the delete horizon on a batch keeping a tombstone, or on a marker of
        # a transaction with no batch left.
        tombstones = kept is not None and any(r.value is None for r in kept)
        stamp = (tombstones or (can_discard and header.is_control)) and horizon is None
        if not stamp and (kept is None or len(kept) == header.records_count):
            out += data
            continue
        changed = True
        if kept is None:
            kept = decode_batch_records(data, header)
        out += _rebuild_batch(header, kept, rnd.now_ms + rnd.delete_retention_ms if stamp else horizon)
    # An ABORT marker keeps its aborted-transaction entry only while its batches are still seen.
    index = [e for e in snap.aborted if e.last_offset >= rnd.upper_bound or e.last_offset in kept_markers]
    if len(index) != len(snap.aborted):
        changed = True
    return (out, index) if changed else None


def _write_cleaned(snap: SegmentSnapshot, cleaned: bytearray) -> Path:
    seg = snap.segment
    tmp_path = seg.directory / (segment_file_name(seg.base_offset, ".log") + ".cleaned")
    fd = os.open(tmp_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(cleaned)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    return tmp_path


def compute_cleaning(
    snapshots: list[SegmentSnapshot],
    now_ms: int,
    delete_retention_ms: int,
    upper_bound: int | None = None,
    last_records: dict[int, LastRecord] | None = None,
) -> tuple[list[CleanedSegment], CleanStats]:
    """The expensive part of a pass, safe to run in a worker thread: it only reads snapshots and
    writes ``.cleaned`` files, which nothing else touches.  ``upper_bound`` (default: the active
    segment's base offset) and ``last_records`` are taken on the event loop with the snapshots
    (``cleanable_upper_bound``, ``last_records_of_active_producers``).  The active (last)
    segment is never cleaned, as in Kafka."""
    stats = CleanStats()
    if len(snapshots) < 2:
        return [], stats
    bound = snapshots[-1].segment.base_offset if upper_bound is None else upper_bound
    rnd = _Round(
        scan_log(snapshots, bound), bound, now_ms, delete_retention_ms, last_records or {}, CleanedTransactions()
    )
    results = []
    for snap in snapshots[:-1]:
        if snap.segment.base_offset >= bound:
            break
        cleaned = _filter_segment(snap, rnd, stats)
        if cleaned is None:
            continue
        data, aborted = cleaned
        stats.bytes_before += snap.size
        stats.bytes_after += len(data)
        index = aborted if len(aborted) != len(snap.aborted) else None
        results.append(CleanedSegment(snap, _write_cleaned(snap, data), len(data), index))
    return results, stats


def apply_cleaning(log: Log, results: list[CleanedSegment]) -> tuple[int, int]:
    """On the event loop: swap each cleaned copy in, unless its segment changed or went away
    while the pass ran (then the copy is dropped and the next pass starts over).  Returns
    (segments rewritten, segments deleted)."""
    rewritten = deleted = 0
    for result in results:
        snap = result.source
        seg = snap.segment
        try:
            index = log.segments.index(seg)
        except ValueError:
            index = -1
        active = index == len(log.segments) - 1
        if index < 0 or active or seg.file is not snap.file or seg.size != snap.size:
            _unlink_quietly(result.tmp_path)
            continue
        if _swap_in(log, index, result) is None:
            deleted += 1
        else:
            rewritten += 1
    return rewritten, deleted


def _unlink_quietly(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _swap_in(log: Log, index: int, result: CleanedSegment) -> LogSegment | None:
    old = log.segments[index]
    directory = old.directory
    base = old.base_offset
    tmp_path = result.tmp_path
    # Indexes first: a crash after this leaves the old .log with no index, rebuilt on open.
    for path in (old.offset_index.path, old.time_index.path):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    old.file = None  # type: ignore[assignment]  # open FileSlices keep the old inode alive
    if result.size == 0 and index > 0:
        # (The first segment is kept even when empty: it holds the log start offset across restarts.)
        os.unlink(tmp_path)
        os.unlink(old.log_path)
        old.txn_index.delete()
        del log.segments[index]
        del log._base_offsets[index]  # noqa: SLF001 - the cleaner is part of storage
        _fsync_dir(directory)
        return None
    os.replace(tmp_path, old.log_path)
    _fsync_dir(directory)
    new = LogSegment.open(directory, base, old.config, old.created_ms)
    new.recover()  # rebuilds both indexes from the cleaned file
    if result.aborted is not None:  # the ABORT markers whose transaction has no batch left dropped out
        new.txn_index.replace(result.aborted)
    new.on_become_inactive()
    new.offset_index.flush(fsync=True)
    new.time_index.flush(fsync=True)
    log.segments[index] = new
    return new


def clean_log(log: Log, now_ms: int, delete_retention_ms: int) -> CleanStats:
    """One whole compaction pass over ``log`` in the calling thread (see the module docstring).
    The broker runs the same three steps with ``compute_cleaning`` in a worker thread."""
    results, stats = compute_cleaning(
        snapshot_segments(log),
        now_ms,
        delete_retention_ms,
        cleanable_upper_bound(log),
        last_records_of_active_producers(log),
    )
    stats.segments_rewritten, stats.segments_deleted = apply_cleaning(log, results)
    log_clean_stats(log, stats)
    return stats


def log_clean_stats(log: Log, stats: CleanStats) -> None:
    if stats.records_removed:
        logger.info(
            "%s: compacted %d records away (%d segments rewritten, %d deleted, %d -> %d bytes)",
            log.name,
            stats.records_removed,
            stats.segments_rewritten,
            stats.segments_deleted,
            stats.bytes_before,
            stats.bytes_after,
        )


def _fsync_dir(directory: os.PathLike[str]) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
