"""Log: one partition's segments (Kafka's UnifiedLog/LocalLog, scaled down)."""

from __future__ import annotations

import logging
import os
import shutil
from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from time import perf_counter
from typing import NamedTuple

from pybroker.records.batch import (
    LOG_OVERHEAD,
    BatchHeader,
    iter_batch_headers,
    stamp_base_offset,
    stamp_log_append_time,
    stamp_offset_and_epoch,
    stamp_partition_leader_epoch,
)
from pybroker.records.control import build_marker_batch, parse_marker
from pybroker.records.recompress import needs_recompression, recompress_batches
from pybroker.storage import errors as storage_errors
from pybroker.storage.config import LogConfig
from pybroker.storage.errors import (
    OffsetOutOfRangeError,
    RecordTooLargeError,
    UnexpectedAppendOffsetError,
    io_failure,
)
from pybroker.storage.file_slice import FileSlice
from pybroker.storage.leader_epoch import LeaderEpochCache
from pybroker.storage.producer_state import CompletedTxn, ProducerStateManager
from pybroker.storage.segment import BatchInfo, LogSegment
from pybroker.storage.txn_index import AbortedTxn
from pybroker.storage.writer import LogDirWriter, LogWriteState, WriteJob, WriteSkipped, voluntary_switches

logger = logging.getLogger(__name__)

_CLEANUP_SUFFIXES = (".deleted", ".cleaned", ".swap", ".tmp")


class AppendInfo(NamedTuple):
    """What an append did (immutable; a NamedTuple: made on every produce request, and a frozen
    dataclass costs ~0.8 us to make here, a NamedTuple ~0.3)."""

    first_offset: int
    last_offset: int
    log_append_time_ms: int
    log_start_offset: int
    duplicate: bool = False
    # append_async: the bytes are on their way to disk; the callback given is told when they are there
    pending: bool = False


