"""The broker's configuration: Kafka's `server.properties` keys, types, defaults and validators.

`BrokerConfig.load(path, overrides)` reads a Java-properties file the way `kafka-server-start.sh`
does, applies `--override key=value` pairs on top and validates everything up front, so a bad
setting stops start-up with one clear message instead of surfacing later. Topic-level configs
and the DescribeConfigs view of both live in `pybroker.topic_config` and are re-exported here.
"""

from __future__ import annotations

import base64
import logging
import os
import re
import socket
import time
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from pybroker.topic_config import (
    COMPRESSION_TYPE_VALIDATOR,
    DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_SEGMENT_BYTES,
    LONG_MAX,
    MS_PER_HOUR,
    MS_PER_MINUTE,
    TOPIC_CONFIGS,
    AllOf,
    ConfigEntry,
    ConfigError,
    ConfigKey,
    ConfigSource,
    ConfigType,
    Importance,
    NonEmptyList,
    OneOf,
    TopicConfigDef,
    Unsupported,
    Validator,
    at_least,
    between,
    describe_topic_config,
    effective_topic_config,
    effective_topic_config_str,
    format_value,
    log_config_kwargs,
    unknown_key_error,
    validate_topic_configs,
    value_to_wire,
)

__all__ = [
    "BROKER_CONFIGS",
    "TOPIC_CONFIGS",
    "BrokerConfig",
    "ConfigEntry",
    "ConfigError",
    "ConfigKey",
    "ConfigSource",
    "ConfigType",
    "Endpoint",
    "TopicConfigDef",
    "describe_broker_config",
    "describe_topic_config",
    "effective_topic_config",
    "effective_topic_config_str",
    "ensure_meta_properties",
    "load_properties",
    "log_config_kwargs",
    "parse_properties",
    "validate_topic_configs",
]

log = logging.getLogger(__name__)

# -- Java properties syntax ------------------------------------------------------------------------

_SIMPLE_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_WHITESPACE = " \t\f"


def parse_properties(text: str, source: str = "<properties>") -> dict[str, str]:
    """Parse `java.util.Properties` text: `key=value`, `key: value` or `key value`, `#`/`!` comment
    lines, backslash line continuations and `\\t \\n \\r \\f \\uXXXX` escapes. Later keys win."""
    result: dict[str, str] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].lstrip(_WHITESPACE)
        first_line = i + 1
        i += 1
        if not line or line[0] in "#!":
            continue
        # A line ending in an odd number of backslashes continues on the next one, whose leading
        # whitespace is dropped.
        while _ends_with_odd_backslashes(line) and i < len(lines):
            line = line[:-1] + lines[i].lstrip(_WHITESPACE)
            i += 1
        if _ends_with_odd_backslashes(line):
            line = line[:-1]
        key_raw, value_raw = _split_key_value(line)
        key = _unescape(key_raw, source, first_line)
        result[key] = _unescape(value_raw, source, first_line)
    return result


def _ends_with_odd_backslashes(line: str) -> bool:
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def _split_key_value(line: str) -> tuple[str, str]:
    pos = 0
    while pos < len(line):
        ch = line[pos]
        if ch == "\\":
            pos += 2
            continue
        if ch in "=:" or ch in _WHITESPACE:
            break
        pos += 1
    key = line[:pos]
    rest = line[pos:].lstrip(_WHITESPACE)
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(_WHITESPACE)
    return key, rest


def _unescape(text: str, source: str, line_no: int) -> str:
    if "\\" not in text:
        return text
    out: list[str] = []
    pos = 0
    while pos < len(text):
        ch = text[pos]
        if ch != "\\" or pos + 1 >= len(text):
            out.append(ch)
            pos += 1
            continue
        nxt = text[pos + 1]
        if nxt == "u":
            digits = text[pos + 2 : pos + 6]
            if not re.fullmatch(r"[0-9a-fA-F]{4}", digits):
                raise ConfigError(
                    "", f"{source}, line {line_no}: malformed \\uxxxx escape {text[pos : pos + 6]!r}", text
                )
            out.append(chr(int(digits, 16)))
            pos += 6
            continue
        out.append(_SIMPLE_ESCAPES.get(nxt, nxt))
        pos += 2
    return "".join(out)


def load_properties(path: str | os.PathLike[str]) -> dict[str, str]:
    """Read a properties file. UTF-8 (Java reads ISO-8859-1; identical for the ASCII Kafka configs use)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError("", f"cannot read properties file {path}: {e.strerror or e}", str(path)) from None
    except UnicodeDecodeError as e:
        raise ConfigError("", f"properties file {path} is not valid UTF-8: {e}", str(path)) from None
    return parse_properties(text, str(path))


def parse_override(text: str) -> tuple[str, str]:
    """`key=value` from `--override`; everything after the first `=` is the value, taken literally."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError("", f"invalid --override {text!r}: expected key=value")
    return key.strip(), value


