"""Idempotent-producer state (Kafka's ProducerStateManager / ProducerAppendInfo, scaled down).

Per producer id: its epoch and the metadata of its last five batches, enough to answer a retried batch
with its original offsets and to reject gaps in the sequence, and the first offset of its ongoing
transaction.  The earliest ongoing transaction's first offset bounds the last stable offset; a
transaction ends with a control batch (COMMIT/ABORT marker) from the coordinator.  Snapshots are
written at segment roll and clean close as `<offset>.snapshot` (a checksummed JSON document) and
replayed from on open.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from crc32c import crc32c

from pybroker.records.batch import NO_PRODUCER_EPOCH, NO_SEQUENCE, BatchHeader
from pybroker.records.control import ABORT
from pybroker.storage.checkpoint import read_if_exists
from pybroker.storage.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from pybroker.storage.txn_index import AbortedTxn

logger = logging.getLogger(__name__)

MAX_CACHED_BATCHES = 5
MAX_PRODUCER_EPOCH = 32767  # Short.MAX_VALUE
SNAPSHOT_SUFFIX = ".snapshot"
# Version 2 adds each producer's ongoing transaction's first offset; version 1 is still read.
_SNAPSHOT_VERSION = 2


class BatchMetadata(NamedTuple):
    """One batch an idempotent producer appended (immutable; a NamedTuple: one is made per such
    batch, and a frozen dataclass costs ~0.8 us to make, this ~0.3)."""

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
    current_txn_first_offset: int = -1  # -1: no ongoing transaction
    coordinator_epoch: int = -1  # of the last transaction marker

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
        return ProducerEntry(
            self.producer_id,
            self.epoch,
            list(self.batches),
            self.last_timestamp,
            self.current_txn_first_offset,
            self.coordinator_epoch,
        )

    def add_batch(self, epoch: int, metadata: BatchMetadata) -> None:
        if epoch != self.epoch:
            self.epoch = epoch
            self.batches = []
        self.batches.append(metadata)
        if len(self.batches) > MAX_CACHED_BATCHES:
            del self.batches[0]
        self.last_timestamp = metadata.timestamp


def check_marker_epoch(entry: ProducerEntry, epoch: int, transaction_version: int) -> None:
    """Kafka's ProducerAppendInfo.checkProducerEpoch for a marker written by the coordinator.

    Transaction version 2 (KIP-890 part 2): the coordinator bumps the epoch at every transaction end
    and writes the markers with the bumped epoch, so a marker must carry an epoch newer than the
    producer's; one of the producer's current epoch is a late retry of an earlier transaction's
    marker and must not end the transaction now open with that epoch.  The exception, as in Kafka,
    is a retry while no transaction is open (the marker was written, its answer lost) or at the
    last epoch (32767, where no bump is possible): written again, harmlessly.  Versions 0 and 1:
    a marker of the producer's epoch or a newer one is accepted."""
    current = entry.epoch
    if transaction_version >= 2:
        if epoch > current:
            return
        if epoch == current and (entry.current_txn_first_offset < 0 or epoch == MAX_PRODUCER_EPOCH):
            logger.info(
                "idempotent transaction marker retry for producer %d epoch %d: its transaction is"
                " already completed, the marker is written again",
                entry.producer_id,
                epoch,
            )
            return
    elif epoch >= current:
        return
    comparison = "<=" if transaction_version >= 2 else "<"
    raise InvalidProducerEpochError(
        f"marker for producer {entry.producer_id} has epoch {epoch}, which is {comparison} the last seen"
        f" epoch {current} (TV{transaction_version})"
    )


def _in_sequence(last_sequence: int, next_sequence: int) -> bool:
    return next_sequence == last_sequence + 1 or (next_sequence == 0 and last_sequence == 2**31 - 1)


class AppendPlan(NamedTuple):
    """Validated producer-state changes for one append, applied only once the bytes are written
    (a NamedTuple: one is made per produce request)."""

    updates: dict[int, ProducerEntry]
    duplicate: BatchMetadata | None = None
    # The common case, a producer's next batch in order (``ProducerStateManager.next_in_order``):
    # added to the producer's own entry at commit, without the copy ``updates`` holds.
    next_batch: tuple[ProducerEntry, int, BatchMetadata] | None = None

    @property
    def changes_state(self) -> bool:
        return bool(self.updates) or self.next_batch is not None


