"""The broker's configuration: Kafka's `server.properties` keys, types, defaults and validators.

`BrokerConfig.load(path, overrides)` reads a Java-properties file the way `kafka-server-start.sh`
does, applies `--override key=value` pairs on top and validates everything up front, so a bad
setting stops start-up with one clear message instead of surfacing later. Topic-level configs
and the DescribeConfigs view of both live in `pybroker.topic_config` and are re-exported here.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import os
import re
import socket
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from pybroker.security.authorizer import AUTHORIZER_CLASS_NAMES, parse_super_users
from pybroker.topic_config import (
    COMPRESSION_TYPE_VALIDATOR,
    DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_SEGMENT_BYTES,
    LONG_MAX,
    MS_PER_HOUR,
    MS_PER_MINUTE,
    TOPIC_CONFIGS,
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
    "ConfigErrors",
    "ConfigKey",
    "ConfigSource",
    "ConfigType",
    "Endpoint",
    "TopicConfigDef",
    "DYNAMIC_BROKER_CONFIGS",
    "describe_broker_config",
    "describe_broker_default_config",
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
SUPPORTED_SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
# Kafka's `ListenerName.configPrefix`: `listener.name.<lower-case listener name>.<key>` overrides `<key>`
# for that listener's channel (ssl.*, and later sasl.*).
LISTENER_PREFIX = "listener.name."
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


class HttpListener:
    """An `http://host:port` address for pybroker's HTTP endpoints; empty means off."""

    _PATTERN = re.compile(r"^http://(?P<host>\[[0-9A-Fa-f:.]*\]|[^:\[\]/]*):(?P<port>\d{1,5})/?$")

    def __call__(self, key: str, value: Any) -> None:
        if value and self.parse(value) is None:
            raise ConfigError(
                key, f"Invalid value {value} for configuration {key}: expected http://host:port", value
            )

    def describe(self) -> str:
        return "http://host:port, or empty"

    @classmethod
    def parse(cls, value: str) -> tuple[str, int] | None:
        """(host, port) of an `http://host:port` value; None if it is malformed."""
        m = cls._PATTERN.match(value.strip())
        if m is None or int(m["port"]) > 65535:
            return None
        return m["host"].strip("[]"), int(m["port"])


class SuperUsers:
    """``super.users``: principals ``Type:name`` separated by ``;`` (StandardAuthorizer's parse)."""

    def __call__(self, key: str, value: Any) -> None:
        try:
            parse_super_users(value)
        except ValueError as e:
            raise ConfigError(key, f"Invalid value {value} for configuration {key}: {e}", value) from None

    def describe(self) -> str:
        return "principals Type:name separated by ';'"


