"""Shared plumbing of the franz-go and sarama adapters: build and run the ``compat-go`` CLI.

The binary is built on first use (``go build``, modules from the Go module proxy cached in
``.cache/gomod``, build cache in ``.cache/gobuild``) into ``.cache/go-bin/compat-go`` and rebuilt when
a Go source or go.mod/go.sum is newer.  One process per operation, JSON lines both ways — the same
command line and JSON as ``compat_tests/java`` (see README.md here).
"""

from __future__ import annotations

import base64
import json
import logging
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from compat_tests.clients.base import (
    Acks,
    ClientError,
    Compression,
    ConsumedRecord,
    Delivery,
    ListedOffset,
    NotSupportedByClient,
    OffsetSpec,
    Record,
    Start,
    TopicDescription,
)
from compat_tests.clients.group_member import drive_group_member
from compat_tests.clients.program_lines import transaction_deliveries, transactions_input
from compat_tests.clients.security import ClientSecurity, go_options
from compat_tests.reference.maven import CACHE_DIR, build_lock

logger = logging.getLogger(__name__)

GO_PROJECT = Path(__file__).resolve().parent
BINARY = CACHE_DIR / "go-bin" / "compat-go"
PROCESS_SLACK_S = 30.0
EXIT_NOT_EXPRESSIBLE = 3


def go_environment() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("GOMODCACHE", str(CACHE_DIR / "gomod"))
    env.setdefault("GOCACHE", str(CACHE_DIR / "gobuild"))
    env["GOFLAGS"] = "-mod=mod -buildvcs=false"
    return env


def _stale() -> bool:
    if not BINARY.exists():
        return True
    built = BINARY.stat().st_mtime
    sources = [*GO_PROJECT.glob("*.go"), GO_PROJECT / "go.mod", GO_PROJECT / "go.sum"]
    return any(path.stat().st_mtime > built for path in sources if path.exists())


def ensure_binary() -> Path:
    with build_lock("compat-go"):
        if _stale():
            go = shutil.which("go")
            if go is None:
                raise RuntimeError("go is not installed (scripts/install-deps.sh go-client installs it)")
            BINARY.parent.mkdir(parents=True, exist_ok=True)
            logger.info("building %s", BINARY)
            result = subprocess.run(
                [go, "build", "-o", str(BINARY), "."],
                cwd=GO_PROJECT,
                env=go_environment(),
                capture_output=True,
                text=True,
                timeout=900,
            )
            if result.returncode != 0:
                raise RuntimeError(f"go build failed:\n{result.stderr[-4000:]}")
    return BINARY


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def _unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