# -- broker config definitions -----------------------------------------------------------------------

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SUPPORTED_SECURITY_PROTOCOLS = ("PLAINTEXT",)
SINGLE_NODE = Unsupported((1,), "a single-node broker cannot place more than one replica")

_H, _M, _L = Importance.HIGH, Importance.MEDIUM, Importance.LOW
_T = ConfigType


def _key(
    name: str,
    config_type: ConfigType,
    default: Any,
    validator: Validator | None,
    importance: Importance,
    doc: str,
) -> ConfigKey:
    return ConfigKey(name, config_type, default, validator, importance, doc)


# fmt: off
_BROKER_CONFIG_LIST = [
    # identity and listeners
    _key("node.id", _T.INT, 0, at_least(0), _H,
         "The node id of this broker (pybroker default 0; Kafka requires it to be set)."),
    _key("broker.id", _T.INT, None, at_least(0), _H,
         "Alias of node.id; if both are set they must be equal."),
    _key("listeners", _T.STRING, "PLAINTEXT://127.0.0.1:9092", None, _H,
         "The listener to bind, as NAME://host:port (an empty host binds every interface). "
         "pybroker serves exactly one listener."),
    _key("advertised.listeners", _T.STRING, None, None, _H,
         "The address clients are told to reconnect to, per listener name; defaults to listeners. "
         "0.0.0.0 cannot be advertised."),
    _key("listener.security.protocol.map", _T.STRING, "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL", None, _L,
         "Map from listener name to security protocol. pybroker supports only PLAINTEXT listeners."),
    # sockets
    _key("max.incremental.fetch.session.cache.slots", _T.INT, 1000, at_least(0), _M,
         "The most incremental fetch sessions (KIP-227) kept; 0 declines every session."),
    _key("socket.request.max.bytes", _T.INT, 104857600, at_least(1), _H,
         "The maximum number of bytes in a request; larger frames close the connection."),
    _key("socket.send.buffer.bytes", _T.INT, 102400, None, _H,
         "SO_SNDBUF of client connections; -1 uses the OS default."),
    _key("socket.receive.buffer.bytes", _T.INT, 102400, None, _H,
         "SO_RCVBUF of client connections; -1 uses the OS default."),
    # logs
    _key("log.dirs", _T.LIST, None, NonEmptyList(), _H,
         "Comma-separated directories holding the log data; if unset, log.dir is used."),
    _key("log.dir", _T.LIST, ["./pybroker-data"], NonEmptyList(), _H,
         "The directory holding the log data, used when log.dirs is unset (pybroker default ./pybroker-data)."),
    _key("num.partitions", _T.INT, 1, at_least(1), _M,
         "The default number of partitions of an auto-created topic."),
    _key("default.replication.factor", _T.INT, 1, AllOf((at_least(1), SINGLE_NODE)), _M,
         "The replication factor of auto-created topics."),
    _key("auto.create.topics.enable", _T.BOOLEAN, True, None, _H,
         "Create a topic when a client asks for metadata of, or produces to, a topic that does not exist."),
    _key("delete.topic.enable", _T.BOOLEAN, True, None, _H,
         "Allow topics to be deleted; when false, DeleteTopics fails with TOPIC_DELETION_DISABLED."),
    _key("log.segment.bytes", _T.INT, DEFAULT_SEGMENT_BYTES, at_least(1024 * 1024), _H,
         "The maximum size of a single log segment file."),
    _key("log.roll.ms", _T.LONG, None, None, _H,
         "The maximum age of a segment before a new one is rolled, in ms; if unset, log.roll.hours is used."),
    _key("log.roll.hours", _T.INT, 168, at_least(1), _H,
         "The maximum age of a segment before a new one is rolled, in hours; secondary to log.roll.ms."),
    _key("log.roll.jitter.ms", _T.LONG, None, None, _H,
         "The maximum jitter subtracted from the roll time, in ms; if unset, log.roll.jitter.hours is used."),
    _key("log.roll.jitter.hours", _T.INT, 0, at_least(0), _H,
         "The maximum jitter subtracted from the roll time, in hours; secondary to log.roll.jitter.ms."),
    _key("log.retention.ms", _T.LONG, None, None, _H,
         "How long to keep a segment before deleting it, in ms; if unset, log.retention.minutes is used. "
         "-1 means no time limit."),
    _key("log.retention.minutes", _T.INT, None, None, _H,
         "How long to keep a segment, in minutes; secondary to log.retention.ms. If unset, "
         "log.retention.hours is used."),
    _key("log.retention.hours", _T.INT, 168, None, _H,
         "How long to keep a segment, in hours; tertiary to log.retention.ms."),
    _key("log.retention.bytes", _T.LONG, -1, None, _H,
         "The maximum size of a partition's log before old segments are deleted; -1 means no limit."),
    _key("log.retention.check.interval.ms", _T.LONG, 300000, at_least(1), _M,
         "How often the retention task looks for segments to delete."),
    _key("log.cleanup.policy", _T.LIST, ["delete"], OneOf(("compact", "delete"), case_sensitive=False), _M,
         "The default cleanup policy of segments beyond the retention window (delete, compact or both)."),
    _key("log.index.interval.bytes", _T.INT, 4096, at_least(0), _M,
         "The number of log bytes between two offset index entries."),
    _key("log.index.size.max.bytes", _T.INT, 10 * 1024 * 1024, at_least(4), _M,
         "The maximum size in bytes of a segment's offset index."),
    _key("log.flush.interval.messages", _T.LONG, LONG_MAX, at_least(1), _H,
         "The number of messages appended to a partition before it is fsynced."),
    _key("log.flush.interval.ms", _T.LONG, None, None, _H,
         "The maximum time a message stays unflushed, in ms; if unset, log.flush.scheduler.interval.ms is used."),
    _key("log.flush.scheduler.interval.ms", _T.LONG, LONG_MAX, None, _H,
         "How often the flusher checks whether a log needs an fsync."),
    _key("log.flush.offset.checkpoint.interval.ms", _T.INT, 60000, at_least(0), _H,
         "How often the recovery-point checkpoint (the last flushed offset of each log) is written."),
    _key("log.segment.delete.delay.ms", _T.LONG, 60000, at_least(0), _H,
         "How long a deleted segment's files are kept before they are removed from the filesystem."),
    _key("log.preallocate", _T.BOOLEAN, False, None, _M,
         "Whether to preallocate the file of a new segment."),
    _key("log.message.timestamp.type", _T.STRING, "CreateTime", OneOf(("CreateTime", "LogAppendTime")), _M,
         "Whether record timestamps are the producer's CreateTime or the broker's LogAppendTime."),
    _key("log.message.timestamp.before.max.ms", _T.LONG, LONG_MAX, at_least(0), _M,
         "How far in the past of the broker's clock a CreateTime timestamp may lie."),
    _key("log.message.timestamp.after.max.ms", _T.LONG, LONG_MAX, at_least(0), _M,
         "How far in the future of the broker's clock a CreateTime timestamp may lie."),
    _key("log.cleaner.delete.retention.ms", _T.LONG, 24 * MS_PER_HOUR, at_least(0), _M,
         "The default delete.retention.ms of topics: how long tombstones are kept on compacted topics."),
    _key("log.cleaner.min.compaction.lag.ms", _T.LONG, 0, at_least(0), _M,
         "The default min.compaction.lag.ms of topics."),
    _key("log.cleaner.max.compaction.lag.ms", _T.LONG, LONG_MAX, at_least(1), _M,
         "The default max.compaction.lag.ms of topics."),
    _key("log.cleaner.min.cleanable.ratio", _T.DOUBLE, 0.5, between(0, 1), _M,
         "The default min.cleanable.dirty.ratio of topics."),
    _key("message.max.bytes", _T.INT, DEFAULT_MAX_MESSAGE_BYTES, at_least(0), _H,
         "The largest record batch size allowed (after compression); topics override it with max.message.bytes."),
    _key("compression.type", _T.STRING, "producer", COMPRESSION_TYPE_VALIDATOR, _H,
         "The final compression of topic data; 'producer' keeps the codec the producer used."),
    _key("compression.gzip.level", _T.INT, -1, TOPIC_CONFIGS["compression.gzip.level"].key.validator, _M,
         "Compression level used for gzip."),
    _key("compression.lz4.level", _T.INT, 9, between(1, 17), _M,
         "Compression level used for lz4."),
    _key("compression.zstd.level", _T.INT, 3, between(-131072, 22), _M,
         "Compression level used for zstd."),
    # replication (a single node: these exist so settings written for Kafka keep their meaning)
    _key("min.insync.replicas", _T.INT, 1, at_least(1), _H,
         "The minimum number of in-sync replicas that must acknowledge an acks=all produce."),
    _key("unclean.leader.election.enable", _T.BOOLEAN, False, None, _H,
         "Whether an out-of-sync replica may become leader (no effect on a single node)."),
    # group coordinator
    _key("offsets.topic.num.partitions", _T.INT, 50, at_least(1), _H,
         "The number of partitions of the __consumer_offsets topic (fixed once the topic exists)."),
    _key("offsets.topic.replication.factor", _T.SHORT, 1, AllOf((at_least(1), SINGLE_NODE)), _H,
         "The replication factor of the __consumer_offsets topic (Kafka default 3; a single node has 1)."),
    _key("offsets.retention.minutes", _T.INT, 10080, at_least(1), _H,
         "How long committed offsets of a group without members are kept."),
    _key("offsets.retention.check.interval.ms", _T.LONG, 600000, at_least(1), _H,
         "How often expired committed offsets are looked for."),
    _key("group.initial.rebalance.delay.ms", _T.INT, 3000, None, _M,
         "How long the coordinator waits for more members to join a new group before the first rebalance."),
    _key("group.min.session.timeout.ms", _T.INT, 6000, None, _M,
         "The smallest session timeout a group member may ask for."),
    _key("group.max.session.timeout.ms", _T.INT, 1800000, None, _M,
         "The largest session timeout a group member may ask for."),
    # KIP-848 consumer groups (group.protocol=consumer): the broker, not the client, sets these.
    _key("group.consumer.heartbeat.interval.ms", _T.INT, 5000, at_least(1), _M,
         "The heartbeat interval given to members of consumer groups."),
    _key("group.consumer.min.heartbeat.interval.ms", _T.INT, 5000, at_least(1), _M,
         "The smallest group.consumer.heartbeat.interval.ms allowed."),
    _key("group.consumer.max.heartbeat.interval.ms", _T.INT, 15000, at_least(1), _M,
         "The largest group.consumer.heartbeat.interval.ms allowed."),
    _key("group.consumer.session.timeout.ms", _T.INT, 45000, at_least(1), _M,
         "How long a consumer group member may stay silent before it is removed from its group."),
    _key("group.consumer.min.session.timeout.ms", _T.INT, 45000, at_least(1), _M,
         "The smallest group.consumer.session.timeout.ms allowed."),
    _key("group.consumer.max.session.timeout.ms", _T.INT, 60000, at_least(1), _M,
         "The largest group.consumer.session.timeout.ms allowed."),
    _key("group.consumer.assignors", _T.LIST, ["uniform", "range"], OneOf(("uniform", "range")), _M,
         "The server-side assignors of consumer groups; the first is the default."),
    _key("group.consumer.max.size", _T.INT, 2147483647, at_least(1), _M,
         "The largest number of members a consumer group may have."),
    # transactions and idempotence
    _key("transaction.state.log.replication.factor", _T.SHORT, 1, AllOf((at_least(1), SINGLE_NODE)), _H,
         "The replication factor of the __transaction_state topic (Kafka default 3; a single node has 1)."),
    _key("transaction.state.log.num.partitions", _T.INT, 50, at_least(1), _H,
         "The number of partitions of the __transaction_state topic."),
    _key("transaction.state.log.min.isr", _T.INT, 1, at_least(1), _H,
         "min.insync.replicas of the __transaction_state topic (Kafka default 2; a single node has 1)."),
    _key("transaction.max.timeout.ms", _T.INT, 900000, at_least(1), _H,
         "The largest transaction timeout a producer may ask for."),
    _key("transactional.id.expiration.ms", _T.INT, 604800000, at_least(1), _H,
         "How long a transactional id is kept without transaction status updates."),
    _key("transaction.abort.timed.out.transaction.cleanup.interval.ms", _T.INT, 10000, at_least(1), _L,
         "How often the transaction coordinator aborts transactions open past their timeout."),
    _key("transaction.remove.expired.transaction.cleanup.interval.ms", _T.INT, 3600000, at_least(1), _L,
         "How often transactional ids idle past transactional.id.expiration.ms are removed."),
    _key("producer.id.expiration.ms", _T.INT, 86400000, at_least(1), _L,
         "How long producer state of an idle producer id is kept."),
    _key("producer.id.expiration.check.interval.ms", _T.INT, 600000, at_least(1), _L,
         "How often producer ids idle for longer than producer.id.expiration.ms are removed."),
]
# fmt: on

