"""Idempotent-producer state (Kafka's ProducerStateManager / ProducerAppendInfo, scaled down).

Per producer id: its epoch and the metadata of its last five batches, enough to answer a retried batch
with its original offsets and to reject gaps in the sequence. Snapshots are written at segment roll and
clean close as `<offset>.snapshot` (a checksummed JSON document) and replayed from on open.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from crc32c import crc32c

from pybroker.records.batch import NO_PRODUCER_EPOCH, NO_SEQUENCE, BatchHeader
from pybroker.storage.checkpoint import read_if_exists
from pybroker.storage.errors import InvalidProducerEpochError, OutOfOrderSequenceError

logger = logging.getLogger(__name__)

MAX_CACHED_BATCHES = 5
SNAPSHOT_SUFFIX = ".snapshot"
_SNAPSHOT_VERSION = 1


@dataclass(frozen=True)
class BatchMetadata:
    first_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass
class ProducerEntry:
    producer_id: int
    epoch: int = NO_PRODUCER_EPOCH
    batches: list[BatchMetadata] = field(default_factory=list)
    last_timestamp: int = -1

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence if self.batches else NO_SEQUENCE

    def find_duplicate(self, epoch: int, first_sequence: int, last_sequence: int) -> BatchMetadata | None:
        if epoch != self.epoch:
            return None
        for batch in self.batches:
            if batch.first_sequence == first_sequence and batch.last_sequence == last_sequence:
                return batch
        return None

    def copy(self) -> ProducerEntry:
        return ProducerEntry(self.producer_id, self.epoch, list(self.batches), self.last_timestamp)

    def add_batch(self, epoch: int, metadata: BatchMetadata) -> None:
        if epoch != self.epoch:
            self.epoch = epoch
            self.batches = []
        self.batches.append(metadata)
        if len(self.batches) > MAX_CACHED_BATCHES:
            del self.batches[0]
        self.last_timestamp = metadata.timestamp


def _in_sequence(last_sequence: int, next_sequence: int) -> bool:
    return next_sequence == last_sequence + 1 or (next_sequence == 0 and last_sequence == 2**31 - 1)


@dataclass
class AppendPlan:
    """Validated producer-state changes for one append, applied only once the bytes are written."""

    updates: dict[int, ProducerEntry]
    duplicate: BatchMetadata | None = None


class ProducerStateManager:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.producers: dict[int, ProducerEntry] = {}

    # ---- validation and update -----------------------------------------------------------------

    def prepare_append(self, batches: list[BatchHeader], first_offset: int) -> AppendPlan:
        """Check every batch of one append against the producer state (offsets assigned from `first_offset`).

        Raises InvalidProducerEpochError / OutOfOrderSequenceError; a retried batch yields `duplicate`.
        """
        updates: dict[int, ProducerEntry] = {}
        offset = first_offset
        for batch in batches:
            batch_first_offset = offset
            offset += batch.last_offset_delta + 1
            if batch.producer_id < 0:
                continue
            entry = updates.get(batch.producer_id)
            if entry is None:
                known = self.producers.get(batch.producer_id)
                entry = known.copy() if known else ProducerEntry(batch.producer_id)
                duplicate = (
                    known.find_duplicate(batch.producer_epoch, batch.base_sequence, batch.last_sequence)
                    if known
                    else None
                )
                if duplicate is not None:
                    return AppendPlan({}, duplicate)
                updates[batch.producer_id] = entry
            self._check(entry, batch)
            entry.add_batch(
                batch.producer_epoch,
                BatchMetadata(
                    batch.base_sequence,
                    batch.last_sequence,
                    batch_first_offset,
                    batch_first_offset + batch.last_offset_delta,
                    batch.max_timestamp,
                ),
            )
        return AppendPlan(updates)

    @staticmethod
    def _check(entry: ProducerEntry, batch: BatchHeader) -> None:
        if batch.producer_epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"producer {batch.producer_id} epoch {batch.producer_epoch} is older than {entry.epoch}"
            )
        if batch.base_sequence == NO_SEQUENCE:
            return
        if batch.producer_epoch != entry.epoch:
            if batch.base_sequence != 0 and entry.epoch != NO_PRODUCER_EPOCH:
                raise OutOfOrderSequenceError(
                    f"producer {batch.producer_id}: new epoch {batch.producer_epoch} must start at sequence 0,"
                    f" got {batch.base_sequence}"
                )
            return
        last_sequence = entry.last_sequence
        if last_sequence != NO_SEQUENCE and not _in_sequence(last_sequence, batch.base_sequence):
            raise OutOfOrderSequenceError(
                f"producer {batch.producer_id}: sequence {batch.base_sequence} does not follow {last_sequence}"
            )

    def commit(self, plan: AppendPlan) -> None:
        self.producers.update(plan.updates)

    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers whose last batch is ``expiration_ms`` old or older (Kafka's
        ``removeExpiredProducers``: the age is measured from the batch's max timestamp).  A retry
        from a forgotten producer is then a new producer to this log, as in Kafka.  Returns the
        number removed."""
        expired = [pid for pid, e in self.producers.items() if now_ms - e.last_timestamp >= expiration_ms]
        for pid in expired:
            del self.producers[pid]
        return len(expired)

    def replay(self, batches: Iterable[BatchHeader]) -> None:
        """Rebuild state from batches already in the log (stored offsets; no validation, like Kafka)."""
        for batch in batches:
            if batch.producer_id < 0:
                continue
            entry = self.producers.get(batch.producer_id)
            if entry is None:
                entry = self.producers[batch.producer_id] = ProducerEntry(batch.producer_id)
            entry.add_batch(
                batch.producer_epoch,
                BatchMetadata(
                    batch.base_sequence,
                    batch.last_sequence,
                    batch.base_offset,
                    batch.last_offset,
                    batch.max_timestamp,
                ),
            )

    # ---- snapshots -----------------------------------------------------------------------------------

    def snapshot_path(self, offset: int) -> Path:
        return self.directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"

    def snapshot_offsets(self, names: Iterable[str] | None = None) -> list[int]:
        """Offsets of the snapshot files, from ``names`` (a listing of the directory) if given."""
        offsets = []
        for name in os.listdir(self.directory) if names is None else names:
            if name.endswith(SNAPSHOT_SUFFIX):
                try:
                    offsets.append(int(name[: -len(SNAPSHOT_SUFFIX)]))
                except ValueError:
                    continue
        return sorted(offsets)

    def take_snapshot(self, offset: int, fsync: bool = True) -> None:
        """Write the snapshot at ``offset`` (temp file, rename); ``fsync=False`` when the caller
        makes the file system durable afterwards (shutdown)."""
        document = {
            "version": _SNAPSHOT_VERSION,
            "offset": offset,
            "producers": [
                [e.producer_id, e.epoch, e.last_timestamp, [list(vars(b).values()) for b in e.batches]]
                for e in self.producers.values()
            ],
        }
        body = json.dumps(document, separators=(",", ":")).encode()
        path = self.snapshot_path(offset)
        temporary = path.with_name(path.name + ".tmp")
        with open(temporary, "wb") as out:
            out.write(b"%08x\n" % crc32c(body))
            out.write(body)
            out.flush()
            if fsync:
                os.fsync(out.fileno())
        os.replace(temporary, path)

    def load_snapshot(self, offset: int) -> bool:
        """Replace the state with snapshot `offset`; False when it is missing or damaged."""
        try:
            data = read_if_exists(self.snapshot_path(offset))
            if data is None:
                raise OSError("missing")
            checksum, _, body = data.partition(b"\n")
            if int(checksum, 16) != crc32c(body):
                raise ValueError("checksum mismatch")
            document = json.loads(body)
            if document["version"] != _SNAPSHOT_VERSION:
                raise ValueError(f"unknown snapshot version {document['version']}")
            producers = {}
            for producer_id, epoch, last_timestamp, batches in document["producers"]:
                producers[producer_id] = ProducerEntry(
                    producer_id, epoch, [BatchMetadata(*b) for b in batches], last_timestamp
                )
        except (OSError, ValueError, KeyError, TypeError) as exc:
            logger.warning("ignoring producer snapshot %s: %s", self.snapshot_path(offset), exc)
            return False
        self.producers = producers
        return True

    def delete_snapshots(
        self, *, below: int | None = None, above: int | None = None, offsets: list[int] | None = None
    ) -> None:
        for offset in self.snapshot_offsets() if offsets is None else offsets:
            if (below is not None and offset < below) or (above is not None and offset > above):
                self.snapshot_path(offset).unlink(missing_ok=True)