class GoCliClient:
    """One of the two Go libraries behind ``compat-go <library> <command>``."""

    name = ""
    library = ""  # "franz" or "sarama"
    security: ClientSecurity | None = None  # set by a scenario for a secured listener

    def __init__(self, *, timeout_s: float = 30.0) -> None:
        self.timeout_s = timeout_s

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
                    "key": _b64(r.key),
                    "value": _b64(r.value),
                    "headers": [[name, _b64(value)] for name, value in r.headers],
                    "timestamp": r.timestamp_ms,
                    "partition": r.partition,
                }
            )
            for r in records
        ]
        options = ["--topic", topic, "--compression", compression, "--idempotent", str(idempotent).lower()]
        out = self._run("produce", bootstrap, [*options, "--acks", acks], stdin="\n".join(lines) + "\n")
        return [Delivery(item["partition"], item["offset"], item["timestamp"]) for item in out]

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
        """``consume`` with the read_committed isolation level."""
        return self._consume(bootstrap, topic, partition, start, count, timeout_s, "read_committed")

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
                timestamp_type=self._timestamp_type(item["timestamp_type"]),
                key=_unb64(item["key"]),
                value=_unb64(item["value"]),
                headers=tuple((name, _unb64(value)) for name, value in item["headers"]),
            )
            for item in out
        ]

    def _timestamp_type(self, reported: str | None) -> Any:
        # sarama's ConsumerMessage has no timestamp type (it swaps in the LogAppendTime value
        # silently): say "unknown" rather than guess, and let scenarios check the value itself.
        return reported

    def offset_for_time(self, bootstrap: str, topic: str, partition: int, timestamp_ms: int) -> int | None:
        options = ["--topic", topic, "--partition", str(partition), "--timestamp", str(timestamp_ms)]
        return self._run_one("offset-for-time", bootstrap, options)["offset"]

    # ---- the Admin interface -------------------------------------------------------------
    def create_topic(
        self, bootstrap: str, topic: str, *, partitions: int = 1, configs: dict[str, str] | None = None
    ) -> None:
        options = ["--topic", topic, "--partitions", str(partitions)]
        for name, value in (configs or {}).items():
            options += ["--config", f"{name}={value}"]
        self._run_one("create-topic", bootstrap, options)

    def delete_topic(self, bootstrap: str, topic: str) -> None:
        self._run_one("delete-topic", bootstrap, ["--topic", topic])

    def describe_configs(self, bootstrap: str, topic: str) -> dict[str, str]:
        return self._run_one("describe-configs", bootstrap, ["--topic", topic])["configs"]

    def alter_configs(self, bootstrap: str, topic: str, configs: dict[str, str]) -> None:
        options = ["--topic", topic]
        for name, value in configs.items():
            options += ["--set", f"{name}={value}"]
        self._run_one("alter-configs", bootstrap, options)

    def create_partitions(self, bootstrap: str, topic: str, total: int) -> None:
        self._run_one("create-partitions", bootstrap, ["--topic", topic, "--total", str(total)])

    def list_offsets(self, bootstrap: str, topic: str, partition: int, spec: OffsetSpec) -> ListedOffset:
        options = ["--topic", topic, "--partition", str(partition), "--spec", str(spec)]
        out = self._run_one("list-offsets", bootstrap, options)
        return ListedOffset(out["offset"], out["timestamp"])

    def delete_records(self, bootstrap: str, topic: str, partition: int, before_offset: int) -> int:
        options = ["--topic", topic, "--partition", str(partition), "--before", str(before_offset)]
        return self._run_one("delete-records", bootstrap, options)["low_watermark"]

    def describe_topic(self, bootstrap: str, topic: str) -> TopicDescription:
        out = self._run_one("describe-topic", bootstrap, ["--topic", topic])
        return TopicDescription(out["topic"], out["partitions"])

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
    ) -> None:
        """See KafkaPythonClient.group_consume (``group-consume``, range assignor, one record at a time)."""
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
    ) -> None:
        """Like group_consume, plus every rebalance callback as ``on_event({"event": "assigned" |
        "revoked" | "lost", "partitions": changed, "assignment": whole after the change,
        "generation"})``; ``assignor`` is range, roundrobin, sticky or cooperative-sticky.

        The Go process commits a record, prints it, and waits for our ``next``/``stop``; closing
        its stdin without ``stop`` (this process killed) makes it exit without leaving the group.
        """
        options = ["--topic", topic, "--group", group_id, "--assignor", assignor]
        options += ["--commit", "record" if commit_each else "none"]
        options += ["--session-timeout-ms", str(session_timeout_ms)]
        if instance_id is not None:
            options += ["--instance-id", instance_id]
        argv = [str(ensure_binary()), self.library, "group-consume", "--bootstrap", bootstrap]
        argv += go_options(self.security)
        argv += ["--timeout-ms", str(int(self.timeout_s * 1000)), *options]
        process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        errors: list[dict[str, Any]] = []  # the member's error line, read once it has exited
        drive_group_member(
            process,
            on_event=on_event,
            on_record=on_record,
            should_stop=should_stop,
            on_assign=on_assign,
            on_error=errors.append,
            decode_value=_unb64,
        )
        error = errors[-1] if errors else None
        if process.returncode == 0:
            return
        if error is not None and process.returncode == EXIT_NOT_EXPRESSIBLE:
            raise NotSupportedByClient(error["message"])
        if error is not None:
            raise ClientError(error.get("kafka_error", "UNKNOWN"), error["error"], error.get("message") or "")
        raise RuntimeError(f"{self.name} group-consume exited {process.returncode}")

    # ---- process plumbing ------------------------------------------------------------------
    def _run_one(self, command: str, bootstrap: str, options: list[str]) -> dict[str, Any]:
        out = self._run(command, bootstrap, options)
        if len(out) != 1:
            raise RuntimeError(f"{self.name} {command} printed {len(out)} JSON lines, expected 1: {out!r}")
        return out[0]

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
        argv = [str(ensure_binary()), self.library, command, "--bootstrap", bootstrap]
        argv += go_options(self.security)
        argv += ["--timeout-ms", str(int(client_timeout_s * 1000)), *options]
        result = subprocess.run(
            argv, input=stdin, capture_output=True, text=True, timeout=client_timeout_s + PROCESS_SLACK_S
        )
        lines = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
        if result.returncode == 0:
            return lines
        error = lines[-1] if lines and "error" in lines[-1] else None
        if error is None:
            raise RuntimeError(f"{self.name} {command} exited {result.returncode}:\n{result.stderr[-4000:]}")
        if result.returncode == EXIT_NOT_EXPRESSIBLE:
            raise NotSupportedByClient(error["message"])
        raise ClientError(error.get("kafka_error", "UNKNOWN"), error["error"], error.get("message") or "")
