"""LogManager: log directories, partition logs, recovery, retention and checkpoints."""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pybroker.storage.checkpoint import (
    read_offset_checkpoint,
    read_partition_metadata,
    write_offset_checkpoint,
    write_partition_metadata,
)
from pybroker.storage.config import LogConfig
from pybroker.storage.errors import LogDirLockedError, StorageError, io_failure
from pybroker.storage.log import Log, _fsync_dir
from pybroker.storage.syncfs import syncfs, syncfs_available
from pybroker.storage.writer import LogDirWriter

logger = logging.getLogger(__name__)

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
LOCK_FILE = ".lock"
DELETE_DIR_SUFFIX = "-delete"
# A replica being moved to another log dir (AlterReplicaLogDirs) is copied into
# ``<topic>-<partition>.<uuid>-future`` there, Kafka's future log, until it replaces the current one.
FUTURE_DIR_SUFFIX = "-future"
# Threads that close logs at shutdown; fsync-bound, so more than the 2 cores pays off.
SHUTDOWN_THREADS = 8
# Writer threads per log directory (storage/writer.py; each partition's writes go to one of them, so a
# slow partition holds up only the partitions sharing its thread).  Kafka's num.io.threads is 8, for
# all of a request's work; these only write.
WRITER_THREADS_PER_DIR = 4


def parse_partition_dir_name(name: str) -> tuple[str, int] | None:
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit():
        return None
    return topic, int(partition)


def parse_future_dir_name(name: str) -> tuple[str, int] | None:
    """``<topic>-<partition>.<uuid>-future`` -> (topic, partition)."""
    if not name.endswith(FUTURE_DIR_SUFFIX):
        return None
    stem, dot, _unique = name[: -len(FUTURE_DIR_SUFFIX)].rpartition(".")
    return parse_partition_dir_name(stem) if dot else None


def remove_directories(paths: list[Path]) -> list[Path]:
    """Delete whole directories (deleted partitions); safe on any thread."""
    for path in paths:
        shutil.rmtree(path, ignore_errors=True)
    return paths


