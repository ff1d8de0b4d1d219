"""Log compaction for ``cleanup.policy=compact``: keep the latest record of every key.

One pass over a log (Kafka's LogCleaner, scaled down to one node and one thread):

1. build the offset map, key -> offset of its latest record, over the whole log (the active
   segment included, so a key rewritten there supersedes its older copies);
2. rewrite every inactive segment keeping only records that are the latest of their key;
   tombstones (null value) are kept as long as they are younger than ``delete.retention.ms``, so
   a consumer reading the topic sees the deletion before it disappears.  Records keep their
   offsets (a rewritten batch keeps its base offset and offset span), control batches (markers)
   are kept as they are, records without a key are kept.  Transactions as in Kafka: a
   record enters the offset map only once its transaction committed, an aborted transaction's
   batches are removed, an open one's kept whole.  A compressed batch is decompressed in
   chunks and only up to RECOMPRESSION_EXPANSION x max.message.bytes; one that expands further is
   kept as it is (the cleaner's memory stays bounded whatever a producer managed to store).
3. swap the cleaned segment in: the new ``.log`` is written beside the old one as
   ``<base>.log.cleaned``, the old indexes are removed, then it replaces the old file with one
   atomic rename and its indexes are rebuilt.  A crash at any point leaves either the old or the
   new segment (``.cleaned`` leftovers are deleted when the log is opened); readers holding a
   FileSlice of the old file keep reading the old inode.

The active segment is never cleaned, as in Kafka.  A segment left with no record is deleted,
except the first one (kept empty, so the log start offset does not move).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pybroker.records.batch import HEADER_STRUCT, LOG_OVERHEAD, BatchHeader, rewrite_crc
from pybroker.records.builder import SimpleRecord, encode_record
from pybroker.records.compression import compress
from pybroker.records.control import COMMIT, control_type
from pybroker.records.errors import DecompressedSizeLimitError
from pybroker.records.reader import Record, decode_batch_records
from pybroker.records.validator import RECOMPRESSION_EXPANSION
from pybroker.storage.file_slice import FileSlice, SegmentFile
from pybroker.storage.log import Log
from pybroker.storage.segment import LogSegment, iter_headers_in, segment_file_name

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

    def headers(self) -> Iterator[BatchHeader]:
        return iter_headers_in(self.file, self.size, self.segment.log_path)

    def read_batch(self, header: BatchHeader) -> bytes:
        return FileSlice(self.file, header.position, header.size).read()


@dataclass
class CleanedSegment:
    """The outcome of filtering one inactive segment: its cleaned copy written beside it."""

    source: SegmentSnapshot
    tmp_path: Path
    size: int


def snapshot_segments(log: Log) -> list[SegmentSnapshot]:
    """Taken on the event loop: every segment, the active one last."""
    return [SegmentSnapshot(seg, seg.file, seg.size) for seg in log.segments]


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
    """What one read of the log tells the cleaner: each key's latest committed offset, and the
    transactional batches (by base offset) whose transaction was aborted or is still open."""

    latest: dict[bytes, int]
    aborted: set[int]
    open: set[int]


def scan_log(snapshots: list[SegmentSnapshot]) -> LogScan:
    """A transactional record counts only once its COMMIT marker is met: an aborted or still open
    transaction's record must never make the cleaner drop the committed record it would supersede
    (Kafka leaves aborted records out of its offset map too)."""
    latest: dict[bytes, int] = {}
    aborted: set[int] = set()
    pending: dict[int, tuple[list[int], list[tuple[bytes, int]]]] = {}  # pid -> (batches, keys)
    for snap in snapshots:
        for header in snap.headers():
            if header.is_control:
                batches, entries = pending.pop(header.producer_id, ([], []))
                if control_type(snap.read_batch(header)) == COMMIT:
                    latest.update(entries)
                else:
                    aborted.update(batches)
                continue
            records = _decode_bounded(snap, header, snap.read_batch(header))
            if header.is_transactional:
                batches, entries = pending.setdefault(header.producer_id, ([], []))
                batches.append(header.base_offset)
                entries.extend((r.key, r.offset) for r in records or () if r.key is not None)
                continue
            for record in records or ():
                if record.key is not None:
                    latest[record.key] = record.offset
    return LogScan(latest, aborted, {b for batches, _ in pending.values() for b in batches})


def build_offset_map(snapshots: list[SegmentSnapshot]) -> dict[bytes, int]:
    """key -> offset of its latest committed record (see ``scan_log``)."""
    return scan_log(snapshots).latest


def _rebuild_batch(header: BatchHeader, kept: list[Record]) -> bytes:
    """The batch with only ``kept`` records: same base offset, offset span, timestamps, producer fields."""
    body = bytearray()
    for record in kept:
        delta = 0 if header.is_log_append_time else record.timestamp - header.base_timestamp
        encode_record(
            SimpleRecord(record.key, record.value, record.headers),
            record.offset - header.base_offset,
            delta,
            body,
        )
    payload = compress(header.compression, body) if header.compression else bytes(body)
    batch = bytearray(HEADER_STRUCT.size + len(payload))
    HEADER_STRUCT.pack_into(
        batch,
        0,
        header.base_offset,
        len(batch) - LOG_OVERHEAD,
        header.partition_leader_epoch,
        header.magic,
        0,
        header.attributes,
        header.last_offset_delta,  # kept: offsets stay where they were
        header.base_timestamp,
        header.max_timestamp,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        len(kept),
    )
    batch[HEADER_STRUCT.size :] = payload
    rewrite_crc(batch, 0)
    return bytes(batch)


def _filter_segment(
    snap: SegmentSnapshot, scan: LogScan, tombstone_horizon_ms: int, stats: CleanStats
) -> bytearray | None:
    """The cleaned contents of a segment, or None when nothing would change.  As Kafka's cleaner:
    an aborted transaction's batches go, an open one's stay whole, a committed one's records are
    compacted like any other; markers are kept."""
    latest = scan.latest
    out = bytearray()
    changed = False
    for header in snap.headers():
        data = snap.read_batch(header)
        if header.is_control or (header.is_transactional and header.base_offset in scan.open):
            out += data
            continue
        if header.is_transactional and header.base_offset in scan.aborted:
            changed = True
            stats.records_removed += header.records_count
            continue
        records = _decode_bounded(snap, header, data)
        if records is None:
            out += data
            continue
        kept = [
            r
            for r in records
            if r.key is None
            or (
                latest.get(r.key) == r.offset and not (r.value is None and r.timestamp < tombstone_horizon_ms)
            )
        ]
        if len(kept) == len(records):
            out += data
            continue
        changed = True
        stats.records_removed += len(records) - len(kept)
        if kept:
            out += _rebuild_batch(header, kept)
    return out if changed else None


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
    snapshots: list[SegmentSnapshot], now_ms: int, delete_retention_ms: int
) -> tuple[list[CleanedSegment], CleanStats]:
    """The expensive part of a pass, safe to run in a worker thread: it only reads snapshots and
    writes ``.cleaned`` files, which nothing else touches.  The active (last) segment feeds the
    offset map but is never cleaned, as in Kafka."""
    stats = CleanStats()
    if len(snapshots) < 2:
        return [], stats
    scan = scan_log(snapshots)
    horizon = now_ms - delete_retention_ms
    results = []
    for snap in snapshots[:-1]:
        cleaned = _filter_segment(snap, scan, horizon, stats)
        if cleaned is None:
            continue
        stats.bytes_before += snap.size
        stats.bytes_after += len(cleaned)
        results.append(CleanedSegment(snap, _write_cleaned(snap, cleaned), len(cleaned)))
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
        del log.segments[index]
        del log._base_offsets[index]  # noqa: SLF001 - the cleaner is part of storage
        _fsync_dir(directory)
        return None
    os.replace(tmp_path, old.log_path)
    _fsync_dir(directory)
    new = LogSegment.open(directory, base, old.config, old.created_ms)
    new.recover()  # rebuilds both indexes from the cleaned file
    new.on_become_inactive()
    new.offset_index.flush(fsync=True)
    new.time_index.flush(fsync=True)
    log.segments[index] = new
    return new


def clean_log(log: Log, now_ms: int, delete_retention_ms: int) -> CleanStats:
    """One whole compaction pass over ``log`` in the calling thread (see the module docstring).
    The broker runs the same three steps with ``compute_cleaning`` in a worker thread."""
    results, stats = compute_cleaning(snapshot_segments(log), now_ms, delete_retention_ms)
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
