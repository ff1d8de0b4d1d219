"""Kafka's configuration vocabulary (types, validators, typed parsing) and the topic-level configs.

The definitions follow Kafka's own `ConfigDef`s (`LogConfig`, `ServerLogConfigs`,
`ServerTopicConfigSynonyms`): same names, types, defaults, ranges and broker synonyms, so that
`kafka-configs.sh --describe` and the AdminClient see what they would see from Apache Kafka.
The broker-level definitions live in `pybroker.config`; this module knows nothing of the broker
object beyond the `BrokerSettings` protocol below, so it can be imported from anywhere.
"""

from __future__ import annotations

import difflib
import enum
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
SHORT_MIN, SHORT_MAX = -(2**15), 2**15 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1

MS_PER_MINUTE = 60 * 1000
MS_PER_HOUR = 60 * MS_PER_MINUTE


class ConfigError(ValueError):
    """An unknown configuration name or an invalid value; `str()` is the message a user should see.

    Handlers map it to INVALID_CONFIG; the command line prints it and exits 1.
    """

    def __init__(self, key: str, message: str, value: object = None) -> None:
        super().__init__(message)
        self.key = key
        self.value = value
        self.message = message


class ConfigType(enum.IntEnum):
    """Kafka's `ConfigDef.Type`, numbered as DescribeConfigs' `ConfigType` field (v3+)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class ConfigSource(enum.IntEnum):
    """DescribeConfigs' `ConfigSource` codes (Kafka's `DescribeConfigsResponse.ConfigSource`)."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8


class Importance(enum.Enum):
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"


# A validator receives the key and the already-typed value and raises ConfigError.
class Validator(Protocol):
    def __call__(self, key: str, value: Any) -> None: ...

    def describe(self) -> str: ...


def _invalid(key: str, value: object, reason: str) -> ConfigError:
    # Kafka's ConfigException wording, so messages read the same as Apache Kafka's.
    return ConfigError(key, f"Invalid value {format_value(value)} for configuration {key}: {reason}", value)


@dataclass(frozen=True)
class Range:
    minimum: float | None = None
    maximum: float | None = None

    def __call__(self, key: str, value: Any) -> None:
        if value is None:
            return
        if self.minimum is not None and value < self.minimum:
            raise _invalid(key, value, f"Value must be at least {self.minimum}")
        if self.maximum is not None and value > self.maximum:
            raise _invalid(key, value, f"Value must be no more than {self.maximum}")

    def describe(self) -> str:
        if self.minimum is not None and self.maximum is not None:
            return f"[{self.minimum},...,{self.maximum}]"
        if self.minimum is not None:
            return f"[{self.minimum},...]"
        return f"[...,{self.maximum}]"


def at_least(minimum: float) -> Range:
    return Range(minimum=minimum)


def between(minimum: float, maximum: float) -> Range:
    return Range(minimum, maximum)


@dataclass(frozen=True)
class OneOf:
    """Kafka's `ValidString.in` (a STRING) or `ValidList.in` (each element of a LIST)."""

    allowed: tuple[str, ...]
    case_sensitive: bool = True

    def __call__(self, key: str, value: Any) -> None:
        if value is None:
            return
        items = value if isinstance(value, list) else [value]
        allowed = self.allowed if self.case_sensitive else tuple(a.lower() for a in self.allowed)
        for item in items:
            probe = item if self.case_sensitive else item.lower()
            if probe not in allowed:
                raise _invalid(key, value, f"String must be one of: {', '.join(self.allowed)}")

    def describe(self) -> str:
        return f"[{', '.join(self.allowed)}]"


@dataclass(frozen=True)
class NonEmptyList:
    """Kafka's `ValidList.anyNonDuplicateValues(false, ...)`: at least one entry, no duplicates."""

    def __call__(self, key: str, value: Any) -> None:
        if value is None:
            return
        if not value or any(not item for item in value):
            raise _invalid(key, value, "Empty list or empty entries are not allowed")
        if len(set(value)) != len(value):
            raise _invalid(key, value, "Values must not be duplicated")

    def describe(self) -> str:
        return "non-empty list without duplicates"


