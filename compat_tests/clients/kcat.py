"""kcat (the Debian ``kcat`` binary, librdkafka underneath) adapter.

kcat reads records from stdin split by delimiters, so what it can express is limited:
- no per-record timestamps (the producer always stamps "now");
- headers come from ``-H`` on the command line, so they apply to every record of one invocation and
  cannot contain NUL bytes; ``-H name`` (no ``=``) is a header with a NULL value;
- ``-Z`` turns an empty key/value into NULL, so one invocation cannot mix empty and NULL;
- an entirely empty input record (no key delimiter, empty value) is skipped by kcat.
Records that need more raise ``NotSupportedByClient``.  Delivery offsets come from kcat's own
delivery-report lines (``-v -v``); kcat does not report the broker's timestamp (Delivery.timestamp_ms = -1).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import uuid

from .base import (
    Acks,
    ClientError,
    Compression,
    ConsumedRecord,
    Delivery,
    NotSupportedByClient,
    Record,
    Start,
)
from .security import ClientSecurity, librdkafka_config

TIMEOUT_S = 60.0
_DELIVERED = re.compile(rb"Message delivered to partition (-?\d+) \(offset (-?\d+)\)")
_FAILED = re.compile(rb"Delivery failed for message: (.*)")
# librdkafka's error strings for the broker errors the scenarios look for.
_ERROR_TEXTS = {
    b"Broker: Message size too large": "MESSAGE_TOO_LARGE",
    b"Broker: Unknown topic or partition": "UNKNOWN_TOPIC_OR_PARTITION",
    b"Broker: Invalid topic": "INVALID_TOPIC_EXCEPTION",
    b"Local: Unknown topic": "UNKNOWN_TOPIC_OR_PARTITION",
    b"Local: Unknown partition": "UNKNOWN_TOPIC_OR_PARTITION",
}


def kcat_binary() -> str:
    path = shutil.which("kcat") or shutil.which("kafkacat")
    if path is None:
        raise RuntimeError("kcat is not installed (Debian: apt-get install kcat)")
    return path


def _error_from_stderr(stderr: bytes, default: str = "UNKNOWN") -> ClientError:
    for text, name in _ERROR_TEXTS.items():
        if text in stderr:
            return ClientError(name, "kcat", stderr.decode(errors="replace")[-500:])
    return ClientError(default, "kcat", stderr.decode(errors="replace")[-500:])


class KcatClient:
    name = "kcat"
    security: ClientSecurity | None = None  # set by a scenario for a secured listener

    def _security_args(self) -> list[str]:
        return [
            arg
            for name, value in librdkafka_config(self.security).items()
            for arg in ("-X", f"{name}={value}")
        ]

    # ---- producer ----------------------------------------------------------------------
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
        for record in records:
            self._check_expressible(record)
        deliveries: list[Delivery] = []
        for group in _invocation_groups(records):
            deliveries += self._produce_group(bootstrap, topic, group, compression, idempotent, acks)
        return deliveries

    @staticmethod
    def _check_expressible(record: Record) -> None:
        if record.timestamp_ms is not None:
            raise NotSupportedByClient("kcat cannot set a record timestamp")
        for name, value in record.headers:
            if "=" in name or "\0" in name or (value is not None and b"\0" in value):
                raise NotSupportedByClient(
                    "kcat -H cannot carry '=' in a header name or NUL bytes (argv strings)"
                )
        if record.key == b"" and record.value is None or record.key is None and record.value == b"":
            raise NotSupportedByClient(
                "kcat -Z makes every empty field NULL; empty and NULL cannot be mixed in one record"
            )

    def _produce_group(
        self,
        bootstrap: str,
        topic: str,
        records: list[Record],
        compression: Compression,
        idempotent: bool,
        acks: Acks,
    ) -> list[Delivery]:
        use_null = any(r.key is None or r.value is None for r in records)
        if use_null and any(r.key == b"" or r.value == b"" for r in records):
            raise NotSupportedByClient("kcat -Z cannot mix empty and NULL keys/values in one invocation")
        key_delim, msg_delim = _delimiters(records)
        args: list[str | bytes] = [
            kcat_binary(),
            "-b", bootstrap, *self._security_args(), "-t", topic, "-P", "-v", "-v",
            "-K", _escape(key_delim), "-D", _escape(msg_delim),
            "-X", f"compression.codec={compression}",
            "-X", f"acks={'-1' if acks == 'all' else acks}",
            "-X", f"enable.idempotence={'true' if idempotent else 'false'}",
            "-X", "message.max.bytes=10000000",
            "-X", "linger.ms=5",
        ]  # fmt: skip
        if use_null:
            args.append("-Z")
        if records[0].partition is not None:
            args += ["-p", str(records[0].partition)]
        for name, value in records[0].headers:
            # argv entries are bytes here: a header value may be any non-NUL bytes.
            args += [b"-H", name.encode() if value is None else name.encode() + b"=" + value]
        payload = b"".join((r.key or b"") + key_delim + (r.value or b"") + msg_delim for r in records)
        proc = subprocess.run(args, input=payload, capture_output=True, timeout=TIMEOUT_S)
        failed = _FAILED.search(proc.stderr)
        if failed or proc.returncode != 0:
            raise _error_from_stderr(proc.stderr)
        # kcat produces in input order from one thread and librdkafka reports deliveries of one
        # partition in order, so the reports line up with the input.
        reported = [Delivery(int(p), int(o), -1) for p, o in _DELIVERED.findall(proc.stderr)]
        if len(reported) != len(records):
            raise ClientError(
                "UNKNOWN",
                "kcat",
                f"{len(reported)} delivery reports for {len(records)} records: {proc.stderr[-500:]!r}",
            )
        return reported

    # ---- consumer ----------------------------------------------------------------------
    def consume(
        self, bootstrap: str, topic: str, partition: int, *, start: Start, count: int, timeout_s: float = 30.0
    ) -> list[ConsumedRecord]:
        offset = "beginning" if start == "beginning" else "end" if start == "end" else str(start)
        args = [
            kcat_binary(), "-b", bootstrap, *self._security_args(), "-t", topic, "-p", str(partition), "-C", "-J",
            "-o", offset, "-c", str(count), "-q", "-u",
            "-X", "allow.auto.create.topics=false",
            "-X", "isolation.level=read_uncommitted",
        ]  # fmt: skip
        try:
            proc = subprocess.run(args, capture_output=True, timeout=timeout_s)
            stdout, stderr = proc.stdout, proc.stderr
        except subprocess.TimeoutExpired as exc:
            stdout, stderr = exc.stdout or b"", exc.stderr or b""
        if b"Unknown topic or partition" in stderr or b"Unknown partition" in stderr:
            raise _error_from_stderr(stderr)
        # On timeout kcat is killed: only newline-terminated lines are complete records.
        complete = stdout[: stdout.rfind(b"\n") + 1]
        return [_parse_json_record(line) for line in complete.split(b"\n") if line.strip()]

    def offset_for_time(self, bootstrap: str, topic: str, partition: int, timestamp_ms: int) -> int | None:
        args = [
            kcat_binary(),
            "-b",
            bootstrap,
            *self._security_args(),
            "-Q",
            "-t",
            f"{topic}:{partition}:{timestamp_ms}",
        ]
        proc = subprocess.run(args, capture_output=True, timeout=TIMEOUT_S)
        if proc.returncode != 0:
            raise _error_from_stderr(proc.stderr)
        match = re.search(rb"offset (-?\d+)", proc.stdout)
        if match is None:
            raise ClientError("UNKNOWN", "kcat -Q", proc.stdout.decode(errors="replace"))
        offset = int(match.group(1))
        return None if offset < 0 else offset

    # ---- admin: kcat has none ------------------------------------------------------------
    def _no_admin(self, *_args: object, **_kwargs: object) -> None:
        raise NotSupportedByClient("kcat has no admin operations")

    create_topic = delete_topic = describe_configs = alter_configs = _no_admin
    create_partitions = list_offsets = delete_records = describe_topic = _no_admin


def _invocation_groups(records: list[Record]) -> list[list[Record]]:
    """Consecutive records that share headers and partition go into one kcat run."""
    groups: list[list[Record]] = []
    for record in records:
        if groups and groups[-1][0].headers == record.headers and groups[-1][0].partition == record.partition:
            groups[-1].append(record)
        else:
            groups.append([record])
    return groups


def _delimiters(records: list[Record]) -> tuple[bytes, bytes]:
    """Delimiters that occur in no key or value (kcat splits on the first occurrence)."""
    while True:
        token = uuid.uuid4().hex[:12].encode()
        key_delim, msg_delim = b"|K" + token + b"|", b"|M" + token + b"|"
        if not any(
            d in (r.key or b"") or d in (r.value or b"") for r in records for d in (key_delim, msg_delim)
        ):
            return key_delim, msg_delim


def _escape(delim: bytes) -> str:
    return delim.decode("ascii")


def _json_bytes(value: str | None) -> bytes | None:
    # kcat writes key/payload bytes raw into the JSON string (yajl escapes only control characters),
    # so the line was decoded with surrogateescape and every byte maps back.
    return None if value is None else value.encode("utf-8", "surrogateescape")


def _parse_json_record(line: bytes) -> ConsumedRecord:
    doc = json.loads(line.decode("utf-8", "surrogateescape"))
    flat = doc.get("headers") or []
    headers = tuple((flat[i], _json_bytes(flat[i + 1])) for i in range(0, len(flat), 2))
    return ConsumedRecord(
        topic=doc["topic"],
        partition=doc["partition"],
        offset=doc["offset"],
        timestamp_ms=doc.get("ts", -1),
        timestamp_type="LogAppendTime" if doc.get("tstype") == "logappend" else "CreateTime",
        key=_json_bytes(doc["key"]),
        value=_json_bytes(doc["payload"]),
        headers=headers,
    )
