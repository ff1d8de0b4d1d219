"""Java kafka-clients 3.9.1 adapter: drives ``compat_tests/java`` (one JVM per operation).

The jar is built on first use (``mvn package``, offline when the dependencies are already in the
project-local Maven repository) and rebuilt when a source file or the POM is newer than it.
Every operation is one ``java -jar target/compat-client.jar <command> ...`` run exchanging JSON lines;
see ``compat_tests/java/README.md`` for the command line itself.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compat_tests.reference.maven import build_lock, run_maven

from .base import (
    Acks,
    ClientError,
    Compression,
    ConsumedRecord,
    Delivery,
    ListedOffset,
    OffsetSpec,
    Record,
    Start,
    TopicDescription,
)
from .group_member import drive_group_member
from .program_lines import transaction_deliveries, transactions_input
from .security import ClientSecurity, java_properties

logger = logging.getLogger(__name__)

JAVA_PROJECT = Path(__file__).resolve().parents[1] / "java"
JAR = JAVA_PROJECT / "target" / "compat-client.jar"
# Class-data-sharing archive of the classes the client loads (made by the jar's `warmup` command).
CDS_ARCHIVE = JAVA_PROJECT / "target" / "compat-client.jsa"
# Short-lived client JVMs: C1 only and the CDS archive cut start-up to about 0.3 s.
JVM_OPTIONS = [
    "-XX:TieredStopAtLevel=1",
    "-Xshare:auto",
    "-XX:+UseSerialGC",
    "-Xmx256m",
    # The JVM's own warnings (e.g. a stale CDS archive) default to stdout, which carries our JSON.
    "-Xlog:disable",
    "-Xlog:all=warning:stderr",
]
# Headroom over the client's own timeouts before we declare the JVM hung.
PROCESS_SLACK_S = 30.0


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def _unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


def _sources_newer_than(jar: Path) -> bool:
    jar_mtime = jar.stat().st_mtime
    sources = [JAVA_PROJECT / "pom.xml", *(JAVA_PROJECT / "src").rglob("*")]
    return any(path.is_file() and path.stat().st_mtime > jar_mtime for path in sources)


@dataclass(frozen=True)
class JavaBuild:
    """One build of the compat program: its jar, its CDS archive and the Maven arguments making it."""

    jar: Path
    cds_archive: Path
    maven_args: tuple[str, ...]


# kafka-clients 3.9.1, what Spark 4 bundles.
KAFKA3_BUILD = JavaBuild(JAR, CDS_ARCHIVE, ("package", "-DskipTests"))


def ensure_jar(build: JavaBuild = KAFKA3_BUILD) -> Path:
    """Build the jar (and its CDS archive) if missing or stale; returns the jar."""
    # One lock for every build: they all read the sources and the local Maven repository.
    with build_lock("compat-client"):
        if not build.jar.exists() or _sources_newer_than(build.jar):
            logger.info("building %s", build.jar)
            run_maven(JAVA_PROJECT, list(build.maven_args))
            if not build.jar.exists():
                raise RuntimeError(f"maven finished but {build.jar} is missing")
        if not build.cds_archive.exists() or build.cds_archive.stat().st_mtime < build.jar.stat().st_mtime:
            _build_cds_archive(build)
    return build.jar


def _build_cds_archive(build: JavaBuild) -> None:
    """Only a speed-up: on failure the client still runs, just slower to start."""
    build.cds_archive.unlink(missing_ok=True)
    argv = ["java", *JVM_OPTIONS, f"-XX:ArchiveClassesAtExit={build.cds_archive}", "-jar", str(build.jar)]
    # Port 9 (discard) on loopback: nothing listens, and warmup never connects anyway.
    argv += ["warmup", "--bootstrap", "127.0.0.1:9"]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if result.returncode != 0 or not build.cds_archive.exists():
        logger.warning(
            "could not build the CDS archive %s (exit %s): %s",
            build.cds_archive,
            result.returncode,
            result.stderr[-2000:],
        )
        build.cds_archive.unlink(missing_ok=True)


class JavaClientError(ClientError):
    """The Java program's error object: ``error`` is the Kafka error name, ``native`` the Java exception."""

    def __init__(self, error: str, native: str, detail: str, error_class: str, exit_code: int) -> None:
        super().__init__(error, native, detail)
        self.error_class = error_class
        self.exit_code = exit_code