# fmt: off
_BROKER_CONFIG_LIST = [
    # identity and listeners
    _key("node.id", _T.INT, 0, at_least(0), _H,
         "The node id of this broker (pybroker default 0; Kafka requires it to be set)."),
    _key("broker.id", _T.INT, None, at_least(0), _H,
         "Alias of node.id; if both are set they must be equal."),
    _key("listeners", _T.STRING, "PLAINTEXT://127.0.0.1:9092", None, _H,
         "The listeners to bind, comma-separated NAME://host:port (an empty host binds every interface); "
         "each name's security protocol comes from listener.security.protocol.map."),
    _key("advertised.listeners", _T.STRING, None, None, _H,
         "The address clients are told to reconnect to, per listener name; defaults to listeners. "
         "0.0.0.0 cannot be advertised."),
    _key("listener.security.protocol.map", _T.STRING, "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL", None, _L,
         "Map from listener name to security protocol: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL."),
    _key("inter.broker.listener.name", _T.STRING, None, None, _M,
         "The listener brokers use between themselves; it must be in advertised.listeners. Defaults to the "
         "listener named after security.inter.broker.protocol; only one of the two may be set."),
    _key("security.inter.broker.protocol", _T.STRING, "PLAINTEXT", OneOf(SECURITY_PROTOCOLS), _M,
         "The security protocol brokers use between themselves (the listener of that name)."),
    # SASL (pybroker/security); per listener as listener.name.<name>.<key>, and per mechanism as
    # listener.name.<name>.<mechanism>.<key> (sasl.jaas.config, connections.max.reauth.ms, ...)
    _key("sasl.enabled.mechanisms", _T.LIST, ["GSSAPI"], None, _M,
         "The SASL mechanisms enabled on SASL listeners: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER "
         "(Kafka's default GSSAPI is not supported by pybroker and must be replaced when a SASL listener is used)."),
    _key("sasl.jaas.config", _T.PASSWORD, None, None, _M,
         "JAAS login module options in Kafka's syntax, used when no listener.name.<l>.<mechanism>.sasl.jaas.config "
         "is given (PlainLoginModule user_<name>=\"<password>\" entries; OAuthBearerLoginModule options)."),
    _key("sasl.mechanism.inter.broker.protocol", _T.STRING, "GSSAPI", None, _M,
         "The SASL mechanism brokers authenticate with on a SASL_PLAINTEXT inter-broker listener: PLAIN (the "
         "username and password of that listener's PlainLoginModule JAAS options) is the one pybroker speaks."),
    _key("connections.max.reauth.ms", _T.LONG, 0, None, _M,
         "When positive, SASL sessions last at most this long (KIP-368): SaslAuthenticate v1+ tells the client, "
         "and a connection that does not re-authenticate in time is closed at its next request."),
    _key("sasl.server.max.receive.size", _T.INT, 524288, at_least(1), _L,
         "The largest request accepted before SASL authentication completes."),
    _key("sasl.server.callback.handler.class", _T.CLASS, None, None, _M,
         "Per listener and mechanism (listener.name.<l>.oauthbearer.sasl.server.callback.handler.class): "
         "Kafka's OAuthBearerValidatorCallbackHandler switches OAUTHBEARER to signed tokens checked against the JWKS."),
    _key("sasl.oauthbearer.jwks.endpoint.url", _T.STRING, None, None, _M,
         "The JWKS (a file: URL) whose keys verify signed OAUTHBEARER tokens when the listener's "
         "oauthbearer.sasl.server.callback.handler.class is OAuthBearerValidatorCallbackHandler."),
    _key("sasl.oauthbearer.expected.audience", _T.LIST, [], None, _L,
         "Audiences one of which a signed OAUTHBEARER token must name (aud), if set."),
    _key("sasl.oauthbearer.expected.issuer", _T.STRING, None, None, _L,
         "The issuer (iss) a signed OAUTHBEARER token must name, if set."),
    _key("sasl.oauthbearer.sub.claim.name", _T.STRING, "sub", None, _L,
         "The claim of a signed OAUTHBEARER token that names the principal."),
    _key("sasl.oauthbearer.scope.claim.name", _T.STRING, "scope", None, _L,
         "The claim of a signed OAUTHBEARER token that holds its scope."),
    _key("sasl.oauthbearer.clock.skew.seconds", _T.INT, 30, at_least(0), _L,
         "Leeway allowed between the token issuer's clock and the broker's."),
    # TLS (Kafka's SslConfigs); each may be given per listener as listener.name.<name>.<key>
    _key("ssl.keystore.type", _T.STRING, "JKS", None, _M,
         "The key store's format: PKCS12 or PEM (a JKS store is read if it is in fact PKCS12, as Java does)."),
    _key("ssl.keystore.location", _T.STRING, None, None, _H,
         "The key store file (PKCS12, or PEM with the private key and its certificate chain)."),
    _key("ssl.keystore.password", _T.PASSWORD, None, None, _H,
         "The key store's password (PKCS12); not allowed for PEM key stores."),
    _key("ssl.key.password", _T.PASSWORD, None, None, _H,
         "The private key's password (an encrypted PKCS#8 PEM key, or a PKCS12 entry's if it differs)."),
    _key("ssl.keystore.certificate.chain", _T.PASSWORD, None, None, _H,
         "The certificate chain in PEM, inline (ssl.keystore.type=PEM)."),
    _key("ssl.keystore.key", _T.PASSWORD, None, None, _H,
         "The PKCS#8 private key in PEM, inline (ssl.keystore.type=PEM); encrypted with ssl.key.password if set."),
    _key("ssl.truststore.type", _T.STRING, "JKS", None, _M,
         "The trust store's format: PKCS12 or PEM."),
    _key("ssl.truststore.location", _T.STRING, None, None, _H,
         "The trust store file: the certificates that client certificates must chain to."),
    _key("ssl.truststore.password", _T.PASSWORD, None, None, _H,
         "The trust store's password (PKCS12 integrity check); not allowed for PEM trust stores."),
    _key("ssl.truststore.certificates", _T.PASSWORD, None, None, _H,
         "Trusted certificates in PEM, inline (ssl.truststore.type=PEM)."),
    _key("ssl.client.auth", _T.STRING, "none", OneOf(("required", "requested", "none")), _M,
         "Client authentication by certificate: required, requested (used if the client sends one) or none."),
    _key("ssl.enabled.protocols", _T.LIST, ["TLSv1.2", "TLSv1.3"], None, _M,
         "The TLS versions accepted."),
    _key("ssl.protocol", _T.STRING, "TLSv1.3", None, _M,
         "The TLS protocol of the SSL context (the newest version offered when ssl.enabled.protocols is empty)."),
    _key("ssl.cipher.suites", _T.LIST, [], None, _L,
         "TLS 1.2 cipher suites, by their IANA/Java names (or OpenSSL's); empty: the defaults. TLS 1.3 suites "
         "cannot be narrowed from Python and are OpenSSL's defaults (the same three as Java's)."),
    _key("ssl.principal.mapping.rules", _T.STRING, "DEFAULT", None, _L,
         "Rules mapping a client certificate's subject DN to a user name: RULE:pattern/replacement/[LU], "
         "comma-separated, tried in order; DEFAULT keeps the whole DN."),
    _key("ssl.endpoint.identification.algorithm", _T.STRING, "https", None, _L,
         "Host name verification of the server certificate by the broker's own clients (pybroker has none: "
         "accepted for settings written for Kafka)."),
    # cluster mode (ZooKeeper): unset zookeeper.connect is today's single broker, no ZooKeeper needed
    _key("zookeeper.connect", _T.STRING, None, None, _H,
         "Cluster mode: the ZooKeeper ensemble as host:port[,host:port...][/chroot]. Brokers register there, "
         "elect a controller through it and learn topics, leaders and ISRs from it. Unset: a single broker."),
    _key("zookeeper.session.timeout.ms", _T.INT, 18000, at_least(1), _H,
         "Cluster mode: the ZooKeeper session timeout; a broker silent for longer is considered dead."),
    _key("zookeeper.connection.timeout.ms", _T.INT, None, None, _H,
         "Cluster mode: how long to wait for the first connection to ZooKeeper; if unset, "
         "zookeeper.session.timeout.ms is used."),
    _key("broker.rack", _T.STRING, None, None, _M,
         "Cluster mode: the rack of this broker; with every broker given a rack, a partition's replicas "
         "are placed on different racks."),
    _key("controlled.shutdown.enable", _T.BOOLEAN, True, None, _M,
         "Cluster mode: on a clean stop, ask the controller to move leadership off this broker first."),
    _key("auto.leader.rebalance.enable", _T.BOOLEAN, True, None, _H,
         "Cluster mode: the controller moves leadership back to preferred replicas when it is imbalanced."),
    _key("leader.imbalance.check.interval.seconds", _T.LONG, 300, at_least(1), _H,
         "Cluster mode: how often the controller checks for leader imbalance."),
    _key("leader.imbalance.per.broker.percentage", _T.INT, 10, at_least(0), _H,
         "Cluster mode: the share of a broker's preferred partitions led elsewhere that triggers a rebalance."),
    _key("replica.lag.time.max.ms", _T.LONG, 30000, at_least(1), _H,
         "Cluster mode: a follower that has not caught up with the leader for this long leaves the ISR."),
    # sockets
    _key("max.incremental.fetch.session.cache.slots", _T.INT, 1000, at_least(0), _M,
         "The most incremental fetch sessions (KIP-227) kept; 0 declines every session."),
    _key("max.request.partition.size.limit", _T.INT, 2000, at_least(1), _L,
         "The most partitions one DescribeTopicPartitions response carries (the request's own limit "
         "can only lower it); the rest is paged through the response's cursor."),
    _key("socket.request.max.bytes", _T.INT, 104857600, at_least(1), _H,
         "The maximum number of bytes in a request; larger frames close the connection."),
    _key("queued.max.request.bytes", _T.LONG, 104857600, None, _M,
         "The most request bytes in memory at once, summed over every connection (Kafka's memory "
         "pool); a connection whose next request does not fit is not read until memory is released. "
         "-1 means unbounded (Kafka's default). pybroker default: 100 MiB, raised to socket.request.max.bytes "
         "when that is set higher, so hostile or stalled large requests cannot take more than twice it."),
    _key("max.connections", _T.INT, 2147483647, at_least(0), _M,
         "The most client connections of the broker (and, as listener.name.<l>.max.connections, of one "
         "listener); further connections wait in the listen backlog until one closes, as in Kafka."),
    _key("max.connections.per.ip", _T.INT, 2147483647, at_least(0), _M,
         "The most connections from one IP address; the next one is closed at once."),
    _key("max.connections.per.ip.overrides", _T.STRING, "", None, _M,
         "Per-IP (or host name) overrides of max.connections.per.ip: 'host:count,host:count'."),
    _key("max.connection.creation.rate", _T.INT, 2147483647, at_least(0), _M,
         "The most connections accepted per second (broker-wide, or per listener with the listener "
         "prefix); accepting is delayed beyond it (KIP-612)."),
    _key("connections.max.idle.ms", _T.LONG, 600000, None, _M,
         "Connections with no request or response for this long are closed."),
    _key("quota.window.num", _T.INT, 11, at_least(1), _L,
         "The number of samples client quotas are measured over."),
    _key("quota.window.size.seconds", _T.INT, 1, at_least(1), _L,
         "The span of each client quota sample."),
    _key("controller.quota.window.num", _T.INT, 11, at_least(1), _L,
         "The number of samples controller mutation quotas are measured over."),
    _key("controller.quota.window.size.seconds", _T.INT, 1, at_least(1), _L,
         "The span of each controller mutation quota sample."),
    # Kafka's default is 102400.  pybroker's is the kernel's autotuned buffer (-1): with one thread
    # sending every response, a 100 KiB SO_SNDBUF cuts a 10 MB fetch into ~40 sendfile rounds, each
    # waking the consumer's network thread for 100-250 KiB, and a librdkafka consumer sharing its CPU
    # then read 250-320 MB/s where the autotuned buffer gives 630-730 MB/s (bench/RESULTS.md).
    _key("socket.send.buffer.bytes", _T.INT, -1, None, _H,
         "SO_SNDBUF of client connections; -1 (pybroker's default; Kafka's is 102400) uses the OS default, "
         "which the kernel autotunes."),
    _key("socket.receive.buffer.bytes", _T.INT, 102400, None, _H,
         "SO_RCVBUF of client connections; -1 uses the OS default."),
    # logs
    _key("log.dirs", _T.LIST, None, NonEmptyList(), _H,
         "Comma-separated directories holding the log data; if unset, log.dir is used."),
    _key("log.dir", _T.LIST, ["./pybroker-data"], NonEmptyList(), _H,
         "The directory holding the log data, used when log.dirs is unset (pybroker default ./pybroker-data)."),
    _key("num.partitions", _T.INT, 1, at_least(1), _M,
         "The default number of partitions of an auto-created topic."),
    _key("default.replication.factor", _T.INT, 1, at_least(1), _M,
         "The replication factor of auto-created topics (above 1 only in cluster mode: zookeeper.connect)."),
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
    _key("log.message.timestamp.after.max.ms", _T.LONG, 3_600_000, at_least(0), _M,
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
    _key("num.replica.fetchers", _T.INT, 1, at_least(1), _H,
         "Fetcher tasks per leader broker that copy its partitions to this follower."),
    _key("replica.fetch.max.bytes", _T.INT, 1048576, at_least(0), _M,
         "Bytes a follower asks for per partition in one replica fetch (at least one batch comes)."),
    _key("replica.fetch.response.max.bytes", _T.INT, 10485760, at_least(0), _M,
         "Bytes a follower asks for in one replica fetch over all partitions."),
    _key("replica.fetch.wait.max.ms", _T.INT, 500, at_least(0), _M,
         "How long the leader may hold a replica fetch waiting for replica.fetch.min.bytes."),
    _key("replica.fetch.min.bytes", _T.INT, 1, at_least(1), _M,
         "Bytes a replica fetch waits for before the leader answers it."),
    _key("replica.fetch.backoff.ms", _T.INT, 1000, at_least(0), _M,
         "How long a follower waits after a fetch error before fetching that partition again."),
    _key("replica.high.watermark.checkpoint.interval.ms", _T.LONG, 5000, at_least(1), _H,
         "How often the high watermarks are saved to replication-offset-checkpoint (in a cluster)."),
    _key("replica.socket.timeout.ms", _T.INT, 30000, None, _M,
         "How long a follower waits for the leader's answer beyond the replica fetch wait."),
    # group coordinator
    _key("offsets.topic.num.partitions", _T.INT, 50, at_least(1), _H,
         "The number of partitions of the __consumer_offsets topic (fixed once the topic exists)."),
    _key("offsets.topic.replication.factor", _T.SHORT, 1, at_least(1), _H,
         "The replication factor of the __consumer_offsets topic (Kafka default 3; a single node has 1; "
         "above 1 only in cluster mode, where it is at most the number of live brokers when the topic is made)."),
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
    # KIP-1071 streams groups (group.protocol=streams in Kafka Streams): the broker assigns the tasks.
    _key("group.streams.heartbeat.interval.ms", _T.INT, 5000, at_least(1), _M,
         "The heartbeat interval given to members of streams groups."),
    _key("group.streams.min.heartbeat.interval.ms", _T.INT, 5000, at_least(1), _M,
         "The smallest group.streams.heartbeat.interval.ms allowed."),
    _key("group.streams.max.heartbeat.interval.ms", _T.INT, 15000, at_least(1), _M,
         "The largest group.streams.heartbeat.interval.ms allowed."),
    _key("group.streams.session.timeout.ms", _T.INT, 45000, at_least(1), _M,
         "How long a streams group member may stay silent before it is removed from its group."),
    _key("group.streams.min.session.timeout.ms", _T.INT, 45000, at_least(1), _M,
         "The smallest group.streams.session.timeout.ms allowed."),
    _key("group.streams.max.session.timeout.ms", _T.INT, 60000, at_least(1), _M,
         "The largest group.streams.session.timeout.ms allowed."),
    _key("group.streams.max.size", _T.INT, 2147483647, at_least(1), _M,
         "The largest number of members a streams group may have."),
    _key("group.streams.num.standby.replicas", _T.INT, 0, at_least(0), _M,
         "The number of standby replicas of each stateful task of a streams group."),
    _key("group.streams.max.standby.replicas", _T.INT, 2, at_least(0), _M,
         "The largest group.streams.num.standby.replicas allowed."),
    _key("group.streams.initial.rebalance.delay.ms", _T.INT, 3000, at_least(0), _M,
         "How long the first assignment of a new streams group waits for more members to join."),
    _key("group.streams.assignment.interval.ms", _T.INT, 1000, at_least(0), _M,
         "The shortest time between two target assignments of a streams group."),
    # KIP-932 share groups
    _key("group.share.heartbeat.interval.ms", _T.INT, 5000, at_least(1), _M,
         "The heartbeat interval given to members of share groups."),
    _key("group.share.min.heartbeat.interval.ms", _T.INT, 5000, at_least(1), _M,
         "The smallest group.share.heartbeat.interval.ms allowed."),
    _key("group.share.session.timeout.ms", _T.INT, 45000, at_least(1), _M,
         "How long a share group member may stay silent before it is removed from its group."),
    _key("group.share.min.session.timeout.ms", _T.INT, 45000, at_least(1), _M,
         "The smallest group.share.session.timeout.ms allowed."),
    _key("group.share.record.lock.duration.ms", _T.INT, 30000, at_least(1000), _M,
         "How long a share consumer holds the records it acquired before they are released."),
    _key("group.share.min.record.lock.duration.ms", _T.INT, 15000, at_least(1000), _M,
         "The smallest record lock duration allowed."),
    _key("group.share.max.record.lock.duration.ms", _T.INT, 60000, at_least(1000), _M,
         "The largest record lock duration allowed."),
    _key("group.share.delivery.count.limit", _T.INT, 5, at_least(2), _M,
         "How many times a record of a share group is delivered before it is archived."),
    _key("group.share.partition.max.record.locks", _T.INT, 2000, at_least(100), _M,
         "The most in-flight records a share partition holds (acquired or awaiting redelivery)."),
    _key("share.coordinator.state.topic.num.partitions", _T.INT, 50, at_least(1), _M,
         "The number of partitions of __share_group_state (fixed once the topic exists)."),
    _key("share.coordinator.state.topic.replication.factor", _T.SHORT, 1, at_least(1), _H,
         "The replication factor of __share_group_state (Kafka default 3; a single node has 1; above 1 only "
         "in cluster mode, where it is at most the number of live brokers when the topic is made)."),
    _key("share.coordinator.state.topic.min.isr", _T.SHORT, 1, at_least(1), _H,
         "min.insync.replicas of the __share_group_state topic (Kafka default 2; a single node has 1)."),
    _key("share.coordinator.state.topic.prune.interval.ms", _T.LONG, 300000, at_least(1), _M,
         "How often the share coordinator deletes the __share_group_state records its snapshots made redundant."),
    _key("share.coordinator.snapshot.update.records.per.snapshot", _T.INT, 500, between(0, 500), _M,
         "How many ShareUpdate records a share partition's state gets before a new ShareSnapshot is written."),
    # transactions and idempotence
    _key("transaction.state.log.replication.factor", _T.SHORT, 1, at_least(1), _H,
         "The replication factor of the __transaction_state topic (Kafka default 3; a single node has 1; "
         "above 1 only in cluster mode)."),
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
    _key("replica.alter.log.dirs.io.max.bytes.per.second", _T.LONG, 2**63 - 1, at_least(1), _M,
         "The most bytes per second copied by moves of replicas between log dirs (AlterReplicaLogDirs)."),
    _key("producer.id.expiration.check.interval.ms", _T.INT, 600000, at_least(1), _L,
         "How often producer ids idle for longer than producer.id.expiration.ms are removed."),
    # authorization (pybroker.security.authorizer): Kafka's StandardAuthorizer semantics
    _key("authorizer.class.name", _T.STRING, "", OneOf(AUTHORIZER_CLASS_NAMES), _L,
         "The authorizer: org.apache.kafka.metadata.authorizer.StandardAuthorizer (or "
         "kafka.security.authorizer.AclAuthorizer) switches ACL checks on; empty: every client may do everything."),
    _key("super.users", _T.STRING, None, SuperUsers(), _L,
         "Principals (Type:name, separated by ';') the authorizer allows everything, whatever the ACLs."),
    _key("allow.everyone.if.no.acl.found", _T.BOOLEAN, False, None, _L,
         "With an authorizer: allow an operation on a resource no ACL applies to (default: deny)."),
    # delegation tokens (KIP-48, controller/delegation_tokens.py)
    _key("delegation.token.secret.key", _T.PASSWORD, None, None, _M,
         "The secret the HMAC of every delegation token is made with (HmacSHA512); set, it enables delegation "
         "tokens. Every broker of a cluster needs the same one."),
    _key("delegation.token.max.lifetime.ms", _T.LONG, 604800000, at_least(1), _M,
         "A token cannot be renewed past this long after it was created."),
    _key("delegation.token.expiry.time.ms", _T.LONG, 86400000, at_least(1), _M,
         "How long a token lasts from its creation or renewal unless renewed (the default renew period)."),
    _key("delegation.token.expiry.check.interval.ms", _T.LONG, 3600000, at_least(1), _L,
         "How often tokens past their expiry are removed."),
    # pybroker's own HTTP endpoints (not Kafka keys): off unless a listener is given
    _key("metrics.listener", _T.STRING, "", HttpListener(), _M,
         "pybroker: serve Prometheus metrics at http://host:port/metrics, e.g. http://127.0.0.1:9644 "
         "(empty: off)."),
    _key("console.listener", _T.STRING, "", HttpListener(), _M,
         "pybroker: serve the web console at this address, e.g. http://127.0.0.1:8080 (empty: off)."),
    _key("console.admin", _T.BOOLEAN, False, None, _M,
         "pybroker: let the web console create and delete topics (read-only when false)."),
    _key("console.lag.sample.interval.ms", _T.INT, 5000, at_least(100), _L,
         "pybroker: how often the web console samples each group's lag for its lag chart."),
]
# fmt: on

BROKER_CONFIGS: dict[str, ConfigKey] = {k.name: k for k in _BROKER_CONFIG_LIST}

# Apache Kafka broker keys pybroker accepts and does not use, with the reason: a server.properties written
# for Kafka starts pybroker with one warning per such key (Kafka itself warns about keys it does not use).
# Exact names only, so that a misspelt key is still refused.
_NO_THREAD_POOLS = "pybroker serves every connection on one event loop, it has no such thread pool"
_SINGLE_NODE = "pybroker is a single combined broker and controller, there is no controller quorum"
_NO_REPLICAS = "pybroker is a single node and has no replica fetchers"
_NO_SECURITY = "pybroker does not implement SASL yet"
_PYTHON_TLS = "pybroker's TLS is Python's ssl module (OpenSSL): Java's security providers do not apply"
UNUSED_KAFKA_KEYS: dict[str, str] = {
    "num.network.threads": _NO_THREAD_POOLS,
    "num.io.threads": _NO_THREAD_POOLS,
    "background.threads": _NO_THREAD_POOLS,
    "queued.max.requests": _NO_THREAD_POOLS,
    "num.recovery.threads.per.data.dir": "pybroker recovers and closes logs on its own worker threads",
    "log.cleaner.threads": "pybroker compacts on its own worker",
    "log.cleaner.enable": "pybroker's log cleaner is always on for compacted topics",
    "process.roles": _SINGLE_NODE,
    "controller.quorum.voters": _SINGLE_NODE,
    "controller.quorum.bootstrap.servers": _SINGLE_NODE,
    "controller.quorum.election.timeout.ms": _SINGLE_NODE,
    "controller.quorum.fetch.timeout.ms": _SINGLE_NODE,
    "controller.listener.names": "pybroker has no controller listener; the listeners it names are not opened",
    "inter.broker.protocol.version": "pybroker is a single node with no inter-broker traffic",
    "metadata.log.dir": "pybroker keeps its metadata in the first log dir",
    "metadata.log.segment.bytes": "pybroker keeps its metadata in the first log dir",
    "metadata.max.retention.bytes": "pybroker keeps its metadata in the first log dir",
    "metadata.max.retention.ms": "pybroker keeps its metadata in the first log dir",
    "cluster.id": "the cluster id is generated once and kept in <log.dir>/meta.properties",
    "offsets.topic.min.isr": "a single node always has one in-sync replica",
    "group.share.enable": "share groups are always on (Kafka 4.3 turns them on with the share.version feature)",
    "group.coordinator.rebalance.protocols": "pybroker always serves the classic, consumer and streams group protocols",
    "sasl.mechanism.controller.protocol": _NO_SECURITY,
    "ssl.keymanager.algorithm": _PYTHON_TLS,
    "ssl.trustmanager.algorithm": _PYTHON_TLS,
    "ssl.provider": _PYTHON_TLS,
    "ssl.secure.random.implementation": _PYTHON_TLS,
    "ssl.engine.factory.class": _PYTHON_TLS,
    "ssl.allow.dn.changes": "pybroker does not reconfigure key stores at runtime",
    "ssl.allow.san.changes": "pybroker does not reconfigure key stores at runtime",
    "log.cleaner.dedupe.buffer.size": "pybroker's compactor sizes its own map",
    "log.cleaner.io.buffer.size": "pybroker's compactor sizes its own buffers",
    "remote.log.storage.system.enable": "pybroker does not implement tiered storage",
}

# Kafka's broker-level synonym groups (DynamicBrokerConfig.brokerConfigSynonyms), highest precedence first.
_BROKER_SYNONYM_GROUPS = [
    ("log.roll.ms", "log.roll.hours"),
    ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
    ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
]
_BROKER_SYNONYMS = {name: group for group in _BROKER_SYNONYM_GROUPS for name in group}

# The keys Kafka lets IncrementalAlterConfigs change on a running broker that pybroker has: the broker
# default of every topic config (Kafka's DynamicLogConfig.ReconfigurableConfigs, i.e. the first broker
# synonym of each topic config: log.retention.ms, not log.retention.hours), producer.id.expiration.ms
# (DynamicProducerStateManagerConfig) and replica.alter.log.dirs.io.max.bytes.per.second (DynamicReplicationConfig). Everything else is read-only, as in Kafka.
DYNAMIC_BROKER_CONFIGS: frozenset[str] = frozenset(
    {d.synonyms[0].name for d in TOPIC_CONFIGS.values() if d.synonyms and d.synonyms[0].name in BROKER_CONFIGS}
    | {"producer.id.expiration.ms", "replica.alter.log.dirs.io.max.bytes.per.second"}
)
# Resolved values that follow a dynamic key (log.retention.ms is recomputed from the dynamic layers).
_SECONDARY_OF_DYNAMIC = frozenset({"log.roll.ms", "log.roll.jitter.ms", "log.retention.ms", "log.flush.interval.ms"})

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


def _parse_listeners(
    key: str, text: str, protocols: Mapping[str, str], skip: set[str] | frozenset[str] = frozenset()
) -> list[Endpoint]:
    endpoints: list[Endpoint] = []
    for item in filter(None, (p.strip() for p in text.split(","))):
        m = _LISTENER.match(item)
        if m is None:
            raise ConfigError(
                key, f"Invalid value {text} for configuration {key}: {item!r} is not NAME://host:port", text
            )
        name, host, port = m["name"].upper(), m["host"].strip("[]"), int(m["port"])
        if name in skip:
            continue
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
    queued_max_request_bytes: int
    max_incremental_fetch_session_cache_slots: int
    socket_send_buffer_bytes: int
    socket_receive_buffer_bytes: int
    min_insync_replicas: int
    replica_lag_time_max_ms: int
    num_replica_fetchers: int
    replica_fetch_max_bytes: int
    replica_fetch_response_max_bytes: int
    replica_fetch_wait_max_ms: int
    replica_fetch_min_bytes: int
    replica_fetch_backoff_ms: int
    replica_socket_timeout_ms: int
    replica_high_watermark_checkpoint_interval_ms: int
    offsets_topic_num_partitions: int
    offsets_retention_minutes: int
    group_initial_rebalance_delay_ms: int
    group_min_session_timeout_ms: int
    group_max_session_timeout_ms: int
    transactional_id_expiration_ms: int
    producer_id_expiration_ms: int
    replica_alter_log_dirs_io_max_bytes_per_second: int
    producer_id_expiration_check_interval_ms: int
    event_loop: str
    connections_max_idle_ms: int
    max_connections: int
    max_connections_per_ip: int
    max_connections_per_ip_overrides: str
    max_connection_creation_rate: int
    quota_window_num: int
    quota_window_size_seconds: int
    controller_quota_window_num: int
    controller_quota_window_size_seconds: int
    default_replication_factor: int

    # Set once by __init__ (through _set: the config is read-only afterwards).
    _originals: dict[str, str]
    _explicit: dict[str, Any]
    _values: dict[str, Any]
    _dynamic: dict[ConfigSource, dict[str, Any]]
    _custom: dict[ConfigSource, dict[str, Any]]
    _listener_overrides: dict[str, dict[str, Any]]

    listener_endpoints: list[Endpoint]
    advertised_endpoints: list[Endpoint]
    inter_broker_listener_name: str
    # One line per Kafka key given that pybroker does not use (logged as warnings at start-up).
    warnings: list[str]

    def __init__(self, props: Mapping[str, object] | None = None, *, event_loop: str = "uvloop") -> None:
        originals = dict(props or {})
        explicit: dict[str, Any] = {}
        # Every problem of the configuration is reported at once (ConfigErrors), not one per start.
        problems = _Problems()
        warnings: list[str] = []
        prefixed: dict[str, object] = {}  # listener.name.<listener>.<key>, resolved once listeners are known
        for name, raw in originals.items():
            if name.startswith(LISTENER_PREFIX):
                prefixed[name] = raw
                continue
            key = BROKER_CONFIGS.get(name)
            if key is None:
                if name in UNUSED_KAFKA_KEYS:
                    warnings.append(
                        f"ignoring {name}={format_value(raw)}: {UNUSED_KAFKA_KEYS[name]} (an Apache Kafka setting "
                        "pybroker does not use)"
                    )
                else:
                    problems.add(_unknown_broker_key(name, raw))
                continue
            with problems.collect():
                explicit[name] = key.parse(raw)
        if event_loop not in EVENT_LOOPS:
            problems.add(
                ConfigError(
                    "event_loop", f"Invalid event loop {event_loop!r}: must be one of {', '.join(EVENT_LOOPS)}"
                )
            )

        values = {name: explicit.get(name, key.default) for name, key in BROKER_CONFIGS.items()}
        self._set("_originals", {k: str(v) if not isinstance(v, str) else v for k, v in originals.items()})
        self._set("_explicit", explicit)
        # Dynamic broker configs (IncrementalAlterConfigs on the BROKER resource), typed, by level:
        # this broker's own ("<node id>") over the cluster default (""), both over the static settings.
        self._set("_dynamic", {ConfigSource.DYNAMIC_BROKER_CONFIG: {}, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG: {}})
        self._set("_custom", {ConfigSource.DYNAMIC_BROKER_CONFIG: {}, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG: {}})
        self._set("warnings", warnings)
        with problems.collect():
            values.update(_resolve(explicit, values))
        self._set("_values", values)
        for name, value in values.items():
            self._set(_attr(name), value)
        self._set("broker_id", values["node.id"])
        self._set("log_dirs", values["log.dirs"])
        self._set("event_loop", event_loop)

        with problems.collect():
            listeners, advertised = _listeners(values, explicit, originals, warnings)
            self._set("listener_endpoints", listeners)
            self._set("advertised_endpoints", advertised)
        overrides: dict[str, dict[str, Any]] = {}
        with problems.collect():
            overrides = _listener_overrides(prefixed, getattr(self, "listener_endpoints", []), warnings)
        self._set("_listener_overrides", overrides)
        inter_broker = ""
        with problems.collect():
            inter_broker = _inter_broker_listener(
                values, explicit, getattr(self, "advertised_endpoints", []), warnings
            )
        values["inter.broker.listener.name"] = inter_broker or values["inter.broker.listener.name"]
        self._set("inter_broker_listener_name", values["inter.broker.listener.name"])
        problems.raise_if_any()

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
        """The typed value `key` is set to (a dynamic config, else the file/overrides), or None if it is not set."""
        found = self.configured_at(key)
        return found[0][1] if found else None

    def static(self, key: str) -> Any:
        """The typed value of `key` as given in the file/overrides, or None if it was not set."""
        return self._explicit.get(key)

    def configured_at(self, key: str) -> list[tuple[ConfigSource, Any]]:
        """Where `key` is set, highest precedence first: this broker's dynamic config, the cluster-wide
        dynamic default, the static file/overrides (Kafka's DynamicBrokerConfig order)."""
        found = [(source, layer[key]) for source, layer in self._dynamic.items() if key in layer]
        if key in self._explicit:
            found.append((ConfigSource.STATIC_BROKER_CONFIG, self._explicit[key]))
        return found

    def dynamic_configs(self, source: ConfigSource) -> dict[str, str]:
        """The dynamic configs of one level as strings, including keys pybroker does not know."""
        defs = BROKER_CONFIGS
        known = {k: format_value(v) for k, v in self._dynamic[source].items() if k in defs}
        return {**known, **self._custom[source]}

    def validate_dynamic(self, source: ConfigSource, configs: Mapping[str, str]) -> dict[str, Any]:
        """The typed values of level `source`'s new dynamic configs; ConfigError with Kafka's message for a
        key that cannot change at runtime or a bad value. Keys pybroker does not know are kept as given
        (Kafka keeps such custom configs too)."""
        read_only = [k for k in configs if k in BROKER_CONFIGS and k not in DYNAMIC_BROKER_CONFIGS]
        if read_only:
            raise ConfigError(read_only[0], f"Cannot update these configs dynamically: [{', '.join(read_only)}]")
        typed = {key: BROKER_CONFIGS[key].parse(raw) if key in BROKER_CONFIGS else raw for key, raw in configs.items()}
        self._resolved(self._merged({**self._dynamic, source: typed}))  # cross-key checks raise ConfigError
        return typed

    def set_dynamic(self, source: ConfigSource, configs: Mapping[str, str]) -> None:
        """Replace the dynamic configs of level `source` (validated as `validate_dynamic` does) and
        recompute the effective values; whoever holds this config sees the new values at once."""
        typed = self.validate_dynamic(source, configs)
        self._dynamic[source] = {k: v for k, v in typed.items() if k in BROKER_CONFIGS}
        self._custom[source] = {k: v for k, v in typed.items() if k not in BROKER_CONFIGS}
        values = self._resolved(self._merged(self._dynamic))
        self._values.update(values)
        for name in DYNAMIC_BROKER_CONFIGS | _SECONDARY_OF_DYNAMIC:
            self._set(_attr(name), values[name])

    def _merged(self, dynamic: Mapping[ConfigSource, Mapping[str, Any]]) -> dict[str, Any]:
        merged = dict(self._explicit)
        for level in (ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, ConfigSource.DYNAMIC_BROKER_CONFIG):
            merged.update({k: v for k, v in dynamic.get(level, {}).items() if k in BROKER_CONFIGS})
        return merged

    def _resolved(self, explicit: Mapping[str, Any]) -> dict[str, Any]:
        values = {name: explicit.get(name, key.default) for name, key in BROKER_CONFIGS.items()}
        values.update(_resolve(explicit, values))
        return values

    def default_of(self, key: str) -> Any:
        definition = BROKER_CONFIGS.get(key)
        return None if definition is None else definition.default

    @property
    def originals(self) -> dict[str, str]:
        """The settings exactly as given (file then overrides)."""
        return dict(self._originals)

    def listener_host_port(self) -> tuple[str, int]:
        """The (host, port) of the first listener; host "" means every interface."""
        endpoint = self.listener_endpoints[0]
        return endpoint.host, endpoint.port

    def advertised_host_port(self, listener_name: str | None = None) -> tuple[str, int]:
        """The (host, port) clients of a listener (by default the first) are told to connect to."""
        name = listener_name or self.listener_endpoints[0].listener_name
        endpoint = next(e for e in self.advertised_endpoints if e.listener_name == name)
        # Kafka advertises the machine's canonical host name for a listener with an empty host.
        return endpoint.host or socket.getfqdn(), endpoint.port

    def listener_value(self, listener_name: str, key: str) -> Any:
        """`key` for one listener's channel: `listener.name.<listener>.<key>` if set, else `key`
        (Kafka's `ChannelBuilders` reads a listener's security configs with that prefix first)."""
        overrides = self._listener_overrides.get(listener_name.lower())
        if overrides is not None and key in overrides:
            return overrides[key]
        return self.get(key)

    def sasl_value(self, listener_name: str, mechanism: str, key: str) -> Any:
        """A SASL key for one listener and mechanism: listener.name.<l>.<mechanism>.<key>, then
        listener.name.<l>.<key>, then <key> (mechanism-scoped values are kept as given, strings)."""
        overrides = self._listener_overrides.get(listener_name.lower(), {})
        scoped = f"{mechanism.lower()}.{key}"
        if scoped in overrides:
            return overrides[scoped]
        return self.listener_value(listener_name, key)

    def listener_overrides(self, listener_name: str) -> dict[str, Any]:
        """The `listener.name.<listener>.*` settings of one listener, by their unprefixed key."""
        return dict(self._listener_overrides.get(listener_name.lower(), {}))


class ConfigErrors(ConfigError):
    """Several problems of one configuration; `str()` lists them one per line."""

    def __init__(self, errors: list[ConfigError]) -> None:
        lines = "\n".join(f"  {e.message}" for e in errors)
        super().__init__(errors[0].key, f"{len(errors)} problems in the configuration:\n{lines}", errors[0].value)
        self.errors = errors


class _Problems:
    def __init__(self) -> None:
        self.errors: list[ConfigError] = []

    def add(self, error: ConfigError) -> None:
        # A key already reported is not reported again by a check derived from it.
        if not any(e.key == error.key and e.key for e in self.errors):
            self.errors.append(error)

    @contextlib.contextmanager
    def collect(self) -> Iterator[None]:
        try:
            yield
        except ConfigErrors as e:
            for error in e.errors:
                self.add(error)
        except ConfigError as e:
            self.add(e)

    def raise_if_any(self) -> None:
        if len(self.errors) == 1:
            raise self.errors[0]
        if self.errors:
            raise ConfigErrors(self.errors)


def _listeners(
    values: Mapping[str, Any], explicit: Mapping[str, Any], originals: Mapping[str, object], warnings: list[str]
) -> tuple[list[Endpoint], list[Endpoint]]:
    """The listeners pybroker serves and their advertised addresses. Listeners named by Kafka's
    controller.listener.names (a KRaft controller's) are left out with a warning."""
    problems = _Problems()
    protocols: dict[str, str] = {}
    with problems.collect():
        protocols = _parse_protocol_map(values["listener.security.protocol.map"])
    controller_names = {
        n.strip().upper() for n in str(originals.get("controller.listener.names") or "").split(",") if n.strip()
    }
    # Kafka maps a controller listener missing from the protocol map to PLAINTEXT.
    for name in controller_names:
        protocols.setdefault(name, "PLAINTEXT")
    listeners: list[Endpoint] = []
    advertised: list[Endpoint] = []
    with problems.collect():
        listeners = _parse_listeners("listeners", values["listeners"], protocols, skip=controller_names)
    # advertised.listeners defaults to listeners: if those are bad, that is already reported.
    if "advertised.listeners" in explicit or listeners:
        with problems.collect():
            advertised = _parse_listeners(
                "advertised.listeners",
                values["advertised.listeners"] or values["listeners"],
                protocols,
                skip=controller_names,
            )
    for name in sorted(controller_names):
        if re.search(rf"(^|,)\s*{re.escape(name)}://", values["listeners"], re.IGNORECASE):
            warnings.append(f"not opening listener {name}: it is a controller listener (controller.listener.names)")
    ports = [e.port for e in listeners if e.port != 0]
    if len(set(ports)) != len(ports):
        problems.add(
            ConfigError(
                "listeners",
                f"Invalid value {values['listeners']} for configuration listeners: each listener must have a "
                "different port",
                values["listeners"],
            )
        )
    if listeners and advertised:
        with problems.collect():
            _check_advertised(
                listeners,
                advertised,
                values["advertised.listeners"] or values["listeners"],
                derived="advertised.listeners" not in explicit,
            )
    problems.raise_if_any()
    return listeners, advertised


# Per-listener keys that are not broker keys of their own (the SASL mechanisms' `<mech>.sasl.jaas.config`
# and the like), kept as given for whoever reads them.
LISTENER_KEY_PATTERNS: list[re.Pattern[str]] = [
    # SASL keys scoped to one mechanism: listener.name.<l>.<mechanism>.<key> (Kafka's JaasContext and
    # SaslChannelBuilder read them so), e.g. plain.sasl.jaas.config, oauthbearer.connections.max.reauth.ms.
    re.compile(
        r"(plain|scram-sha-256|scram-sha-512|oauthbearer|gssapi)\.(sasl\.jaas\.config|connections\.max\.reauth\.ms"
        r"|sasl\.server\.callback\.handler\.class|sasl\.oauthbearer\.[a-z.]+)"
    ),
]


def _listener_overrides(
    prefixed: Mapping[str, object], listeners: list[Endpoint], warnings: list[str]
) -> dict[str, dict[str, Any]]:
    """`listener.name.<listener>.<key>` settings by lower-case listener name, typed like `<key>`."""
    problems = _Problems()
    names = sorted((e.listener_name.lower() for e in listeners), key=len, reverse=True)
    result: dict[str, dict[str, Any]] = {}
    for name, raw in prefixed.items():
        rest = name[len(LISTENER_PREFIX) :]
        listener = next((n for n in names if rest.lower().startswith(n + ".")), None)
        if listener is None:
            # Kafka only reads the prefixes of its listeners; others are unused settings.
            warnings.append(f"ignoring {name}: no listener {rest.split('.', 1)[0]} among the listeners")
            continue
        key_name = rest[len(listener) + 1 :]
        key = BROKER_CONFIGS.get(key_name)
        if key is None:
            if any(p.fullmatch(key_name) for p in LISTENER_KEY_PATTERNS):
                result.setdefault(listener, {})[key_name] = raw
            elif key_name in UNUSED_KAFKA_KEYS:
                warnings.append(f"ignoring {name}: {UNUSED_KAFKA_KEYS[key_name]}")
            else:
                problems.add(_unknown_broker_key(name, raw))
            continue
        with problems.collect():
            result.setdefault(listener, {})[key_name] = key.parse(raw)
    problems.raise_if_any()
    return result


def _inter_broker_listener(
    values: Mapping[str, Any], explicit: Mapping[str, Any], advertised: list[Endpoint], warnings: list[str]
) -> str:
    """Kafka's `KafkaConfig.interBrokerListenerName` and its checks."""
    name = explicit.get("inter.broker.listener.name")
    if name is not None and "security.inter.broker.protocol" in explicit:
        raise ConfigError(
            "inter.broker.listener.name",
            "Only one of inter.broker.listener.name and security.inter.broker.protocol should be set.",
            name,
        )
    names = [e.listener_name for e in advertised]
    if not names:
        return ""
    wanted = (name or values["security.inter.broker.protocol"]).upper()
    if wanted in names:
        return wanted
    message = (
        f"inter.broker.listener.name must be a listener name defined in advertised.listeners. The valid options "
        f"based on currently configured listeners are {','.join(names)}"
    )
    if name is not None or "security.inter.broker.protocol" in explicit:
        raise ConfigError("inter.broker.listener.name", message, name)
    # Kafka refuses to start here; a single pybroker has no inter-broker traffic, so it only warns
    # (settings with one listener named anything but PLAINTEXT have always started).
    warnings.append(f"{message}; using {names[0]}")
    return names[0]


def _unknown_broker_key(name: str, raw: object) -> ConfigError:
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
    queued = explicit.get("queued.max.request.bytes")
    resolved["queued.max.request.bytes"] = (
        max(values["queued.max.request.bytes"], values["socket.request.max.bytes"]) if queued is None else queued
    )
    if 0 < resolved["queued.max.request.bytes"] < values["socket.request.max.bytes"]:
        # Kafka's KafkaConfig check: a pool smaller than one request could never take some requests.
        raise ConfigError(
            "queued.max.request.bytes",
            "queued.max.request.bytes must be larger or equal to socket.request.max.bytes "
            f"({values['socket.request.max.bytes']})",
            queued,
        )
    if resolved["log.roll.ms"] < 1:
        raise _derived_error("log.roll.ms", resolved["log.roll.ms"], "Value must be at least 1")
    if resolved["log.roll.jitter.ms"] < 0:
        raise _derived_error("log.roll.jitter.ms", resolved["log.roll.jitter.ms"], "Value must be at least 0")
    _check_consumer_group_timeouts(values)
    if values["zookeeper.connect"] is None:
        # A single broker has one replica of everything; more needs a cluster (zookeeper.connect).
        for key in (
            "default.replication.factor",
            "offsets.topic.replication.factor",
            "transaction.state.log.replication.factor",
            "share.coordinator.state.topic.replication.factor",
        ):
            if values[key] != 1:
                raise ConfigError(
                    key,
                    f"Invalid value {values[key]} for configuration {key}: a single-node broker cannot place "
                    "more than one replica; pybroker accepts only: 1 (or set zookeeper.connect for a cluster)",
                    values[key],
                )
    resolved["zookeeper.connection.timeout.ms"] = (
        values["zookeeper.connection.timeout.ms"]
        if values["zookeeper.connection.timeout.ms"] is not None
        else values["zookeeper.session.timeout.ms"]
    )
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
    """DescribeConfigs rows for this broker (resource name = its node id), the way Kafka builds them:
    every key with its effective value and source, synonyms by source (this broker's dynamic config, the
    dynamic cluster default, the static settings, Kafka's default), keys that cannot change at runtime
    read-only."""
    entries = []
    for name, key in sorted(BROKER_CONFIGS.items()):
        group = _BROKER_SYNONYMS.get(name, (name,))
        synonyms: list[tuple[str, str | None, int]] = []
        for by in (
            ConfigSource.DYNAMIC_BROKER_CONFIG,
            ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
            ConfigSource.STATIC_BROKER_CONFIG,
        ):
            for syn in group:
                for where, value in broker.configured_at(syn):
                    if where == by:
                        synonyms.append((syn, value_to_wire(BROKER_CONFIGS[syn], value), int(by)))
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
                read_only=name not in DYNAMIC_BROKER_CONFIGS,
                is_default=source == ConfigSource.DEFAULT_CONFIG,
                sensitive=key.sensitive,
                config_type=int(key.type),
                synonyms=synonyms,
                documentation=key.doc,
            )
        )
    return entries


