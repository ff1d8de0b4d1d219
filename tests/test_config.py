"""Broker configuration, topic configs, DescribeConfigs rows, meta.properties and the command line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pybroker import config as cfg
from pybroker.__main__ import main
from pybroker.config import (
    BROKER_CONFIGS,
    DYNAMIC_BROKER_CONFIGS,
    TOPIC_CONFIGS,
    BrokerConfig,
    ConfigError,
    ConfigSource,
    ConfigType,
    describe_broker_config,
    describe_topic_config,
    effective_topic_config,
    ensure_meta_properties,
    log_config_kwargs,
    parse_properties,
    validate_topic_configs,
)

REPO = Path(__file__).resolve().parents[1]
HOUR_MS = 3600 * 1000


def error_of(props: dict[str, str]) -> str:
    with pytest.raises(ConfigError) as info:
        BrokerConfig(props)
    return str(info.value)


# -- properties syntax ------------------------------------------------------------------------------


def test_properties_separators_comments_and_blank_lines():
    text = "# comment\n! also a comment\n\n  a=1\nb: 2\nc 3\nd = spaced value  \ne=\nf\n"
    assert parse_properties(text) == {"a": "1", "b": "2", "c": "3", "d": "spaced value  ", "e": "", "f": ""}


def test_properties_continuations_and_escapes():
    text = (
        "listeners=PLAINTEXT://127.0.0.1:9092,\\\n"
        "          \tOTHER://127.0.0.1:9093\n"
        "key\\ with\\=odd\\:chars = tab\\there\\nnewline \\u0041\\\\\n"
        "trailing.backslashes=ends\\\\\n"
        "next=line\n"
        "# a comment ending in a backslash does not continue \\\n"
        "after=comment\r\n"
        "last=continued\\"
    )
    assert parse_properties(text) == {
        "listeners": "PLAINTEXT://127.0.0.1:9092,OTHER://127.0.0.1:9093",
        "key with=odd:chars": "tab\there\nnewline A\\",
        "trailing.backslashes": "ends\\",
        "next": "line",
        "after": "comment",
        "last": "continued",
    }


def test_properties_later_key_wins_and_bad_unicode_escape_is_reported():
    assert parse_properties("a=1\na=2\n") == {"a": "2"}
    with pytest.raises(ConfigError, match=r"line 2: malformed \\uxxxx"):
        parse_properties("ok=1\nbad=\\u12x4\n", "server.properties")


def test_overrides_win_over_the_file(tmp_path):
    props = tmp_path / "server.properties"
    props.write_text("num.partitions=3\nlog.dirs=/from/file\nnode.id=4\n")
    config = BrokerConfig.load(props, ["num.partitions=7", "log.retention.ms=5"])
    assert config.num_partitions == 7
    assert config.log_dirs == ["/from/file"]
    assert config.node_id == 4
    assert config.log_retention_ms == 5
    assert BrokerConfig.load(props, {"node.id": "9"}).node_id == 9


def test_override_value_is_everything_after_the_first_equals_sign(tmp_path):
    assert BrokerConfig.load(None, [f"log.dirs={tmp_path}/a=b"]).log_dirs == [f"{tmp_path}/a=b"]


def test_missing_file_and_malformed_override_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="cannot read properties file"):
        BrokerConfig.load(tmp_path / "nope.properties")
    with pytest.raises(ConfigError, match="expected key=value"):
        BrokerConfig.load(None, ["num.partitions"])


# -- broker config ---------------------------------------------------------------------------------


def test_defaults_without_any_setting():
    config = BrokerConfig()
    assert config.listener_host_port() == ("127.0.0.1", 9092)
    assert config.advertised_host_port() == ("127.0.0.1", 9092)
    assert config.log_dirs == ["./pybroker-data"]
    assert config.node_id == 0 and config.broker_id == 0
    assert config.num_partitions == 1
    assert config.auto_create_topics_enable is True
    assert config.delete_topic_enable is True
    assert config.log_segment_bytes == 1024**3
    assert config.log_retention_ms == 168 * HOUR_MS
    assert config.log_roll_ms == 168 * HOUR_MS
    assert config.message_max_bytes == 1048588
    assert config.socket_request_max_bytes == 104857600
    assert config.compression_type == "producer"
    assert config.event_loop == "uvloop"
    assert config.get("log.segment.bytes") == config.log_segment_bytes


def test_every_key_is_an_attribute_and_config_is_read_only():
    config = BrokerConfig()
    for name in BROKER_CONFIGS:
        assert getattr(config, name.replace(".", "_")) == config.get(name)
    with pytest.raises(AttributeError):
        config.num_partitions = 5  # type: ignore[misc]
    with pytest.raises(KeyError):
        config.get("no.such.key")


@pytest.mark.parametrize(
    ("props", "expected_ms"),
    [
        ({}, 168 * HOUR_MS),
        ({"log.retention.hours": "1"}, HOUR_MS),
        ({"log.retention.minutes": "2", "log.retention.hours": "1"}, 120_000),
        ({"log.retention.ms": "5", "log.retention.minutes": "2", "log.retention.hours": "1"}, 5),
        ({"log.retention.hours": "-1"}, -1),
        ({"log.retention.ms": "-7"}, -1),
    ],
)
def test_retention_precedence(props, expected_ms):
    config = BrokerConfig(props)
    assert config.log_retention_ms == expected_ms
    assert effective_topic_config(config, {})["retention.ms"] == expected_ms


@pytest.mark.parametrize(
    ("props", "expected_ms"),
    [
        ({}, 168 * HOUR_MS),
        ({"log.roll.hours": "2"}, 2 * HOUR_MS),
        ({"log.roll.ms": "1000", "log.roll.hours": "2"}, 1000),
    ],
)
def test_roll_precedence(props, expected_ms):
    config = BrokerConfig(props)
    assert config.log_roll_ms == expected_ms
    assert effective_topic_config(config, {})["segment.ms"] == expected_ms


def test_flush_interval_falls_back_to_scheduler_interval():
    assert BrokerConfig({"log.flush.scheduler.interval.ms": "500"}).log_flush_interval_ms == 500
    config = BrokerConfig({"log.flush.interval.ms": "20", "log.flush.scheduler.interval.ms": "500"})
    assert config.log_flush_interval_ms == 20
    assert effective_topic_config(config, {})["flush.ms"] == 20


def test_log_dirs_wins_over_log_dir_and_broker_id_is_an_alias():
    assert BrokerConfig({"log.dir": "/a"}).log_dirs == ["/a"]
    assert BrokerConfig({"log.dir": "/a", "log.dirs": "/b, /c"}).log_dirs == ["/b", "/c"]
    assert BrokerConfig({"broker.id": "3"}).node_id == 3
    assert BrokerConfig({"broker.id": "3", "node.id": "3"}).node_id == 3


def test_advertised_listeners_default_to_listeners_and_can_differ():
    config = BrokerConfig({"listeners": "PLAINTEXT://127.0.0.1:19092"})
    assert config.advertised_host_port() == ("127.0.0.1", 19092)
    config = BrokerConfig(
        {"listeners": "PLAINTEXT://:9092", "advertised.listeners": "PLAINTEXT://broker.example:29092"}
    )
    assert config.listener_host_port() == ("", 9092)
    assert config.advertised_host_port() == ("broker.example", 29092)
    ipv6 = BrokerConfig({"listeners": "PLAINTEXT://[::1]:9092"})
    assert ipv6.listener_host_port() == ("::1", 9092)
    custom = BrokerConfig(
        {"listeners": "CLIENT://127.0.0.1:9092", "listener.security.protocol.map": "CLIENT:PLAINTEXT"}
    )
    assert custom.listener_endpoints[0].security_protocol == "PLAINTEXT"


@pytest.mark.parametrize(
    ("props", "fragments"),
    [
        ({"bogus.key": "1"}, ["bogus.key", "value 1", "pybroker configs"]),
        ({"log.retention.hourz": "1"}, ["log.retention.hourz", "Did you mean 'log.retention.hours'"]),
        ({"retention.ms": "5"}, ["retention.ms", "topic config", "log.retention.ms"]),
        ({"num.partitions": "0"}, ["Invalid value 0 for configuration num.partitions", "at least 1"]),
        ({"num.partitions": "many"}, ["many", "num.partitions", "Not a number of type INT"]),
        ({"num.partitions": "2147483648"}, ["num.partitions", "32-bit"]),
        ({"auto.create.topics.enable": "yes"}, ["yes", "auto.create.topics.enable", "true or false"]),
        ({"log.segment.bytes": "1000"}, ["1000", "log.segment.bytes", "at least 1048576"]),
        ({"log.cleanup.policy": "shred"}, ["shred", "log.cleanup.policy", "compact, delete"]),
        ({"log.message.timestamp.type": "Now"}, ["Now", "CreateTime, LogAppendTime"]),
        ({"compression.type": "brotli"}, ["brotli", "uncompressed, zstd, lz4, snappy, gzip, producer"]),
        ({"default.replication.factor": "3"}, ["3", "default.replication.factor", "single-node", "1"]),
        ({"offsets.topic.replication.factor": "3"}, ["offsets.topic.replication.factor", "single-node"]),
        ({"transaction.state.log.replication.factor": "2"}, ["transaction.state.log.replication.factor"]),
        ({"node.id": "1", "broker.id": "2"}, ["broker.id", "node.id"]),
        ({"log.dirs": "/a,/a"}, ["/a,/a", "log.dirs", "duplicated"]),
        ({"log.dirs": ""}, ["log.dirs", "Empty list"]),
        ({"log.roll.ms": "0"}, ["log.roll.ms", "at least 1"]),
        (
            {"listeners": "SASL_PLAINTEXT://127.0.0.1:9093", "listener.name.sasl_plaintext.bogus.sasl.jaas.config": "x"},
            ["listener.name.sasl_plaintext.bogus.sasl.jaas.config"],
        ),
        ({"listeners": "localhost:9092"}, ["localhost:9092", "NAME://host:port"]),
        ({"listeners": "FOO://127.0.0.1:9092"}, ["FOO", "listener.security.protocol.map"]),
        ({"listeners": "PLAINTEXT://127.0.0.1:70000"}, ["70000", "out of range"]),
        (
            {
                "listeners": "PLAINTEXT://127.0.0.1:1,OTHER://127.0.0.1:1",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,OTHER:PLAINTEXT",
            },
            ["listeners", "different port"],
        ),
        (
            {"listeners": "PLAINTEXT://0.0.0.0:9092"},
            ["0.0.0.0", "taken from listeners", "advertised.listeners"],
        ),
        (
            {"listeners": "PLAINTEXT://0.0.0.0:9092", "advertised.listeners": "PLAINTEXT://0.0.0.0:9092"},
            ["nonroutable", "advertised.listeners"],
        ),
        (
            {
                "advertised.listeners": "OTHER://h:1",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,OTHER:PLAINTEXT",
            },
            ["OTHER", "not among the listeners"],
        ),
        (
            {"listener.security.protocol.map": "PLAINTEXT:TLS"},
            ["listener.security.protocol.map", "PLAINTEXT:TLS"],
        ),
    ],
)
def test_invalid_broker_settings_name_key_value_and_what_is_allowed(props, fragments):
    message = error_of(props)
    for fragment in fragments:
        assert fragment in message, (fragment, message)


def test_invalid_event_loop():
    with pytest.raises(ConfigError, match="uvloop, asyncio"):
        BrokerConfig(event_loop="trio")


# -- topic configs ---------------------------------------------------------------------------------


def test_topic_configs_have_kafka_types_and_defaults():
    expected = {
        "retention.ms": (ConfigType.LONG, 604800000),
        "segment.bytes": (ConfigType.INT, 1073741824),
        "cleanup.policy": (ConfigType.LIST, ["delete"]),
        "min.cleanable.dirty.ratio": (ConfigType.DOUBLE, 0.5),
        "preallocate": (ConfigType.BOOLEAN, False),
        "max.message.bytes": (ConfigType.INT, 1048588),
        "message.timestamp.type": (ConfigType.STRING, "CreateTime"),
    }
    for name, (config_type, default) in expected.items():
        assert TOPIC_CONFIGS[name].key.type is config_type
        assert TOPIC_CONFIGS[name].key.default == default


def test_validate_topic_configs_types_values_and_drops_nones():
    typed = validate_topic_configs(
        {"retention.ms": "1000", "cleanup.policy": "compact, delete", "preallocate": "TRUE", "flush.ms": None}
    )
    assert typed == {"retention.ms": 1000, "cleanup.policy": ["compact", "delete"], "preallocate": True}


@pytest.mark.parametrize(
    ("configs", "key", "fragments"),
    [
        (
            {"retention.mss": "1"},
            "retention.mss",
            ["Unknown topic config name: retention.mss", "retention.ms"],
        ),
        ({"retention.ms": "-2"}, "retention.ms", ["-2", "at least -1"]),
        ({"segment.bytes": "1024"}, "segment.bytes", ["1024", "at least 1048576"]),
        ({"cleanup.policy": "compact,shred"}, "cleanup.policy", ["compact,shred", "compact, delete"]),
        ({"min.cleanable.dirty.ratio": "1.5"}, "min.cleanable.dirty.ratio", ["1.5", "no more than 1"]),
        ({"compression.type": "brotli"}, "compression.type", ["brotli", "uncompressed, zstd, lz4"]),
        ({"compression.gzip.level": "0"}, "compression.gzip.level", ["Invalid value 0", "at least 1"]),
        ({"remote.storage.enable": "true"}, "remote.storage.enable", ["tiered storage"]),
        (
            {"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"},
            "min.compaction.lag.ms",
            ["min.compaction.lag.ms (10) > max.compaction.lag.ms (5)"],
        ),
    ],
)
def test_invalid_topic_configs(configs, key, fragments):
    with pytest.raises(ConfigError) as info:
        validate_topic_configs(configs)
    assert info.value.key == key
    for fragment in fragments:
        assert fragment in str(info.value)


def test_compression_type_names_a_codec_with_its_level():
    assert validate_topic_configs({"compression.type": "zstd"}) == {"compression.type": "zstd"}
    broker = BrokerConfig({"compression.type": "lz4", "compression.lz4.level": "4"})
    kwargs = log_config_kwargs(effective_topic_config(broker, {}))
    assert (kwargs["compression_type"], kwargs["compression_level"]) == ("lz4", 4)
    kwargs = log_config_kwargs(effective_topic_config(broker, {"compression.type": "gzip"}))
    assert (kwargs["compression_type"], kwargs["compression_level"]) == ("gzip", None)  # -1: gzip's default


def test_gzip_level_accepts_default_sentinel_and_range():
    assert validate_topic_configs({"compression.gzip.level": "-1"}) == {"compression.gzip.level": -1}
    assert validate_topic_configs({"compression.gzip.level": "9"}) == {"compression.gzip.level": 9}


def test_effective_topic_config_override_then_broker_synonym_then_default():
    broker = BrokerConfig(
        {
            "log.segment.bytes": str(2 * 1024 * 1024),
            "message.max.bytes": "2000000",
            "log.cleanup.policy": "compact",
        }
    )
    effective = effective_topic_config(broker, {"segment.bytes": str(4 * 1024 * 1024)})
    assert effective["segment.bytes"] == 4 * 1024 * 1024  # topic override
    assert effective["max.message.bytes"] == 2000000  # broker synonym message.max.bytes
    assert effective["cleanup.policy"] == ["compact"]
    assert effective["delete.retention.ms"] == 86400000  # topic default
    assert set(effective) == set(TOPIC_CONFIGS)


def test_effective_topic_config_str_for_incremental_alter():
    broker = BrokerConfig({"log.cleanup.policy": "delete,compact"})
    assert cfg.effective_topic_config_str(broker, {}, "cleanup.policy") == "delete,compact"
    assert cfg.effective_topic_config_str(broker, {"retention.ms": "5"}, "retention.ms") == "5"
    with pytest.raises(ConfigError, match="Unknown topic config name: nope"):
        cfg.effective_topic_config_str(broker, {}, "nope")


def test_log_config_kwargs_match_storage_field_names():
    broker = BrokerConfig({"log.message.timestamp.type": "LogAppendTime"})
    kwargs = log_config_kwargs(effective_topic_config(broker, {"cleanup.policy": "Compact,delete"}))
    assert kwargs == {
        "segment_bytes": 1073741824,
        "segment_ms": 604800000,
        "retention_ms": 604800000,
        "retention_bytes": -1,
        "index_interval_bytes": 4096,
        "segment_index_bytes": 10485760,
        "max_message_bytes": 1048588,
        "message_timestamp_type": "LogAppendTime",
        "message_timestamp_before_max_ms": 2**63 - 1,
        "message_timestamp_after_max_ms": 3_600_000,
        "cleanup_policy": "compact,delete",
        "flush_messages": 2**63 - 1,
        "flush_ms": 2**63 - 1,
        "file_delete_delay_ms": 60000,
        "compression_type": "producer",
        "compression_level": None,
    }
    small = log_config_kwargs(effective_topic_config(broker, {"internal.segment.bytes": "4096"}))
    assert small["segment_bytes"] == 4096


def test_log_config_kwargs_construct_the_storage_log_config():
    from pybroker.storage import LogConfig

    log_config = LogConfig(**log_config_kwargs(effective_topic_config(BrokerConfig(), {})))
    assert log_config.retention_ms == 604800000


# -- DescribeConfigs rows ----------------------------------------------------------------------------


def by_name(entries):
    return {e.name: e for e in entries}


def test_describe_topic_config_sources_and_synonyms():
    broker = BrokerConfig({"log.retention.hours": "24", "log.segment.bytes": str(2 * 1024 * 1024)})
    entries = by_name(describe_topic_config(broker, {"retention.ms": "1000"}))
    retention = entries["retention.ms"]
    assert retention.value == "1000"
    assert retention.source == ConfigSource.DYNAMIC_TOPIC_CONFIG == 1
    assert not retention.is_default and not retention.read_only and not retention.sensitive
    assert retention.config_type == ConfigType.LONG == 5
    assert retention.synonyms == [
        ("retention.ms", "1000", 1),
        ("log.retention.hours", "24", 4),
        ("log.retention.hours", "168", 5),
    ]
    segment = entries["segment.bytes"]
    assert (segment.value, segment.source) == (str(2 * 1024 * 1024), ConfigSource.STATIC_BROKER_CONFIG)
    assert segment.synonyms[0] == ("log.segment.bytes", str(2 * 1024 * 1024), 4)
    delete_retention = entries["delete.retention.ms"]
    assert (delete_retention.value, delete_retention.source, delete_retention.is_default) == (
        "86400000",
        5,
        True,
    )
    assert entries["cleanup.policy"].value == "delete"
    assert entries["preallocate"].value == "false"
    assert "internal.segment.bytes" not in entries
    assert all(e.documentation for e in entries.values())


def test_describe_broker_config_sources_and_synonyms():
    broker = BrokerConfig({"log.retention.minutes": "5", "num.partitions": "3"})
    entries = by_name(describe_broker_config(broker))
    assert set(entries) == set(BROKER_CONFIGS)
    # Read-only unless Kafka lets the key change at runtime (the broker defaults of topic configs...).
    assert {n for n, e in entries.items() if not e.read_only} == DYNAMIC_BROKER_CONFIGS
    assert entries["num.partitions"].read_only and not entries["log.retention.ms"].read_only
    partitions = entries["num.partitions"]
    assert (partitions.value, partitions.source, partitions.is_default) == ("3", 4, False)
    assert partitions.synonyms == [("num.partitions", "3", 4), ("num.partitions", "1", 5)]
    minutes = entries["log.retention.minutes"]
    assert minutes.synonyms == [("log.retention.minutes", "5", 4), ("log.retention.hours", "168", 5)]
    unset = entries["log.retention.ms"]
    assert (unset.value, unset.source, unset.synonyms) == (None, 5, [])
    assert entries["auto.create.topics.enable"].config_type == ConfigType.BOOLEAN


# -- meta.properties -----------------------------------------------------------------------------------


def test_meta_properties_written_once_and_reused(tmp_path):
    dirs = [tmp_path / "a", tmp_path / "b"]
    config = BrokerConfig({"log.dirs": ",".join(map(str, dirs)), "node.id": "2"})
    cluster_id = ensure_meta_properties(config)
    assert len(cluster_id) == 22 and not cluster_id.startswith("-")
    for d in dirs:
        props = parse_properties((d / "meta.properties").read_text())
        assert props["cluster.id"] == cluster_id
        assert props["node.id"] == "2"
        assert props["version"] == "1"
        assert len(props["directory.id"]) == 22
    assert ensure_meta_properties(config) == cluster_id


def test_meta_properties_new_dir_joins_existing_cluster(tmp_path):
    first = BrokerConfig({"log.dirs": str(tmp_path / "a")})
    cluster_id = ensure_meta_properties(first)
    both = BrokerConfig({"log.dirs": f"{tmp_path / 'a'},{tmp_path / 'b'}"})
    assert ensure_meta_properties(both) == cluster_id
    assert f"cluster.id={cluster_id}" in (tmp_path / "b" / "meta.properties").read_text()


def test_meta_properties_node_id_and_cluster_mismatch_are_errors(tmp_path):
    ensure_meta_properties(BrokerConfig({"log.dirs": str(tmp_path / "a"), "node.id": "1"}))
    with pytest.raises(ConfigError, match="Stored node id 1"):
        ensure_meta_properties(BrokerConfig({"log.dirs": str(tmp_path / "a"), "node.id": "2"}))
    ensure_meta_properties(BrokerConfig({"log.dirs": str(tmp_path / "b"), "node.id": "1"}))
    with pytest.raises(ConfigError, match="different clusters"):
        ensure_meta_properties(
            BrokerConfig({"log.dirs": f"{tmp_path / 'a'},{tmp_path / 'b'}", "node.id": "1"})
        )


# -- command line ----------------------------------------------------------------------------------------


def run_cli(*args: str, env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), **(env_extra or {}))
    return subprocess.run(
        [sys.executable, "-m", "pybroker", *args], capture_output=True, text=True, timeout=60, env=env
    )


def test_cli_unknown_override_exits_1_with_the_message_and_no_traceback():
    result = run_cli("serve", "--override", "bogus.key=1")
    assert result.returncode == 1
    assert "bogus.key" in result.stderr and "value 1" in result.stderr
    assert "Traceback" not in result.stderr


def test_cli_bad_file_value_exits_1(tmp_path):
    props = tmp_path / "server.properties"
    # A SASL listener with Kafka's default sasl.enabled.mechanisms (GSSAPI, which pybroker does not serve).
    props.write_text(f"listeners=SASL_PLAINTEXT://127.0.0.1:9093\nlog.dirs={tmp_path / 'data'}\n")
    result = run_cli("serve", str(props))
    assert result.returncode == 1
    assert "GSSAPI" in result.stderr and "sasl.enabled.mechanisms" in result.stderr
    assert "Traceback" not in result.stderr


def test_cli_ssl_listener_without_key_store_exits_1(tmp_path):
    props = tmp_path / "server.properties"
    props.write_text(f"listeners=SSL://127.0.0.1:9093\nlog.dirs={tmp_path / 'data'}\n")
    result = run_cli("serve", str(props))
    assert result.returncode == 1
    assert "listener SSL" in result.stderr and "ssl.keystore.location" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "data").exists()  # refused before any directory is touched


def test_cli_help_documents_serve():
    result = run_cli("serve", "--help")
    assert result.returncode == 0
    for fragment in (
        "--override",
        "--log-level",
        "--event-loop",
        "server.properties",
        "PLAINTEXT://127.0.0.1:9092",
    ):
        assert fragment in result.stdout


def test_cli_configs_lists_every_key():
    broker = run_cli("configs")
    topic = run_cli("configs", "--topic")
    assert broker.returncode == topic.returncode == 0
    for name in BROKER_CONFIGS:
        assert f"\n{name}\n" in "\n" + broker.stdout
    assert "broker default from: log.retention.ms, log.retention.minutes, log.retention.hours" in topic.stdout


def test_main_in_process_reports_config_errors(capsys):
    assert main(["serve", "--override", "num.partitions=zero"]) == 1
    assert "num.partitions" in capsys.readouterr().err


def test_cli_serve_runs_the_broker_with_malloc_tuning(tmp_path):
    """A real start: the process re-execs itself with the malloc variables, formats the log dir, and
    stops cleanly on SIGTERM."""
    import signal
    import socket
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    for name in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"):
        env.pop(name, None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "pybroker", "serve", "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
         "--override", f"log.dirs={tmp_path / 'data'}", "--event-loop", "asyncio"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline, "broker did not start listening"
                time.sleep(0.05)  # polling a condition with a deadline, not synchronising by sleep
        environ = Path(f"/proc/{proc.pid}/environ").read_bytes().split(b"\0")
        assert b"MALLOC_MMAP_THRESHOLD_=67108864" in environ
        assert (tmp_path / "data" / "meta.properties").exists()
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr
    assert "asyncio event loop" in stderr


def test_config_module_reexports_topic_api():
    # broker.py and the handlers reach these through pybroker.config
    for name in (
        "validate_topic_configs",
        "effective_topic_config",
        "describe_topic_config",
        "log_config_kwargs",
    ):
        assert callable(getattr(cfg, name))


def test_queued_max_request_bytes():
    """Kafka's key for the request memory pool: pybroker bounds it by default (Kafka: -1,
    unbounded), never below one request (KafkaConfig's own check), and takes -1."""
    assert BrokerConfig.load().queued_max_request_bytes == 104857600
    assert BrokerConfig.load(overrides={"socket.request.max.bytes": "209715200"}).queued_max_request_bytes == 209715200
    assert BrokerConfig.load(overrides={"queued.max.request.bytes": "-1"}).queued_max_request_bytes == -1
    with pytest.raises(ConfigError, match="must be larger or equal to socket.request.max.bytes"):
        BrokerConfig.load(overrides={"queued.max.request.bytes": "1000"})


def test_cluster_mode_keys():
    config = BrokerConfig({"zookeeper.connect": "127.0.0.1:2181/pb", "default.replication.factor": "3",
                           "offsets.topic.replication.factor": "3", "broker.rack": "r1",
                           "zookeeper.session.timeout.ms": "6000", "inter.broker.listener.name": "PLAINTEXT"})
    assert config.get("zookeeper.connect") == "127.0.0.1:2181/pb"
    assert config.get("default.replication.factor") == 3
    assert config.get("zookeeper.connection.timeout.ms") == 6000  # follows the session timeout
    assert config.get("broker.rack") == "r1"
    assert config.get("replica.lag.time.max.ms") == 30000
    assert config.get("auto.leader.rebalance.enable") is True
    assert config.get("leader.imbalance.check.interval.seconds") == 300
    assert config.get("controlled.shutdown.enable") is True
    # Without zookeeper.connect, one replica only (today's single broker).
    with pytest.raises(ConfigError) as error:
        BrokerConfig({"default.replication.factor": "3"})
    assert "zookeeper.connect" in str(error.value)
    with pytest.raises(ConfigError) as error:
        BrokerConfig({"zookeeper.connect": "127.0.0.1:2181", "inter.broker.listener.name": "REPLICATION"})
    assert "inter.broker.listener.name" in str(error.value)
