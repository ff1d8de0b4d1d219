"""A small seeded generator of messages with non-default values in every field of a version."""

from __future__ import annotations

import random
import uuid
from typing import Any

from pybroker.protocol.codec import UNKNOWN_TAGS
from pybroker.protocol.schema import FieldSpec, MessageSpec, in_range

_INT_RANGES = {
    "int8": (-128, 127),
    "int16": (-32768, 32767),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint16": (0, 2**16 - 1),
    "uint32": (0, 2**32 - 1),
}


class MessageFactory:
    """Builds messages whose values differ from the defaults, so every field (tagged ones included)
    is actually put on the wire. Nullable fields are sometimes null, to exercise null markers."""

    def __init__(self, seed: int, null_probability: float = 0.25, unknown_tags: bool = True) -> None:
        self.random = random.Random(seed)
        self.null_probability = null_probability
        self.unknown_tags = unknown_tags

    def message(self, spec: MessageSpec, version: int) -> dict:
        return self.struct(spec.fields, version, spec.is_flexible(version), depth=0)

    def struct(self, fields: tuple[FieldSpec, ...], version: int, flexible: bool, depth: int) -> dict:
        out: dict[str, Any] = {}
        for field in fields:
            if in_range(field.versions, version):
                out[field.name] = self.value(field, version, flexible, depth)
        if flexible and self.unknown_tags and self.random.random() < 0.5:
            used = {f.tag for f in fields if f.tag is not None}
            tag = self.random.choice([t for t in range(20, 40) if t not in used])
            out[UNKNOWN_TAGS] = {tag: self.random.randbytes(self.random.randint(0, 5))}
        return out

    def value(self, field: FieldSpec, version: int, flexible: bool, depth: int) -> Any:
        nullable = in_range(field.nullable_versions, version)
        if nullable and self.random.random() < self.null_probability:
            # A tagged field whose default is null would then be omitted: still a valid round trip.
            return None
        if field.is_array:
            count = self.random.randint(1, 3 if depth < 2 else 1)
            return [self.element(field, version, flexible, depth) for _ in range(count)]
        return self.element(field, version, flexible, depth)

    def element(self, field: FieldSpec, version: int, flexible: bool, depth: int) -> Any:
        kind = field.element_type
        if field.is_struct:
            return self.struct(field.fields, version, flexible, depth + 1)
        if kind in _INT_RANGES:
            low, high = _INT_RANGES[kind]
            value = self.random.choice([low, high, self.random.randint(low, high)])
            default = field.default
            if default not in (None, "null") and not field.is_array and value == int(default, 0):
                value = low if value != low else high
            if value == 0:
                value = 1
            return value
        if kind == "float64":
            return self.random.choice([1.5, -2.25, 1e300])
        if kind == "bool":
            return field.default != "true"
        if kind == "string":
            return self.random.choice(["x", "topic-ü", "a" * self.random.randint(1, 40), "group.1"])
        if kind in ("bytes", "records"):
            return self.random.randbytes(self.random.randint(1, 30))
        if kind == "uuid":
            return uuid.UUID(int=self.random.getrandbits(128) or 1)
        raise AssertionError(f"unknown type {kind}")
