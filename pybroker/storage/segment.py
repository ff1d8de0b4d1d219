"""LogSegment: one .log file with its offset and time indexes (Kafka's LogSegment, scaled down)."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

from crc32c import crc32c

from pybroker.records.batch import (
    ATTRIBUTES_OFFSET,
    BATCH_HEADER_SIZE,
    CURRENT_MAGIC,
    HEADER_STRUCT,
    MIN_BATCH_LENGTH,
    BatchHeader,
)
from pybroker.records.reader import decode_batch_records
from pybroker.storage.config import LogConfig
from pybroker.storage.errors import StorageError
from pybroker.storage.file_slice import FileSlice, SegmentFile
from pybroker.storage.index import CorruptIndexError, OffsetIndex, TimeIndex
from pybroker.storage.txn_index import TransactionIndex

logger = logging.getLogger(__name__)

INT32_MAX = 2**31 - 1
# One batch as (last offset, max timestamp, size in bytes), in append order.
BatchInfo = tuple[int, int, int]


def segment_file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


class LogSegment:
    def __init__(self, directory: Path, base_offset: int, config: LogConfig, created_ms: int) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.config = config
        self.created_ms = created_ms
        self.log_path = directory / segment_file_name(base_offset, ".log")
        self.file = SegmentFile(self.log_path)
        self.size = os.fstat(self.file.fileno()).st_size
        self.offset_index = OffsetIndex(
            directory / segment_file_name(base_offset, ".index"), base_offset, config.max_offset_index_entries
        )
        self.time_index = TimeIndex(
            directory / segment_file_name(base_offset, ".timeindex"),
            base_offset,
            config.max_time_index_entries,
        )
        self.txn_index = TransactionIndex.load(directory / segment_file_name(base_offset, ".txnindex"))
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = base_offset
        self.rolling_based_timestamp: int | None = None
        self._bytes_since_index_entry = 0
        self.needs_recovery = False

    # ---- lifecycle -------------------------------------------------------------------------------

    @classmethod
    def create(cls, directory: Path, base_offset: int, config: LogConfig, now_ms: int) -> LogSegment:
        segment = cls(directory, base_offset, config, now_ms)
        if segment.size:
            segment.file = None  # type: ignore[assignment]
            raise StorageError(f"segment {segment.log_path} already exists")
        # The index files are made with the segment, not by their first flush: that
        # flush is usually the shutdown's, where creating two files per partition (a journal
        # transaction each) was most of the time a 10,000-partition broker took to stop.
        for index in (segment.offset_index, segment.time_index):
            os.close(os.open(index.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644))
        return segment

    @classmethod
    def open(cls, directory: Path, base_offset: int, config: LogConfig, now_ms: int) -> LogSegment:
        """Open an existing segment, trusting its indexes when they load; else mark it for recovery."""
        segment = cls(directory, base_offset, config, now_ms)
        try:
            segment.offset_index = OffsetIndex.load(
                segment.offset_index.path, base_offset, config.max_offset_index_entries
            )
            segment.time_index = TimeIndex.load(
                segment.time_index.path, base_offset, config.max_time_index_entries
            )
            _, last_position = segment.offset_index.last_entry
            if last_position > segment.size:
                raise CorruptIndexError(f"{segment.offset_index.path} points past the end of the segment")
            next_offset = base_offset
            for header in segment.iter_headers(last_position):
                next_offset = header.next_offset
            segment.next_offset = max(
                next_offset,
                segment.offset_index.last_entry[0] + 1 if len(segment.offset_index) else base_offset,
            )
            segment.max_timestamp, segment.offset_of_max_timestamp = segment.time_index.last_entry
            first = segment.read_header(0) if segment.size >= BATCH_HEADER_SIZE else None
            segment.rolling_based_timestamp = first.max_timestamp if first else None
        except (CorruptIndexError, StorageError) as exc:
            logger.warning("segment %s needs recovery: %s", segment.log_path, exc)
            segment.offset_index.reset()
            segment.time_index.reset()
            segment.needs_recovery = True
        return segment

    # ---- append and read -------------------------------------------------------------------------

    def append(self, data: bytes | bytearray | memoryview, batches: list[BatchInfo]) -> None:
        position = self.size
        try:
            fd = self.file.fileno()
            # One pwrite takes the whole batch (into the page cache) but for a signal or a full disk.
            written = os.pwrite(fd, data, position)
            if written != len(data):
                _write_fully(fd, memoryview(data)[written:], position + written)
        except OSError:
            # A partial write (disk full mid-batch) must not stay behind the valid end: give the
            # space back, so the file ends where the log does.
            try:
                os.ftruncate(self.file.fileno(), position)
            except OSError:
                pass  # recovery truncates a torn tail anyway
            raise
        self._index_batches(batches, position)
        self.size = position + len(data)

    def append_written(self, batches: list[BatchInfo], position: int, end_position: int) -> None:
        """Batches the log directory's writer thread wrote at ``position``: now part of the segment."""
        self._index_batches(batches, position)
        self.size = end_position

    def _index_batches(self, batches: list[BatchInfo], position: int) -> None:
        interval = self.config.index_interval_bytes
        if self.rolling_based_timestamp is None and batches:
            self.rolling_based_timestamp = batches[0][1]
        for last_offset, max_timestamp, size in batches:
            if max_timestamp > self.max_timestamp:
                self.max_timestamp = max_timestamp
                self.offset_of_max_timestamp = last_offset
            if self._bytes_since_index_entry > interval:
                self.offset_index.append(last_offset, position)
                self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
                self._bytes_since_index_entry = 0
            position += size
            self._bytes_since_index_entry += size
        if batches:
            self.next_offset = batches[-1][0] + 1

    def read_header(self, position: int) -> BatchHeader | None:
        """The header of the batch at `position`, or None at (or past) a torn end."""
        return read_header_at(self.file.fileno(), position, self.size)

    def iter_headers(self, start_position: int = 0) -> Iterator[BatchHeader]:
        """Headers from `start_position` on, reading 61 bytes per batch (never the records)."""
        return iter_headers_in(self.file, self.size, self.log_path, start_position)

    def translate_offset(self, offset: int, start_position: int = 0) -> BatchHeader | None:
        """Header of the first batch whose last offset is >= `offset`, or None."""
        _, position = self.offset_index.lookup(offset)
        for header in self.iter_headers(max(position, start_position)):
            if header.last_offset >= offset:
                return header
        return None

    def position_of_first_batch_from(self, offset: int) -> int:
        """File position of the first batch whose base offset is >= `offset` (the size when none)."""
        header = self.translate_offset(offset)
        if header is None:
            return self.size
        if header.base_offset >= offset:
            return header.position
        return header.position + header.size

    def read(
        self, start_offset: int, max_size: int, max_position: int | None = None, min_one_batch: bool = True
    ) -> FileSlice | None:
        """A slice starting at the batch that contains `start_offset`, or None past the end."""
        if max_position is None:
            max_position = self.size
        header = self.translate_offset(start_offset)
        if header is None or header.position >= max_position:
            return None
        limit = max(max_size, header.size) if min_one_batch else max_size
        size = min(max_position - header.position, limit)
        if size <= 0:
            return None
        return FileSlice(self.file, header.position, size)

    def read_batch(self, header: BatchHeader) -> bytes:
        return FileSlice(self.file, header.position, header.size).read()

    def find_offset_by_timestamp(self, timestamp: int, start_offset: int = 0) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at/after `start_offset` with timestamp >= `timestamp`."""
        _, indexed_offset = self.time_index.lookup(timestamp)
        _, position = self.offset_index.lookup(max(indexed_offset, start_offset))
        for header in self.iter_headers(position):
            if header.max_timestamp < timestamp or header.last_offset < start_offset:
                continue
            for record in decode_batch_records(self.read_batch(header), header):
                if record.timestamp >= timestamp and record.offset >= start_offset:
                    return record.offset, record.timestamp
        return None

    # ---- rolling, recovery, truncation ---------------------------------------------------------------

    def should_roll(
        self, messages_size: int, max_timestamp: int, max_offset: int, now_ms: int, size: int | None = None
    ) -> bool:
        """``size``: the segment's size counting writes still queued (Log.append_async)."""
        if size is None:
            size = self.size
        if size == 0:
            return False
        config = self.config
        if size > config.segment_bytes - messages_size:
            return True
        # time_waited_for_roll, inline (asked on every append)
        rolling = self.rolling_based_timestamp
        waited = max_timestamp - rolling if rolling is not None and rolling >= 0 else now_ms - self.created_ms
        if waited > config.segment_ms:
            return True
        if self.offset_index.is_full or self.time_index.is_full:
            return True
        return max_offset - self.base_offset > INT32_MAX

    def time_waited_for_roll(self, now_ms: int, message_timestamp: int) -> int:
        # Kafka measures segment age by record timestamps when the first batch has one, else by wall clock.
        if self.rolling_based_timestamp is not None and self.rolling_based_timestamp >= 0:
            return message_timestamp - self.rolling_based_timestamp
        return now_ms - self.created_ms

    def recover(self) -> int:
        """Validate every batch from the start, truncate a torn/corrupt tail, rebuild the indexes.

        Returns the number of bytes truncated.
        """
        fd = self.file.fileno()
        file_size = os.fstat(fd).st_size
        self.size = file_size
        self.offset_index.reset()
        self.time_index.reset()
        self.max_timestamp = -1
        self.offset_of_max_timestamp = self.base_offset
        self.next_offset = self.base_offset
        self.rolling_based_timestamp = None
        self._bytes_since_index_entry = 0
        position = 0
        expected_min_offset = self.base_offset
        while position < file_size:
            header = self.read_header(position)
            if header is None or header.base_offset < expected_min_offset:
                break
            data = os.pread(fd, header.size, position)
            if len(data) < header.size or crc32c(memoryview(data)[ATTRIBUTES_OFFSET:]) != header.crc:
                break
            if header.last_offset - self.base_offset > INT32_MAX or header.last_offset_delta < 0:
                break
            self._index_batches([(header.last_offset, header.max_timestamp, header.size)], position)
            expected_min_offset = header.next_offset
            position += header.size
        truncated = file_size - position
        if truncated:
            logger.warning(
                "%s: truncating %d invalid bytes at position %d (next offset %d)",
                self.log_path,
                truncated,
                position,
                self.next_offset,
            )
            os.ftruncate(fd, position)
        self.size = position
        self.needs_recovery = False
        self.offset_index.flush(fsync=False)
        self.time_index.flush(fsync=False)
        return truncated

    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose last offset is >= `offset`; returns bytes removed."""
        header = self.translate_offset(offset)
        if header is None:
            return 0
        removed = self.size - header.position
        os.ftruncate(self.file.fileno(), header.position)
        self.size = header.position
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        self.max_timestamp, self.offset_of_max_timestamp = self.time_index.last_entry
        self.next_offset = self.base_offset
        _, position = self.offset_index.last_entry
        for batch in self.iter_headers(position):
            self.next_offset = batch.next_offset
            if batch.max_timestamp > self.max_timestamp:
                self.max_timestamp, self.offset_of_max_timestamp = batch.max_timestamp, batch.last_offset
        if self.size == 0:
            self.rolling_based_timestamp = None
        self._bytes_since_index_entry = 0
        return removed

    def on_become_inactive(self) -> None:
        # Kafka records the segment's final max timestamp so lookups and retention see it after a restart.
        if self.max_timestamp >= 0:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)

    def flush_indexes(self) -> None:
        """Write the indexes' new entries (no fsync: an index that lost its tail is still right)."""
        self.offset_index.flush(fsync=False)
        self.time_index.flush(fsync=False)

    def flush(self, fsync: bool = True) -> None:
        """Write the indexes' new entries; ``fsync=False`` leaves durability to the caller."""
        if fsync:
            os.fsync(self.file.fileno())
        self.offset_index.flush(fsync=fsync)
        self.time_index.flush(fsync=fsync)
        self.txn_index.flush(fsync=fsync)

    def close(self, fsync_log: bool = True, fsync_indexes: bool = True) -> None:
        """``fsync_log=False`` when the caller has just flushed the log (Log.close): a second fsync
        of every clean .log costs a disk round trip per partition at shutdown for nothing.
        ``fsync_indexes=False`` when the caller makes the whole file system durable instead."""
        self.on_become_inactive()
        self.offset_index.flush(fsync=fsync_indexes)
        self.time_index.flush(fsync=fsync_indexes)
        self.txn_index.flush(fsync=fsync_indexes)
        if fsync_log:
            os.fsync(self.file.fileno())
        # Dropping the reference closes the descriptor once no FileSlice holds it.
        self.file = None  # type: ignore[assignment]

    def delete(self) -> None:
        for path in (self.log_path, self.offset_index.path, self.time_index.path, self.txn_index.path):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        self.file = None  # type: ignore[assignment]

    def last_modified_ms(self) -> int:
        return int(os.stat(self.log_path).st_mtime * 1000)

    @property
    def largest_timestamp(self) -> int:
        """Max record timestamp, or the file's modification time when no batch carries one (Kafka)."""
        return self.max_timestamp if self.max_timestamp >= 0 else self.last_modified_ms()