@dataclass(frozen=True)
class Unsupported:
    """A Kafka value pybroker does not implement yet: only `supported` values pass, with `why`."""

    supported: tuple[Any, ...]
    why: str

    def __call__(self, key: str, value: Any) -> None:
        if value is not None and value not in self.supported:
            allowed = ", ".join(format_value(v) for v in self.supported)
            raise _invalid(key, value, f"{self.why}; pybroker accepts only: {allowed}")

    def describe(self) -> str:
        return f"[{', '.join(format_value(v) for v in self.supported)}] (pybroker)"


@dataclass(frozen=True)
class DefaultOr:
    """A sentinel meaning "the codec's default" or a value the inner validator accepts (gzip's -1 or 1..9)."""

    sentinel: Any
    inner: Validator

    def __call__(self, key: str, value: Any) -> None:
        if value != self.sentinel:
            self.inner(key, value)

    def describe(self) -> str:
        return f"{format_value(self.sentinel)} or {self.inner.describe()}"


@dataclass(frozen=True)
class AllOf:
    validators: tuple[Validator, ...]

    def __call__(self, key: str, value: Any) -> None:
        for v in self.validators:
            v(key, value)

    def describe(self) -> str:
        return ", ".join(v.describe() for v in self.validators)


@dataclass(frozen=True)
class ConfigKey:
    name: str
    type: ConfigType
    default: Any  # already typed; None means "no default"
    validator: Validator | None
    importance: Importance
    doc: str
    internal: bool = False  # accepted, but not listed by DescribeConfigs unless set (Kafka's defineInternal)

    @property
    def sensitive(self) -> bool:
        return self.type is ConfigType.PASSWORD

    def parse(self, raw: object) -> Any:
        """Convert a raw value (normally a string from a file or the wire) to this key's type and validate it."""
        value = parse_typed(self.name, self.type, raw)
        if self.validator is not None:
            self.validator(self.name, value)
        return value


_COMMA_WITH_WHITESPACE = re.compile(r"\s*,\s*")


def parse_typed(key: str, config_type: ConfigType, raw: object) -> Any:
    """Kafka's `ConfigDef.parseType` for string input (surrounding whitespace is ignored, as in Kafka)."""
    if raw is None:
        return None
    if not isinstance(raw, str):
        return _check_python_value(key, config_type, raw)
    text = raw.strip()
    if config_type is ConfigType.BOOLEAN:
        if text.lower() == "true":
            return True
        if text.lower() == "false":
            return False
        raise _invalid(key, raw, "Expected value to be either true or false")
    if config_type in (ConfigType.STRING, ConfigType.CLASS, ConfigType.PASSWORD):
        return text
    if config_type in (ConfigType.INT, ConfigType.SHORT, ConfigType.LONG):
        lo, hi, what = _INTEGER_BOUNDS[config_type]
        if not re.fullmatch(r"[+-]?\d+", text):
            raise _invalid(key, raw, f"Not a number of type {config_type.name}")
        n = int(text)
        if not lo <= n <= hi:
            raise _invalid(key, raw, f"Not a number of type {config_type.name} ({what} is {lo}..{hi})")
        return n
    if config_type is ConfigType.DOUBLE:
        try:
            return float(text)
        except ValueError:
            raise _invalid(key, raw, "Not a number of type DOUBLE") from None
    if config_type is ConfigType.LIST:
        return [] if not text else _COMMA_WITH_WHITESPACE.split(text)
    raise _invalid(key, raw, f"Unknown type {config_type.name}")


_INTEGER_BOUNDS = {
    ConfigType.SHORT: (SHORT_MIN, SHORT_MAX, "a 16-bit integer"),
    ConfigType.INT: (INT_MIN, INT_MAX, "a 32-bit integer"),
    ConfigType.LONG: (LONG_MIN, LONG_MAX, "a 64-bit integer"),
}


def _check_python_value(key: str, config_type: ConfigType, value: object) -> Any:
    # Typed values (defaults, programmatic overrides) get the same type checks as strings.
    if config_type is ConfigType.BOOLEAN and isinstance(value, bool):
        return value
    if config_type in _INTEGER_BOUNDS and isinstance(value, int) and not isinstance(value, bool):
        return parse_typed(key, config_type, str(value))
    if config_type is ConfigType.DOUBLE and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if config_type is ConfigType.LIST and isinstance(value, list | tuple):
        return [str(v) for v in value]
    raise _invalid(key, value, f"Expected a value of type {config_type.name}")


