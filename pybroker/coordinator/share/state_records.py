"""Keys and values of ``__share_group_state``: Kafka's ShareSnapshotKey / ShareSnapshotValue.

A key is an int16 record type (0 = ShareSnapshot, as Kafka's coordinator records are typed) followed
by ShareSnapshotKey v0 (GroupId, TopicId, Partition); a value is an int16 version followed by
ShareSnapshotValue v0 (flexible): snapshot epoch, state epoch, leader epoch, start offset and the
state batches of the in-flight window. A null value is a tombstone (DeleteShareGroupState).
Source: apache/kafka share-coordinator/src/main/resources/common/message/ShareSnapshot{Key,Value}.json.

Each snapshot is complete, so replay keeps the last value per key and compaction keeps the topic
small; Kafka additionally writes ShareUpdate deltas between snapshots, which pybroker does not need
because a snapshot of a window bounded by ``group.share.partition.max.record.locks`` is small.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass

from pybroker.coordinator.share.share_partition import RecordState, StateBatch
from pybroker.protocol import codec
from pybroker.protocol.schema import NO_VERSIONS, MessageSpec
from pybroker.protocol.schema import FieldSpec as F
from pybroker.protocol.schema import VersionRange as V

SHARE_SNAPSHOT_RECORD_TYPE = 0
SHARE_SNAPSHOT_VALUE_VERSION = 0
_INT16 = struct.Struct(">h")

SHARE_SNAPSHOT_KEY = MessageSpec(
    name="ShareSnapshotKey",
    api_key=None,
    kind="data",
    valid_versions=V(0, 0),
    flexible_versions=NO_VERSIONS,
    fields=(
        F("group_id", "GroupId", "string", V(0, None)),
        F("topic_id", "TopicId", "uuid", V(0, None)),
        F("partition", "Partition", "int32", V(0, None)),
    ),
)

STATE_BATCH = (
    F("first_offset", "FirstOffset", "int64", V(0, None)),
    F("last_offset", "LastOffset", "int64", V(0, None)),
    F("delivery_state", "DeliveryState", "int8", V(0, None)),
    F("delivery_count", "DeliveryCount", "int16", V(0, None)),
)

SHARE_SNAPSHOT_VALUE = MessageSpec(
    name="ShareSnapshotValue",
    api_key=None,
    kind="data",
    valid_versions=V(0, 0),
    flexible_versions=V(0, None),
    fields=(
        F("snapshot_epoch", "SnapshotEpoch", "uint16", V(0, None)),
        F("state_epoch", "StateEpoch", "int32", V(0, None)),
        F("leader_epoch", "LeaderEpoch", "int32", V(0, None)),
        F("start_offset", "StartOffset", "int64", V(0, None)),
        F("state_batches", "StateBatches", "[]StateBatch", V(0, None), fields=STATE_BATCH),
    ),
)


@dataclass(frozen=True)
class SharePartitionKey:
    group_id: str
    topic_id: uuid.UUID
    partition: int

    @property
    def coordinator_key(self) -> str:
        """What picks the ``__share_group_state`` partition (Kafka's SharePartitionKey.asCoordinatorKey)."""
        return f"{self.group_id}:{self.topic_id}:{self.partition}"


@dataclass(frozen=True)
class ShareSnapshot:
    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    state_batches: tuple[StateBatch, ...]


def snapshot_key(key: SharePartitionKey) -> bytes:
    body = codec.encode(
        SHARE_SNAPSHOT_KEY, 0, {"group_id": key.group_id, "topic_id": key.topic_id, "partition": key.partition}
    )
    return _INT16.pack(SHARE_SNAPSHOT_RECORD_TYPE) + body


def snapshot_value(snap: ShareSnapshot) -> bytes:
    body = codec.encode(
        SHARE_SNAPSHOT_VALUE,
        SHARE_SNAPSHOT_VALUE_VERSION,
        {
            "snapshot_epoch": snap.snapshot_epoch & 0xFFFF,
            "state_epoch": snap.state_epoch,
            "leader_epoch": snap.leader_epoch,
            "start_offset": snap.start_offset,
            "state_batches": [
                {
                    "first_offset": b.first_offset,
                    "last_offset": b.last_offset,
                    "delivery_state": int(b.delivery_state),
                    "delivery_count": b.delivery_count,
                }
                for b in snap.state_batches
            ],
        },
    )
    return _INT16.pack(SHARE_SNAPSHOT_VALUE_VERSION) + body


def decode_key(data: bytes) -> SharePartitionKey | None:
    """The key of a snapshot record; None for record types this broker does not write (skipped)."""
    (record_type,) = _INT16.unpack_from(data, 0)
    if record_type != SHARE_SNAPSHOT_RECORD_TYPE:
        return None
    msg, _ = codec.decode(SHARE_SNAPSHOT_KEY, 0, memoryview(data), 2)
    return SharePartitionKey(msg["group_id"], msg["topic_id"], msg["partition"])


def decode_value(data: bytes) -> ShareSnapshot:
    msg, _ = codec.decode(SHARE_SNAPSHOT_VALUE, SHARE_SNAPSHOT_VALUE_VERSION, memoryview(data), 2)
    return ShareSnapshot(
        snapshot_epoch=msg["snapshot_epoch"],
        state_epoch=msg["state_epoch"],
        leader_epoch=msg["leader_epoch"],
        start_offset=msg["start_offset"],
        state_batches=tuple(
            StateBatch(b["first_offset"], b["last_offset"], RecordState(b["delivery_state"]), b["delivery_count"])
            for b in msg["state_batches"]
        ),
    )
