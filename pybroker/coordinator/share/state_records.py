"""Keys and values of ``__share_group_state``, as Apache Kafka 4.3.1's share coordinator writes them.

A key is an int16 record type followed by the key message: 0 = ShareSnapshotKey, 1 = ShareUpdateKey, both
(GroupId, TopicId, Partition), not flexible. A value is an int16 version (0) followed by ShareSnapshotValue
(snapshot epoch, state epoch, leader epoch, start offset, create and write timestamps, state batches, and
the tagged DeliveryCompleteCount of KIP-1226) or ShareUpdateValue (snapshot epoch, leader epoch, start
offset, the changed state batches, tagged DeliveryCompleteCount). A null value under a ShareSnapshotKey is a
tombstone (DeleteShareGroupState).
Source: kafka-share-coordinator 4.3.1, common/message/Share{Snapshot,Update}{Key,Value}.json.

A ShareSnapshot is the whole state of a share partition; a ShareUpdate carries only the batches one
WriteShareGroupState changed, merged into the state on replay (``batch_combiner.combine``).
"""

from __future__ import annotations

import base64
import struct
import uuid
from dataclasses import dataclass
from typing import cast

from pybroker.coordinator.share.share_partition import RecordState, StateBatch
from pybroker.protocol import codec
from pybroker.protocol.schema import NO_VERSIONS, MessageSpec
from pybroker.protocol.schema import FieldSpec as F
from pybroker.protocol.schema import VersionRange as V

SHARE_SNAPSHOT_RECORD_TYPE = 0
SHARE_UPDATE_RECORD_TYPE = 1
VALUE_VERSION = 0
_INT16 = struct.Struct(">h")

_KEY_FIELDS = (
    F("group_id", "GroupId", "string", V(0, None)),
    F("topic_id", "TopicId", "uuid", V(0, None)),
    F("partition", "Partition", "int32", V(0, None)),
)
SHARE_SNAPSHOT_KEY = MessageSpec(
    name="ShareSnapshotKey", api_key=None, kind="data", valid_versions=V(0, 0), flexible_versions=NO_VERSIONS,
    fields=_KEY_FIELDS,
)  # fmt: skip
SHARE_UPDATE_KEY = MessageSpec(
    name="ShareUpdateKey", api_key=None, kind="data", valid_versions=V(0, 0), flexible_versions=NO_VERSIONS,
    fields=_KEY_FIELDS,
)  # fmt: skip

STATE_BATCH = (
    F("first_offset", "FirstOffset", "int64", V(0, None)),
    F("last_offset", "LastOffset", "int64", V(0, None)),
    F("delivery_state", "DeliveryState", "int8", V(0, None)),
    F("delivery_count", "DeliveryCount", "int16", V(0, None)),
)
_DELIVERY_COMPLETE_COUNT = F(
    "delivery_complete_count", "DeliveryCompleteCount", "int32", V(0, None), tagged_versions=V(0, None), tag=0,
    default="-1",
)  # fmt: skip

SHARE_SNAPSHOT_VALUE = MessageSpec(
    name="ShareSnapshotValue",
    api_key=None,
    kind="data",
    valid_versions=V(0, 0),
    flexible_versions=V(0, None),
    fields=(
        F("snapshot_epoch", "SnapshotEpoch", "int32", V(0, None)),
        F("state_epoch", "StateEpoch", "int32", V(0, None)),
        F("leader_epoch", "LeaderEpoch", "int32", V(0, None)),
        F("start_offset", "StartOffset", "int64", V(0, None)),
        _DELIVERY_COMPLETE_COUNT,
        F("create_timestamp", "CreateTimestamp", "int64", V(0, None)),
        F("write_timestamp", "WriteTimestamp", "int64", V(0, None)),
        F("state_batches", "StateBatches", "[]StateBatch", V(0, None), fields=STATE_BATCH),
    ),
)