class LogManager:
    def __init__(
        self,
        log_dirs: list[Path],
        clock: Callable[[], float] = time.time,
        default_config: LogConfig | None = None,
    ) -> None:
        if not log_dirs:
            raise ValueError("at least one log directory is needed")
        self.log_dirs = [Path(d) for d in log_dirs]
        self.clock = clock
        self.default_config = default_config or LogConfig()
        self._logs: dict[tuple[str, int], Log] = {}
        self._log_dir_of: dict[tuple[str, int], Path] = {}
        self.topic_ids: dict[tuple[str, int], uuid.UUID | None] = {}
        self._lock_fds: list[int] = []
        self.loaded = False  # startup() has loaded the logs; only then may shutdown() mark a clean stop
        self._pending_deletes: list[tuple[int, Path]] = []
        # Future logs (replicas being moved to another log dir) and their directories.
        self._future_logs: dict[tuple[str, int], Log] = {}
        self._future_dir_of: dict[tuple[str, int], Path] = {}
        # Moves a restart interrupted: the partition and its destination dir (the copy starts again).
        self.interrupted_moves: dict[tuple[str, int], Path] = {}
        # Writer threads per log directory for produced batches (storage/writer.py: each log bound to
        # one); PYBROKER_LOG_WRITER_THREADS=0 writes them all on the event loop (to compare the two).
        threads = int(os.environ.get("PYBROKER_LOG_WRITER_THREADS", str(WRITER_THREADS_PER_DIR)))
        self._writers: dict[Path, LogDirWriter] = (
            {d: LogDirWriter(d.name, threads) for d in self.log_dirs} if threads > 0 else {}
        )

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    # ---- startup / shutdown ---------------------------------------------------------------------------

    def lock_dirs(self) -> None:
        """Create and lock every log dir (a broker does this before anything else: a directory in use
        by another process must stop start-up before this one writes a byte). Idempotent."""
        if self._lock_fds:
            return
        try:
            for log_dir in self.log_dirs:
                log_dir.mkdir(parents=True, exist_ok=True)
                self._lock(log_dir)
        except BaseException:
            self.unlock_dirs()
            raise

    def unlock_dirs(self) -> None:
        for fd in self._lock_fds:
            os.close(fd)
        self._lock_fds.clear()

    def startup(self, config_for: Callable[[str], LogConfig] | None = None) -> None:
        """Lock the dirs and load every partition, recovering after an unclean shutdown."""
        now_ms = self.now_ms()
        self.lock_dirs()
        futures: list[tuple[tuple[str, int], Path, Path, bool]] = []
        for log_dir in self.log_dirs:
            clean_marker = log_dir / CLEAN_SHUTDOWN_FILE
            clean_shutdown = clean_marker.exists()
            # A directory no broker has used yet: nothing to recover, and no shutdown to call unclean.
            fresh = not clean_shutdown and not (log_dir / RECOVERY_POINT_CHECKPOINT).exists()
            recovery_points = read_offset_checkpoint(log_dir / RECOVERY_POINT_CHECKPOINT)
            start_offsets = read_offset_checkpoint(log_dir / LOG_START_OFFSET_CHECKPOINT)
            for entry in sorted(log_dir.iterdir()):
                if not entry.is_dir():
                    continue
                if entry.name.endswith(DELETE_DIR_SUFFIX):
                    shutil.rmtree(entry, ignore_errors=True)
                    continue
                future = parse_future_dir_name(entry.name)
                if future is not None:
                    futures.append((future, log_dir, entry, clean_shutdown))
                    continue
                parsed = parse_partition_dir_name(entry.name)
                if parsed is None:
                    continue
                config = config_for(parsed[0]) if config_for else self.default_config
                log = Log.open(
                    entry,
                    parsed[0],
                    parsed[1],
                    config,
                    now_ms,
                    recovery_point=recovery_points.get(parsed, 0),
                    log_start_offset=start_offsets.get(parsed, 0),
                    clean_shutdown=clean_shutdown,
                )
                self._attach_writer(log, log_dir)
                self._logs[parsed] = log
                self._log_dir_of[parsed] = log_dir
                self.topic_ids[parsed] = read_partition_metadata(entry)
            if clean_shutdown:
                clean_marker.unlink()
            if fresh and not any(self._log_dir_of.get(tp) == log_dir for tp in self._logs):
                logger.info("loaded log dir %s (new, no logs yet)", log_dir)
            else:
                logger.info(
                    "loaded log dir %s (%s shutdown)", log_dir, "clean" if clean_shutdown else "unclean"
                )
        for key, log_dir, entry, clean_shutdown in futures:
            self._recover_future_dir(key, log_dir, entry, config_for, now_ms, clean_shutdown)
        self.checkpoint()
        self.loaded = True

    def _recover_future_dir(
        self,
        key: tuple[str, int],
        log_dir: Path,
        entry: Path,
        config_for: Callable[[str], LogConfig] | None,
        now_ms: int,
        clean_shutdown: bool,
    ) -> None:
        """A move a restart interrupted.  With the current log in place the copy is dropped and the
        move recorded to start again; without it (stopped between the two renames of the swap) the
        future log is the partition's only complete copy, and becomes its log."""
        if key in self._logs:
            shutil.rmtree(entry, ignore_errors=True)
            self.interrupted_moves[key] = log_dir
            logger.info("%s-%d: the move to %s was interrupted; it starts again", key[0], key[1], log_dir)
            return
        target = log_dir / f"{key[0]}-{key[1]}"
        os.replace(entry, target)
        config = config_for(key[0]) if config_for else self.default_config
        log = Log.open(target, key[0], key[1], config, now_ms, clean_shutdown=clean_shutdown)
        self._attach_writer(log, log_dir)
        self._logs[key] = log
        self._log_dir_of[key] = log_dir
        self.topic_ids[key] = read_partition_metadata(target)
        logger.info("%s-%d: the future log in %s completes an interrupted move", key[0], key[1], log_dir)

    def _lock(self, log_dir: Path) -> None:
        fd = os.open(log_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            os.close(fd)
            raise LogDirLockedError(
                f"Failed to acquire lock on file {LOCK_FILE} in {log_dir}: another pybroker (or Kafka) process "
                "is using this log directory"
            ) from exc
        self._lock_fds.append(fd)

    def _attach_writer(self, log: Log, log_dir: Path) -> None:
        writer = self._writers.get(log_dir)
        if writer is not None:
            writer.attach(log)

    def finish_writes(self) -> None:
        """On the event loop, before ``shutdown``: wait for every queued write (their requests get
        their answers) and stop the writer threads."""
        for log in self._logs.values():
            log.wait_for_writes()
        for writer in self._writers.values():
            writer.stop()

    def shutdown(self) -> None:
        """Flush every log, snapshot producer state, write checkpoints and the clean-shutdown marker.

        Logs close on a few threads, as Kafka closes them with num.recovery.threads.per.data.dir:
        closing is mostly fsync, which waits on the disk with the GIL released, so with 10,000
        partitions the waits overlap instead of adding up.  Each log is closed by one thread only."""
        if not self.loaded:  # start-up failed before the logs were loaded: nothing may be marked clean
            self.unlock_dirs()
            return
        logs = list(self._logs.values())
        whole_fs_sync = syncfs_available()
        with ThreadPoolExecutor(max_workers=SHUTDOWN_THREADS, thread_name_prefix="log-close") as pool:
            for _ in pool.map(lambda log: log.close(durable=not whole_fs_sync), logs):
                pass  # re-raises the first failure
        if whole_fs_sync:
            # One syncfs per log directory instead of a few fsyncs per partition (thousands of
            # disk round trips with 10,000 partitions); only then may the recovery points move.
            for log_dir in self.log_dirs:
                syncfs(log_dir)
            for log in logs:
                log.mark_flushed()
        self.checkpoint()
        for log_dir in self.log_dirs:
            (log_dir / CLEAN_SHUTDOWN_FILE).touch()
        self.purge_deleted(force=True)
        self.unlock_dirs()
        self._logs.clear()

    # ---- logs -----------------------------------------------------------------------------------------

    def get_log(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def all_logs(self) -> list[Log]:
        return list(self._logs.values())

    def create_log(self, topic: str, partition: int, config: LogConfig, topic_id: uuid.UUID) -> Log:
        key = (topic, partition)
        existing = self._logs.get(key)
        if existing is not None:
            if self.topic_ids.get(key) not in (None, topic_id):
                raise StorageError(f"log {topic}-{partition} exists with another topic id")
            existing.update_config(config)
            return existing
        log_dir = self.choose_log_dir()
        log = self.build_log(log_dir, topic, partition, config, topic_id, self.now_ms())
        self.register_log(log, log_dir, topic_id)
        return log

    def choose_log_dir(self) -> Path:
        """The directory holding the fewest partitions (Kafka's placement rule)."""
        if len(self.log_dirs) == 1:
            return self.log_dirs[0]
        counts = {d: 0 for d in self.log_dirs}
        for d in self._log_dir_of.values():
            counts[d] = counts.get(d, 0) + 1
        return min(self.log_dirs, key=lambda d: counts[d])

    @staticmethod
    def build_log(
        log_dir: Path, topic: str, partition: int, config: LogConfig, topic_id: uuid.UUID, now_ms: int
    ) -> Log:
        """Create a new partition's files; touches no manager state, so it may run in an executor
        thread (creating thousands of partitions must not stall the event loop)."""
        log = Log.create(log_dir / f"{topic}-{partition}", topic, partition, config, now_ms)
        write_partition_metadata(log.directory, topic_id)
        return log

    def register_log(self, log: Log, log_dir: Path, topic_id: uuid.UUID) -> None:
        key = (log.topic, log.partition)
        if key in self._logs:
            raise StorageError(f"log {log.topic}-{log.partition} already exists")
        self._attach_writer(log, log_dir)
        self._logs[key] = log
        self._log_dir_of[key] = log_dir
        self.topic_ids[key] = topic_id

    def delete_log(self, topic: str, partition: int) -> None:
        """Rename the partition dir to `<name>.<uuid>-delete` now; its files go at the next purge.
        A future log of the partition goes with it."""
        key = (topic, partition)
        self.remove_future_log(topic, partition)
        log = self._logs.pop(key, None)
        if log is None:
            return
        self._log_dir_of.pop(key, None)
        self.topic_ids.pop(key, None)
        self._schedule_delete(log)

    def _schedule_delete(self, log: Log) -> None:
        target = log.directory.with_name(f"{log.directory.name}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}")
        os.replace(log.directory, target)
        for segment in log.segments:
            segment.file = None  # type: ignore[assignment]
        self._pending_deletes.append((self.now_ms() + log.config.file_delete_delay_ms, target))

    # ---- moving a replica to another log dir (AlterReplicaLogDirs) ----------------------------------------

    def log_dir_of(self, topic: str, partition: int) -> Path | None:
        return self._log_dir_of.get((topic, partition))

    def configured_log_dir(self, path: str) -> Path | None:
        """The log dir ``path`` names, compared as Kafka's LogManager does: an absolute path,
        exactly (a trailing slash or a relative path names none)."""
        for d in self.log_dirs:
            if path in (str(d.absolute()), str(d.resolve())):
                return d
        return None

    def future_log(self, topic: str, partition: int) -> Log | None:
        return self._future_logs.get((topic, partition))

    def future_log_dir_of(self, topic: str, partition: int) -> Path | None:
        return self._future_dir_of.get((topic, partition))

    def future_logs(self) -> list[tuple[Path, Log]]:
        return [(self._future_dir_of[k], log) for k, log in self._future_logs.items()]

    def create_future_log(self, topic: str, partition: int, log_dir: Path, config: LogConfig) -> Log:
        """An empty future log of the partition in ``log_dir`` (Kafka's maybeCreateFutureReplica)."""
        key = (topic, partition)
        if key in self._future_logs:
            raise StorageError(f"{topic}-{partition} already has a future log")
        directory = log_dir / f"{topic}-{partition}.{uuid.uuid4().hex}{FUTURE_DIR_SUFFIX}"
        try:
            log = Log.create(directory, topic, partition, config, self.now_ms())
            topic_id = self.topic_ids.get(key)
            if topic_id is not None:
                write_partition_metadata(directory, topic_id)
        except OSError as e:
            raise io_failure(log_dir, f"creating the future log of {topic}-{partition}", e) from e
        self._future_logs[key] = log
        self._future_dir_of[key] = log_dir
        return log

    def remove_future_log(self, topic: str, partition: int) -> None:
        key = (topic, partition)
        log = self._future_logs.pop(key, None)
        self._future_dir_of.pop(key, None)
        if log is not None:
            self._schedule_delete(log)

    def replace_current_with_future_log(self, topic: str, partition: int) -> Log:
        """The caught-up future log becomes the partition's log (Kafka's replaceCurrentWithFutureLog):
        the current directory is renamed away first, then the future one takes the partition's name, so a
        stop between the two leaves only the future copy (``startup`` completes the move).  The caller
        holds the event loop: nothing is appended to the current log meanwhile."""
        key = (topic, partition)
        current = self._logs[key]
        future = self._future_logs.pop(key)
        log_dir = self._future_dir_of.pop(key)
        current.wait_for_writes()
        if current.log_end_offset != future.log_end_offset:
            raise StorageError(f"{topic}-{partition}: the future log is not caught up")
        future.close()
        # Entries the current log has and the copy cannot (a leader epoch begun at the log end).
        epochs = [e for e in current.leader_epochs.entries if e[0] > future.leader_epochs.latest_epoch]
        config = current.config
        self._logs.pop(key)
        self._schedule_delete(current)
        target = log_dir / f"{topic}-{partition}"
        try:
            os.replace(future.directory, target)
            _fsync_dir(log_dir)  # both renames durable before the move is reported done
            log = Log.open(
                target,
                topic,
                partition,
                config,
                self.now_ms(),
                recovery_point=future.log_end_offset,
                log_start_offset=max(current.log_start_offset, future.log_start_offset),
                clean_shutdown=True,
            )
        except OSError as e:
            raise io_failure(log_dir, f"replacing {topic}-{partition} with its future log", e) from e
        for epoch, start in epochs:
            log.leader_epochs.assign(epoch, start)
        self._attach_writer(log, log_dir)
        self._logs[key] = log
        self._log_dir_of[key] = log_dir
        self.checkpoint()
        return log

    def purge_deleted(self, force: bool = False) -> int:
        return len(remove_directories(self.take_due_deletes(force)))

    def take_due_deletes(self, force: bool = False) -> list[Path]:
        """The renamed-away partition directories whose delay is over, no longer pending: the
        caller removes them (``remove_directories``), off the event loop — unlinking thousands of
        files can take seconds (minutes on a disk that discards freed blocks synchronously)."""
        now_ms = self.now_ms()
        due = [p for t, p in self._pending_deletes if force or t <= now_ms]
        if due:
            self._pending_deletes = [(t, p) for t, p in self._pending_deletes if not (force or t <= now_ms)]
        return due

    # ---- periodic work ------------------------------------------------------------------------------------

    def retention_pass(self, now_ms: int | None = None) -> int:
        now_ms = self.now_ms() if now_ms is None else now_ms
        return sum(log.apply_retention(now_ms) for log in self._logs.values())

    def remove_expired_producers(self, expiration_ms: int, now_ms: int | None = None) -> int:
        now_ms = self.now_ms() if now_ms is None else now_ms
        return sum(log.remove_expired_producers(now_ms, expiration_ms) for log in self._logs.values())

    def flush_dirty(self, now_ms: int | None = None) -> int:
        now_ms = self.now_ms() if now_ms is None else now_ms
        flushed = 0
        for key, log in self._logs.items():
            try:
                flushed += log.flush_if_due(now_ms)
            except OSError as e:
                io_failure(self._log_dir_of.get(key, log.directory.parent), f"flush of {log.name}", e)
        return flushed

    def checkpoint(self) -> None:
        for log_dir in self.log_dirs:
            keys = [k for k, d in self._log_dir_of.items() if d == log_dir]
            try:
                write_offset_checkpoint(
                    log_dir / RECOVERY_POINT_CHECKPOINT, {k: self._logs[k].recovery_point for k in keys}
                )
                write_offset_checkpoint(
                    log_dir / LOG_START_OFFSET_CHECKPOINT, {k: self._logs[k].log_start_offset for k in keys}
                )
            except OSError as e:
                # A full disk: the older checkpoints stay (recovery scans a little more after a
                # crash; moved log starts are written by the next checkpoint that succeeds).
                io_failure(log_dir, "writing checkpoints", e)
