"""Mutation fuzzing of a real pybroker process with captured and generated requests.

    python -m tools.fuzz_broker --frames 1000000 [--connections 16] [--seed N] [--duration S]
                                [--bootstrap HOST:PORT] [--workdir DIR]

Seeds: the captured client requests of tests/protocol/golden/ (tools/capture_frames.py) plus one
well-formed request per advertised (api, version) built by tests/protocol/protocol_samples.py, so
every API the broker advertises is covered. Each frame is a seed whose topic and group names are
first drawn from a few shared names (``fz-0`` ... — so that concurrent CreateTopics/CreatePartitions/
DeleteTopics/DeleteRecords/config changes from several connections hit the same topics) and whose
counts and timeouts are made small, then mutated at the byte level: bit flips, random bytes,
boundary integers, truncation, extension, insertion/deletion in the middle, a splice of another
seed of the same API, and now and then a wrong size prefix. Each fuzz frame is followed on its
connection by an ApiVersions probe.

Counted and printed at the end (all must be 0; the exit status is 1 otherwise):
- internal errors: responses carrying UNKNOWN_SERVER_ERROR (-1) anywhere, and "internal error" /
  "Traceback" lines in the broker's log (except a Produce partition refused because its compressed
  records do not decompress: Kafka answers UNKNOWN_SERVER_ERROR there too; counted apart),
- undecodable answers,
- hangs: neither an answer nor a close within ``--timeout`` seconds (requests that may legitimately
  wait — Fetch long polls, JoinGroup/SyncGroup rebalances — are counted apart as "held"),
- crashes: the broker process gone (or, with --bootstrap, no longer answering).

Without --bootstrap a broker is started in a temporary directory and stopped afterwards; every
``--janitor-every`` frames topics outside the shared names are deleted so the broker stays small.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import random
import re
import struct
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from compat_tests.brokers import PyBroker, api_versions_probe  # noqa: E402
from pybroker.protocol.api import REQUEST_HEADER, REQUESTS, RESPONSE_HEADER, RESPONSES  # noqa: E402
from pybroker.protocol.codec import (  # noqa: E402
    decode,
    decode_request_header,
    encode,
    request_header_version,
    response_header_version,
)

GOLDEN_DIR = REPO_ROOT / "tests" / "protocol" / "golden"
PRODUCE, API_VERSIONS, FETCH, JOIN_GROUP, SYNC_GROUP, METADATA, DELETE_TOPICS = 0, 18, 1, 11, 14, 3, 20
CONSUMER_GROUP_HEARTBEAT = 68
# Requests a broker may rightly hold for a while (long poll, rebalance): silence is not a hang.
HOLDING_APIS = {FETCH, JOIN_GROUP, SYNC_GROUP, CONSUMER_GROUP_HEARTBEAT}
PROBE_CORRELATION_ID = 0x7E57
FUZZ_CORRELATION_ID = 4242
SHARED_TOPICS = [f"fz-{i}" for i in range(4)]
SHARED_GROUPS = [f"fzg-{i}" for i in range(3)]
SOCKET_REQUEST_MAX_BYTES = 1_048_576
BOUNDARY_INTS = [0, 1, -1, 0x7F, 0x80, 0xFF, 0x7FFF, -0x8000, 0x7FFFFFFF, -0x80000000]
INTERNAL_LOG = re.compile(r"internal error|Traceback")
# The reasons records/streams.py gives when a produced batch's compressed records do not decompress.
_REFUSED_COMPRESSED = re.compile(
    r"decompress|records end before their (stream|frame)|snappy block|records expand beyond", re.I
)
CREATE_TOPICS, CREATE_PARTITIONS = 19, 37
# A mutated count can ask for thousands of partitions: real work (files, fsyncs) that takes
# seconds and would be reported as a hang; such frames are drawn again (the dedicated tests
# cover large creations: tests/test_fuzz_requests.py, tests/integration/test_admin_races.py).
MAX_FUZZED_PARTITIONS = 100


def _load_message_factory() -> type:
    path = REPO_ROOT / "tests" / "protocol" / "protocol_samples.py"
    spec = importlib.util.spec_from_file_location("protocol_samples_for_fuzz_broker", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.MessageFactory


def request_header(api_key: int, version: int, correlation_id: int, client_id: str = "fuzz") -> bytes:
    fields = {
        "request_api_key": api_key,
        "request_api_version": version,
        "correlation_id": correlation_id,
        "client_id": client_id,
    }
    return encode(REQUEST_HEADER, request_header_version(api_key, version), fields)


def sized(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


PROBE = sized(request_header(API_VERSIONS, 0, PROBE_CORRELATION_ID))


@dataclass
class Seed:
    api_key: int
    version: int
    body: dict  # decoded request body, re-randomised (names, counts) for every frame


def declared_range(api_key: int, advertised: tuple[int, int]) -> tuple[int, int]:
    """The advertised versions a request can be built at: Produce v0-2 stay advertised
    (KAFKA-18659) but Kafka 4 removed their definitions, so there is nothing to encode."""
    spec = REQUESTS.get(api_key)
    if spec is None:
        return 1, 0
    return max(advertised[0], spec.valid_versions.low), min(advertised[1], spec.valid_versions.high)


def load_seeds(advertised: dict[int, tuple[int, int]], seed: int) -> list[Seed]:
    seeds: list[Seed] = []
    index = json.loads((GOLDEN_DIR / "index.json").read_text())
    for entry in index["requests"]:
        api_key, version = entry["api_key"], entry["api_version"]
        low, high = declared_range(api_key, advertised.get(api_key, (1, 0)))
        if not low <= version <= high:
            continue
        frame = (GOLDEN_DIR / entry["file"]).read_bytes()
        try:
            body, _ = decode(REQUESTS[api_key], version, frame, decode_request_header(frame).body_offset)
        except Exception:  # noqa: BLE001 - a capture the codec cannot read is no seed
            continue
        seeds.append(Seed(api_key, version, body))
    factory = _load_message_factory()(seed)
    for api_key, advertised_range in sorted(advertised.items()):
        low, high = declared_range(api_key, advertised_range)
        for version in range(low, high + 1):
            seeds.append(Seed(api_key, version, factory.message(REQUESTS[api_key], version)))
    return seeds


# --------------------------------------------------------------------------------------------------
# Mutation

_TOPIC_KEYS = {"name", "topic", "topic_name", "resource_name"}
_GROUP_KEYS = {"group_id", "group", "key"}
_SMALL_COUNTS = {"num_partitions": (-1, 4), "count": (1, 12), "replication_factor": (-1, 1)}
_SHORT_WAITS = {
    "timeout_ms": (0, 200),
    "max_wait_ms": (0, 100),
    "rebalance_timeout_ms": (0, 300),
    "session_timeout_ms": (6000, 10000),
}


def _shape(value: Any, rng: random.Random, in_topics: bool = False) -> Any:
    """Shared topic/group names, small partition counts and short waits, recursively."""
    if isinstance(value, list):
        return [_shape(v, rng, in_topics) for v in value]
    if not isinstance(value, dict):
        return value
    out = {}
    for key, v in value.items():
        if isinstance(v, str) and (key in _TOPIC_KEYS and in_topics or key in ("topic", "topic_name")):
            v = rng.choice(SHARED_TOPICS)
        elif isinstance(v, str) and key in _GROUP_KEYS:
            v = rng.choice(SHARED_GROUPS)
        elif isinstance(v, int) and not isinstance(v, bool) and key in _SMALL_COUNTS:
            v = rng.randint(*_SMALL_COUNTS[key])
        elif isinstance(v, int) and not isinstance(v, bool) and key in _SHORT_WAITS:
            v = rng.randint(*_SHORT_WAITS[key])
        elif isinstance(v, list | dict):
            v = _shape(v, rng, in_topics or "topic" in key or key in ("resources", "creations"))
        out[key] = v
    return out


def _mutate_bytes(data: bytearray, body_offset: int, rng: random.Random, donors: list[bytes]) -> bytearray:
    for _ in range(rng.randint(1, 3)):
        if len(data) <= body_offset:
            data += rng.randbytes(rng.randint(1, 16))
            continue
        kind = rng.random()
        pos = rng.randrange(body_offset, len(data))
        if kind < 0.3:  # bit flips
            data[pos] ^= 1 << rng.randrange(8)
        elif kind < 0.45:  # a random byte
            data[pos] = rng.randrange(256)
        elif kind < 0.6:  # a boundary integer over 2 or 4 bytes
            width = rng.choice((2, 4))
            value = rng.choice(BOUNDARY_INTS)
            packed = struct.pack(">i", value)[-width:] if width == 4 else struct.pack(">h", max(-0x8000, min(0x7FFF, value)))
            data[pos : pos + width] = packed
        elif kind < 0.7:  # truncate
            del data[pos:]
        elif kind < 0.8:  # extend
            data += rng.randbytes(rng.randint(1, 64))
        elif kind < 0.88:  # insert or delete in the middle
            if rng.random() < 0.5:
                data[pos:pos] = rng.randbytes(rng.randint(1, 8))
            else:
                del data[pos : pos + rng.randint(1, 8)]
        elif donors:  # splice a piece of another request of the same api
            donor = rng.choice(donors)
            if len(donor) > body_offset:
                start = rng.randrange(body_offset, len(donor))
                piece = donor[start : start + rng.randint(1, 32)]
                data[pos : pos + rng.randint(0, len(piece))] = piece
    return data


def creates_many_partitions(api_key: int, version: int, payload: bytes) -> bool:
    if api_key not in (CREATE_TOPICS, CREATE_PARTITIONS):
        return False
    try:
        body, _ = decode(REQUESTS[api_key], version, payload, decode_request_header(payload).body_offset)
    except Exception:  # noqa: BLE001 - undecodable: the broker closes the connection
        return False
    if api_key == CREATE_TOPICS:
        return any(
            max(t["num_partitions"], len(t["assignments"] or ())) > MAX_FUZZED_PARTITIONS for t in body["topics"]
        )
    return any(t["count"] > MAX_FUZZED_PARTITIONS for t in body["topics"])


def make_frame(seed: Seed, rng: random.Random, donors: list[bytes]) -> tuple[bytes, bool]:
    """The frame to send, and whether its size prefix lies (then the broker may rightly wait for
    bytes that never come: the sender half-closes after it)."""
    while True:
        frame, lying = _make_frame(seed, rng, donors)
        if not creates_many_partitions(seed.api_key, seed.version, frame[4:]):
            return frame, lying


def _make_frame(seed: Seed, rng: random.Random, donors: list[bytes]) -> tuple[bytes, bool]:
    header = request_header(seed.api_key, seed.version, FUZZ_CORRELATION_ID)
    try:
        body = encode(REQUESTS[seed.api_key], seed.version, _shape(seed.body, rng))
    except Exception:  # noqa: BLE001 - a reshaped value the version cannot carry: keep the original
        body = encode(REQUESTS[seed.api_key], seed.version, seed.body)
    payload = bytearray(header + body)
    if rng.random() < 0.85:  # the rest go through well-formed, to reach deep into the handlers
        payload = _mutate_bytes(payload, len(header), rng, donors)
    if rng.random() < 0.02:  # a size prefix that lies
        return struct.pack(">i", len(payload) + rng.choice((-3, -1, 1, 7))) + bytes(payload), True
    return sized(bytes(payload)), False


# --------------------------------------------------------------------------------------------------
# Running


@dataclass
class Results:
    frames: int = 0
    outcomes: Counter = field(default_factory=Counter)
    unknown_server_errors: list[str] = field(default_factory=list)
    undecodable: list[str] = field(default_factory=list)
    hangs: list[str] = field(default_factory=list)
    internal_log_lines: list[str] = field(default_factory=list)
    crashes: int = 0

    @property
    def failures(self) -> int:
        return (
            len(self.unknown_server_errors)
            + len(self.undecodable)
            + len(self.hangs)
            + len(self.internal_log_lines)
            + self.crashes
        )

    def summary(self) -> str:
        lines = [
            f"frames sent: {self.frames}",
            "outcomes: " + ", ".join(f"{k}={v}" for k, v in sorted(self.outcomes.items())),
            f"UNKNOWN_SERVER_ERROR responses: {len(self.unknown_server_errors)}",
            f"'internal error'/Traceback log lines: {len(self.internal_log_lines)}",
            f"undecodable answers: {len(self.undecodable)}",
            f"hangs: {len(self.hangs)}",
            f"crashes: {self.crashes}",
        ]
        for title, items in (
            ("UNKNOWN_SERVER_ERROR", self.unknown_server_errors),
            ("log", self.internal_log_lines),
            ("undecodable", self.undecodable),
            ("hang", self.hangs),
        ):
            for item in items[:5]:
                lines.append(f"  {title}: {item[:600]}")
        return "\n".join(lines)


def _kafka_refused_compressed_batch(api_key: int, body: dict) -> bool:
    """Kafka itself answers UNKNOWN_SERVER_ERROR for a produced batch whose compressed records
    cannot be decompressed (its decompressing iterator throws a KafkaException), and pybroker
    matches it (apis/produce.py): such partition answers carry the reason and are not internal
    errors.  True when every UNKNOWN_SERVER_ERROR of a Produce answer is one of those."""
    if api_key != PRODUCE:
        return False
    refused = [
        p
        for t in body.get("responses") or []
        for p in t.get("partition_responses") or []
        if p.get("error_code") == -1
    ]
    return bool(refused) and all(
        _REFUSED_COMPRESSED.search(p.get("error_message") or "") for p in refused
    )


def _has_unknown_server_error(value: Any) -> bool:
    if isinstance(value, dict):
        return any(
            (k == "error_code" and v == -1) or _has_unknown_server_error(v) for k, v in value.items()
        )
    if isinstance(value, list):
        return any(_has_unknown_server_error(v) for v in value)
    return False


def _decode_answer(api_key: int, version: int, frame: bytes) -> dict | None:
    versions = [version] + ([0] if api_key == API_VERSIONS else [])  # KIP-511's v0 fallback
    for v in versions:
        try:
            _, offset = decode(RESPONSE_HEADER, response_header_version(api_key, v), frame)
            body, end = decode(RESPONSES[api_key], v, frame, offset)
        except Exception:  # noqa: BLE001
            continue
        if end == len(frame):
            return body
    return None


class Connection:
    def __init__(self, port: int) -> None:
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    return await reader.readexactly(size)


async def exchange(
    conn: Connection, frame: bytes, lying: bool, seed: Seed, timeout_s: float, results: Results
) -> None:
    what = f"api {seed.api_key} v{seed.version}: {frame.hex()}"
    try:
        async with asyncio.timeout(timeout_s):  # connecting and writing included: never wait forever
            if conn.writer is None:
                await conn.open()
            assert conn.reader is not None and conn.writer is not None
            conn.writer.write(frame + PROBE)
            if lying:
                conn.writer.write_eof()  # whatever the broker waits for will not come: it must close
            await conn.writer.drain()
            while True:
                answer = await _read_frame(conn.reader)
                (correlation_id,) = struct.unpack_from(">i", answer, 0)
                if correlation_id == PROBE_CORRELATION_ID:
                    results.outcomes["answered"] += 1
                    if lying:
                        conn.close()
                    return
                if correlation_id != FUZZ_CORRELATION_ID:
                    results.undecodable.append(f"unexpected correlation id {correlation_id} after {what}")
                    conn.close()
                    return
                body = _decode_answer(seed.api_key, seed.version, answer)
                if body is None:
                    results.undecodable.append(f"{answer[:64].hex()} answering {what}")
                elif _has_unknown_server_error(body):
                    if _kafka_refused_compressed_batch(seed.api_key, body):
                        results.outcomes["refused-compressed-batch"] += 1
                    else:
                        results.unknown_server_errors.append(f"{body} answering {what}")
    except (asyncio.IncompleteReadError, ConnectionError):
        results.outcomes["closed"] += 1
        conn.close()
    except TimeoutError:
        if seed.api_key in HOLDING_APIS:
            results.outcomes["held"] += 1
        else:
            results.hangs.append(what)
        conn.close()


async def janitor(port: int) -> None:
    """Delete every topic outside the shared names (and internal ones), so the broker stays small."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(sized(request_header(METADATA, 12, 1) + encode(REQUESTS[METADATA], 12, {"topics": None})))
        await writer.drain()
        frame = await _read_frame(reader)
        body, _ = decode(RESPONSES[METADATA], 12, frame, 5)
        extra = [
            t["name"]
            for t in body["topics"]
            if t["name"] and t["name"] not in SHARED_TOPICS and not t["name"].startswith("__")
        ]
        if extra:
            request = {"topic_names": extra, "timeout_ms": 30000}
            writer.write(sized(request_header(DELETE_TOPICS, 5, 2) + encode(REQUESTS[DELETE_TOPICS], 5, request)))
            await writer.drain()
            await _read_frame(reader)
    finally:
        writer.close()