# What pybroker wrote before it followed Kafka 4.3.1's layout (also version 0): a uint16 snapshot epoch and
# no create/write timestamps or DeliveryCompleteCount. Read as a fallback so an upgraded broker keeps the state.
LEGACY_SHARE_SNAPSHOT_VALUE = MessageSpec(
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

SHARE_UPDATE_VALUE = MessageSpec(
    name="ShareUpdateValue",
    api_key=None,
    kind="data",
    valid_versions=V(0, 0),
    flexible_versions=V(0, None),
    fields=(
        F("snapshot_epoch", "SnapshotEpoch", "int32", V(0, None)),
        F("leader_epoch", "LeaderEpoch", "int32", V(0, None)),
        F("start_offset", "StartOffset", "int64", V(0, None)),
        _DELIVERY_COMPLETE_COUNT,
        F("state_batches", "StateBatches", "[]StateBatch", V(0, None), fields=STATE_BATCH),
    ),
)


def kafka_uuid_string(topic_id: uuid.UUID) -> str:
    """Kafka's ``Uuid.toString()``: URL-safe base64 of the 16 bytes, without padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode("ascii")


def parse_kafka_uuid(text: str) -> uuid.UUID:
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if len(raw) != 16:
        raise ValueError(f"not a Kafka Uuid: {text!r}")
    return uuid.UUID(bytes=raw)


@dataclass(frozen=True)
class SharePartitionKey:
    group_id: str
    topic_id: uuid.UUID
    partition: int

    @property
    def coordinator_key(self) -> str:
        """What picks the ``__share_group_state`` partition: Kafka's ``SharePartitionKey.asCoordinatorKey``,
        ``group:topicId:partition`` with the topic id as Kafka prints it."""
        return f"{self.group_id}:{kafka_uuid_string(self.topic_id)}:{self.partition}"

    @classmethod
    def parse(cls, key: str) -> SharePartitionKey:
        """Kafka's ``SharePartitionKey.getInstance(String)``: the group id may itself hold colons, so the
        topic id and partition are the last two parts. ValueError for anything else."""
        parts = key.rsplit(":", 2)
        if len(parts) != 3 or not parts[0]:
            raise ValueError(f"Invalid key format: expected - groupId:topicId:partition, found -  {key}")
        return cls(parts[0], parse_kafka_uuid(parts[1]), int(parts[2]))


@dataclass(frozen=True)
class ShareSnapshot:
    """ShareSnapshotValue, and the coordinator's state of one share partition (Kafka's ShareGroupOffset)."""

    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    state_batches: tuple[StateBatch, ...]
    delivery_complete_count: int = -1
    create_timestamp: int = 0
    write_timestamp: int = 0


@dataclass(frozen=True)
class ShareUpdate:
    """ShareUpdateValue: the batches one write changed, and the new start offset (-1: unchanged)."""

    snapshot_epoch: int
    leader_epoch: int
    start_offset: int
    state_batches: tuple[StateBatch, ...]
    delivery_complete_count: int = -1


def _key_bytes(record_type: int, key: SharePartitionKey) -> bytes:
    spec = SHARE_SNAPSHOT_KEY if record_type == SHARE_SNAPSHOT_RECORD_TYPE else SHARE_UPDATE_KEY
    body = codec.encode(spec, 0, {"group_id": key.group_id, "topic_id": key.topic_id, "partition": key.partition})
    return _INT16.pack(record_type) + body


def snapshot_key(key: SharePartitionKey) -> bytes:
    return _key_bytes(SHARE_SNAPSHOT_RECORD_TYPE, key)


def update_key(key: SharePartitionKey) -> bytes:
    return _key_bytes(SHARE_UPDATE_RECORD_TYPE, key)


def _batches_out(batches: tuple[StateBatch, ...]) -> list[dict[str, int]]:
    return [
        {
            "first_offset": b.first_offset,
            "last_offset": b.last_offset,
            "delivery_state": int(b.delivery_state),
            "delivery_count": b.delivery_count,
        }
        for b in batches
    ]


def delivery_state(raw: int) -> RecordState:
    """A delivery state as read; one this broker does not name is kept as its number (Kafka stores the
    int8 it was given without checking it)."""
    try:
        return RecordState(raw)
    except ValueError:
        return cast(RecordState, raw)


def _batches_in(raw: list[dict[str, int]]) -> tuple[StateBatch, ...]:
    return tuple(
        StateBatch(b["first_offset"], b["last_offset"], delivery_state(b["delivery_state"]), b["delivery_count"])
        for b in raw
    )


def snapshot_value(snap: ShareSnapshot) -> bytes:
    body = codec.encode(
        SHARE_SNAPSHOT_VALUE,
        VALUE_VERSION,
        {
            "snapshot_epoch": snap.snapshot_epoch,
            "state_epoch": snap.state_epoch,
            "leader_epoch": snap.leader_epoch,
            "start_offset": snap.start_offset,
            "delivery_complete_count": snap.delivery_complete_count,
            "create_timestamp": snap.create_timestamp,
            "write_timestamp": snap.write_timestamp,
            "state_batches": _batches_out(snap.state_batches),
        },
    )
    return _INT16.pack(VALUE_VERSION) + body


def update_value(update: ShareUpdate) -> bytes:
    body = codec.encode(
        SHARE_UPDATE_VALUE,
        VALUE_VERSION,
        {
            "snapshot_epoch": update.snapshot_epoch,
            "leader_epoch": update.leader_epoch,
            "start_offset": update.start_offset,
            "delivery_complete_count": update.delivery_complete_count,
            "state_batches": _batches_out(update.state_batches),
        },
    )
    return _INT16.pack(VALUE_VERSION) + body


def decode_record_type(data: bytes) -> int:
    return int(_INT16.unpack_from(data, 0)[0])


def decode_key(data: bytes) -> SharePartitionKey | None:
    """The share partition of a ShareSnapshot or ShareUpdate key; None for other record types (skipped)."""
    record_type = decode_record_type(data)
    if record_type not in (SHARE_SNAPSHOT_RECORD_TYPE, SHARE_UPDATE_RECORD_TYPE):
        return None
    msg, _ = codec.decode(SHARE_SNAPSHOT_KEY, 0, memoryview(data), 2)
    return SharePartitionKey(msg["group_id"], msg["topic_id"], msg["partition"])


def _decode_whole(spec: MessageSpec, data: bytes) -> dict:
    """A value message that must take up the whole record value (so one layout is not read as the other)."""
    msg, end = codec.decode(spec, VALUE_VERSION, memoryview(data), 2)
    if end != len(data):
        raise codec.DecodeError(f"{spec.name}: {len(data) - end} bytes left over")
    return msg


def decode_snapshot_value(data: bytes) -> tuple[ShareSnapshot, bool]:
    """A ShareSnapshotValue in Kafka 4.3.1's layout, else in the layout earlier pybroker versions wrote; and
    whether it was the earlier one. ValueError when it is neither."""
    try:
        return decode_value(data), False
    except ValueError as current_error:
        try:
            msg = _decode_whole(LEGACY_SHARE_SNAPSHOT_VALUE, data)
        except ValueError:
            raise current_error from None
    snap = ShareSnapshot(
        snapshot_epoch=msg["snapshot_epoch"],
        state_epoch=msg["state_epoch"],
        leader_epoch=msg["leader_epoch"],
        start_offset=msg["start_offset"],
        state_batches=_batches_in(msg["state_batches"]),
    )
    return snap, True


def decode_value(data: bytes) -> ShareSnapshot:
    msg = _decode_whole(SHARE_SNAPSHOT_VALUE, data)
    return ShareSnapshot(
        snapshot_epoch=msg["snapshot_epoch"],
        state_epoch=msg["state_epoch"],
        leader_epoch=msg["leader_epoch"],
        start_offset=msg["start_offset"],
        state_batches=_batches_in(msg["state_batches"]),
        delivery_complete_count=msg["delivery_complete_count"],
        create_timestamp=msg["create_timestamp"],
        write_timestamp=msg["write_timestamp"],
    )


def decode_update_value(data: bytes) -> ShareUpdate:
    msg, _ = codec.decode(SHARE_UPDATE_VALUE, VALUE_VERSION, memoryview(data), 2)
    return ShareUpdate(
        snapshot_epoch=msg["snapshot_epoch"],
        leader_epoch=msg["leader_epoch"],
        start_offset=msg["start_offset"],
        state_batches=_batches_in(msg["state_batches"]),
        delivery_complete_count=msg["delivery_complete_count"],
    )