_NO_UPDATES: dict[int, ProducerEntry] = {}  # shared, never written to
# The plan of an append without producer ids (no idempotent producer): nothing to change.
_NO_CHANGES = AppendPlan(_NO_UPDATES)


@dataclass(frozen=True)
class CompletedTxn:
    """A transaction ended by a marker at ``last_offset``; ``last_stable_offset`` is the LSO after it."""

    producer_id: int
    first_offset: int
    last_offset: int
    aborted: bool
    last_stable_offset: int

    def aborted_txn(self) -> AbortedTxn:
        return AbortedTxn(self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset)


@dataclass
class MarkerPlan:
    entry: ProducerEntry
    completed: CompletedTxn | None  # None: no transaction was open (Kafka completes none either)


class ProducerStateManager:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.producers: dict[int, ProducerEntry] = {}
        # producer id -> first offset of its ongoing transaction (kept beside ``producers`` so the
        # last stable offset does not need a walk over every producer).
        self.ongoing: dict[int, int] = {}

    def clear(self) -> None:
        self.producers.clear()
        self.ongoing.clear()

    def first_unstable_offset(self) -> int | None:
        return min(self.ongoing.values()) if self.ongoing else None

    def _track(self, entry: ProducerEntry) -> None:
        if entry.current_txn_first_offset >= 0:
            self.ongoing[entry.producer_id] = entry.current_txn_first_offset
        else:
            self.ongoing.pop(entry.producer_id, None)

    # ---- validation and update -----------------------------------------------------------------

    def prepare_append(self, batches: list[BatchHeader], first_offset: int) -> AppendPlan:
        """Check every batch of one append against the producer state (offsets assigned from `first_offset`).

        Raises InvalidProducerEpochError / OutOfOrderSequenceError; a retried batch yields `duplicate`.
        """
        if len(batches) == 1:  # every produce request of a v3+ client
            batch = batches[0]
            if batch.producer_id < 0:
                return _NO_CHANGES
            known = self.producers.get(batch.producer_id)
            if known is not None and self.next_in_order(known, batch):
                return AppendPlan(
                    _NO_UPDATES,
                    None,
                    (
                        known,
                        batch.producer_epoch,
                        BatchMetadata(
                            batch.base_sequence,
                            batch.last_sequence,
                            first_offset,
                            first_offset + batch.last_offset_delta,
                            batch.max_timestamp,
                        ),
                    ),
                )
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
            if batch.is_transactional:
                if entry.current_txn_first_offset < 0:
                    entry.current_txn_first_offset = batch_first_offset
            elif entry.current_txn_first_offset >= 0:
                raise InvalidTxnStateError(
                    f"producer {batch.producer_id}: non-transactional write during its ongoing transaction"
                )
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
    def next_in_order(entry: ProducerEntry, batch: BatchHeader) -> bool:
        """Whether ``batch`` is the known producer's next one: its epoch, the sequence right after
        the last (not wrapping: that takes the full checks), and no transaction to begin or that
        a non-transactional batch would break into.  Every check of ``prepare_append`` passes for
        it, and it cannot be a retry of a cached batch (those lie at or below the last sequence),
        so its producer's entry is only to be added the batch."""
        batches = entry.batches
        return (
            batch.producer_epoch == entry.epoch
            and bool(batches)
            and batch.base_sequence == batches[-1].last_sequence + 1
            and batch.is_transactional == (entry.current_txn_first_offset >= 0)
        )

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
        if plan.next_batch is not None:
            entry, epoch, metadata = plan.next_batch
            entry.add_batch(epoch, metadata)  # its transaction state stays as it is (next_in_order)
            return
        self.producers.update(plan.updates)
        for entry in plan.updates.values():
            self._track(entry)

    # ---- transaction markers -------------------------------------------------------------------

    def prepare_marker(
        self,
        producer_id: int,
        epoch: int,
        marker_offset: int,
        kind: int,
        coordinator_epoch: int = -1,
        transaction_version: int = 0,
        *,
        replication: bool = False,
    ) -> MarkerPlan:
        """Validate an end-of-transaction marker (Kafka's appendEndTxnMarker); raises
        InvalidProducerEpochError for a marker whose epoch ``check_marker_epoch`` refuses, and
        TransactionCoordinatorFencedError for one from an older coordinator epoch than the
        producer's last marker's (``replication``: a marker already in the log, replayed, is not
        refused for that, as Kafka's REPLICATION origin only logs it)."""
        known = self.producers.get(producer_id)
        entry = known.copy() if known else ProducerEntry(producer_id)
        check_marker_epoch(entry, epoch, transaction_version)
        if entry.coordinator_epoch > coordinator_epoch and not replication:
            raise TransactionCoordinatorFencedError(
                f"marker for producer {producer_id} has coordinator epoch {coordinator_epoch}, older than"
                f" {entry.coordinator_epoch} of its last marker"
            )
        if epoch != entry.epoch:
            entry.epoch = epoch
            entry.batches = []
        first = entry.current_txn_first_offset
        entry.current_txn_first_offset = -1
        entry.coordinator_epoch = coordinator_epoch
        others = [o for pid, o in self.ongoing.items() if pid != producer_id]
        lso = min(others) if others else marker_offset + 1
        if first < 0:  # e.g. a retried marker: nothing to complete, no aborted transaction to index
            return MarkerPlan(entry, None)
        return MarkerPlan(entry, CompletedTxn(producer_id, first, marker_offset, kind == ABORT, lso))

    def commit_marker(self, plan: MarkerPlan) -> None:
        self.producers[plan.entry.producer_id] = plan.entry
        self._track(plan.entry)

    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers whose last batch is ``expiration_ms`` old or older (Kafka's
        ``removeExpiredProducers``: the age is measured from the batch's max timestamp).  A retry
        from a forgotten producer is then a new producer to this log, as in Kafka.  Returns the
        number removed."""
        # A producer with an ongoing transaction is kept (Kafka's isProducerExpired).
        expired = [
            pid
            for pid, e in self.producers.items()
            if now_ms - e.last_timestamp >= expiration_ms and e.current_txn_first_offset < 0
        ]
        for pid in expired:
            del self.producers[pid]
        return len(expired)

    def replay(
        self,
        batches: Iterable[BatchHeader],
        read_marker: Callable[[BatchHeader], tuple[int, int] | None] | None = None,
        on_completed: Callable[[CompletedTxn], None] | None = None,
    ) -> None:
        """Rebuild state from batches already in the log (stored offsets; no validation, like Kafka).

        ``read_marker`` reads a control batch's (marker type, coordinator epoch) from its record;
        ``on_completed`` is told of every transaction a marker ends (the log rebuilds its transaction
        index from them)."""
        for batch in batches:
            if batch.producer_id < 0:
                continue
            if batch.is_control:
                marker = read_marker(batch) if read_marker is not None else None
                if marker is None:
                    # A marker the cleaner emptied (KIP-534): the producer stays known, as in
                    # Kafka's rebuild, but nothing of a marker is applied.
                    self.producers.setdefault(batch.producer_id, ProducerEntry(batch.producer_id))
                    continue
                try:
                    plan = self.prepare_marker(
                        batch.producer_id,
                        batch.producer_epoch,
                        batch.base_offset,
                        marker[0],
                        marker[1],
                        replication=True,
                    )
                except InvalidProducerEpochError:
                    continue
                self.commit_marker(plan)
                if on_completed is not None and plan.completed is not None:
                    on_completed(plan.completed)
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
            if batch.is_transactional and entry.current_txn_first_offset < 0:
                entry.current_txn_first_offset = batch.base_offset
                self._track(entry)

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
                [
                    e.producer_id,
                    e.epoch,
                    e.last_timestamp,
                    [list(b) for b in e.batches],
                    e.current_txn_first_offset,
                    e.coordinator_epoch,
                ]
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
            if document["version"] not in (1, _SNAPSHOT_VERSION):
                raise ValueError(f"unknown snapshot version {document['version']}")
            producers = {}
            for producer_id, epoch, last_timestamp, batches, *rest in document["producers"]:
                producers[producer_id] = ProducerEntry(
                    producer_id, epoch, [BatchMetadata(*b) for b in batches], last_timestamp, *rest[:2]
                )
        except (OSError, ValueError, KeyError, TypeError) as exc:
            logger.warning("ignoring producer snapshot %s: %s", self.snapshot_path(offset), exc)
            return False
        self.producers = producers
        self.ongoing = {
            pid: e.current_txn_first_offset for pid, e in producers.items() if e.current_txn_first_offset >= 0
        }
        return True

    def delete_snapshots(
        self, *, below: int | None = None, above: int | None = None, offsets: list[int] | None = None
    ) -> None:
        for offset in self.snapshot_offsets() if offsets is None else offsets:
            if (below is not None and offset < below) or (above is not None and offset > above):
                self.snapshot_path(offset).unlink(missing_ok=True)
