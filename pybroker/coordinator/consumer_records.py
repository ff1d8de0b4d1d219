"""KIP-848 consumer-group records of ``__consumer_offsets``, in Apache Kafka's own layout.

The new group coordinator writes one record type per key version (the int16 in front of every key
is the record type): 3 ConsumerGroupMetadata, 4 ConsumerGroupPartitionMetadata, 5
ConsumerGroupMemberMetadata, 6 ConsumerGroupTargetAssignmentMetadata, 7
ConsumerGroupTargetAssignmentMember, 8 ConsumerGroupCurrentMemberAssignment.  Keys are
non-flexible; values are flexible, version 0.  A null value is a tombstone.  Source of truth:
apache/kafka group-coordinator/src/main/resources/common/message/ConsumerGroup*{Key,Value}.json.
Unknown tagged fields (e.g. the 4.1+ MetadataHash) are kept on decode and ignored.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from pybroker.coordinator.group_records import GroupRecordCodec, GroupRecordKey, key_spec, value_spec
from pybroker.protocol.schema import FieldSpec as F
from pybroker.protocol.schema import MessageSpec
from pybroker.protocol.schema import VersionRange as V

if TYPE_CHECKING:
    from pybroker.protocol.typed.groups import ConsumerGroupHeartbeatResponseTopicPartitions

METADATA = 3
PARTITION_METADATA = 4
MEMBER_METADATA = 5
TARGET_ASSIGNMENT_METADATA = 6
TARGET_ASSIGNMENT_MEMBER = 7
CURRENT_MEMBER_ASSIGNMENT = 8
RECORD_TYPES = range(METADATA, CURRENT_MEMBER_ASSIGNMENT + 1)
_ALL = V(0, None)

# Assignments as Kafka writes them: topic id -> sorted partitions.
Assignment = dict[uuid.UUID, tuple[int, ...]]


KEY_SPECS: dict[int, MessageSpec] = {
    METADATA: key_spec("ConsumerGroupMetadataKey", METADATA, False),
    PARTITION_METADATA: key_spec("ConsumerGroupPartitionMetadataKey", PARTITION_METADATA, False),
    MEMBER_METADATA: key_spec("ConsumerGroupMemberMetadataKey", MEMBER_METADATA, True),
    TARGET_ASSIGNMENT_METADATA: key_spec(
        "ConsumerGroupTargetAssignmentMetadataKey", TARGET_ASSIGNMENT_METADATA, False
    ),
    TARGET_ASSIGNMENT_MEMBER: key_spec(
        "ConsumerGroupTargetAssignmentMemberKey", TARGET_ASSIGNMENT_MEMBER, True
    ),
    CURRENT_MEMBER_ASSIGNMENT: key_spec(
        "ConsumerGroupCurrentMemberAssignmentKey", CURRENT_MEMBER_ASSIGNMENT, True
    ),
}


def _topic_partitions(name: str, with_epochs: bool = False) -> F:
    fields = [F("topic_id", "topicId", "uuid", _ALL), F("partitions", "partitions", "[]int32", _ALL)]
    if with_epochs:
        # KIP-1251 (Kafka 4.3): the epoch at which each partition was assigned, aligned with Partitions.
        fields.append(
            F(
                "assignment_epochs",
                "assignmentEpochs",
                "[]int32",
                _ALL,
                nullable_versions=_ALL,
                tagged_versions=_ALL,
                tag=0,
                default="null",
            )
        )
    return F(
        name,
        "".join(w.capitalize() for w in name.split("_")),
        "[]TopicPartitions",
        _ALL,
        fields=tuple(fields),
    )


VALUE_SPECS: dict[int, MessageSpec] = {
    METADATA: value_spec("ConsumerGroupMetadataValue", (F("epoch", "epoch", "int32", _ALL),)),
    PARTITION_METADATA: value_spec(
        "ConsumerGroupPartitionMetadataValue",
        (
            F(
                "topics",
                "topics",
                "[]TopicMetadata",
                _ALL,
                fields=(
                    F("topic_id", "topicId", "uuid", _ALL),
                    F("topic_name", "topicName", "string", _ALL),
                    F("num_partitions", "numPartitions", "int32", _ALL),
                    F(
                        "partition_racks",
                        "partitionRacks",
                        "[]PartitionMetadata",
                        _ALL,
                        fields=(
                            F("partition", "partition", "int32", _ALL),
                            F("racks", "racks", "[]string", _ALL),
                        ),
                    ),
                ),
            ),
        ),
    ),
    MEMBER_METADATA: value_spec(
        "ConsumerGroupMemberMetadataValue",
        (
            F("instance_id", "instanceId", "string", _ALL, nullable_versions=_ALL),
            F("rack_id", "rackId", "string", _ALL, nullable_versions=_ALL),
            F("client_id", "clientId", "string", _ALL),
            F("client_host", "clientHost", "string", _ALL),
            F("subscribed_topic_names", "subscribedTopicNames", "[]string", _ALL),
            F("subscribed_topic_regex", "subscribedTopicRegex", "string", _ALL, nullable_versions=_ALL),
            F("rebalance_timeout_ms", "rebalanceTimeoutMs", "int32", _ALL, default="-1"),
            F("server_assignor", "serverAssignor", "string", _ALL, nullable_versions=_ALL),
        ),
    ),
    TARGET_ASSIGNMENT_METADATA: value_spec(
        "ConsumerGroupTargetAssignmentMetadataValue",
        (F("assignment_epoch", "assignmentEpoch", "int32", _ALL),),
    ),
    TARGET_ASSIGNMENT_MEMBER: value_spec(
        "ConsumerGroupTargetAssignmentMemberValue", (_topic_partitions("topic_partitions"),)
    ),
    CURRENT_MEMBER_ASSIGNMENT: value_spec(
        "ConsumerGroupCurrentMemberAssignmentValue",
        (
            F("member_epoch", "memberEpoch", "int32", _ALL),
            F("previous_member_epoch", "previousMemberEpoch", "int32", _ALL),
            F("state", "state", "int8", _ALL),
            _topic_partitions("assigned_partitions", with_epochs=True),
            _topic_partitions("partitions_pending_revocation", with_epochs=True),
        ),
    ),
}


ConsumerRecordKey = GroupRecordKey
_CODEC = GroupRecordCodec(RECORD_TYPES, KEY_SPECS, VALUE_SPECS)
encode_key = _CODEC.encode_key
encode_value = _CODEC.encode_value
decode_key = _CODEC.decode_key  # the key of a consumer-group record, or None for any other record type
decode_value = _CODEC.decode_value


def assignment_to_wire(assignment: Assignment) -> list[ConsumerGroupHeartbeatResponseTopicPartitions]:
    """ConsumerGroupHeartbeat's TopicPartitions (the same two fields in the assignment records)."""
    return [
        {"topic_id": topic_id, "partitions": list(parts)}
        for topic_id, parts in sorted(assignment.items(), key=lambda kv: str(kv[0]))
        if parts
    ]


def assignment_with_epochs_to_wire(
    assignment: Assignment, epochs: dict[tuple[uuid.UUID, int], int], default_epoch: int
) -> list[dict[str, Any]]:
    return [
        {**t, "assignment_epochs": [epochs.get((t["topic_id"], p), default_epoch) for p in t["partitions"]]}
        for t in assignment_to_wire(assignment)
    ]


def epochs_from_wire(
    topics: list[dict[str, Any]] | None, default_epoch: int
) -> dict[tuple[uuid.UUID, int], int]:
    """The KIP-1251 assignment epochs of a record (``default_epoch`` where a writer gave none)."""
    out: dict[tuple[uuid.UUID, int], int] = {}
    for t in topics or []:
        epochs = t.get("assignment_epochs") or []
        for i, p in enumerate(t["partitions"]):
            out[(t["topic_id"], p)] = epochs[i] if i < len(epochs) else default_epoch
    return out


def assignment_from_wire(topics: Iterable[Mapping[str, Any]] | None) -> Assignment:
    out: Assignment = {}
    for t in topics or []:
        parts = tuple(sorted(set(t["partitions"])))
        if parts:
            out[t["topic_id"]] = tuple(sorted(set(out.get(t["topic_id"], ())) | set(parts)))
    return out