BROKER_CONFIGS: dict[str, ConfigKey] = {k.name: k for k in _BROKER_CONFIG_LIST}

# Kafka keys pybroker deliberately does not accept, with the reason shown to the user.
NOT_APPLICABLE: dict[str, str] = {
    "num.network.threads": "pybroker runs its network I/O on one event loop, there is no network thread pool",
    "num.io.threads": "pybroker handles requests on one event loop, there is no request handler thread pool",
    "num.recovery.threads.per.data.dir": "pybroker recovers logs sequentially in one worker",
    "zookeeper.connect": "pybroker keeps its own metadata and needs no ZooKeeper",
    "process.roles": "pybroker is always a single combined broker and controller",
    "controller.quorum.voters": "pybroker is a single node with no controller quorum",
    "controller.quorum.bootstrap.servers": "pybroker is a single node with no controller quorum",
    "controller.listener.names": "pybroker has no separate controller listener",
    "inter.broker.listener.name": "pybroker is a single node with no inter-broker traffic",
    "cluster.id": "the cluster id is generated once and kept in <log.dir>/meta.properties",
}

# Kafka's broker-level synonym groups (DynamicBrokerConfig.brokerConfigSynonyms), highest precedence first.
_BROKER_SYNONYM_GROUPS = [
    ("log.roll.ms", "log.roll.hours"),
    ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
    ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
]
_BROKER_SYNONYMS = {name: group for group in _BROKER_SYNONYM_GROUPS for name in group}

