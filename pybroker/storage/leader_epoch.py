"""The leader-epoch cache of one partition: for every leader epoch, the first offset written in it.

Kafka's `leader-epoch-checkpoint` file and semantics (LeaderEpochFileCache): it answers
OffsetForLeaderEpoch (consumers validating their position, followers finding where to truncate),
so it must survive restarts and follow the log when it is truncated at either end.
"""

from __future__ import annotations

import bisect
import logging
from pathlib import Path

from pybroker.storage.checkpoint import read_if_exists, write_atomically
from pybroker.storage.errors import StorageError

logger = logging.getLogger(__name__)

FILE_NAME = "leader-epoch-checkpoint"
VERSION = 0
UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


class LeaderEpochCache:
    def __init__(self, directory: Path, entries: list[tuple[int, int]] | None = None) -> None:
        self.path = directory / FILE_NAME
        self._epochs: list[int] = []
        self._starts: list[int] = []
        for epoch, start in entries or []:
            self._epochs.append(epoch)
            self._starts.append(start)

    @classmethod
    def load(cls, directory: Path) -> LeaderEpochCache | None:
        """The cache from its checkpoint file, or None when there is no file (rebuild from the log)."""
        path = directory / FILE_NAME
        data = read_if_exists(path)
        if data is None:
            return None
        lines = data.decode().split("\n")
        try:
            if int(lines[0]) != VERSION:
                raise ValueError(f"version {lines[0]}")
            count = int(lines[1])
            parsed = [tuple(int(x) for x in line.split()) for line in lines[2 : 2 + count]]
            if len(parsed) != count or any(len(e) != 2 for e in parsed):
                raise ValueError("entry count does not match")
        except (ValueError, IndexError) as e:
            raise StorageError(f"malformed {path}: {e}") from None
        return cls(directory, [(epoch, start) for epoch, start in parsed])  # pairs: checked above

    @property
    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._epochs, self._starts, strict=True))

    @property
    def latest_epoch(self) -> int:
        return self._epochs[-1] if self._epochs else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int, *, persist: bool = True) -> None:
        """Record that `epoch` starts at `start_offset`; only a newer epoch is recorded."""
        if epoch < 0 or epoch <= self.latest_epoch:
            return
        if self._starts and start_offset < self._starts[-1]:
            logger.warning(
                "%s: epoch %d starts at %d, before the previous epoch's start %d",
                self.path,
                epoch,
                start_offset,
                self._starts[-1],
            )
        self._epochs.append(epoch)
        self._starts.append(start_offset)
        if persist:
            self.flush()

    def truncate_from_end(self, end_offset: int) -> None:
        """The log now ends at `end_offset`: forget epochs that start at or after it."""
        keep = bisect.bisect_left(self._starts, end_offset)
        if keep < len(self._starts):
            del self._epochs[keep:]
            del self._starts[keep:]
            self.flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at `start_offset`: the epoch covering it now starts there."""
        below = bisect.bisect_right(self._starts, start_offset)
        if below == 0:
            return
        # Keep the last entry at or below the new start, moved up to it (Kafka's truncateFromStart).
        if below == 1 and self._starts[0] == start_offset:
            return
        del self._epochs[: below - 1]
        del self._starts[: below - 1]
        self._starts[0] = start_offset
        self.flush()

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) as OffsetForLeaderEpoch answers: the largest epoch <= requested and
        the start offset of the first epoch after it (the log end for the latest epoch)."""
        if requested_epoch == UNDEFINED_EPOCH or not self._epochs:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if requested_epoch == self._epochs[-1]:
            return requested_epoch, log_end_offset
        higher = bisect.bisect_right(self._epochs, requested_epoch)
        if higher == len(self._epochs):
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET  # newer than anything this log has seen
        if higher == 0:
            return requested_epoch, self._starts[0]  # older than the first epoch we still know
        return self._epochs[higher - 1], self._starts[higher]

    def flush(self) -> None:
        lines = [str(VERSION), str(len(self._epochs))]
        lines += [f"{e} {s}" for e, s in zip(self._epochs, self._starts, strict=True)]
        write_atomically(self.path, ("\n".join(lines) + "\n").encode())
