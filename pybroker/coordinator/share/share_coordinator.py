"""The share coordinator: durable share-partition state in ``__share_group_state`` (KIP-932).

Kafka's ShareCoordinator answers Read/Write/Initialize/DeleteShareGroupState from a compacted internal
topic; its only client is the broker's own persister. pybroker keeps the same topic and record layout
(``state_records``) and the same contract, called in-process rather than over the wire: every write is
a complete ShareSnapshot of one share partition, appended as the leader of the key's partition, and at
start-up the topic is replayed so the last snapshot per share partition is its state. Writes of one
share partition are chained so they reach the log in the order they were made.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Iterator
from typing import Protocol

from pybroker.coordinator.share.state_records import (
    SharePartitionKey,
    ShareSnapshot,
    decode_key,
    decode_value,
    snapshot_key,
    snapshot_value,
)

log = logging.getLogger(__name__)

TOPIC = "__share_group_state"
# What Kafka gives the topic (ShareCoordinatorConfig: compacted, 100 MiB segments, producer compression).
TOPIC_CONFIGS = {"cleanup.policy": "compact", "compression.type": "producer", "segment.bytes": "104857600"}
DEFAULT_NUM_PARTITIONS = 50  # share.coordinator.state.topic.num.partitions


class StateLog(Protocol):
    """What the coordinator needs of its topic; ``offsets_topic.InternalTopic`` is one."""

    def ensure_topic(self) -> None: ...

    def append(self, key: str, entries: list[tuple[bytes, bytes | None]]) -> Awaitable[object] | None: ...

    def replay(self) -> Iterator[tuple[bytes, bytes | None]]: ...


class ShareCoordinator:
    def __init__(self, state_log: StateLog) -> None:
        self.state_log = state_log
        self._state: dict[SharePartitionKey, ShareSnapshot] = {}
        self._pending: dict[SharePartitionKey, asyncio.Future[None]] = {}

    def load(self) -> int:
        """Replay the topic (last snapshot per share partition wins, a tombstone deletes)."""
        self.state_log.ensure_topic()
        self._state.clear()
        for raw_key, raw_value in self.state_log.replay():
            try:
                key = decode_key(raw_key)
                if key is None:
                    continue
                if raw_value is None:
                    self._state.pop(key, None)
                else:
                    self._state[key] = decode_value(raw_value)
            except (ValueError, IndexError) as exc:
                log.warning("skipping an undecodable %s record: %s", TOPIC, exc)
        log.info("loaded the state of %d share partitions from %s", len(self._state), TOPIC)
        return len(self._state)

    # -- ReadShareGroupState / WriteShareGroupState / DeleteShareGroupState -------------------------

    def read_state(self, key: SharePartitionKey) -> ShareSnapshot | None:
        return self._state.get(key)

    def keys_of_group(self, group_id: str) -> list[SharePartitionKey]:
        return [k for k in self._state if k.group_id == group_id]

    def write_state(self, key: SharePartitionKey, snapshot: ShareSnapshot) -> Awaitable[object] | None:
        """Record ``snapshot`` as the share partition's state; the returned awaitable completes once
        the write is replicated (None when it already is, e.g. on a single replica)."""
        prev = self._state.get(key)
        if prev is not None and snapshot.snapshot_epoch <= prev.snapshot_epoch:
            snapshot = ShareSnapshot(
                prev.snapshot_epoch + 1,
                snapshot.state_epoch,
                snapshot.leader_epoch,
                snapshot.start_offset,
                snapshot.state_batches,
            )
        self._state[key] = snapshot
        return self.state_log.append(key.coordinator_key, [(snapshot_key(key), snapshot_value(snapshot))])

    def delete_state(self, key: SharePartitionKey) -> Awaitable[object] | None:
        if self._state.pop(key, None) is None:
            return None
        return self.state_log.append(key.coordinator_key, [(snapshot_key(key), None)])