EVENT_LOOPS = ("uvloop", "asyncio")

# -- listeners ------------------------------------------------------------------------------------------

_LISTENER = re.compile(
    r"^(?P<name>[A-Za-z0-9_\-.]+)://(?P<host>\[[0-9A-Fa-f:.%a-z]*\]|[^:\[\]/]*):(?P<port>\d+)$"
)


class Endpoint(NamedTuple):
    listener_name: str
    security_protocol: str
    host: str  # "" means every interface (bind) / this machine's canonical name (advertise)
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.listener_name}://{host}:{self.port}"


def _parse_protocol_map(text: str) -> dict[str, str]:
    result: dict[str, str] = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        name, sep, protocol = item.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not name or protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(
                "listener.security.protocol.map",
                f"Invalid value {text} for configuration listener.security.protocol.map: entry {item!r} must be "
                f"LISTENER_NAME:PROTOCOL with PROTOCOL one of {', '.join(SECURITY_PROTOCOLS)}",
                text,
            )
        result[name] = protocol
    return result


def _parse_listeners(key: str, text: str, protocols: Mapping[str, str]) -> list[Endpoint]:
    endpoints: list[Endpoint] = []
    for item in filter(None, (p.strip() for p in text.split(","))):
        m = _LISTENER.match(item)
        if m is None:
            raise ConfigError(
                key, f"Invalid value {text} for configuration {key}: {item!r} is not NAME://host:port", text
            )
        name, host, port = m["name"].upper(), m["host"].strip("[]"), int(m["port"])
        if port > 65535:
            raise ConfigError(
                key, f"Invalid value {text} for configuration {key}: port {port} is out of range", text
            )
        protocol = protocols.get(name)
        if protocol is None:
            raise ConfigError(
                key,
                f"Invalid value {text} for configuration {key}: no security protocol defined for listener "
                f"{name} in listener.security.protocol.map",
                text,
            )
        if protocol not in SUPPORTED_SECURITY_PROTOCOLS:
            raise ConfigError(
                key,
                f"Invalid value {text} for configuration {key}: listener {name} uses security protocol "
                f"{protocol}, but pybroker supports only {', '.join(SUPPORTED_SECURITY_PROTOCOLS)} for now",
                text,
            )
        if any(e.listener_name == name for e in endpoints):
            raise ConfigError(
                key, f"Invalid value {text} for configuration {key}: listener {name} is repeated", text
            )
        endpoints.append(Endpoint(name, protocol, host, port))
    if not endpoints:
        raise ConfigError(key, f"Invalid value {text!r} for configuration {key}: no listener given", text)
    return endpoints