def describe_broker_default_config(broker: BrokerConfig) -> list[ConfigEntry]:
    """DescribeConfigs rows for the cluster default (resource name ""): only the dynamic defaults that are
    set, each its own only synonym, as Kafka answers."""
    source = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
    entries = []
    for name, text in sorted(broker.dynamic_configs(source).items()):
        key = BROKER_CONFIGS.get(name)
        value = text if key is None else value_to_wire(key, key.parse(text))
        entries.append(
            ConfigEntry(
                name=name,
                value=value,
                source=int(source),
                read_only=False,
                is_default=False,
                sensitive=key is not None and key.sensitive,
                config_type=int(key.type) if key is not None else int(ConfigType.UNKNOWN),
                synonyms=[(name, value, int(source))],
                documentation=key.doc if key is not None else None,
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


def ensure_meta_properties(config: BrokerConfig, cluster_id_of_cluster: str | None = None) -> str:
    """Check or create `<dir>/meta.properties` in every log dir, the way `kafka-storage format` lays it out;
    returns the cluster id. A stored node id or cluster id that disagrees stops start-up (ConfigError).
    ``cluster_id_of_cluster``: in cluster mode, ZooKeeper's /cluster/id, which new directories take and
    existing ones must hold (Kafka's InconsistentClusterIdException otherwise)."""
    existing: dict[Path, dict[str, str]] = {}
    for d in map(Path, config.log_dirs):
        path = d / META_PROPERTIES
        if path.exists():
            existing[d] = _read_meta(path, config.node_id)
    cluster_ids = {props["cluster.id"] for props in existing.values()}
    if len(cluster_ids) > 1:
        detail = ", ".join(f"{d}: {p['cluster.id']}" for d, p in existing.items())
        raise ConfigError("log.dirs", f"log directories belong to different clusters ({detail})")
    cluster_id = cluster_ids.pop() if cluster_ids else (cluster_id_of_cluster or random_kafka_uuid())
    if cluster_id_of_cluster is not None and cluster_id != cluster_id_of_cluster:
        raise ConfigError(
            "log.dirs",
            f"The cluster id {cluster_id_of_cluster} in ZooKeeper does not match the stored cluster id "
            f"{cluster_id} in meta.properties: the log directories belong to another cluster",
        )
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