class Log:
    """Segments of one partition, by base offset. Not thread-safe: the event loop owns it.

    With a ``writer`` (the log directory's thread, set by the LogManager) ``append_async`` leaves
    the write itself to that thread: offsets, producer state and the leader-epoch cache move at
    once, while the segments — and so ``log_end_offset``, reads, the high watermark — show only
    what is written.  Everything else that touches the files first waits for those writes
    (``wait_for_writes``)."""

    def __init__(self, directory: Path, topic: str, partition: int, config: LogConfig, now_ms: int) -> None:
        self.directory = directory
        self.topic = topic
        self.partition = partition
        self.config = config
        self.segments: list[LogSegment] = []
        self._base_offsets: list[int] = []
        self.log_start_offset = 0
        self.recovery_point = 0
        self.producer_state = ProducerStateManager(directory)
        self.leader_epochs = LeaderEpochCache(directory)
        self._last_flush_ms = now_ms
        self._dir_dirty = False
        self.writer: LogDirWriter | None = None
        self._writes: deque[WriteJob] = deque()  # submitted to the writer, in order, not yet taken back
        self._write_state = LogWriteState()
        self._write_failed = False  # a write came back failed: roll back once none is queued

    # ---- construction ------------------------------------------------------------------------------

    @classmethod
    def create(cls, directory: Path, topic: str, partition: int, config: LogConfig, now_ms: int) -> Log:
        directory.mkdir(parents=True, exist_ok=False)
        log = cls(directory, topic, partition, config, now_ms)
        log._add_segment(LogSegment.create(directory, 0, config, now_ms))
        _fsync_dir(directory.parent)
        return log

    @classmethod
    def open(
        cls,
        directory: Path,
        topic: str,
        partition: int,
        config: LogConfig,
        now_ms: int,
        *,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        clean_shutdown: bool = False,
    ) -> Log:
        log = cls(directory, topic, partition, config, now_ms)
        # One listing serves every lookup below (leftovers, segments, producer snapshots): with
        # thousands of partitions, start-up time is mostly such per-directory calls.
        names = os.listdir(directory)
        for name in names:
            if name.endswith(_CLEANUP_SUFFIXES):
                os.unlink(os.path.join(directory, name))
        base_offsets = sorted(int(n[:-4]) for n in names if n.endswith(".log") and n[:-4].isdigit())
        for base_offset in base_offsets:
            log._add_segment(LogSegment.open(directory, base_offset, config, now_ms))
        if not log.segments:
            log._add_segment(LogSegment.create(directory, max(log_start_offset, 0), config, now_ms))
        log._recover(recovery_point, clean_shutdown)
        log.log_start_offset = max(log_start_offset, log.segments[0].base_offset)
        if log.log_start_offset > log.log_end_offset:
            log.log_start_offset = log.log_end_offset
        log.recovery_point = log.log_end_offset if clean_shutdown else min(recovery_point, log.log_end_offset)
        log._load_producer_state(log.producer_state.snapshot_offsets(names))
        log._load_leader_epochs()
        return log

    def _load_leader_epochs(self) -> None:
        cache = LeaderEpochCache.load(self.directory)
        if cache is None:
            # No checkpoint (a log written before the cache existed): rebuild it from batch headers.
            cache = LeaderEpochCache(self.directory)
            for header in self.iter_headers(self.log_start_offset):
                cache.assign(header.partition_leader_epoch, header.base_offset, persist=False)
            cache.flush()
        # A crash can leave epochs past the recovered log end, or before a moved log start.
        cache.truncate_from_end(self.log_end_offset)
        cache.truncate_from_start(self.log_start_offset)
        self.leader_epochs = cache

    def _recover(self, recovery_point: int, clean_shutdown: bool) -> None:
        first_unsafe = len(self.segments) if clean_shutdown else max(0, self._segment_index(recovery_point))
        for position, segment in enumerate(self.segments):
            if position < first_unsafe and not segment.needs_recovery:
                continue
            truncated = segment.recover()
            if truncated:
                # Everything after a corrupt batch is unreachable: drop the later segments (Kafka does too).
                for later in self.segments[position + 1 :]:
                    logger.warning("%s: deleting segment %s after a corrupt tail", self.name, later.log_path)
                    later.delete()
                del self.segments[position + 1 :]
                del self._base_offsets[position + 1 :]
                break

    def _load_producer_state(self, snapshot_offsets: list[int] | None = None) -> None:
        end = self.log_end_offset
        if snapshot_offsets is None:
            snapshot_offsets = self.producer_state.snapshot_offsets()
        self.producer_state.delete_snapshots(above=end, offsets=snapshot_offsets)
        start = self.log_start_offset
        for offset in reversed([o for o in snapshot_offsets if o <= end]):
            if self.producer_state.load_snapshot(offset):
                start = offset
                break
        # The transaction indexes are rebuilt from the same point: entries of markers at or past
        # ``start`` come back from the replay (a crash may have lost or torn them).
        for segment in self.segments[max(0, self._segment_index(start)) :]:
            segment.txn_index.truncate_to(start)
        self.producer_state.replay(self.iter_headers(start), self._stored_marker, self._record_completed)

    def _stored_marker(self, header: BatchHeader) -> tuple[int, int] | None:
        segment = self.segments[max(0, self._segment_index(header.base_offset))]
        return parse_marker(segment.read_batch(header))

    def _record_completed(self, completed: CompletedTxn) -> None:
        if completed.aborted:
            segment = self.segments[max(0, self._segment_index(completed.last_offset))]
            segment.txn_index.append(completed.aborted_txn())

    # ---- basic properties --------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self.segments[-1].next_offset

    def first_unstable_offset(self) -> int | None:
        """First offset of the earliest ongoing transaction, or None when none is open."""
        return self.producer_state.first_unstable_offset()

    @property
    def size_bytes(self) -> int:
        return sum(segment.size for segment in self.segments)

    def update_config(self, config: LogConfig) -> None:
        self.config = config
        for segment in self.segments:
            segment.config = config

    def _add_segment(self, segment: LogSegment) -> None:
        self.segments.append(segment)
        self._base_offsets.append(segment.base_offset)

    def _segment_index(self, offset: int) -> int:
        return bisect_right(self._base_offsets, offset) - 1

    # ---- append --------------------------------------------------------------------------------------

    def append(
        self, buf: bytearray | memoryview, batches: list[BatchHeader], *, leader_epoch: int, now_ms: int
    ) -> AppendInfo:
        """Append a validated request's batches for this partition, all or nothing, as the leader."""
        self.wait_for_writes()
        return self._append(buf, batches, leader_epoch, now_ms, None)

    def append_async(
        self,
        buf: bytearray | memoryview,
        batches: list[BatchHeader],
        *,
        leader_epoch: int,
        now_ms: int,
        on_written: Callable[[BaseException | None], None],
    ) -> AppendInfo:
        """``append``, with the write done by a writer thread of the log directory when it should
        be (``LogDirWriter.should_queue``, ``_queue_write``): the returned info then has ``pending``
        set and ``on_written(None)`` is called on the loop once the bytes are in the log (readable,
        counted in ``log_end_offset``), or ``on_written(KafkaStorageError)`` if they could not be
        written (nothing of this append is then kept); ``buf`` must stay unchanged until then.
        Otherwise (and without a writer) this is ``append``: ``pending`` unset, no call."""
        if self.writer is None:
            return self.append(buf, batches, leader_epoch=leader_epoch, now_ms=now_ms)
        return self._append(buf, batches, leader_epoch, now_ms, on_written)

    @property
    def pending_writes(self) -> int:
        return len(self._writes)

    def _append(
        self,
        buf: bytearray | memoryview,
        batches: list[BatchHeader],
        leader_epoch: int,
        now_ms: int,
        on_written: Callable[[BaseException | None], None] | None,
    ) -> AppendInfo:
        if not batches:
            raise ValueError("nothing to append")
        config = self.config
        codec = config.target_codec
        if codec is not None and needs_recompression(batches, codec):
            buf, batches = recompress_batches(
                buf, batches, codec, config.compression_level, config.max_message_bytes
            )
        total_size = 0
        max_message_bytes = config.max_message_bytes
        for batch in batches:
            size = batch.batch_length + LOG_OVERHEAD  # batch.size, without the property's call
            if size > max_message_bytes:
                raise RecordTooLargeError(f"batch of {size} bytes exceeds max.message.bytes {max_message_bytes}")
            total_size += size
        if total_size > config.segment_bytes:
            raise RecordTooLargeError(f"{total_size} bytes exceed segment.bytes {config.segment_bytes}")
        writes = self._writes
        first_offset = writes[-1].end_offset if writes else self.segments[-1].next_offset  # log_end_offset
        plan = self.producer_state.prepare_append(batches, first_offset)
        if plan.duplicate is not None:
            info = AppendInfo(
                plan.duplicate.first_offset, plan.duplicate.last_offset, -1, self.log_start_offset, True
            )
            if writes and on_written is not None:
                # The original may still be on its way to disk: answer when what is queued is written.
                writes[-1].callbacks.append(on_written)
                return _pending(info)
            return info
        log_append_time = config.message_timestamp_type == "LogAppendTime"  # uses_log_append_time
        infos: list[BatchInfo] = []
        next_offset = first_offset
        for batch in batches:
            stamp_offset_and_epoch(buf, batch, next_offset, leader_epoch)
            max_timestamp = batch.max_timestamp
            if log_append_time:
                stamp_log_append_time(buf, batch.position, now_ms)
                max_timestamp = now_ms
            next_offset += batch.last_offset_delta + 1
            infos.append((next_offset - 1, max_timestamp, batch.batch_length + LOG_OVERHEAD))
        try:
            # The epoch is recorded before its first batch is written, so a crash cannot leave a
            # batch of an epoch the checkpoint does not know.
            epochs = self.leader_epochs
            if leader_epoch > epochs.latest_epoch:  # (assign's own test, without its call when it is a no-op)
                epochs.assign(leader_epoch, first_offset)
            queued = on_written is not None and self._queue_write(total_size, next_offset)
            if on_written is None:
                self._write(buf, batches, infos, now_ms)
            elif queued:
                self._submit(buf, batches, infos, now_ms, first_offset, next_offset, on_written)
            else:  # the loop writes it itself (LogDirWriter.should_queue): a write that stalls diverts the next
                switches = voluntary_switches()
                started = perf_counter()
                self._write(buf, batches, infos, now_ms)
                elapsed = perf_counter() - started
                if elapsed >= LogDirWriter.SLOW_WRITE_S:  # slept in the kernel, or only preempted?
                    assert self.writer is not None  # an on_written callback comes with a writer (append_async)
                    self.writer.inline_write_stalled(elapsed, voluntary_switches() > switches)
        except OSError as e:  # disk full, I/O error, read-only: nothing of this append was kept
            raise io_failure(self.directory.parent, f"append to {self.name}", e) from e
        if plan.changes_state:  # (nothing for batches without a producer id)
            self.producer_state.commit(plan)
        info = AppendInfo(
            first_offset, next_offset - 1, now_ms if log_append_time else -1, self.log_start_offset, False
        )
        if queued:
            return _pending(info)
        if next_offset - self.recovery_point >= config.flush_messages:  # _maybe_flush_after_append's test
            try:
                self._maybe_flush_after_append(now_ms)
            except OSError as e:  # written but not made durable: the recovery point stays behind
                raise io_failure(self.directory.parent, f"flush of {self.name}", e) from e
        if storage_errors.failing:  # one truth test per append while nothing failed
            storage_errors.io_success(self.directory.parent)
        return info

    def _queue_write(self, total_size: int, end_offset: int) -> bool:
        """Whether append_async hands this write to the writer thread (else the loop writes it)."""
        if self._writes:  # behind writes still queued: in order
            return True
        if end_offset - self.recovery_point >= self.config.flush_messages:  # an fsync: never on the loop
            return True
        assert self.writer is not None  # asked only by append_async, which has a writer
        return self.writer.should_queue(total_size)

    def _submit(
        self,
        buf: bytearray | memoryview,
        batches: list[BatchHeader],
        infos: list[BatchInfo],
        now_ms: int,
        first_offset: int,
        end_offset: int,
        on_written: Callable[[BaseException | None], None],
    ) -> None:
        """Queue the write of stamped batches at the end of what is already queued."""
        assert self.writer is not None
        if len(infos) == 1:  # one batch per partition: every produce request (no generators then)
            _, max_timestamp, total_size = infos[0]
        else:
            total_size = sum(info[2] for info in infos)
            max_timestamp = max(info[1] for info in infos)
        writes = self._writes
        segment = self.active_segment
        position = writes[-1].end_position if writes else segment.size
        if segment.should_roll(total_size, max_timestamp, infos[-1][0], now_ms, size=position):
            # A roll touches the files (indexes, producer snapshot): only with nothing queued.
            self._wait_for_writes_before(first_offset)
            segment = self.roll(now_ms)
            position = segment.size
        start = batches[0].position
        last = batches[-1]
        end = last.position + last.batch_length + LOG_OVERHEAD  # last.end_position
        view = memoryview(buf)
        if end - start == total_size:
            data: bytes | memoryview = view[start:end]
        else:
            data = b"".join(view[b.position : b.end_position] for b in batches)
        fsync = end_offset - self.recovery_point >= self.config.flush_messages
        if fsync and (self._dir_dirty or self.recovery_point < segment.base_offset):
            # Older segments (or the directory, after a roll) are not durable yet: flush them here,
            # as append does, so that the recovery point never passes what is not on disk.
            self._wait_for_writes_before(first_offset)
            self.flush()
        job = WriteJob(self, self._write_state, segment.file, data, position, fsync, segment, infos, end_offset)
        job.callbacks.append(on_written)
        writes.append(job)
        self.writer.submit(job)

    def _write_done(self, job: WriteJob) -> None:
        """On the loop, in submission order: the writer thread has done (or skipped) ``job``."""
        job.delivered = True
        popped = self._writes.popleft()
        assert popped is job, "log writes completed out of order"
        error: BaseException | None = None
        if job.error is None and self._write_failed:
            # Written although an earlier write of this log failed (the C thread remembers at most
            # 64 failed logs): it lies past a hole, so it is not part of the log.  Cut it off again.
            job.error = WriteSkipped("an earlier write to this log failed")
            try:
                os.ftruncate(job.file.fileno(), job.segment.size)
            except OSError:
                pass  # recovery cuts a torn tail anyway
        if job.error is None:
            job.segment.append_written(job.infos, job.position, job.end_position)
            if job.fsync:  # flush.messages: the thread fsynced the segment after writing
                job.segment.flush_indexes()
                self.recovery_point = max(self.recovery_point, job.end_offset)
            if storage_errors.failing:
                storage_errors.io_success(self.directory.parent)
        elif isinstance(job.error, WriteSkipped):
            self._write_failed = True
            error = storage_errors.KafkaStorageError(f"append to {self.name} failed: {job.error}")
        else:
            self._write_failed = True
            error = io_failure(self.directory.parent, f"append to {self.name}", job.error)
        if self._write_failed and not self._writes:
            self._roll_back_unwritten()
        for callback in job.callbacks:
            callback(error)

    def _roll_back_unwritten(self) -> None:
        """After a failed write, once none is queued: forget what was assigned but not written
        (producer state and leader epochs back to what the files hold)."""
        self._write_failed = False
        assert self.writer is not None
        self.writer.clear_failed(self._write_state)
        self.producer_state.clear()
        self._load_producer_state()
        self.leader_epochs.truncate_from_end(self.log_end_offset)
        logger.warning("%s: appends not written were rolled back to offset %d", self.name, self.log_end_offset)

    def _wait_for_writes_before(self, first_offset: int) -> None:
        """wait_for_writes in the middle of an append whose offsets start at ``first_offset``: if
        an earlier write failed meanwhile, the offsets it was given are gone and it fails too."""
        self.wait_for_writes()
        if self.log_end_offset != first_offset:
            raise storage_errors.KafkaStorageError(
                f"append to {self.name} failed: an earlier write to this log failed"
            )

    def wait_for_writes(self) -> None:
        """Block until every queued write of this log is done and taken back (a no-op when none is)."""
        writes = self._writes
        while writes:
            assert self.writer is not None
            self.writer.wait(writes[0])

    def append_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        *,
        leader_epoch: int,
        now_ms: int,
        transaction_version: int = 0,
    ) -> AppendInfo:
        """Write a COMMIT/ABORT control batch ending ``producer_id``'s transaction, as the leader
        (Kafka's appendAsLeader with origin COORDINATOR; ``transaction_version`` decides which
        epochs the marker may carry, see ``check_marker_epoch``).  An aborted transaction is
        recorded in the transaction index of the segment that receives the marker."""
        self.wait_for_writes()
        buf = bytearray(build_marker_batch(producer_id, producer_epoch, commit, coordinator_epoch, now_ms))
        batches = list(iter_batch_headers(buf))
        offset = self.log_end_offset
        plan = self.producer_state.prepare_marker(
            producer_id, producer_epoch, offset, 1 if commit else 0, coordinator_epoch, transaction_version
        )
        stamp_base_offset(buf, 0, offset)
        stamp_partition_leader_epoch(buf, 0, leader_epoch)
        try:
            self.leader_epochs.assign(leader_epoch, offset)
            self._write(buf, batches, [(offset, batches[0].max_timestamp, batches[0].size)], now_ms)
        except OSError as e:  # nothing of the marker was kept: the coordinator writes it again
            raise io_failure(self.directory.parent, f"transaction marker to {self.name}", e) from e
        self.producer_state.commit_marker(plan)
        try:
            if plan.completed is not None:
                self._record_completed(plan.completed)
        except OSError as e:  # the entry is kept in memory; a recovery from before it rebuilds it
            io_failure(self.directory.parent, f"transaction index of {self.name}", e)
        try:
            self._maybe_flush_after_append(now_ms)
        except OSError as e:
            raise io_failure(self.directory.parent, f"flush of {self.name}", e) from e
        return AppendInfo(offset, offset, -1, self.log_start_offset, False)

    def collect_aborted_transactions(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [fetch_offset, upper_bound), for a read_committed fetch
        (Kafka's collectAbortedTransactions: from the segment holding ``fetch_offset`` onwards)."""
        found: list[AbortedTxn] = []
        for segment in self.segments[max(0, self._segment_index(fetch_offset)) :]:
            entries, complete = segment.txn_index.collect(fetch_offset, upper_bound)
            found.extend(entries)
            if complete:
                break
        return found

    def append_as_follower(
        self, buf: bytearray | bytes | memoryview, batches: list[BatchHeader] | None = None, *, now_ms: int
    ) -> AppendInfo | None:
        """Append batches that already carry the offsets and leader epochs the leader assigned
        (Kafka's appendAsFollower: nothing is reassigned or recompressed).

        ``batches`` None: ``buf`` is a replica fetch's records, parsed here with each batch's CRC
        checked; a trailing partial batch (a fetch cut by its byte limit) is left for the next
        fetch.  Offsets must be increasing and start at or past the log end.  Producer state, the
        transaction index and the leader-epoch cache follow.  None when there was no whole batch."""
        self.wait_for_writes()
        if batches is None:
            batches = follower_batches(buf)
        if not batches:
            return None
        end = self.log_end_offset
        for b in batches:
            if b.base_offset < end or b.last_offset_delta < 0:
                raise UnexpectedAppendOffsetError(
                    f"{self.name}: follower append of a batch at {b.base_offset}, not past {end - 1}",
                    batches[0].base_offset,
                    batches[-1].last_offset,
                )
            if b.size > self.config.segment_bytes:
                raise RecordTooLargeError(f"batch of {b.size} bytes exceeds segment.bytes")
            end = b.last_offset + 1
        infos = [(b.last_offset, b.max_timestamp, b.size) for b in batches]
        first = batches[0].base_offset
        try:
            # Epochs first (as in append): a crash cannot leave a batch of an epoch the cache lacks.
            for b in batches:
                self.leader_epochs.assign(b.partition_leader_epoch, b.base_offset)
            if first > self.log_end_offset and self.active_segment.size == 0:
                self._replace_empty_active_segment(first, now_ms)
            self._write(buf, batches, infos, now_ms)
        except OSError as e:
            raise io_failure(self.directory.parent, f"follower append to {self.name}", e) from e
        view = memoryview(buf)
        self.producer_state.replay(
            batches, lambda b: parse_marker(view[b.position : b.end_position]), self._record_completed
        )
        try:
            self._maybe_flush_after_append(now_ms)
        except OSError as e:
            raise io_failure(self.directory.parent, f"flush of {self.name}", e) from e
        return AppendInfo(first, batches[-1].last_offset, -1, self.log_start_offset, False)

    def end_offset_for_epoch(self, leader_epoch: int) -> tuple[int, int]:
        """(epoch, end offset) of Kafka's LeaderEpochFileCache.endOffsetFor over this log: the
        largest epoch <= ``leader_epoch`` this log knows and the first offset after it; (-1, -1)
        when the log knows no such epoch."""
        return self.leader_epochs.end_offset_for(leader_epoch, self.log_end_offset)

    @property
    def latest_epoch(self) -> int:
        """The leader epoch of the log's last epoch entry (-1: none)."""
        return self.leader_epochs.latest_epoch

    def _write(
        self,
        buf: bytearray | bytes | memoryview,
        batches: list[BatchHeader],
        infos: list[BatchInfo],
        now_ms: int,
    ) -> None:
        if len(infos) == 1:  # one batch per partition: what every produce request appends
            _, max_timestamp, total_size = infos[0]
        else:
            total_size = sum(info[2] for info in infos)
            max_timestamp = max(info[1] for info in infos)
        segment = self.segments[-1]  # the active segment
        if segment.should_roll(total_size, max_timestamp, infos[-1][0], now_ms):
            segment = self.roll(now_ms)
        start = batches[0].position
        last = batches[-1]
        end = last.position + last.batch_length + LOG_OVERHEAD  # last.end_position
        if end - start == total_size:
            segment.append(memoryview(buf)[start:end], infos)
        else:
            view = memoryview(buf)
            segment.append(b"".join(view[b.position : b.end_position] for b in batches), infos)

    def _maybe_flush_after_append(self, now_ms: int) -> None:
        if self.log_end_offset - self.recovery_point >= self.config.flush_messages:
            self.flush()
            self._last_flush_ms = now_ms

    def roll(self, now_ms: int) -> LogSegment:
        """Start a new active segment at the log end offset (snapshotting producer state there)."""
        self.wait_for_writes()
        old = self.active_segment
        new_base = self.log_end_offset
        if old.size == 0:
            return old
        old.on_become_inactive()
        old.offset_index.flush(fsync=False)
        old.time_index.flush(fsync=False)
        segment = LogSegment.create(self.directory, new_base, self.config, now_ms)
        self._add_segment(segment)
        self.producer_state.take_snapshot(new_base)
        self._dir_dirty = True
        logger.debug("%s: rolled new segment at offset %d", self.name, new_base)
        return segment

    def _replace_empty_active_segment(self, base_offset: int, now_ms: int) -> None:
        self.segments.pop().delete()
        self._base_offsets.pop()
        self._add_segment(LogSegment.create(self.directory, base_offset, self.config, now_ms))
        self._dir_dirty = True

    # ---- read ------------------------------------------------------------------------------------------

    def read(
        self, offset: int, max_bytes: int, max_offset: int | None = None, min_one_batch: bool = True
    ) -> FileSlice | None:
        """File slice starting at the batch containing `offset`; None when nothing is readable below max_offset.

        Bytes at/past `max_offset` are never returned, except the rest of a batch that starts below it.
        """
        end = self.log_end_offset
        if offset < self.log_start_offset or offset > end:
            raise OffsetOutOfRangeError(
                f"{self.name}: offset {offset} outside [{self.log_start_offset}, {end}]"
            )
        if max_offset is None or max_offset > end:
            max_offset = end
        if offset >= max_offset:
            return None
        for segment in self.segments[max(0, self._segment_index(offset)) :]:
            if segment.base_offset >= max_offset:
                return None
            if max_offset >= segment.next_offset:
                max_position = segment.size
            else:
                max_position = segment.position_of_first_batch_from(max_offset)
            file_slice = segment.read(offset, max_bytes, max_position, min_one_batch)
            if file_slice is not None:
                return file_slice
        return None

    def iter_headers(self, start_offset: int = 0) -> Iterator[BatchHeader]:
        """Headers of every batch whose last offset is >= `start_offset`."""
        for segment in self.segments[max(0, self._segment_index(start_offset)) :]:
            first = segment.translate_offset(start_offset)
            if first is None:
                continue
            yield from segment.iter_headers(first.position)

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= `timestamp`, or None."""
        for segment in self.segments:
            if segment.max_timestamp >= timestamp:
                found = segment.find_offset_by_timestamp(timestamp, self.log_start_offset)
                if found is not None:
                    return found
        return None

    def offset_of_max_timestamp(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record carrying the log's largest timestamp (KIP-734)."""
        best: LogSegment | None = None
        for segment in self.segments:
            if segment.size and (best is None or segment.max_timestamp > best.max_timestamp):
                best = segment
        if best is None or best.max_timestamp < 0:
            return None
        return best.find_offset_by_timestamp(best.max_timestamp, self.log_start_offset)

    # ---- truncation, deletion, retention -----------------------------------------------------------

    def truncate_to(self, offset: int, now_ms: int) -> bool:
        """Remove every batch at or after the one containing ``offset`` (follower truncation).

        Crash-safe by order: the segments are cut first, then the producer snapshots and the
        leader-epoch cache; a crash in between leaves files that open() cuts to the log end
        again.  A target below the first segment empties the log and restarts it there.  Returns
        whether anything was removed."""
        self.wait_for_writes()
        if offset >= self.log_end_offset:
            return False
        if offset < self.segments[0].base_offset or offset < self.log_start_offset:
            self.truncate_fully_and_start_at(offset, now_ms)
            return True
        while len(self.segments) > 1 and self.segments[-1].base_offset >= offset:
            self.segments.pop().delete()
            self._base_offsets.pop()
            self._dir_dirty = True
        self.active_segment.truncate_to(offset)
        if self.active_segment.size == 0 and self.active_segment.base_offset != self.log_end_offset:
            self._replace_empty_active_segment(self.log_end_offset, now_ms)
        end = self.log_end_offset
        self.log_start_offset = min(self.log_start_offset, end)
        self.recovery_point = min(self.recovery_point, end)
        # The truncated tail must be gone from disk before anything is written past it again.
        self.active_segment.flush()
        self.producer_state.delete_snapshots(above=end)
        self.producer_state.clear()
        self._load_producer_state()
        self.leader_epochs.truncate_from_end(end)
        logger.info("%s: truncated to offset %d", self.name, end)
        return True

    def truncate_fully_and_start_at(self, offset: int, now_ms: int) -> None:
        """Drop every segment and start an empty log at ``offset`` (a follower whose log lies
        wholly below the leader's log start offset: Kafka's truncateFullyAndStartAt)."""
        self.wait_for_writes()
        for segment in self.segments:
            segment.delete()
        self.segments.clear()
        self._base_offsets.clear()
        self._add_segment(LogSegment.create(self.directory, offset, self.config, now_ms))
        self._dir_dirty = True
        self.flush()
        self.log_start_offset = offset
        self.recovery_point = offset
        self.producer_state.delete_snapshots(above=-1)
        self.producer_state.clear()
        self.leader_epochs.truncate_from_end(-1)
        logger.info("%s: truncated fully, log now starts at offset %d", self.name, offset)

    def delete_records_before(self, offset: int) -> int:
        """Move the log start offset to `offset` (DeleteRecords) and drop segments wholly below it."""
        if offset > self.log_end_offset or offset < 0:
            raise OffsetOutOfRangeError(
                f"{self.name}: cannot delete before {offset} (log end {self.log_end_offset})"
            )
        if offset > self.log_start_offset:
            self.log_start_offset = offset
        deleted = self._delete_segments_below_log_start()
        self._truncate_epochs_from_start()
        return deleted

    def _truncate_epochs_from_start(self) -> None:
        # Freeing space must work on a full disk: the epoch checkpoint is only rewritten by the
        # next change that succeeds, and at start-up it is cut to the log start offset anyway.
        try:
            self.leader_epochs.truncate_from_start(self.log_start_offset)
        except OSError as e:
            io_failure(self.directory.parent, f"leader epoch checkpoint of {self.name}", e)

    def _delete_segments_below_log_start(self) -> int:
        count = 0
        while len(self.segments) > 1 and self.segments[1].base_offset <= self.log_start_offset:
            self._delete_oldest_segment()
            count += 1
        return count

    def _delete_oldest_segment(self) -> None:
        segment = self.segments.pop(0)
        self._base_offsets.pop(0)
        segment.delete()
        self.log_start_offset = max(self.log_start_offset, self.segments[0].base_offset)
        self.producer_state.delete_snapshots(below=self.segments[0].base_offset)

    def remove_expired_producers(self, now_ms: int, expiration_ms: int) -> int:
        return self.producer_state.remove_expired(now_ms, expiration_ms)

    def apply_retention(self, now_ms: int) -> int:
        """Delete old segments by retention.ms / retention.bytes and the log start offset. Returns count."""
        deleted = self._delete_segments_below_log_start()
        if not self.config.deletes_by_retention:
            return deleted
        retention_ms = self.config.retention_ms
        if retention_ms >= 0:
            while len(self.segments) > 1 and now_ms - self.segments[0].largest_timestamp > retention_ms:
                self._delete_oldest_segment()
                deleted += 1
        retention_bytes = self.config.retention_bytes
        if retention_bytes >= 0:
            excess = self.size_bytes - retention_bytes
            while len(self.segments) > 1 and excess - self.segments[0].size >= 0:
                excess -= self.segments[0].size
                self._delete_oldest_segment()
                deleted += 1
        if deleted:
            self._truncate_epochs_from_start()
            logger.info(
                "%s: deleted %d segments, log start offset now %d", self.name, deleted, self.log_start_offset
            )
        return deleted

    # ---- durability --------------------------------------------------------------------------------------

    def flush(self, up_to: int | None = None, fsync: bool = True) -> None:
        """fsync segments holding offsets in [recovery_point, up_to) and advance the recovery point.

        ``fsync=False`` only writes their index entries: the caller makes the file system durable
        (one syncfs at shutdown) and then calls ``mark_flushed``; the recovery point stays put."""
        self.wait_for_writes()
        end = self.log_end_offset
        target = end if up_to is None else min(up_to, end)
        if target <= self.recovery_point and not self._dir_dirty:
            return
        for segment in self.segments[max(0, self._segment_index(self.recovery_point)) :]:
            if segment.base_offset >= target and segment is not self.active_segment:
                break
            segment.flush(fsync=fsync)
        if not fsync:
            return
        if self._dir_dirty:
            _fsync_dir(self.directory)
            self._dir_dirty = False
        self.recovery_point = max(self.recovery_point, target)

    def flush_if_due(self, now_ms: int) -> bool:
        if now_ms - self._last_flush_ms >= self.config.flush_ms and self.log_end_offset > self.recovery_point:
            self.flush()
            self._last_flush_ms = now_ms
            return True
        return False

    def close(self, durable: bool = True) -> None:
        """Flush everything, snapshot producer state at the log end and release the files.

        ``durable=False`` writes all of it but leaves every fsync to the caller, who must make the
        file system durable (one syncfs for all logs at shutdown) and only then call
        ``mark_flushed`` — the recovery point must never pass data that is not on disk."""
        self.wait_for_writes()
        # The active segment's closing time-index entry before the flush, so each index file is
        # written (and, without syncfs, fsynced) once at shutdown, not again by segment.close.
        self.active_segment.on_become_inactive()
        self.flush(fsync=durable)
        end = self.log_end_offset
        # As Kafka's ProducerStateManager: no snapshot unless the log moved past the last one (an
        # existing snapshot at this offset holds the same state; an empty log has none to keep).
        if end > 0 and end not in self.producer_state.snapshot_offsets():
            self.producer_state.take_snapshot(end, fsync=durable)
        for segment in self.segments:
            # flush() above made every .log durable, or the caller will
            segment.close(fsync_log=False, fsync_indexes=durable)

    def mark_flushed(self) -> None:
        """Everything written is on disk (the caller synced the file system): advance the
        recovery point to the log end."""
        self.recovery_point = max(self.recovery_point, self.log_end_offset)
        self._dir_dirty = False

    def delete(self) -> None:
        for segment in self.segments:
            segment.file = None  # type: ignore[assignment]
        shutil.rmtree(self.directory, ignore_errors=True)


def _pending(info: AppendInfo) -> AppendInfo:
    return info._replace(pending=True)


def follower_batches(buf: bytes | bytearray | memoryview) -> list[BatchHeader]:
    """The whole batches of a replica fetch's records, CRCs checked; a trailing partial batch
    (cut by the fetch's byte limit, as Kafka's FileRecords slices may be) is left out."""
    view = memoryview(buf)
    end = len(view)
    position = 0
    while end - position >= LOG_OVERHEAD:
        length = int.from_bytes(view[position + 8 : position + 12], "big", signed=True)
        if length < 0 or position + LOG_OVERHEAD + length > end:
            break
        position += LOG_OVERHEAD + length
    return list(iter_batch_headers(view[:position], verify_crc=True))


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


__all__ = ["AppendInfo", "Log", "follower_batches"]