# -- the config object ----------------------------------------------------------------------------------


def _attr(key: str) -> str:
    return key.replace(".", "_")


class BrokerConfig:
    """Validated broker settings. Each Kafka key is an attribute named by its snake_case
    (`config.log_segment_bytes`) and available as `config.get("log.segment.bytes")`.

    Keys with secondary spellings hold the value Kafka would use: `node_id` (node.id or broker.id),
    `log_dirs` (log.dirs or log.dir), `log_roll_ms`, `log_roll_jitter_ms`, `log_retention_ms`
    (ms, then minutes, then hours; any negative value is -1) and `log_flush_interval_ms`
    (or log.flush.scheduler.interval.ms), `advertised_listeners` (or listeners).
    """

    # Typed views of the keys others read most; every key in BROKER_CONFIGS is an attribute.
    node_id: int
    broker_id: int
    listeners: str
    advertised_listeners: str
    log_dirs: list[str]
    num_partitions: int
    auto_create_topics_enable: bool
    delete_topic_enable: bool
    log_segment_bytes: int
    log_roll_ms: int
    log_retention_ms: int
    log_retention_bytes: int
    log_retention_check_interval_ms: int
    log_flush_interval_ms: int
    log_flush_scheduler_interval_ms: int
    log_flush_offset_checkpoint_interval_ms: int
    message_max_bytes: int
    socket_request_max_bytes: int
    max_incremental_fetch_session_cache_slots: int
    socket_send_buffer_bytes: int
    socket_receive_buffer_bytes: int
    min_insync_replicas: int
    offsets_topic_num_partitions: int
    offsets_retention_minutes: int
    group_initial_rebalance_delay_ms: int
    group_min_session_timeout_ms: int
    group_max_session_timeout_ms: int
    transactional_id_expiration_ms: int
    producer_id_expiration_ms: int
    producer_id_expiration_check_interval_ms: int
    event_loop: str

    listener_endpoints: list[Endpoint]
    advertised_endpoints: list[Endpoint]

    def __init__(self, props: Mapping[str, object] | None = None, *, event_loop: str = "uvloop") -> None:
        originals = dict(props or {})
        explicit: dict[str, Any] = {}
        for name, raw in originals.items():
            key = BROKER_CONFIGS.get(name)
            if key is None:
                raise _unknown_broker_key(name, raw)
            explicit[name] = key.parse(raw)
        if event_loop not in EVENT_LOOPS:
            raise ConfigError(
                "event_loop", f"Invalid event loop {event_loop!r}: must be one of {', '.join(EVENT_LOOPS)}"
            )

        values = {name: explicit.get(name, key.default) for name, key in BROKER_CONFIGS.items()}
        self._set("_originals", {k: str(v) if not isinstance(v, str) else v for k, v in originals.items()})
        self._set("_explicit", explicit)
        values.update(_resolve(explicit, values))
        self._set("_values", values)
        for name, value in values.items():
            self._set(_attr(name), value)
        self._set("broker_id", values["node.id"])
        self._set("log_dirs", values["log.dirs"])
        self._set("event_loop", event_loop)

        protocols = _parse_protocol_map(values["listener.security.protocol.map"])
        listeners = _parse_listeners("listeners", values["listeners"], protocols)
        if len(listeners) > 1:
            raise ConfigError(
                "listeners",
                f"Invalid value {values['listeners']} for configuration listeners: pybroker serves exactly one "
                "listener for now",
                values["listeners"],
            )
        advertised = _parse_listeners("advertised.listeners", values["advertised.listeners"], protocols)
        _check_advertised(
            listeners,
            advertised,
            values["advertised.listeners"],
            derived="advertised.listeners" not in explicit,
        )
        self._set("listener_endpoints", listeners)
        self._set("advertised_endpoints", advertised)

    # -- construction --------------------------------------------------------------------------------
    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str] | None = None,
        overrides: Mapping[str, str] | Iterable[str] | None = None,
        *,
        event_loop: str = "uvloop",
    ) -> BrokerConfig:
        """From an optional properties file plus overrides (a mapping or `key=value` strings); overrides win."""
        props: dict[str, str] = load_properties(path) if path is not None else {}
        if isinstance(overrides, Mapping):
            props.update(overrides)
        else:
            for item in overrides or ():
                key, value = parse_override(item)
                props[key] = value
        return cls(props, event_loop=event_loop)

    def _set(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"BrokerConfig is read-only (tried to set {name})")

    def __repr__(self) -> str:
        return f"BrokerConfig({self._originals!r}, event_loop={self.event_loop!r})"

    # -- lookups -------------------------------------------------------------------------------------
    def get(self, key: str) -> Any:
        """The effective typed value of a Kafka broker key (the same as the attribute)."""
        if key not in self._values:
            raise KeyError(f"unknown broker config {key!r}")
        return self._values[key]

    def explicit(self, key: str) -> Any:
        """The typed value of `key` as given in the file/overrides, or None if it was not set."""
        return self._explicit.get(key)

    def default_of(self, key: str) -> Any:
        definition = BROKER_CONFIGS.get(key)
        return None if definition is None else definition.default

    @property
    def originals(self) -> dict[str, str]:
        """The settings exactly as given (file then overrides)."""
        return dict(self._originals)

    def listener_host_port(self) -> tuple[str, int]:
        """The (host, port) to bind; host "" means every interface."""
        endpoint = self.listener_endpoints[0]
        return endpoint.host, endpoint.port

    def advertised_host_port(self) -> tuple[str, int]:
        """The (host, port) clients are told to connect to, for the listener that is bound."""
        name = self.listener_endpoints[0].listener_name
        endpoint = next(e for e in self.advertised_endpoints if e.listener_name == name)
        # Kafka advertises the machine's canonical host name for a listener with an empty host.
        return endpoint.host or socket.getfqdn(), endpoint.port