async def fuzz(
    port: int,
    frames: int,
    connections: int,
    seed: int,
    timeout_s: float,
    janitor_every: int,
    alive,
    progress_every: int = 0,
    duration_s: float | None = None,
) -> Results:
    error_code, advertised = api_versions_probe("127.0.0.1", port)
    assert error_code == 0 and advertised
    seeds = load_seeds(advertised, seed)
    donors: dict[int, list[bytes]] = {}
    for s in seeds:
        header = request_header(s.api_key, s.version, FUZZ_CORRELATION_ID)
        try:
            donors.setdefault(s.api_key, []).append(header + encode(REQUESTS[s.api_key], s.version, s.body))
        except Exception:  # noqa: BLE001
            pass
    results = Results()
    counter = iter(range(frames))
    started = time.monotonic()
    deadline = started + duration_s if duration_s else None

    async def worker(index: int) -> None:
        rng = random.Random(seed * 1000 + index)
        conn = Connection(port)
        try:
            for n in counter:
                if not alive() or (deadline is not None and time.monotonic() > deadline):
                    return
                s = rng.choice(seeds)
                frame, lying = make_frame(s, rng, donors.get(s.api_key, []))
                results.frames += 1
                await exchange(conn, frame, lying, s, timeout_s, results)
                if janitor_every and n and n % janitor_every == 0:
                    try:
                        await asyncio.wait_for(janitor(port), timeout_s * 6)
                    except (TimeoutError, OSError, asyncio.IncompleteReadError) as e:
                        results.hangs.append(f"janitor (Metadata + DeleteTopics) got no answer: {e!r}")
                if progress_every and n and n % progress_every == 0:
                    rate = n / (time.monotonic() - started)
                    print(f"{n} frames ({rate:.0f}/s): {dict(results.outcomes)}", flush=True)
        finally:
            conn.close()

    await asyncio.gather(*(worker(i) for i in range(connections)))
    return results


