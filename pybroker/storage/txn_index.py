"""TransactionIndex: a segment's aborted transactions, in Kafka's ``.txnindex`` format.

Each entry is 34 bytes, big-endian: int16 version (0), int64 producer id, int64 first offset,
int64 last offset (the ABORT marker's offset), int64 last stable offset (the LSO once this
transaction completed).  The entry lives in the index of the segment holding the marker; read_committed
fetches collect the entries overlapping the fetched range.  The file is created only when a first
entry is written, as Kafka does.
"""

from __future__ import annotations

import logging
import os
import struct
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = ENTRY.size  # 34
VERSION = 0


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TransactionIndex:
    def __init__(self, path: Path, entries: list[AbortedTxn] | None = None) -> None:
        self.path = path
        self.entries: list[AbortedTxn] = entries or []

    @classmethod
    def load(cls, path: Path) -> TransactionIndex:
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return cls(path)
        entries = []
        usable = len(data) - len(data) % ENTRY_SIZE
        for pos in range(0, usable, ENTRY_SIZE):
            version, pid, first, last, lso = ENTRY.unpack_from(data, pos)
            if version != VERSION:
                logger.warning("%s: unknown entry version %d at %d, ignoring the rest", path, version, pos)
                break
            entries.append(AbortedTxn(pid, first, last, lso))
        index = cls(path, entries)
        if usable != len(data) or len(entries) * ENTRY_SIZE != len(data):
            index._rewrite()  # a torn or unreadable tail: keep what is whole
        return index

    def append(self, txn: AbortedTxn) -> None:
        if self.entries and txn.last_offset <= self.entries[-1].last_offset:
            raise ValueError(f"{self.path}: aborted txn at {txn.last_offset} is not after the last entry")
        self.entries.append(txn)
        with open(self.path, "ab") as f:
            f.write(
                ENTRY.pack(
                    VERSION, txn.producer_id, txn.first_offset, txn.last_offset, txn.last_stable_offset
                )
            )

    def truncate_to(self, offset: int) -> None:
        """Drop entries whose marker is at or after ``offset``."""
        kept = [e for e in self.entries if e.last_offset < offset]
        if len(kept) != len(self.entries):
            self.entries = kept
            self._rewrite()

    def replace(self, entries: list[AbortedTxn]) -> None:
        """All entries at once (the log cleaner's rewritten segment)."""
        self.entries = list(entries)
        self._rewrite()

    def _rewrite(self) -> None:
        if not self.entries:
            self.path.unlink(missing_ok=True)
            return
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "wb") as f:
            for e in self.entries:
                f.write(
                    ENTRY.pack(VERSION, e.producer_id, e.first_offset, e.last_offset, e.last_stable_offset)
                )
        os.replace(tmp, self.path)

    def collect(self, fetch_offset: int, upper_bound: int) -> tuple[list[AbortedTxn], bool]:
        """Entries overlapping [fetch_offset, upper_bound), and whether the search is complete
        (an entry's LSO reached ``upper_bound``: no later segment can hold an overlapping one)."""
        found = []
        for e in self.entries:
            if e.last_offset >= fetch_offset and e.first_offset < upper_bound:
                found.append(e)
            if e.last_stable_offset >= upper_bound:
                return found, True
        return found, False

    def flush(self, fsync: bool = True) -> None:
        if fsync and self.entries:
            try:
                fd = os.open(self.path, os.O_RDONLY)
            except FileNotFoundError:
                return
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def delete(self) -> None:
        self.entries = []
        self.path.unlink(missing_ok=True)