def read_header_at(fd: int, position: int, end: int) -> BatchHeader | None:
    """The header of the batch at `position` of a file whose valid bytes end at `end`, or None
    at (or past) a torn end."""
    data = os.pread(fd, BATCH_HEADER_SIZE, position)
    if len(data) < BATCH_HEADER_SIZE:
        return None
    header = BatchHeader._make((*HEADER_STRUCT.unpack(data), position))
    if header.magic != CURRENT_MAGIC or header.batch_length < MIN_BATCH_LENGTH:
        return None
    if position + header.size > end:
        return None
    return header


def whole_batch_headers(file_slice: FileSlice, through_offset: int) -> list[BatchHeader]:
    """Headers of the whole batches a log read returned, from its start up to the first batch whose last
    offset is >= ``through_offset``, reading 61 bytes per batch (never the records). A batch the slice
    ends inside (a read is cut at its byte limit) is left out, as is anything after an unreadable header."""
    fd = file_slice.fileno()
    position, end = file_slice.position, file_slice.position + file_slice.size
    out: list[BatchHeader] = []
    while position < end:
        header = read_header_at(fd, position, end)
        if header is None:
            break
        out.append(header)
        if header.last_offset >= through_offset:
            break
        position += header.size
    return out


def iter_headers_in(
    file: SegmentFile, end: int, name: object, start_position: int = 0
) -> Iterator[BatchHeader]:
    """Headers of the batches in ``file`` up to ``end``.  Takes the file and its end explicitly so
    the cleaner's thread can read a snapshot of a segment while the event loop appends to it."""
    fd = file.fileno()
    position = start_position
    while position < end:
        header = read_header_at(fd, position, end)
        if header is None:
            raise StorageError(f"{name}: unreadable batch header at position {position}")
        yield header
        position += header.size


def _write_fully(fd: int, data: bytes | bytearray | memoryview, position: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, position)
        position += written
        view = view[written:]