def run(
    frames: int,
    *,
    connections: int = 16,
    seed: int = 20261123,
    timeout_s: float = 5.0,
    janitor_every: int = 2000,
    bootstrap: str | None = None,
    workdir: Path | None = None,
    progress_every: int = 0,
    duration_s: float | None = None,
) -> Results:
    """Fuzz ``frames`` frames (or stop after ``duration_s`` seconds, whichever comes first)."""
    broker: PyBroker | None = None
    tmp: tempfile.TemporaryDirectory | None = None
    if bootstrap is None:
        if workdir is None:
            tmp = tempfile.TemporaryDirectory(prefix="fuzz-broker-")
            workdir = Path(tmp.name)
        broker = PyBroker(
            workdir,
            overrides={
                "socket.request.max.bytes": str(SOCKET_REQUEST_MAX_BYTES),
                "group.initial.rebalance.delay.ms": "0",
                "log.segment.delete.delay.ms": "1000",
            },
        )
        broker.start()
        port = broker.port
    else:
        port = int(bootstrap.rpartition(":")[2])

    def alive() -> bool:
        return broker is None or broker.process is None or broker.process.poll() is None

    try:
        results = asyncio.run(
            fuzz(port, frames, connections, seed, timeout_s, janitor_every, alive, progress_every, duration_s)
        )
        if broker is not None:
            if not alive():
                results.crashes += 1
            else:
                try:
                    api_versions_probe("127.0.0.1", port, timeout_s=10)
                except OSError:
                    results.crashes += 1
            results.internal_log_lines = [
                line for line in broker.log_text().splitlines() if INTERNAL_LOG.search(line)
            ]
        else:
            try:
                api_versions_probe("127.0.0.1", port, timeout_s=10)
            except OSError:
                results.crashes += 1
        return results
    finally:
        if broker is not None:
            broker.stop()
        if tmp is not None:
            tmp.cleanup()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=int, default=100_000)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--seed", type=int, default=20261123)
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds before silence is a hang")
    parser.add_argument("--janitor-every", type=int, default=2000)
    parser.add_argument("--bootstrap", help="fuzz a running broker instead of starting one")
    parser.add_argument("--workdir", type=Path, help="where the started broker keeps data and its log")
    parser.add_argument("--progress-every", type=int, default=10_000)
    parser.add_argument("--duration", type=float, help="stop sending after this many seconds")
    args = parser.parse_args(argv)
    started = time.monotonic()
    results = run(
        args.frames,
        connections=args.connections,
        seed=args.seed,
        timeout_s=args.timeout,
        janitor_every=args.janitor_every,
        bootstrap=args.bootstrap,
        workdir=args.workdir,
        progress_every=args.progress_every,
        duration_s=args.duration,
    )
    print(results.summary())
    print(f"wall time: {time.monotonic() - started:.0f} s")
    return 1 if results.failures else 0


if __name__ == "__main__":
    sys.exit(main())