def _unknown_broker_key(name: str, raw: object) -> ConfigError:
    reason = NOT_APPLICABLE.get(name)
    if reason is not None:
        return ConfigError(
            name, f"Unsupported configuration {name} (value {format_value(raw)}): {reason}. Remove it.", raw
        )
    if name in TOPIC_CONFIGS and name not in BROKER_CONFIGS:
        synonyms = [s.name for s in TOPIC_CONFIGS[name].synonyms]
        hint = f" The broker-wide default is {synonyms[0]}." if synonyms else ""
        return ConfigError(
            name,
            f"Unknown broker config name: {name} (value {format_value(raw)}); it is a topic config.{hint}",
            raw,
        )
    error = unknown_key_error("broker", name, raw, BROKER_CONFIGS)
    return ConfigError(name, f"{error.message} `pybroker configs` lists the accepted keys.", raw)


def _resolve(explicit: Mapping[str, Any], values: Mapping[str, Any]) -> dict[str, Any]:
    """Secondary spellings folded into the primary key, with Kafka's precedence."""
    node_id, broker_id = explicit.get("node.id"), explicit.get("broker.id")
    if node_id is not None and broker_id is not None and node_id != broker_id:
        raise ConfigError(
            "broker.id",
            f"Invalid value {broker_id} for configuration broker.id: it must equal node.id ({node_id}) when both are set",
            broker_id,
        )
    resolved: dict[str, Any] = {}
    resolved["node.id"] = (
        node_id if node_id is not None else broker_id if broker_id is not None else values["node.id"]
    )
    resolved["broker.id"] = resolved["node.id"]
    resolved["log.dirs"] = values["log.dirs"] if values["log.dirs"] is not None else values["log.dir"]

    def first(*candidates: tuple[str, int]) -> int:
        for key, factor in candidates:
            if values[key] is not None:
                return values[key] * factor
        raise AssertionError("the last candidate always has a default")

    resolved["log.roll.ms"] = first(("log.roll.ms", 1), ("log.roll.hours", MS_PER_HOUR))
    resolved["log.roll.jitter.ms"] = first(("log.roll.jitter.ms", 1), ("log.roll.jitter.hours", MS_PER_HOUR))
    retention = first(
        ("log.retention.ms", 1),
        ("log.retention.minutes", MS_PER_MINUTE),
        ("log.retention.hours", MS_PER_HOUR),
    )
    resolved["log.retention.ms"] = -1 if retention < 0 else retention
    resolved["log.flush.interval.ms"] = first(
        ("log.flush.interval.ms", 1), ("log.flush.scheduler.interval.ms", 1)
    )
    resolved["advertised.listeners"] = (
        values["advertised.listeners"] if values["advertised.listeners"] is not None else values["listeners"]
    )
    if resolved["log.roll.ms"] < 1:
        raise _derived_error("log.roll.ms", resolved["log.roll.ms"], "Value must be at least 1")
    if resolved["log.roll.jitter.ms"] < 0:
        raise _derived_error("log.roll.jitter.ms", resolved["log.roll.jitter.ms"], "Value must be at least 0")
    _check_consumer_group_timeouts(values)
    return resolved