def format_value(value: object) -> str:
    """Kafka's `ConfigDef.convertToString`: the string a client sees in DescribeConfigs."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def value_to_wire(key: ConfigKey, value: object) -> str | None:
    """A value as DescribeConfigs sends it: None for unset values and for anything sensitive."""
    if value is None or key.sensitive:
        return None
    return format_value(value)


def unknown_key_error(kind: str, key: str, value: object, known: Iterable[str]) -> ConfigError:
    hint = difflib.get_close_matches(key, list(known), n=1, cutoff=0.75)
    suffix = f" Did you mean '{hint[0]}'?" if hint else ""
    return ConfigError(
        key, f"Unknown {kind} config name: {key} (value {format_value(value)}).{suffix}", value
    )


class ConfigEntry(NamedTuple):
    """One row of a DescribeConfigs result, in the response's own terms."""

    name: str
    value: str | None
    source: int  # ConfigSource
    read_only: bool
    is_default: bool
    sensitive: bool
    config_type: int  # ConfigType
    synonyms: list[tuple[str, str | None, int]]  # (name, value, ConfigSource), highest precedence first
    documentation: str | None


# -- topic configs -------------------------------------------------------------------------------


class BrokerSettings(Protocol):
    """What topic-config resolution needs from the broker config (implemented by `BrokerConfig`)."""

    def explicit(self, key: str) -> Any:
        """The typed value `key` is set to (dynamically or in the file/overrides), else None."""

    def configured_at(self, key: str) -> list[tuple[ConfigSource, Any]]:
        """(source, typed value) of every level `key` is set at, highest precedence first."""

    def default_of(self, key: str) -> Any:
        """The typed default of broker key `key` (None when it has none)."""


@dataclass(frozen=True)
class BrokerSynonym:
    """A broker key whose value supplies a topic config's default (`log.roll.hours` → `segment.ms`)."""

    name: str
    to_topic_unit: Callable[[Any], Any] = field(default=lambda v: v)


def _hours(v: int) -> int:
    return v * MS_PER_HOUR


def _minutes(v: int) -> int:
    return v * MS_PER_MINUTE


@dataclass(frozen=True)
class TopicConfigDef:
    key: ConfigKey
    synonyms: tuple[BrokerSynonym, ...]  # broker keys in Kafka's precedence order


_COMPRESSION_CODECS = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
# "producer" keeps the producer's codec; any other value makes the broker recompress to it.
COMPRESSION_TYPE_VALIDATOR = OneOf(_COMPRESSION_CODECS)
_TIMESTAMP_TYPES = OneOf(("CreateTime", "LogAppendTime"))
_CLEANUP_POLICIES = OneOf(("compact", "delete"), case_sensitive=False)


def _topic(
    name: str,
    config_type: ConfigType,
    default: Any,
    validator: Validator | None,
    doc: str,
    *synonyms: BrokerSynonym | str,
    internal: bool = False,
) -> TopicConfigDef:
    syns = tuple(s if isinstance(s, BrokerSynonym) else BrokerSynonym(s) for s in synonyms)
    return TopicConfigDef(
        ConfigKey(name, config_type, default, validator, Importance.MEDIUM, doc, internal), syns
    )


_T = ConfigType
DEFAULT_SEGMENT_BYTES = 1024 * 1024 * 1024
DEFAULT_SEVEN_DAYS_MS = 7 * 24 * MS_PER_HOUR
DEFAULT_MAX_MESSAGE_BYTES = 1024 * 1024 + 12  # Kafka's 1 MiB plus the v0 record overhead

