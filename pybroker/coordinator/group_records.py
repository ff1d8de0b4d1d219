"""The framing the group coordinator's own records share in ``__consumer_offsets``: an int16 record
type in front of the key (also the key's version), an int16 value version in front of the value (0:
Kafka defines no other; later fields arrive as tagged fields), the key holding the group id and, for
member records, the member id.  KIP-848 consumer groups (consumer_records) and KIP-1071 streams groups
(streams/records) differ only in their record types and layouts, given here as specs."""

from __future__ import annotations

import struct
from collections.abc import Container, Mapping
from dataclasses import dataclass
from typing import Any

from pybroker.protocol import codec
from pybroker.protocol.schema import NO_VERSIONS, MessageSpec
from pybroker.protocol.schema import FieldSpec as F
from pybroker.protocol.schema import VersionRange as V

VALUE_VERSION = 0
_VERSION = struct.Struct(">h")


def key_spec(name: str, version: int, with_member: bool) -> MessageSpec:
    """A record key: the group id (and the member id for member records), at the record type's version."""
    fields = [F("group_id", "groupId", "string", V(version, None))]
    if with_member:
        fields.append(F("member_id", "memberId", "string", V(version, None)))
    return MessageSpec(
        name=name,
        api_key=None,
        kind="data",
        valid_versions=V(version, version),
        flexible_versions=NO_VERSIONS,
        fields=tuple(fields),
    )


def value_spec(name: str, fields: tuple[F, ...]) -> MessageSpec:
    """A record value: version 0, flexible (later fields arrive tagged)."""
    return MessageSpec(
        name=name, api_key=None, kind="data", valid_versions=V(0, 0), flexible_versions=V(0, None), fields=fields
    )


@dataclass(frozen=True, slots=True)
class GroupRecordKey:
    record_type: int
    group_id: str
    member_id: str | None = None


class GroupRecordCodec:
    """Encodes and decodes one family's records (its record types, key and value layouts)."""

    __slots__ = ("record_types", "key_specs", "value_specs")

    def __init__(
        self, record_types: Container[int], key_specs: Mapping[int, MessageSpec], value_specs: Mapping[int, MessageSpec]
    ) -> None:
        self.record_types = record_types
        self.key_specs = key_specs
        self.value_specs = value_specs

    def encode_key(self, record_type: int, group_id: str, member_id: str | None = None) -> bytes:
        msg: dict[str, Any] = {"group_id": group_id}
        if member_id is not None:
            msg["member_id"] = member_id
        return _VERSION.pack(record_type) + codec.encode(self.key_specs[record_type], record_type, msg)

    def encode_value(self, record_type: int, msg: dict[str, Any]) -> bytes:
        return _VERSION.pack(VALUE_VERSION) + codec.encode(self.value_specs[record_type], VALUE_VERSION, msg)

    def decode_key(self, data: bytes) -> GroupRecordKey | None:
        """The key of one of this family's records, or None for any other record type."""
        (record_type,) = _VERSION.unpack_from(data, 0)
        if record_type not in self.record_types:
            return None
        msg, _ = codec.decode(self.key_specs[record_type], record_type, memoryview(data), 2)
        return GroupRecordKey(record_type, msg["group_id"], msg.get("member_id"))

    def decode_value(self, record_type: int, data: bytes) -> dict[str, Any]:
        msg, _ = codec.decode(self.value_specs[record_type], VALUE_VERSION, memoryview(data), 2)
        return msg