def _check_consumer_group_timeouts(values: Mapping[str, Any]) -> None:
    """Kafka's GroupCoordinatorConfig requirements on the KIP-848 heartbeat and session settings."""
    for kind in ("heartbeat.interval", "session.timeout"):
        key = f"group.consumer.{kind}.ms"
        low, high = values[f"group.consumer.min.{kind}.ms"], values[f"group.consumer.max.{kind}.ms"]
        if not low <= values[key] <= high:
            raise _derived_error(key, values[key], f"Value must be between {low} and {high}")
    heartbeat, session = (
        values["group.consumer.heartbeat.interval.ms"],
        values["group.consumer.session.timeout.ms"],
    )
    if heartbeat >= session:
        raise _derived_error(
            "group.consumer.heartbeat.interval.ms",
            heartbeat,
            "Value must be less than group.consumer.session.timeout.ms",
        )


def _derived_error(key: str, value: object, reason: str) -> ConfigError:
    return ConfigError(key, f"Invalid value {value} for configuration {key}: {reason}", value)


def _check_advertised(
    listeners: list[Endpoint], advertised: list[Endpoint], text: str, derived: bool
) -> None:
    names = {e.listener_name for e in listeners}
    origin = " (taken from listeners, since advertised.listeners is not set)" if derived else ""
    for e in advertised:
        if e.host == "0.0.0.0" or e.host == "::":
            raise ConfigError(
                "advertised.listeners",
                f"Invalid value {text} for configuration advertised.listeners{origin}: it cannot use the nonroutable "
                f"meta-address {e.host}; set advertised.listeners to a routable address (for example "
                f"{e.listener_name}://127.0.0.1:{e.port})",
                text,
            )
        if e.listener_name not in names:
            raise ConfigError(
                "advertised.listeners",
                f"Invalid value {text} for configuration advertised.listeners: listener {e.listener_name} is not "
                f"among the listeners ({', '.join(sorted(names))})",
                text,
            )
    for name in names:
        if not any(e.listener_name == name for e in advertised):
            raise ConfigError(
                "advertised.listeners",
                f"Invalid value {text} for configuration advertised.listeners: listener {name} has no advertised "
                "address",
                text,
            )