# fmt: off
_TOPIC_CONFIG_LIST = [
    _topic("cleanup.policy", _T.LIST, ["delete"], _CLEANUP_POLICIES,
           "Retention policy for old segments: 'delete' discards them, 'compact' keeps the latest value per key.",
           "log.cleanup.policy"),
    _topic("compression.type", _T.STRING, "producer", COMPRESSION_TYPE_VALIDATOR,
           "Final compression of the topic's data; 'producer' keeps the codec the producer used.",
           "compression.type"),
    _topic("compression.gzip.level", _T.INT, -1, DefaultOr(-1, between(1, 9)),
           "Compression level used when compression.type is gzip.",
           "compression.gzip.level"),
    _topic("compression.lz4.level", _T.INT, 9, between(1, 17),
           "Compression level used when compression.type is lz4.",
           "compression.lz4.level"),
    _topic("compression.zstd.level", _T.INT, 3, between(-131072, 22),
           "Compression level used when compression.type is zstd.",
           "compression.zstd.level"),
    _topic("delete.retention.ms", _T.LONG, 24 * MS_PER_HOUR, at_least(0),
           "How long delete tombstones are kept on compacted topics.",
           "log.cleaner.delete.retention.ms"),
    _topic("file.delete.delay.ms", _T.LONG, 60000, at_least(0),
           "Time to wait before deleting a segment file from the filesystem.",
           "log.segment.delete.delay.ms"),
    _topic("flush.messages", _T.LONG, LONG_MAX, at_least(1),
           "Number of messages written to a partition before it is fsynced.",
           "log.flush.interval.messages"),
    _topic("flush.ms", _T.LONG, LONG_MAX, at_least(0),
           "Maximum time a message may stay unflushed before the partition is fsynced.",
           "log.flush.interval.ms",
           "log.flush.scheduler.interval.ms"),
    _topic("follower.replication.throttled.replicas", _T.LIST, [], None,
           "Replicas whose follower-side replication is throttled (no effect on a single node)."),
    _topic("index.interval.bytes", _T.INT, 4096, at_least(0),
           "Bytes of log between two entries of the offset index.",
           "log.index.interval.bytes"),
    _topic("leader.replication.throttled.replicas", _T.LIST, [], None,
           "Replicas whose leader-side replication is throttled (no effect on a single node)."),
    _topic("max.compaction.lag.ms", _T.LONG, LONG_MAX, at_least(1),
           "Maximum time a message remains ineligible for compaction.",
           "log.cleaner.max.compaction.lag.ms"),
    _topic("max.message.bytes", _T.INT, DEFAULT_MAX_MESSAGE_BYTES, at_least(0),
           "Largest record batch size allowed by Kafka (after compression).",
           "message.max.bytes"),
    _topic("message.timestamp.after.max.ms", _T.LONG, 3_600_000, at_least(0),
           "How far a CreateTime timestamp may lie in the future of the broker's clock.",
           "log.message.timestamp.after.max.ms"),
    _topic("message.timestamp.before.max.ms", _T.LONG, LONG_MAX, at_least(0),
           "How far a CreateTime timestamp may lie in the past of the broker's clock.",
           "log.message.timestamp.before.max.ms"),
    _topic("message.timestamp.type", _T.STRING, "CreateTime", _TIMESTAMP_TYPES,
           "Whether record timestamps are the producer's CreateTime or the broker's LogAppendTime.",
           "log.message.timestamp.type"),
    _topic("min.cleanable.dirty.ratio", _T.DOUBLE, 0.5, between(0, 1),
           "Minimum share of uncompacted log before the log compactor cleans it.",
           "log.cleaner.min.cleanable.ratio"),
    _topic("min.compaction.lag.ms", _T.LONG, 0, at_least(0),
           "Minimum time a message remains uncompacted.",
           "log.cleaner.min.compaction.lag.ms"),
    _topic("min.insync.replicas", _T.INT, 1, at_least(1),
           "Minimum number of in-sync replicas that must acknowledge an acks=all write.",
           "min.insync.replicas"),
    _topic("preallocate", _T.BOOLEAN, False, None,
           "Whether to preallocate the file on disk when creating a new segment.",
           "log.preallocate"),
    _topic("remote.storage.enable", _T.BOOLEAN, False, Unsupported((False,), "tiered storage is not implemented"),
           "Whether tiered storage is enabled for the topic."),
    _topic("retention.bytes", _T.LONG, -1, None,
           "Maximum size of a partition before old segments are discarded (-1: no limit).",
           "log.retention.bytes"),
    _topic("retention.ms", _T.LONG, DEFAULT_SEVEN_DAYS_MS, at_least(-1),
           "Maximum age of a segment before it is discarded (-1: no time limit).",
           "log.retention.ms",
           BrokerSynonym("log.retention.minutes", _minutes),
           BrokerSynonym("log.retention.hours", _hours)),
    _topic("segment.bytes", _T.INT, DEFAULT_SEGMENT_BYTES, at_least(1024 * 1024),
           "Size of a log segment file.",
           "log.segment.bytes"),
    _topic("segment.index.bytes", _T.INT, 10 * 1024 * 1024, at_least(4),
           "Size of the index that maps offsets to file positions.",
           "log.index.size.max.bytes"),
    _topic("segment.jitter.ms", _T.LONG, 0, at_least(0),
           "Maximum random jitter subtracted from segment.ms to avoid rolling every segment at once.",
           "log.roll.jitter.ms",
           BrokerSynonym("log.roll.jitter.hours", _hours)),
    _topic("segment.ms", _T.LONG, DEFAULT_SEVEN_DAYS_MS, at_least(1),
           "Time after which a segment is rolled even if it is not full.",
           "log.roll.ms",
           BrokerSynonym("log.roll.hours", _hours)),
    _topic("unclean.leader.election.enable", _T.BOOLEAN, False, None,
           "Whether out-of-sync replicas may become leader (no effect on a single node).",
           "unclean.leader.election.enable"),
    # Kafka 4 raised the segment.bytes floor to 1 MiB and kept this internal key for tests.
    _topic("internal.segment.bytes", _T.INT, None, at_least(1),
           "Segment size overriding segment.bytes; for tests only.",
           internal=True),
]
# fmt: on

