"""The share coordinator: durable share-partition state in ``__share_group_state`` (KIP-932).

Kafka's ShareCoordinatorService routes each share partition (group, topic id, partition) to the shard of
the ``__share_group_state`` partition its coordinator key hashes to, and ShareCoordinatorShard answers
InitializeShareGroupState, ReadShareGroupState, WriteShareGroupState, ReadShareGroupStateSummary and
DeleteShareGroupState for it. This class is both, for the partitions this broker leads:

- Initialize writes a ShareSnapshot (a fresh start: state epoch and start offset as asked, no batches);
- Write writes a ShareUpdate holding the batches it was given, merged into the state on replay, or, after
  ``share.coordinator.snapshot.update.records.per.snapshot`` updates, a ShareSnapshot of the merged state;
- Read answers the state and, when it carries a newer leader epoch, records that epoch in a ShareUpdate;
- Delete writes a tombstone.

Writes and reads are fenced as Kafka fences them: a leader epoch older than the highest recorded is
FENCED_LEADER_EPOCH, a state epoch older than the highest recorded FENCED_STATE_EPOCH (-1 skips either
check). The records are applied to the in-memory state at once (``replay``, the same code that loads the
topic at start-up) and appended as the partition leader; the caller awaits their replication.

The state topic is made by FindCoordinator of a share key (or by the broker's own share partitions, whose
persister would look their coordinator up the same way); until it exists every call is NOT_COORDINATOR.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol

from pybroker.coordinator.share.batch_combiner import combine
from pybroker.coordinator.share.share_partition import StateBatch
from pybroker.coordinator.share.state_records import (
    SHARE_SNAPSHOT_RECORD_TYPE,
    SharePartitionKey,
    ShareSnapshot,
    ShareUpdate,
    decode_key,
    decode_record_type,
    decode_snapshot_value,
    decode_update_value,
    snapshot_key,
    snapshot_value,
    update_key,
    update_value,
)
from pybroker.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

TOPIC = "__share_group_state"
# What Kafka gives the topic (ShareCoordinatorService.shareGroupStateTopicConfigs, as KIP-932 defines it): not
# compacted (a ShareUpdate's key is its share partition's, so compaction would keep only the last update) but
# kept forever, the coordinator itself deleting what its snapshots made redundant; 100 MiB segments.
TOPIC_CONFIGS = {
    "cleanup.policy": "delete",
    "compression.type": "producer",
    "segment.bytes": "104857600",
    "retention.ms": "-1",
}
DEFAULT_NUM_PARTITIONS = 50  # share.coordinator.state.topic.num.partitions
DEFAULT_UPDATES_PER_SNAPSHOT = 500  # share.coordinator.snapshot.update.records.per.snapshot

# Kafka's PartitionFactory defaults, answered for a share partition with no state.
UNINITIALIZED_START_OFFSET = -1
UNINITIALIZED_DELIVERY_COMPLETE_COUNT = -1
DEFAULT_STATE_EPOCH = 0
DEFAULT_LEADER_EPOCH = 0

NEGATIVE_PARTITION_ID = "The partition id cannot be a negative number."
WRITE_UNINITIALIZED = "Write operation on uninitialized share partition not allowed."
READ_UNINITIALIZED = "Read operation on uninitialized share partition not allowed."

Entry = tuple[bytes, bytes | None]


class StateLog(Protocol):
    """What the coordinator needs of its topic; ``offsets_topic.InternalTopic`` is one."""

    def exists(self) -> bool: ...

    def ensure_topic(self) -> None: ...

    def leads(self, key: str) -> bool: ...

    def partition_for(self, key: str) -> int: ...

    # (partition, offset) of the last record ``append`` wrote.
    last_append: tuple[int, int]

    def append(self, key: str, entries: list[Entry]) -> Awaitable[object] | None: ...

    def replay(
        self, partitions: Iterable[int] | None = None, at: Callable[[int, int], None] | None = None
    ) -> Iterator[Entry]: ...

    def delete_records_before(self, index: int, offset: int) -> None: ...


def _result(partition: int, error: ErrorCode = ErrorCode.NONE, message: str | None = None, **fields: Any) -> dict:
    return {"partition": partition, "error_code": error, "error_message": message, **fields}


def _error(partition: int, error: ErrorCode, message: str | None = None) -> dict:
    return _result(partition, error, message if message is not None else error.message)


class ShareCoordinator:
    def __init__(
        self,
        state_log: StateLog,
        partition_count: Callable[[uuid.UUID], int | None],
        *,
        updates_per_snapshot: int = DEFAULT_UPDATES_PER_SNAPSHOT,
        now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        request_topic: Callable[[], None] | None = None,
    ) -> None:
        self.state_log = state_log
        # In a cluster the topic is made through ZooKeeper (a moment later), not by this broker alone.
        self.request_topic = request_topic
        # The partition count of a topic id in the metadata, None for an unknown topic (Kafka's metadata image).
        self.partition_count = partition_count
        self.updates_per_snapshot = updates_per_snapshot
        self.now_ms = now_ms
        self.loaded = False
        self._state: dict[SharePartitionKey, ShareSnapshot] = {}  # Kafka's shareStateMap
        self._leader_epochs: dict[SharePartitionKey, int] = {}
        self._state_epochs: dict[SharePartitionKey, int] = {}
        self._update_counts: dict[SharePartitionKey, int] = {}
        # Kafka's ShareCoordinatorOffsetsManager: where each share partition's last ShareSnapshot is; the
        # records of a state partition below the lowest of them are redundant and are deleted.
        self._snapshot_offsets: dict[SharePartitionKey, tuple[int, int]] = {}
        self._position = (-1, -1)  # (partition, offset) of the record being replayed
        self._last_snapshot_record: dict[int, int] = {}  # partition -> offset of its last snapshot or tombstone
        # Keys with a record in today's layout: an earlier pybroker's snapshot of them is older (ignored).
        self._current_format_keys: set[SharePartitionKey] = set()

    # -- loading --------------------------------------------------------------------------------------

    def ensure_topic(self) -> None:
        """Create the state topic if it is absent (FindCoordinator of a share key does), and load it."""
        if self.request_topic is not None:
            self.request_topic()
        else:
            self.state_log.ensure_topic()
        self.maybe_load()

    # Kafka's ShareCoordinatorService.onElection / onResignation: a partition's state is (re)loaded when this
    # broker becomes its leader (it may have missed records as a follower) and forgotten when it stops.

    def on_election(self, partition: int) -> None:
        if not self.loaded:
            return  # the first load replays every partition
        self._forget(partition)
        self._replay(self.state_log.replay([partition], self._at))
        log.info("loaded %s-%d (share coordinator elected)", TOPIC, partition)

    def on_resignation(self, partition: int) -> None:
        self._forget(partition)

    def _at(self, partition: int, offset: int) -> None:
        self._position = (partition, offset)

    def _forget(self, partition: int) -> None:
        self._last_snapshot_record.pop(partition, None)
        for key in [k for k in self._state if self.state_log.partition_for(k.coordinator_key) == partition]:
            self._drop(key)

    def _drop(self, key: SharePartitionKey) -> None:
        for m in (self._state, self._leader_epochs, self._state_epochs, self._update_counts, self._snapshot_offsets):
            m.pop(key, None)

    def _replay(self, records: Iterator[Entry]) -> None:
        for raw_key, raw_value in records:
            try:
                self.replay(raw_key, raw_value)
            except (ValueError, IndexError) as exc:
                log.warning("skipping an undecodable %s record: %s", TOPIC, exc)

    def maybe_load(self) -> bool:
        """Replay the state topic once it exists; whether the coordinator is loaded."""
        if self.loaded:
            return True
        if not self.state_log.exists():
            return False
        self._replay(self.state_log.replay(None, self._at))
        self.loaded = True
        log.info("loaded the state of %d share partitions from %s", len(self._state), TOPIC)
        return True

    def owns(self, key: SharePartitionKey) -> bool:
        """Whether this broker coordinates ``key``: the state topic exists and its partition is led here."""
        return self.maybe_load() and self.state_log.leads(key.coordinator_key)

    def replay(self, raw_key: bytes, raw_value: bytes | None) -> None:
        """Apply one record of the topic (Kafka's ShareCoordinatorShard.replay)."""
        key = decode_key(raw_key)
        if key is None:
            return
        if decode_record_type(raw_key) == SHARE_SNAPSHOT_RECORD_TYPE:
            self._last_snapshot_record[self._position[0]] = self._position[1]
            if raw_value is None:  # tombstone
                self._current_format_keys.add(key)
                self._drop(key)
                return
            snap, legacy = decode_snapshot_value(raw_value)
            if legacy:
                self._replay_legacy(key, snap)
                return
            self._current_format_keys.add(key)
            self._snapshot_offsets[key] = self._position
            self._raise_epochs(key, snap.leader_epoch, snap.state_epoch)
            self._state[key] = snap
            if self._update_counts.get(key, 0) >= self.updates_per_snapshot:
                self._update_counts[key] = 0
            return
        if raw_value is None:
            return
        self._current_format_keys.add(key)
        update = decode_update_value(raw_value)
        self._raise_epochs(key, update.leader_epoch, None)
        cur = self._state.get(key)
        self._state[key] = _from_update(update) if cur is None else _merge(cur, update)
        self._update_counts[key] = self._update_counts.get(key, 0) + 1

    def _replay_legacy(self, key: SharePartitionKey, snap: ShareSnapshot) -> None:
        """A snapshot an earlier pybroker wrote (its own layout, and in the partition its key hashed to then,
        the topic id as a UUID string). It is the state only while no record of today's layout has been seen
        for the key (those are newer, in whatever partition order the replay meets them), and the next write
        of the key is a whole ShareSnapshot, so the state no longer depends on the old record."""
        if key in self._current_format_keys:
            return
        self._snapshot_offsets[key] = self._position
        self._raise_epochs(key, snap.leader_epoch, snap.state_epoch)
        self._state[key] = snap
        self._update_counts[key] = self.updates_per_snapshot

    def _raise_epochs(self, key: SharePartitionKey, leader_epoch: int, state_epoch: int | None) -> None:
        self._leader_epochs[key] = max(self._leader_epochs.get(key, leader_epoch), leader_epoch)
        if state_epoch is not None:
            self._state_epochs[key] = max(self._state_epochs.get(key, state_epoch), state_epoch)

    # -- inspection (the broker's own share partitions, DescribeShareGroupOffsets) ---------------------

    def read_state(self, key: SharePartitionKey) -> ShareSnapshot | None:
        self.maybe_load()
        return self._state.get(key)

    def state_epoch(self, key: SharePartitionKey) -> int:
        """The highest state epoch recorded for ``key`` (-1: none)."""
        return self._state_epochs.get(key, -1)

    def leader_epoch(self, key: SharePartitionKey) -> int:
        """The highest leader epoch recorded for ``key`` (-1: none)."""
        return self._leader_epochs.get(key, -1)

    def keys_of_group(self, group_id: str) -> list[SharePartitionKey]:
        self.maybe_load()
        return [k for k in self._state if k.group_id == group_id]

    # -- the five operations, one share partition each ------------------------------------------------
    # Each returns the PartitionResult of its response and what to await before answering (the
    # replication of the records it wrote, or None).

    def _unknown_partition(self, key: SharePartitionKey) -> bool:
        count = self.partition_count(key.topic_id)
        return count is None or count <= key.partition

    def initialize_state(self, key: SharePartitionKey, state_epoch: int, start_offset: int) -> tuple[dict, Awaitable | None]:
        if key.partition < 0:
            return _error(key.partition, ErrorCode.INVALID_REQUEST, NEGATIVE_PARTITION_ID), None
        if state_epoch != -1 and self._state_epochs.get(key, state_epoch) > state_epoch:
            return _error(key.partition, ErrorCode.FENCED_STATE_EPOCH), None
        if self._unknown_partition(key):
            return _error(key.partition, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), None
        prev = self._state.get(key)
        now = self.now_ms()
        snap = ShareSnapshot(
            snapshot_epoch=0 if prev is None else prev.snapshot_epoch + 1,
            state_epoch=state_epoch,
            leader_epoch=DEFAULT_LEADER_EPOCH,
            start_offset=start_offset,
            state_batches=(),
            delivery_complete_count=0,
            create_timestamp=now,
            write_timestamp=now,
        )
        return _result(key.partition), self._write(key, [(snapshot_key(key), snapshot_value(snap))])

    def write_state(  # noqa: PLR0913
        self,
        key: SharePartitionKey,
        state_epoch: int,
        leader_epoch: int,
        start_offset: int,
        batches: Sequence[StateBatch],
        delivery_complete_count: int = -1,
    ) -> tuple[dict, Awaitable | None]:
        if key.partition < 0:
            return _error(key.partition, ErrorCode.INVALID_REQUEST, NEGATIVE_PARTITION_ID), None
        if key not in self._state:
            return _error(key.partition, ErrorCode.INVALID_REQUEST, WRITE_UNINITIALIZED), None
        if leader_epoch != -1 and self._leader_epochs.get(key, leader_epoch) > leader_epoch:
            return _error(key.partition, ErrorCode.FENCED_LEADER_EPOCH), None
        if state_epoch != -1 and self._state_epochs.get(key, state_epoch) > state_epoch:
            return _error(key.partition, ErrorCode.FENCED_STATE_EPOCH), None
        if self._unknown_partition(key):
            return _error(key.partition, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), None
        entry = self._state_record(key, leader_epoch, start_offset, tuple(batches), delivery_complete_count, False)
        return _result(key.partition), self._write(key, [entry])

    def read_state_and_maybe_update_leader_epoch(
        self, key: SharePartitionKey, leader_epoch: int
    ) -> tuple[dict, Awaitable | None]:
        empty = {"state_epoch": 0, "start_offset": 0, "state_batches": []}
        if key.partition < 0:
            return {**_error(key.partition, ErrorCode.INVALID_REQUEST, NEGATIVE_PARTITION_ID), **empty}, None
        cur = self._state.get(key)
        if cur is None:
            return {**_error(key.partition, ErrorCode.INVALID_REQUEST, READ_UNINITIALIZED), **empty}, None
        if leader_epoch != -1 and self._leader_epochs.get(key, leader_epoch) > leader_epoch:
            return {**_error(key.partition, ErrorCode.FENCED_LEADER_EPOCH), **empty}, None
        if self._unknown_partition(key):
            return {**_error(key.partition, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), **empty}, None
        result = _result(
            key.partition,
            state_epoch=cur.state_epoch,
            start_offset=cur.start_offset,
            state_batches=[
                {
                    "first_offset": b.first_offset,
                    "last_offset": b.last_offset,
                    "delivery_state": int(b.delivery_state),
                    "delivery_count": b.delivery_count,
                }
                for b in cur.state_batches
            ],
        )
        if leader_epoch == -1 or self._leader_epochs.get(key) == leader_epoch:
            return result, None
        # A newer leader read the state: its epoch is recorded, so that older leaders are fenced.
        entry = self._state_record(key, leader_epoch, cur.start_offset, (), cur.delivery_complete_count, True)
        return result, self._write(key, [entry])

    def read_state_summary(self, key: SharePartitionKey) -> dict:
        empty = {"state_epoch": 0, "leader_epoch": 0, "start_offset": 0, "delivery_complete_count": -1}
        if key.partition < 0:
            return {**_error(key.partition, ErrorCode.INVALID_REQUEST, NEGATIVE_PARTITION_ID), **empty}
        if self._unknown_partition(key):
            return {**_error(key.partition, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), **empty}
        cur = self._state.get(key)
        if cur is None:
            return _result(
                key.partition,
                state_epoch=DEFAULT_STATE_EPOCH,
                leader_epoch=DEFAULT_LEADER_EPOCH,
                start_offset=UNINITIALIZED_START_OFFSET,
                delivery_complete_count=UNINITIALIZED_DELIVERY_COMPLETE_COUNT,
            )
        return _result(
            key.partition,
            state_epoch=cur.state_epoch,
            leader_epoch=cur.leader_epoch,
            start_offset=cur.start_offset,
            delivery_complete_count=cur.delivery_complete_count,
        )

    def delete_state(self, key: SharePartitionKey) -> tuple[dict, Awaitable | None]:
        if key.partition < 0:
            return _error(key.partition, ErrorCode.INVALID_REQUEST, NEGATIVE_PARTITION_ID), None
        if self._unknown_partition(key):
            return _error(key.partition, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), None
        if key not in self._state:
            return _result(key.partition), None
        return _result(key.partition), self._write(key, [(snapshot_key(key), None)])

    # -- records ----------------------------------------------------------------------------------------

    def _state_record(  # noqa: PLR0913
        self,
        key: SharePartitionKey,
        leader_epoch: int,
        start_offset: int,
        batches: tuple[StateBatch, ...],
        delivery_complete_count: int,
        update_leader_epoch: bool,
    ) -> Entry:
        """Kafka's generateShareStateRecord: a ShareUpdate with the write's batches, or a ShareSnapshot of
        the merged state once the key has had ``updates_per_snapshot`` updates since its last snapshot.
        Only a read moves the recorded leader epoch (``update_leader_epoch``)."""
        cur = self._state[key]
        new_leader_epoch = cur.leader_epoch
        if update_leader_epoch and leader_epoch != -1:
            new_leader_epoch = leader_epoch
        if self._update_counts.get(key, 0) >= self.updates_per_snapshot:
            start = cur.start_offset if start_offset == -1 else start_offset
            now = self.now_ms()
            snap = ShareSnapshot(
                snapshot_epoch=cur.snapshot_epoch + 1,
                state_epoch=cur.state_epoch,
                leader_epoch=new_leader_epoch,
                start_offset=start,
                state_batches=combine(cur.state_batches, batches, start),
                delivery_complete_count=delivery_complete_count,
                create_timestamp=now,
                write_timestamp=now,
            )
            return snapshot_key(key), snapshot_value(snap)
        update = ShareUpdate(
            snapshot_epoch=cur.snapshot_epoch,
            leader_epoch=new_leader_epoch,
            start_offset=start_offset,
            state_batches=combine((), batches, start_offset),
            delivery_complete_count=delivery_complete_count,
        )
        return update_key(key), update_value(update)

    def _write(self, key: SharePartitionKey, entries: list[Entry]) -> Awaitable | None:
        """Append ``entries`` (one record: each operation writes one) and apply it, as Kafka's runtime replays
        what a shard wrote; a ShareSnapshot may make older records of its partition redundant."""
        wait = self.state_log.append(key.coordinator_key, entries)
        self._position = self.state_log.last_append
        for raw_key, raw_value in entries:
            self.replay(raw_key, raw_value)
        return wait

    def prune(self) -> None:
        """Kafka's record pruning (every ``share.coordinator.state.topic.prune.interval.ms``): in each state
        partition, the records below the oldest last-ShareSnapshot of its live share partitions are redundant
        and deleted; with none live, those below its last snapshot or tombstone."""
        for partition, last in self._last_snapshot_record.items():
            live = [offset for p, offset in self._snapshot_offsets.values() if p == partition]
            self.state_log.delete_records_before(partition, min(live) if live else last)


def _from_update(update: ShareUpdate) -> ShareSnapshot:
    """Kafka's ShareGroupOffset.fromRecord(ShareUpdateValue): an update met before any snapshot."""
    return ShareSnapshot(
        snapshot_epoch=update.snapshot_epoch,
        state_epoch=0,
        leader_epoch=update.leader_epoch,
        start_offset=update.start_offset,
        state_batches=update.state_batches,
        delivery_complete_count=update.delivery_complete_count,
    )


def _merge(cur: ShareSnapshot, update: ShareUpdate) -> ShareSnapshot:
    """A ShareUpdate applied to the state so far (Kafka's ShareCoordinatorShard.merge)."""
    start = cur.start_offset if update.start_offset == -1 else update.start_offset
    return ShareSnapshot(
        snapshot_epoch=cur.snapshot_epoch,
        state_epoch=cur.state_epoch,
        leader_epoch=cur.leader_epoch if update.leader_epoch == -1 else update.leader_epoch,
        start_offset=start,
        state_batches=combine(cur.state_batches, update.state_batches, start),
        delivery_complete_count=update.delivery_complete_count,
        create_timestamp=cur.create_timestamp,
        write_timestamp=cur.write_timestamp,
    )