class JavaClient:
    """The stock Java client (kafka-clients 3.9.1, as bundled by Spark 4)."""

    name = "java"
    build = KAFKA3_BUILD
    security: ClientSecurity | None = None  # set by a scenario for a secured listener

    def __init__(
        self, *, timeout_s: float = 30.0, java: str = "java", properties: dict[str, str] | None = None
    ):
        self.timeout_s = timeout_s
        self.java = java
        # Extra client configs passed to every command as --property k=v (applied last).
        self.properties = dict(properties or {})

    # ---- the Client interface ------------------------------------------------------------
    def produce(
        self,
        bootstrap: str,
        topic: str,
        records: list[Record],
        *,
        compression: Compression = "none",
        idempotent: bool = False,
        acks: Acks = "all",
    ) -> list[Delivery]:
        lines = [
            json.dumps(
                {
                    "key": _b64(record.key),
                    "value": _b64(record.value),
                    "headers": [[name, _b64(value)] for name, value in record.headers],
                    "timestamp": record.timestamp_ms,
                    "partition": record.partition,
                }
            )
            for record in records
        ]
        options = [
            "--topic",
            topic,
            "--compression",
            compression,
            "--idempotent",
            str(idempotent).lower(),
            "--acks",
            acks,
        ]
        out = self._run("produce", bootstrap, options, stdin="\n".join(lines) + "\n")
        return [Delivery(item["partition"], item["offset"], item["timestamp"]) for item in out]

    def consume(
        self, bootstrap: str, topic: str, partition: int, *, start: Start, count: int, timeout_s: float = 30.0
    ) -> list[ConsumedRecord]:
        return self._consume(bootstrap, topic, partition, start, count, timeout_s, "read_uncommitted")

    def _consume(
        self,
        bootstrap: str,
        topic: str,
        partition: int,
        start: Start,
        count: int,
        timeout_s: float,
        isolation: str,
    ) -> list[ConsumedRecord]:
        options = [
            "--topic",
            topic,
            "--partition",
            str(partition),
            "--start",
            str(start),
            "--count",
            str(count),
            "--isolation",
            isolation,
        ]
        out = self._run("consume", bootstrap, options, timeout_s=timeout_s)
        return [
            ConsumedRecord(
                topic=item["topic"],
                partition=item["partition"],
                offset=item["offset"],
                timestamp_ms=item["timestamp"],
                timestamp_type=item["timestamp_type"],
                key=_unb64(item["key"]),
                value=_unb64(item["value"]),
                headers=tuple((name, _unb64(value)) for name, value in item["headers"]),
            )
            for item in out
        ]

    def produce_transactions(
        self,
        bootstrap: str,
        topic: str,
        transactional_id: str,
        transactions: list[tuple[list[Record], bool]],
    ) -> list[list[Delivery]]:
        """See ConfluentClient.produce_transactions (the program's ``transactions`` command)."""
        options = ["--topic", topic, "--transactional-id", transactional_id]
        out = self._run("transactions", bootstrap, options, stdin=transactions_input(transactions))
        return transaction_deliveries(out)

    def consume_committed(
        self, bootstrap: str, topic: str, partition: int, *, start: Start, count: int, timeout_s: float = 30.0
    ) -> list[ConsumedRecord]:
        """``consume`` with isolation.level=read_committed."""
        return self._consume(bootstrap, topic, partition, start, count, timeout_s, "read_committed")

    def offset_for_time(self, bootstrap: str, topic: str, partition: int, timestamp_ms: int) -> int | None:
        options = ["--topic", topic, "--partition", str(partition), "--timestamp", str(timestamp_ms)]
        return self._run_one("offset-for-time", bootstrap, options)["offset"]

    # ---- the Admin interface -------------------------------------------------------------
    def create_topic(
        self,
        bootstrap: str,
        topic: str,
        *,
        partitions: int = 1,
        configs: dict[str, str] | None = None,
        replication_factor: int = 1,
    ) -> None:
        options = [
            "--topic",
            topic,
            "--partitions",
            str(partitions),
            "--replication-factor",
            str(replication_factor),
        ]
        for name, value in (configs or {}).items():
            options += ["--config", f"{name}={value}"]
        self._run_one("create-topic", bootstrap, options)

    def delete_topic(self, bootstrap: str, topic: str) -> None:
        self._run_one("delete-topic", bootstrap, ["--topic", topic])

    def describe_configs(self, bootstrap: str, topic: str) -> dict[str, str]:
        return {
            name: entry["value"] or ""
            for name, entry in self.describe_configs_detailed(bootstrap, topic).items()
        }

    def describe_configs_detailed(self, bootstrap: str, topic: str) -> dict[str, dict[str, Any]]:
        """name -> {"value", "source" (e.g. DYNAMIC_TOPIC_CONFIG, DEFAULT_CONFIG), "read_only", "default", "sensitive"}."""
        return self._run_one("describe-configs", bootstrap, ["--topic", topic])["configs"]

    def alter_configs(
        self, bootstrap: str, topic: str, configs: dict[str, str], *, delete: tuple[str, ...] | list[str] = ()
    ) -> None:
        """incrementalAlterConfigs: SET each of ``configs``, DELETE (revert to default) each of ``delete``."""
        options = ["--topic", topic]
        for name, value in configs.items():
            options += ["--set", f"{name}={value}"]
        for name in delete:
            options += ["--delete", name]
        self._run_one("alter-configs", bootstrap, options)

    def create_partitions(self, bootstrap: str, topic: str, total: int) -> None:
        self._run_one("create-partitions", bootstrap, ["--topic", topic, "--total", str(total)])

    def list_offsets(self, bootstrap: str, topic: str, partition: int, spec: OffsetSpec) -> ListedOffset:
        out = self._run_one(
            "list-offsets", bootstrap, ["--topic", topic, "--partition", str(partition), "--spec", str(spec)]
        )
        return ListedOffset(out["offset"], out["timestamp"])

    def delete_records(self, bootstrap: str, topic: str, partition: int, before_offset: int) -> int:
        options = ["--topic", topic, "--partition", str(partition), "--before", str(before_offset)]
        return self._run_one("delete-records", bootstrap, options)["low_watermark"]

    def describe_topic(self, bootstrap: str, topic: str) -> TopicDescription:
        out = self.describe_topic_detailed(bootstrap, topic)
        return TopicDescription(out["topic"], len(out["partitions"]))

    def describe_topic_detailed(self, bootstrap: str, topic: str) -> dict[str, Any]:
        """{"topic", "topic_id", "internal", "partitions": [{"partition", "leader", "replicas", "isr"}]}."""
        return self._run_one("describe-topic", bootstrap, ["--topic", topic])

    def list_topics(self, bootstrap: str, *, internal: bool = False) -> list[str]:
        return self._run_one("list-topics", bootstrap, ["--internal", str(internal).lower()])["topics"]

    def describe_cluster(self, bootstrap: str) -> dict[str, Any]:
        """{"cluster_id", "controller": node|None, "nodes": [node]}, node = {"id", "host", "port", "rack"}."""
        return self._run_one("describe-cluster", bootstrap, [])

    # ---- consumer groups -------------------------------------------------------------------
    def group_consume(
        self,
        bootstrap: str,
        topic: str,
        group_id: str,
        *,
        on_assign: Callable[[list[int]], None],
        on_record: Callable[[int, int, bytes | None], bool],
        should_stop: Callable[[], bool],
        session_timeout_ms: int = 6000,
        instance_id: str | None = None,
        commit_each: bool = True,
        group_protocol: str = "classic",
        remote_assignor: str | None = None,
    ) -> None:
        """See KafkaPythonClient.group_consume (the ``group-consume`` command, one record at a time).

        ``group_protocol="consumer"`` joins as a KIP-848 member (``group.protocol=consumer``):
        ``session_timeout_ms`` is then the broker's to set and is not sent; ``remote_assignor`` is
        ``group.remote.assignor`` (uniform, range)."""
        self.group_consume_events(
            bootstrap,
            topic,
            group_id,
            on_event=lambda event: None,
            on_assign=on_assign,
            on_record=on_record,
            should_stop=should_stop,
            session_timeout_ms=session_timeout_ms,
            instance_id=instance_id,
            commit_each=commit_each,
            group_protocol=group_protocol,
            remote_assignor=remote_assignor,
        )

    def group_consume_events(
        self,
        bootstrap: str,
        topic: str,
        group_id: str,
        *,
        on_event: Callable[[dict[str, Any]], None],
        on_record: Callable[[int, int, bytes | None], bool],
        should_stop: Callable[[], bool],
        on_assign: Callable[[list[int]], None] = lambda partitions: None,
        session_timeout_ms: int = 6000,
        instance_id: str | None = None,
        commit_each: bool = True,
        assignor: str = "range",
        properties: dict[str, str] | None = None,
        group_protocol: str = "classic",
        remote_assignor: str | None = None,
    ) -> None:
        """Like group_consume, plus every rebalance callback as ``on_event({"event": "assigned" |
        "revoked" | "lost", "partitions": changed, "assignment": whole after the change,
        "generation", "member_id"})``; ``assignor`` is range, roundrobin, sticky or cooperative-sticky.

        The JVM waits after each record for our ``next``/``stop``, so nothing past the record that
        ``on_record`` ended on is committed."""
        options = ["--topic", topic, "--group", group_id, "--ack-each", "true"]
        options += ["--commit", "record" if commit_each else "none", "--assignor", assignor]
        options += ["--session-timeout-ms", str(session_timeout_ms), "--group-protocol", group_protocol]
        if remote_assignor is not None:
            options += ["--remote-assignor", remote_assignor]
        # No deadline of its own (a day): should_stop() or on_record ends the run.
        options += ["--deadline-ms", str(24 * 3600 * 1000)]
        if instance_id is not None:
            options += ["--instance-id", instance_id]
        for name, value in (properties or {}).items():
            options += ["--property", f"{name}={value}"]
        process = self._start("group-consume", bootstrap, options, timeout_s=self.timeout_s)

        def on_error(event: dict[str, Any]) -> None:
            raise JavaClientError(
                event.get("kafka_error", "UNKNOWN"),
                event["error"],
                event.get("message") or "",
                event.get("error_class", ""),
                1,
            )

        drive_group_member(
            process,
            on_event=on_event,
            on_record=on_record,
            should_stop=should_stop,
            on_assign=on_assign,
            on_error=on_error,
            decode_value=_unb64,
        )
        if process.returncode != 0:
            raise RuntimeError(f"java group-consume exited {process.returncode}")

    def list_groups(self, bootstrap: str, states: list[str] | None = None) -> dict[str, str]:
        """group id -> state (STABLE, EMPTY, ...), through Admin.listConsumerGroups (ListGroups)."""
        options: list[str] = []
        for state in states or []:
            options += ["--state", state]
        return self._run_one("list-groups", bootstrap, options)["groups"]

    def describe_group(self, bootstrap: str, group_id: str) -> dict[str, Any]:
        """Same shape as ConfluentClient.describe_group, via Admin.describeConsumerGroups."""
        out = self._run_one("describe-group", bootstrap, ["--group", group_id])
        return {
            "state": out["state"],
            "protocol": out["protocol"],
            "type": out["type"],
            "members": {
                m["member_id"]: {
                    "client_id": m["client_id"],
                    "host": m["host"],
                    "instance_id": m["instance_id"],
                    "partitions": [tuple(tp) for tp in m["partitions"]],
                }
                for m in out["members"]
            },
        }

    def delete_group(self, bootstrap: str, group_id: str) -> None:
        self._run_one("delete-group", bootstrap, ["--group", group_id])

    def committed_offsets(self, bootstrap: str, group_id: str) -> dict[tuple[str, int], int]:
        """Every committed offset of the group, via Admin.listConsumerGroupOffsets (OffsetFetch)."""
        out = self._run_one("committed-offsets", bootstrap, ["--group", group_id])
        return {(o["topic"], o["partition"]): o["offset"] for o in out["offsets"]}

    # ---- process plumbing ------------------------------------------------------------------
    def _run_one(self, command: str, bootstrap: str, options: list[str]) -> dict[str, Any]:
        out = self._run(command, bootstrap, options)
        if len(out) != 1:
            raise RuntimeError(f"java {command} printed {len(out)} JSON lines, expected 1: {out!r}")
        return out[0]

    def _argv(self, command: str, bootstrap: str, options: list[str], client_timeout_s: float) -> list[str]:
        java = shutil.which(self.java) or self.java
        jar = ensure_jar(self.build)
        cds = [f"-XX:SharedArchiveFile={self.build.cds_archive}"] if self.build.cds_archive.exists() else []
        argv = [java, *JVM_OPTIONS, *cds, "-jar", str(jar), command, "--bootstrap", bootstrap]
        argv += ["--timeout-ms", str(int(client_timeout_s * 1000)), *options]
        for name, value in {**java_properties(self.security), **self.properties}.items():
            argv += ["--property", f"{name}={value}"]
        return argv

    def _start(
        self, command: str, bootstrap: str, options: list[str], *, timeout_s: float
    ) -> subprocess.Popen:
        """A long-running command with line-buffered text pipes (stderr goes to ours)."""
        return subprocess.Popen(
            self._argv(command, bootstrap, options, timeout_s),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )

    def _run(
        self,
        command: str,
        bootstrap: str,
        options: list[str],
        *,
        stdin: str = "",
        timeout_s: float | None = None,
    ) -> list[dict[str, Any]]:
        client_timeout_s = timeout_s if timeout_s is not None else self.timeout_s
        argv = self._argv(command, bootstrap, options, client_timeout_s)
        env = dict(os.environ)
        if level := os.environ.get("COMPAT_CLIENT_LOG_LEVEL"):
            env["JAVA_TOOL_OPTIONS"] = (
                f"{env.get('JAVA_TOOL_OPTIONS', '')} -Dorg.slf4j.simpleLogger.defaultLogLevel={level}".strip()
            )
        result = subprocess.run(
            argv,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=client_timeout_s + PROCESS_SLACK_S,
            env=env,
        )
        lines = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
        if result.returncode != 0:
            error = lines[-1] if lines and "error" in lines[-1] else None
            if error is None:
                raise RuntimeError(
                    f"{self.name} {command} exited {result.returncode} without an error object:\n"
                    f"{result.stderr[-4000:]}"
                )
            raise JavaClientError(
                error.get("kafka_error", "UNKNOWN"),
                error["error"],
                error.get("message") or "",
                error.get("error_class", ""),
                result.returncode,
            )
        if result.stderr.strip():
            logger.debug("%s %s stderr:\n%s", self.name, command, result.stderr[-4000:])
        return lines