TOPIC_CONFIGS: dict[str, TopicConfigDef] = {d.key.name: d for d in _TOPIC_CONFIG_LIST}


def validate_topic_configs(configs: Mapping[str, str | None]) -> dict[str, Any]:
    """Typed values of the given topic overrides; raises ConfigError (→ INVALID_CONFIG).

    A None value means "no override" (it is what a DELETE in IncrementalAlterConfigs leaves), so it
    is validated as a name only and left out of the result.
    """
    typed: dict[str, Any] = {}
    for name, raw in configs.items():
        definition = TOPIC_CONFIGS.get(name)
        if definition is None:
            raise unknown_key_error("topic", name, raw, TOPIC_CONFIGS)
        if raw is not None:
            typed[name] = definition.key.parse(raw)
    min_lag = typed.get("min.compaction.lag.ms", 0)
    max_lag = typed.get("max.compaction.lag.ms", LONG_MAX)
    if min_lag > max_lag:
        raise ConfigError(
            "min.compaction.lag.ms",
            f"conflict topic config setting min.compaction.lag.ms ({min_lag}) > max.compaction.lag.ms ({max_lag})",
            min_lag,
        )
    return typed


def broker_value_for(broker: BrokerSettings, definition: TopicConfigDef) -> Any:
    """The broker-level default of a topic config: the first synonym set explicitly, else the top
    synonym's own default (converted to the topic's unit), else the topic default."""
    for syn in definition.synonyms:
        value = broker.explicit(syn.name)
        if value is not None:
            return _clamp_unlimited(definition, syn.to_topic_unit(value))
    for syn in definition.synonyms:
        value = broker.default_of(syn.name)
        if value is not None:
            return _clamp_unlimited(definition, syn.to_topic_unit(value))
    return definition.key.default


def _clamp_unlimited(definition: TopicConfigDef, value: Any) -> Any:
    # Kafka maps any negative retention time (e.g. log.retention.hours=-1) to -1, "no limit".
    if definition.key.name == "retention.ms" and value < 0:
        return -1
    return value


def effective_topic_config(broker: BrokerSettings, overrides: Mapping[str, str | None]) -> dict[str, Any]:
    """Every topic config's typed value for a topic: its override, else the broker's synonym, else the default."""
    typed_overrides = validate_topic_configs(overrides)
    effective: dict[str, Any] = {}
    for name, definition in TOPIC_CONFIGS.items():
        if name in typed_overrides:
            effective[name] = typed_overrides[name]
        else:
            effective[name] = broker_value_for(broker, definition)
    return effective


