"""KIP-1071 streams-group records of ``__consumer_offsets``, in Apache Kafka 4.3's own layout.

Kafka's coordinator writes one record type per key version (the int16 in front of every key is the
record type): 17 StreamsGroupMetadata, 19 StreamsGroupMemberMetadata, 20
StreamsGroupTargetAssignmentMetadata, 21 StreamsGroupTargetAssignmentMember, 22
StreamsGroupCurrentMemberAssignment, 23 StreamsGroupTopology (18, the partition metadata of early
4.x versions, is no longer written).  Keys are non-flexible; values are flexible, version 0, with
later fields as tagged fields.  A null value is a tombstone.  The layouts are those of the generated
classes in kafka-group-coordinator 4.3.1 (``...coordinator.group.generated.StreamsGroup*``).
"""

from __future__ import annotations

from pybroker.coordinator.group_records import GroupRecordCodec, GroupRecordKey, key_spec, value_spec
from pybroker.protocol.schema import FieldSpec as F
from pybroker.protocol.schema import MessageSpec
from pybroker.protocol.schema import VersionRange as V

METADATA = 17
MEMBER_METADATA = 19
TARGET_ASSIGNMENT_METADATA = 20
TARGET_ASSIGNMENT_MEMBER = 21
CURRENT_MEMBER_ASSIGNMENT = 22
TOPOLOGY = 23
RECORD_TYPES = frozenset((METADATA, MEMBER_METADATA, TARGET_ASSIGNMENT_METADATA, TARGET_ASSIGNMENT_MEMBER,
                          CURRENT_MEMBER_ASSIGNMENT, TOPOLOGY))  # fmt: skip
WITH_MEMBER = frozenset((MEMBER_METADATA, TARGET_ASSIGNMENT_MEMBER, CURRENT_MEMBER_ASSIGNMENT))
_ALL = V(0, None)


def _key_values(name: str) -> F:
    json_name = "".join(w.capitalize() for w in name.split("_"))
    return F(
        name,
        json_name,
        "[]KeyValue",
        _ALL,
        fields=(F("key", "key", "string", _ALL), F("value", "value", "string", _ALL)),
    )


def _task_ids(name: str, with_epochs: bool = False) -> F:
    fields = [
        F("subtopology_id", "subtopologyId", "string", _ALL),
        F("partitions", "partitions", "[]int32", _ALL),
    ]
    if with_epochs:
        # KIP-1251: the epoch at which each active task was assigned, aligned with Partitions.
        fields.append(
            F(
                "assignment_epochs",
                "assignmentEpochs",
                "[]int32",
                _ALL,
                tagged_versions=_ALL,
                tag=0,
            )
        )
    json_name = "".join(w.capitalize() for w in name.split("_"))
    return F(name, json_name, "[]TaskIds", _ALL, fields=tuple(fields))


def _topic_info(name: str) -> F:
    json_name = "".join(w.capitalize() for w in name.split("_"))
    return F(
        name,
        json_name,
        "[]TopicInfo",
        _ALL,
        fields=(
            F("name", "name", "string", _ALL),
            F("partitions", "partitions", "int32", _ALL),
            F("replication_factor", "replicationFactor", "int16", _ALL),
            _key_values("topic_configs"),
        ),
    )


KEY_SPECS: dict[int, MessageSpec] = {
    record_type: key_spec(f"StreamsGroup{name}Key", record_type, record_type in WITH_MEMBER)
    for record_type, name in (
        (METADATA, "Metadata"),
        (MEMBER_METADATA, "MemberMetadata"),
        (TARGET_ASSIGNMENT_METADATA, "TargetAssignmentMetadata"),
        (TARGET_ASSIGNMENT_MEMBER, "TargetAssignmentMember"),
        (CURRENT_MEMBER_ASSIGNMENT, "CurrentMemberAssignment"),
        (TOPOLOGY, "Topology"),
    )
}

