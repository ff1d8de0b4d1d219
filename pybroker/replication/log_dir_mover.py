"""Moving a replica between this broker's log dirs (AlterReplicaLogDirs): Kafka's
ReplicaAlterLogDirsManager and ReplicaAlterLogDirsThread.

A move makes a future log in the destination dir (``<topic>-<partition>.<uuid>-future``) and copies
the current log's batches into it as a follower would (offsets, epochs, producer state and
transaction index as they are), a chunk at a time between other work on the event loop, while the
partition keeps serving produce and fetch from the current log.  Once the copy has caught up, in one
step on the loop (so no append comes in between), the future log replaces the current one, whose
directory is deleted after ``file.delete.delay.ms``.  A restart during the copy starts it again
(storage/manager.py ``interrupted_moves``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path

from pybroker.replication.replica_manager import ReplicaManager
from pybroker.storage.config import LogConfig
from pybroker.storage.log import Log
from pybroker.storage.manager import LogManager

log = logging.getLogger(__name__)

# Bytes copied per step: the loop serves requests between two steps.
COPY_CHUNK_BYTES = 1 << 20
UNLIMITED = 2**63 - 1


class ReplicaAlterLogDirsManager:
    def __init__(
        self,
        log_manager: LogManager,
        replica_manager: ReplicaManager,
        config_for: Callable[[str], LogConfig],
        rate: Callable[[], int] = lambda: UNLIMITED,
    ) -> None:
        self.log_manager = log_manager
        self.replica_manager = replica_manager
        self.config_for = config_for
        # replica.alter.log.dirs.io.max.bytes.per.second, read at every step (a dynamic broker config).
        self.rate = rate
        self._tasks: dict[tuple[str, int], asyncio.Task[None]] = {}

    def start(self) -> None:
        """Start again the moves a restart interrupted."""
        for (topic, partition), log_dir in sorted(self.log_manager.interrupted_moves.items()):
            if self.replica_manager.get_partition(topic, partition) is not None:
                self.alter(topic, partition, log_dir)
        self.log_manager.interrupted_moves.clear()

    def stop(self) -> None:
        for task in self._tasks.values():
            task.cancel()
        self._tasks.clear()

    def alter(self, topic: str, partition: int, log_dir: Path) -> None:
        """Move the hosted replica to ``log_dir`` (nothing to do when it is there and not moving
        elsewhere); a move to another dir already under way is abandoned.  Raises
        KafkaStorageError when the future log cannot be made."""
        key = (topic, partition)
        lm = self.log_manager
        future_dir = lm.future_log_dir_of(topic, partition)
        if future_dir is not None and future_dir != log_dir:
            self._cancel(key)
            lm.remove_future_log(topic, partition)
            log.info("%s-%d: the move to %s is abandoned", topic, partition, future_dir)
        if lm.log_dir_of(topic, partition) == log_dir or lm.future_log(topic, partition) is not None:
            return
        lm.create_future_log(topic, partition, log_dir, self.config_for(topic))
        log.info("%s-%d: moving from %s to %s", topic, partition, lm.log_dir_of(topic, partition), log_dir)
        self._tasks[key] = asyncio.ensure_future(self._move(topic, partition))

    def _cancel(self, key: tuple[str, int]) -> None:
        task = self._tasks.pop(key, None)
        if task is not None:
            task.cancel()

    async def _move(self, topic: str, partition: int) -> None:
        key = (topic, partition)
        try:
            while True:
                current, future = self._logs(topic, partition)
                if current is None or future is None:
                    return  # deleted, or the move abandoned
                rate = self.rate()
                copied = self._copy_some(current, future, min(COPY_CHUNK_BYTES, rate))
                if not copied:
                    break
                await asyncio.sleep(copied / rate if rate < UNLIMITED else 0)
            # Caught up with what is written: wait for the writes in flight and copy them too, then
            # swap, all without yielding the loop.
            current.wait_for_writes()
            while self._copy_some(current, future, COPY_CHUNK_BYTES):
                pass
            replaced = self.log_manager.replace_current_with_future_log(topic, partition)
            p = self.replica_manager.get_partition(topic, partition)
            if p is not None:
                p.log = replaced
            log.info(
                "%s-%d: moved to %s at offset %d", topic, partition, replaced.directory.parent, replaced.log_end_offset
            )
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s-%d: moving the replica failed; it stays where it was", topic, partition)
            self.log_manager.remove_future_log(topic, partition)
        finally:
            if self._tasks.get(key) is asyncio.current_task():
                self._tasks.pop(key, None)

    def _logs(self, topic: str, partition: int) -> tuple[Log | None, Log | None]:
        p = self.replica_manager.get_partition(topic, partition)
        return (None if p is None else p.log), self.log_manager.future_log(topic, partition)

    @staticmethod
    def _copy_some(current: Log, future: Log, max_bytes: int) -> int:
        """Copy the next chunk (at least one batch) of the current log into the future one; the bytes
        copied, 0 when caught up."""
        now_ms = int(time.time() * 1000)
        if current.log_start_offset > future.log_end_offset:  # retention or DeleteRecords moved past it
            future.truncate_fully_and_start_at(current.log_start_offset, now_ms)
        if future.log_end_offset >= current.log_end_offset:
            return 0
        chunk = current.read(future.log_end_offset, max_bytes, None, True)
        if chunk is None:
            return 0
        data = chunk.read()
        future.append_as_follower(data, now_ms=now_ms)
        return len(data)