def effective_topic_config_str(
    broker: BrokerSettings, overrides: Mapping[str, str | None], name: str
) -> str | None:
    """One topic config's effective value as DescribeConfigs shows it (lists comma-joined; None if sensitive/unset).

    IncrementalAlterConfigs APPEND/SUBTRACT start from this when the topic has no override yet."""
    definition = TOPIC_CONFIGS.get(name)
    if definition is None:
        raise unknown_key_error("topic", name, None, TOPIC_CONFIGS)
    return value_to_wire(definition.key, effective_topic_config(broker, overrides)[name])


def describe_topic_config(broker: BrokerSettings, overrides: Mapping[str, str | None]) -> list[ConfigEntry]:
    """DescribeConfigs rows for a topic, the way Kafka's ConfigHelper builds them."""
    typed_overrides = validate_topic_configs(overrides)
    entries = []
    for name, definition in sorted(TOPIC_CONFIGS.items()):
        key = definition.key
        if key.internal and name not in typed_overrides:
            continue
        synonyms: list[tuple[str, str | None, int]] = []
        if name in typed_overrides:
            value = typed_overrides[name]
            synonyms.append((name, value_to_wire(key, value), ConfigSource.DYNAMIC_TOPIC_CONFIG))
        else:
            value = broker_value_for(broker, definition)
        # Kafka's order: by source (this broker's dynamic config, the dynamic default, static), then by name.
        for level in (
            ConfigSource.DYNAMIC_BROKER_CONFIG,
            ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
            ConfigSource.STATIC_BROKER_CONFIG,
        ):
            for syn in definition.synonyms:
                for where, set_value in broker.configured_at(syn.name):
                    if where == level:
                        synonyms.append((syn.name, value_to_wire(key, set_value), level))
        for syn in definition.synonyms:
            default = broker.default_of(syn.name)
            if default is not None:
                synonyms.append((syn.name, value_to_wire(key, default), ConfigSource.DEFAULT_CONFIG))
        source = synonyms[0][2] if synonyms else ConfigSource.DEFAULT_CONFIG
        entries.append(
            ConfigEntry(
                name=name,
                value=value_to_wire(key, value),
                source=int(source),
                read_only=False,
                is_default=source == ConfigSource.DEFAULT_CONFIG,
                sensitive=key.sensitive,
                config_type=int(key.type),
                synonyms=[(n, v, int(s)) for n, v, s in synonyms],
                documentation=key.doc,
            )
        )
    return entries


def log_config_kwargs(effective: Mapping[str, Any]) -> dict[str, Any]:
    """Keyword arguments for `pybroker.storage.LogConfig` from an `effective_topic_config` result."""
    segment_bytes = effective.get("internal.segment.bytes") or effective["segment.bytes"]
    return {
        "segment_bytes": segment_bytes,
        "segment_ms": effective["segment.ms"],
        "retention_ms": effective["retention.ms"],
        "retention_bytes": effective["retention.bytes"],
        "index_interval_bytes": effective["index.interval.bytes"],
        "segment_index_bytes": effective["segment.index.bytes"],
        "max_message_bytes": effective["max.message.bytes"],
        "message_timestamp_type": effective["message.timestamp.type"],
        "message_timestamp_before_max_ms": effective["message.timestamp.before.max.ms"],
        "message_timestamp_after_max_ms": effective["message.timestamp.after.max.ms"],
        # storage keeps Kafka's comma-separated spelling ("compact,delete")
        "cleanup_policy": ",".join(p.lower() for p in effective["cleanup.policy"]),
        "flush_messages": effective["flush.messages"],
        "flush_ms": effective["flush.ms"],
        "file_delete_delay_ms": effective["file.delete.delay.ms"],
        "compression_type": effective["compression.type"],
        "compression_level": _compression_level(effective),
    }


def _compression_level(effective: Mapping[str, Any]) -> int | None:
    """The level for the topic's codec (None: the codec's own default, as Kafka's -1 for gzip)."""
    codec = effective["compression.type"]
    level = effective.get(f"compression.{codec}.level")
    return None if level is None or (codec == "gzip" and level == -1) else int(level)