VALUE_SPECS: dict[int, MessageSpec] = {
    METADATA: value_spec(
        "StreamsGroupMetadataValue",
        (
            F("epoch", "epoch", "int32", _ALL),
            F("metadata_hash", "metadataHash", "int64", _ALL),
            F(
                "validated_topology_epoch",
                "validatedTopologyEpoch",
                "int32",
                _ALL,
                tagged_versions=_ALL,
                tag=0,
                default="-1",
            ),
            F(
                "last_assignment_configs",
                "lastAssignmentConfigs",
                "[]LastAssignmentConfig",
                _ALL,
                nullable_versions=_ALL,
                tagged_versions=_ALL,
                tag=1,
                default="null",
                fields=(F("key", "key", "string", _ALL), F("value", "value", "string", _ALL)),
            ),
        ),
    ),  # fmt: skip
    MEMBER_METADATA: value_spec(
        "StreamsGroupMemberMetadataValue",
        (
            F("instance_id", "instanceId", "string", _ALL, nullable_versions=_ALL),
            F("rack_id", "rackId", "string", _ALL, nullable_versions=_ALL),
            F("client_id", "clientId", "string", _ALL),
            F("client_host", "clientHost", "string", _ALL),
            F("rebalance_timeout_ms", "rebalanceTimeoutMs", "int32", _ALL),
            F("topology_epoch", "topologyEpoch", "int32", _ALL),
            F("process_id", "processId", "string", _ALL),
            F(
                "user_endpoint",
                "userEndpoint",
                "Endpoint",
                _ALL,
                nullable_versions=_ALL,
                default="null",
                fields=(F("host", "host", "string", _ALL), F("port", "port", "uint16", _ALL)),
            ),
            _key_values("client_tags"),
        ),
    ),  # fmt: skip
    TARGET_ASSIGNMENT_METADATA: value_spec(
        "StreamsGroupTargetAssignmentMetadataValue",
        (
            F("assignment_epoch", "assignmentEpoch", "int32", _ALL),
            F(
                "assignment_timestamp",
                "assignmentTimestamp",
                "int64",
                _ALL,
                tagged_versions=_ALL,
                tag=0,
                default="0",
            ),
        ),
    ),
    TARGET_ASSIGNMENT_MEMBER: value_spec(
        "StreamsGroupTargetAssignmentMemberValue",
        (_task_ids("active_tasks"), _task_ids("standby_tasks"), _task_ids("warmup_tasks")),
    ),
    CURRENT_MEMBER_ASSIGNMENT: value_spec(
        "StreamsGroupCurrentMemberAssignmentValue",
        (
            F("member_epoch", "memberEpoch", "int32", _ALL),
            F("previous_member_epoch", "previousMemberEpoch", "int32", _ALL),
            F("state", "state", "int8", _ALL),
            _task_ids("active_tasks", with_epochs=True),
            _task_ids("standby_tasks", with_epochs=True),
            _task_ids("warmup_tasks", with_epochs=True),
            _task_ids("active_tasks_pending_revocation", with_epochs=True),
            _task_ids("standby_tasks_pending_revocation", with_epochs=True),
            _task_ids("warmup_tasks_pending_revocation", with_epochs=True),
        ),
    ),
    TOPOLOGY: value_spec(
        "StreamsGroupTopologyValue",
        (
            F("epoch", "epoch", "int32", _ALL),
            F(
                "subtopologies",
                "subtopologies",
                "[]Subtopology",
                _ALL,
                fields=(
                    F("subtopology_id", "subtopologyId", "string", _ALL),
                    F("source_topics", "sourceTopics", "[]string", _ALL),
                    F("source_topic_regex", "sourceTopicRegex", "[]string", _ALL),
                    _topic_info("state_changelog_topics"),
                    F("repartition_sink_topics", "repartitionSinkTopics", "[]string", _ALL),
                    _topic_info("repartition_source_topics"),
                    F(
                        "copartition_groups",
                        "copartitionGroups",
                        "[]CopartitionGroup",
                        _ALL,
                        fields=(
                            F("source_topics", "sourceTopics", "[]int16", _ALL),
                            F("source_topic_regex", "sourceTopicRegex", "[]int16", _ALL),
                            F("repartition_source_topics", "repartitionSourceTopics", "[]int16", _ALL),
                        ),
                    ),
                ),
            ),
        ),
    ),
}


StreamsRecordKey = GroupRecordKey
_CODEC = GroupRecordCodec(RECORD_TYPES, KEY_SPECS, VALUE_SPECS)
encode_key = _CODEC.encode_key
encode_value = _CODEC.encode_value
decode_key = _CODEC.decode_key  # the key of a streams-group record, or None for any other record type
decode_value = _CODEC.decode_value
