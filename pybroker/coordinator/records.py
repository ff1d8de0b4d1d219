"""Keys and values of the __consumer_offsets topic, in Apache Kafka's own layout.

Each key and value starts with an int16 version.  Key version 0/1 is an offset commit
(group, topic, partition), key version 2 is a group's metadata (group).  Values are written as
OffsetCommitValue v3 and GroupMetadataValue v3, the versions Kafka itself writes for classic
groups, and every version 0-4 is read.  A null value is a tombstone.  Source of truth:
apache/kafka group-coordinator/src/main/resources/common/message/{OffsetCommit,GroupMetadata}{Key,Value}.json.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from pybroker.protocol import codec
from pybroker.protocol.schema import NO_VERSIONS, MessageSpec
from pybroker.protocol.schema import FieldSpec as F
from pybroker.protocol.schema import VersionRange as V

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_VALUE_VERSION = 3

_VERSION = struct.Struct(">h")

OFFSET_COMMIT_KEY = MessageSpec(
    name="OffsetCommitKey",
    api_key=None,
    kind="data",
    valid_versions=V(0, 1),
    flexible_versions=NO_VERSIONS,
    fields=(
        F("group", "group", "string", V(0, None)),
        F("topic", "topic", "string", V(0, None)),
        F("partition", "partition", "int32", V(0, None)),
    ),
)

GROUP_METADATA_KEY = MessageSpec(
    name="GroupMetadataKey",
    api_key=None,
    kind="data",
    valid_versions=V(2, 2),
    flexible_versions=NO_VERSIONS,
    fields=(F("group", "group", "string", V(2, None)),),
)

OFFSET_COMMIT_VALUE = MessageSpec(
    name="OffsetCommitValue",
    api_key=None,
    kind="data",
    valid_versions=V(0, 4),
    flexible_versions=V(4, None),
    fields=(
        F("offset", "offset", "int64", V(0, None)),
        F("leader_epoch", "leaderEpoch", "int32", V(3, None), default="-1", ignorable=True),
        F("metadata", "metadata", "string", V(0, None)),
        F("commit_timestamp", "commitTimestamp", "int64", V(0, None)),
        F("expire_timestamp", "expireTimestamp", "int64", V(1, 1), default="-1", ignorable=True),
    ),
)

GROUP_METADATA_VALUE = MessageSpec(
    name="GroupMetadataValue",
    api_key=None,
    kind="data",
    valid_versions=V(0, 4),
    flexible_versions=V(4, None),
    fields=(
        F("protocol_type", "protocolType", "string", V(0, None)),
        F("generation", "generation", "int32", V(0, None)),
        F("protocol", "protocol", "string", V(0, None), nullable_versions=V(0, None)),
        F("leader", "leader", "string", V(0, None), nullable_versions=V(0, None)),
        F(
            "current_state_timestamp",
            "currentStateTimestamp",
            "int64",
            V(2, None),
            default="-1",
            ignorable=True,
        ),
        F(
            "members",
            "members",
            "[]MemberMetadata",
            V(0, None),
            fields=(
                F("member_id", "memberId", "string", V(0, None)),
                F(
                    "group_instance_id",
                    "groupInstanceId",
                    "string",
                    V(3, None),
                    nullable_versions=V(3, None),
                    default="null",
                    ignorable=True,
                ),
                F("client_id", "clientId", "string", V(0, None)),
                F("client_host", "clientHost", "string", V(0, None)),
                F("rebalance_timeout", "rebalanceTimeout", "int32", V(1, None), ignorable=True),
                F("session_timeout", "sessionTimeout", "int32", V(0, None)),
                F("subscription", "subscription", "bytes", V(0, None)),
                F("assignment", "assignment", "bytes", V(0, None)),
            ),
        ),
    ),
)


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    group: str


def _encode(spec: MessageSpec, version: int, msg: dict[str, Any]) -> bytes:
    return _VERSION.pack(version) + codec.encode(spec, version, msg)


def offset_key(group: str, topic: str, partition: int) -> bytes:
    return _encode(
        OFFSET_COMMIT_KEY, OFFSET_COMMIT_KEY_VERSION, {"group": group, "topic": topic, "partition": partition}
    )


def group_key(group: str) -> bytes:
    return _encode(GROUP_METADATA_KEY, GROUP_METADATA_KEY_VERSION, {"group": group})


def offset_value(offset: int, leader_epoch: int, metadata: str, commit_timestamp: int) -> bytes:
    return _encode(
        OFFSET_COMMIT_VALUE,
        OFFSET_COMMIT_VALUE_VERSION,
        {
            "offset": offset,
            "leader_epoch": leader_epoch,
            "metadata": metadata,
            "commit_timestamp": commit_timestamp,
        },
    )


def group_value(msg: dict[str, Any]) -> bytes:
    """``msg`` holds GroupMetadataValue fields by snake_case name (see GROUP_METADATA_VALUE)."""
    return _encode(GROUP_METADATA_VALUE, GROUP_METADATA_VALUE_VERSION, msg)


def decode_key(data: bytes) -> OffsetKey | GroupKey | None:
    """None for key versions this broker does not know (e.g. KIP-848 records): they are skipped."""
    (version,) = _VERSION.unpack_from(data, 0)
    if version in (0, 1):
        msg, _ = codec.decode(OFFSET_COMMIT_KEY, version, memoryview(data), 2)
        return OffsetKey(msg["group"], msg["topic"], msg["partition"])
    if version == 2:
        msg, _ = codec.decode(GROUP_METADATA_KEY, version, memoryview(data), 2)
        return GroupKey(msg["group"])
    return None


def decode_offset_value(data: bytes) -> dict[str, Any]:
    (version,) = _VERSION.unpack_from(data, 0)
    msg, _ = codec.decode(OFFSET_COMMIT_VALUE, min(version, 4), memoryview(data), 2)
    return msg


def decode_group_value(data: bytes) -> dict[str, Any]:
    (version,) = _VERSION.unpack_from(data, 0)
    msg, _ = codec.decode(GROUP_METADATA_VALUE, min(version, 4), memoryview(data), 2)
    return msg
