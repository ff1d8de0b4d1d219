"""Kafka message declarations as plain data.

The generated modules in ``pybroker/protocol/messages/`` build these objects from Apache Kafka's JSON
message definitions; ``pybroker.protocol.codec`` interprets them. Nothing here does I/O or encoding.

Version ranges are ``VersionRange(low, high)`` tuples, inclusive, where ``high is None`` means "and
every later version" (the JSON's ``"3+"``); ``NO_VERSIONS`` means none (the JSON's ``"none"`` or an
absent key). ``version in spec.flexible_versions`` works for every range.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple


class VersionRange(NamedTuple):
    """Inclusive range of versions; ``high is None`` means open-ended (the JSON's ``"3+"``).

    Supports ``version in versions``. ``NO_VERSIONS`` (the JSON's ``"none"``) contains nothing.
    """

    low: int
    high: int | None

    def __contains__(self, version: object) -> bool:
        return (
            isinstance(version, int) and self.low <= version and (self.high is None or version <= self.high)
        )

    @property
    def is_empty(self) -> bool:
        return self.high is not None and self.high < self.low

    def __str__(self) -> str:
        if self.is_empty:
            return "none"
        if self.high is None:
            return f"{self.low}+"
        return f"{self.low}-{self.high}" if self.high != self.low else str(self.low)


NO_VERSIONS = VersionRange(0, -1)

PRIMITIVE_TYPES = frozenset(
    {
        "bool",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint16",
        "uint32",
        "float64",
        "string",
        "bytes",
        "records",
        "uuid",
    }
)

# A field-level ``flexible_versions`` equal to this follows the message's flexible versions; any other
# value (only NO_VERSIONS occurs in Kafka's specs: RequestHeader.ClientId) overrides it.
INHERIT = "inherit"


def in_range(versions: VersionRange, version: int) -> bool:
    low, high = versions
    return low <= version and (high is None or version <= high)


def parse_versions(text: str | None) -> VersionRange:
    """Parses Kafka's version syntax: ``"3+"``, ``"0-7"``, ``"5"``, ``"none"`` (or missing)."""
    if text is None:
        return NO_VERSIONS
    text = text.strip()
    if text == "none" or text == "":
        return NO_VERSIONS
    if text.endswith("+"):
        return VersionRange(int(text[:-1]), None)
    if "-" in text:
        low, high = text.split("-", 1)
        return VersionRange(int(low), int(high))
    return VersionRange(int(text), int(text))


def snake_case(json_name: str) -> str:
    """``TopicData`` → ``topic_data``, ``ThrottleTimeMs`` → ``throttle_time_ms``, ``ISR`` → ``isr``."""
    # Kafka spells "KRaft" as one word (isKRaftController → is_kraft_controller).
    json_name = json_name.replace("KRaft", "Kraft")
    out: list[str] = []
    for index, char in enumerate(json_name):
        if char.isupper():
            previous_is_lower = index > 0 and (
                json_name[index - 1].islower() or json_name[index - 1].isdigit()
            )
            next_is_lower = index + 1 < len(json_name) and json_name[index + 1].islower()
            previous_is_upper = index > 0 and json_name[index - 1].isupper()
            if index > 0 and (previous_is_lower or (previous_is_upper and next_is_lower)):
                out.append("_")
            out.append(char.lower())
        else:
            out.append(char)
    return "".join(out)


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """One field of a message or struct, exactly as declared in Kafka's JSON.

    ``type`` is the JSON type string: a primitive (``int32``, ``string``, ``records``, ...), a struct name
    (``LeaderIdAndEpoch``) or an array of either (``[]int32``, ``[]TopicData``). Struct types carry their
    (common structs already resolved) fields in ``fields``. ``default`` is the JSON default as text
    (``"-1"``, ``"null"``, ``"0x7fffffff"``, ``"true"``), or ``None`` when the JSON gives none.
    """

    name: str
    json_name: str
    type: str
    versions: VersionRange
    nullable_versions: VersionRange = NO_VERSIONS
    tagged_versions: VersionRange = NO_VERSIONS
    tag: int | None = None
    flexible_versions: VersionRange | str = INHERIT
    default: str | None = None
    ignorable: bool = False
    fields: tuple[FieldSpec, ...] = ()

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def element_type(self) -> str:
        return self.type[2:] if self.is_array else self.type

    @property
    def is_struct(self) -> bool:
        """True for a struct field or an array of structs."""
        return self.element_type not in PRIMITIVE_TYPES


@dataclass(frozen=True, slots=True)
class MessageSpec:
    """One request, response, header or data message."""

    name: str
    api_key: int | None
    kind: str  # "request" | "response" | "header" | "data"
    valid_versions: VersionRange
    flexible_versions: VersionRange
    fields: tuple[FieldSpec, ...]
    listeners: tuple[str, ...] = ()
    latest_version_unstable: bool = False
    deprecated_versions: VersionRange = NO_VERSIONS

    @property
    def min_version(self) -> int:
        return self.valid_versions.low

    @property
    def max_version(self) -> int:
        assert self.valid_versions.high is not None
        return self.valid_versions.high

    def is_flexible(self, version: int) -> bool:
        return in_range(self.flexible_versions, version)

    def supports(self, version: int) -> bool:
        return in_range(self.valid_versions, version)