# -- DescribeConfigs for the broker ---------------------------------------------------------------------


def describe_broker_config(broker: BrokerConfig) -> list[ConfigEntry]:
    """DescribeConfigs rows for this broker: every key, its value as set (or Kafka's default, None when it
    has none), STATIC_BROKER_CONFIG or DEFAULT_CONFIG, read-only since nothing here is dynamic."""
    entries = []
    for name, key in sorted(BROKER_CONFIGS.items()):
        group = _BROKER_SYNONYMS.get(name, (name,))
        synonyms: list[tuple[str, str | None, int]] = []
        for syn in group:
            if broker.explicit(syn) is not None:
                synonyms.append(
                    (syn, value_to_wire(key, broker.explicit(syn)), int(ConfigSource.STATIC_BROKER_CONFIG))
                )
        for syn in group:
            default = BROKER_CONFIGS[syn].default
            if default is not None:
                synonyms.append((syn, value_to_wire(key, default), int(ConfigSource.DEFAULT_CONFIG)))
        # Like Kafka, synonyms of lower precedence than the described key are not listed for it.
        while synonyms and synonyms[0][0] != name:
            synonyms.pop(0)
        source = synonyms[0][2] if synonyms else int(ConfigSource.DEFAULT_CONFIG)
        value = broker.explicit(name)
        if value is None:
            value = key.default
        entries.append(
            ConfigEntry(
                name=name,
                value=value_to_wire(key, value),
                source=source,
                read_only=True,
                is_default=source == ConfigSource.DEFAULT_CONFIG,
                sensitive=key.sensitive,
                config_type=int(key.type),
                synonyms=synonyms,
                documentation=key.doc,
            )
        )
    return entries


# -- meta.properties ----------------------------------------------------------------------------------

META_PROPERTIES = "meta.properties"
META_PROPERTIES_VERSION = 1  # KRaft's format: version, node.id, cluster.id, directory.id


def random_kafka_uuid() -> str:
    """A Kafka `Uuid.randomUuid().toString()`: 16 random bytes, URL-safe base64 without padding.
    Like Kafka, ids that would start with '-' are redrawn (they look like command-line options)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")
        if not text.startswith("-"):
            return text


def ensure_meta_properties(config: BrokerConfig) -> str:
    """Check or create `<dir>/meta.properties` in every log dir, the way `kafka-storage format` lays it out;
    returns the cluster id. A stored node id or cluster id that disagrees stops start-up (ConfigError)."""
    existing: dict[Path, dict[str, str]] = {}
    for d in map(Path, config.log_dirs):
        path = d / META_PROPERTIES
        if path.exists():
            existing[d] = _read_meta(path, config.node_id)
    cluster_ids = {props["cluster.id"] for props in existing.values()}
    if len(cluster_ids) > 1:
        detail = ", ".join(f"{d}: {p['cluster.id']}" for d, p in existing.items())
        raise ConfigError("log.dirs", f"log directories belong to different clusters ({detail})")
    cluster_id = cluster_ids.pop() if cluster_ids else random_kafka_uuid()
    for d in map(Path, config.log_dirs):
        if d in existing:
            continue
        try:
            d.mkdir(parents=True, exist_ok=True)
            _write_meta(d / META_PROPERTIES, cluster_id, config.node_id)
        except OSError as e:
            raise ConfigError(
                "log.dirs", f"cannot write {d / META_PROPERTIES}: {e.strerror or e}", str(d)
            ) from None
        log.info("formatted log directory %s (cluster id %s, node id %d)", d, cluster_id, config.node_id)
    return cluster_id


def _read_meta(path: Path, node_id: int) -> dict[str, str]:
    props = load_properties(path)
    version = props.get("version")
    if version not in ("0", "1"):
        raise ConfigError("log.dirs", f"{path}: unsupported meta.properties version {version!r}")
    if not props.get("cluster.id"):
        raise ConfigError("log.dirs", f"{path}: no cluster.id")
    stored = props.get("node.id", props.get("broker.id"))
    if stored is not None and stored != str(node_id):
        raise ConfigError(
            "node.id",
            f"Stored node id {stored} in {path} doesn't match the configured node.id {node_id}. If you moved "
            "your data, make sure the configured node id matches; if you intend to create a new node, use a "
            "different log directory.",
            node_id,
        )
    return props


def _write_meta(path: Path, cluster_id: str, node_id: int) -> None:
    props = {
        "cluster.id": cluster_id,
        "directory.id": random_kafka_uuid(),
        "node.id": str(node_id),
        "version": str(META_PROPERTIES_VERSION),
    }
    body = "#\n#" + time.strftime("%a %b %d %H:%M:%S %Z %Y") + "\n"
    body += "".join(f"{k}={v}\n" for k, v in props.items())
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(body)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
