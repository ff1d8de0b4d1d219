"""A recording Kafka proxy, and the command that captures the golden frames of tests/protocol/golden/.

The proxy sits between a client and one broker and keeps every request and response frame (the raw
bytes after the int32 size prefix) with the api key, version and correlation id of its request header.
Clients must keep talking through the proxy after bootstrap, so the broker addresses that Metadata,
DescribeCluster and FindCoordinator responses announce are rewritten to the proxy's own address
(decode with pybroker's codec, change host/port, re-encode); every other frame passes through as is.

Commands::

    # record any client against any broker; frames land in OUT/ with an index.jsonl
    python tools/capture_frames.py proxy --upstream 127.0.0.1:9092 --listen-port 19092 --out OUT

    # start a pybroker, run every stock client through the proxy, rewrite tests/protocol/golden/
    python tools/capture_frames.py golden [--out tests/protocol/golden] [--clients kafka-python,kcat,...]

The golden directory holds one request frame per (client, api key, version) as
``<client>/<ApiName>-v<version>.bin`` (the first one the client sent), a few pybroker responses to
kafka-python as ``kafka-python/responses/<ApiName>-v<version>.bin``, and ``index.json`` describing them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from pybroker.protocol.api import API_NAMES, RESPONSE_HEADER, RESPONSES  # noqa: E402
from pybroker.protocol.codec import (  # noqa: E402
    decode,
    encode,
    response_header_version,
)

log = logging.getLogger("capture_frames")

_SIZE = struct.Struct(">i")
METADATA, FIND_COORDINATOR, DESCRIBE_CLUSTER = 3, 10, 60
# Responses that tell a client where brokers are: rewritten so the client stays on the proxy.
ADDRESS_BEARING = {METADATA, FIND_COORDINATOR, DESCRIBE_CLUSTER}


@dataclass(frozen=True)
class Frame:
    """One frame as it crossed the proxy (``data`` excludes the int32 size prefix)."""

    label: str  # which client (set by the capture driver before it runs that client)
    connection: int
    direction: str  # "request" or "response"
    api_key: int
    api_version: int
    correlation_id: int
    data: bytes
    rewritten: bool = False  # a response whose broker address the proxy changed


@dataclass
class FrameLog:
    """Frames in arrival order; optionally also written to ``out_dir`` as they arrive."""

    out_dir: Path | None = None
    frames: list[Frame] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, frame: Frame) -> None:
        with self.lock:
            self.frames.append(frame)
            seq = len(self.frames)
        if self.out_dir is None:
            return
        name = (
            f"{seq:06d}-c{frame.connection}-{frame.direction}-{API_NAMES.get(frame.api_key, frame.api_key)}"
            f"-v{frame.api_version}-corr{frame.correlation_id}.bin"
        )
        (self.out_dir / name).write_bytes(frame.data)
        entry = {
            "file": name,
            "label": frame.label,
            "connection": frame.connection,
            "direction": frame.direction,
            "api_key": frame.api_key,
            "api_version": frame.api_version,
            "correlation_id": frame.correlation_id,
            "rewritten": frame.rewritten,
        }
        with open(self.out_dir / "index.jsonl", "a") as index:
            index.write(json.dumps(entry) + "\n")


def rewrite_broker_addresses(api_key: int, version: int, body: dict, host: str, port: int) -> bool:
    """Point every broker address in an address-bearing response at ``host:port``; True if changed."""
    nodes: list[dict] = []
    if api_key in (METADATA, DESCRIBE_CLUSTER):
        nodes = list(body.get("brokers") or [])
    elif api_key == FIND_COORDINATOR:
        nodes = list(body.get("coordinators") or []) if version >= 4 else [body]
    changed = False
    for node in nodes:
        if node.get("host") is None:
            continue  # FindCoordinator error answers carry no address worth keeping
        if (node["host"], node["port"]) != (host, port):
            node["host"], node["port"] = host, port
            changed = True
    return changed


async def _read_frame(reader: asyncio.StreamReader) -> bytes | None:
    try:
        prefix = await reader.readexactly(4)
        (size,) = _SIZE.unpack(prefix)
        return await reader.readexactly(size)
    except asyncio.IncompleteReadError:
        return None


class RecordingProxy:
    """An asyncio TCP proxy to one upstream broker, recording frames into ``frame_log``.

    Run it in its own thread with ``start_in_thread()`` so blocking clients can use it from the caller's
    thread. ``label`` is stamped on the frames of connections accepted while it is set.
    """

    def __init__(self, upstream: tuple[str, int], frame_log: FrameLog, listen_port: int = 0) -> None:
        self.upstream = upstream
        self.frame_log = frame_log
        self.host = "127.0.0.1"
        self.port = listen_port
        self.label = "unlabelled"
        self._connections = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve_client, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    def start_in_thread(self, timeout_s: float = 10) -> str:
        ready = threading.Event()

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            self._loop.run_until_complete(self.start())
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="capture-proxy", daemon=True)
        self._thread.start()
        if not ready.wait(timeout_s):
            raise RuntimeError("proxy did not start")
        return self.bootstrap

    def stop(self) -> None:
        if self._loop is None or self._server is None:
            return
        server, loop = self._server, self._loop

        async def close() -> None:
            server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(close(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(10)

    async def _serve_client(
        self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter
    ) -> None:
        self._connections += 1
        connection, label = self._connections, self.label
        try:
            broker_reader, broker_writer = await asyncio.open_connection(*self.upstream)
        except OSError as exc:
            log.warning("connection %d: upstream %s unreachable: %s", connection, self.upstream, exc)
            client_writer.close()
            return
        # correlation id -> (api key, version) of requests still waiting for their response
        in_flight: dict[int, tuple[int, int]] = {}
        tasks = [
            asyncio.ensure_future(
                self._pump_requests(label, connection, client_reader, broker_writer, in_flight)
            ),
            asyncio.ensure_future(
                self._pump_responses(label, connection, broker_reader, client_writer, in_flight)
            ),
        ]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            for writer in (client_writer, broker_writer):
                writer.close()

    async def _pump_requests(
        self,
        label: str,
        connection: int,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        in_flight: dict[int, tuple[int, int]],
    ) -> None:
        while (frame := await _read_frame(reader)) is not None:
            api_key, api_version, correlation_id = struct.unpack_from(">hhi", frame, 0)
            in_flight[correlation_id] = (api_key, api_version)
            self.frame_log.add(
                Frame(label, connection, "request", api_key, api_version, correlation_id, frame)
            )
            writer.write(_SIZE.pack(len(frame)) + frame)
            await writer.drain()

    async def _pump_responses(
        self,
        label: str,
        connection: int,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        in_flight: dict[int, tuple[int, int]],
    ) -> None:
        while (frame := await _read_frame(reader)) is not None:
            (correlation_id,) = struct.unpack_from(">i", frame, 0)
            api_key, api_version = in_flight.pop(correlation_id, (-1, -1))
            self.frame_log.add(
                Frame(label, connection, "response", api_key, api_version, correlation_id, frame)
            )
            if api_key in ADDRESS_BEARING:
                frame = self._rewrite(label, connection, api_key, api_version, correlation_id, frame)
            writer.write(_SIZE.pack(len(frame)) + frame)
            await writer.drain()

    def _rewrite(
        self, label: str, connection: int, api_key: int, api_version: int, correlation_id: int, frame: bytes
    ) -> bytes:
        header_version = response_header_version(api_key, api_version)
        _, body_offset = decode(RESPONSE_HEADER, header_version, frame)
        spec = RESPONSES[api_key]
        body, end = decode(spec, api_version, frame, body_offset)
        if end != len(frame):
            log.warning("%s response v%d has %d trailing bytes", spec.name, api_version, len(frame) - end)
        if not rewrite_broker_addresses(api_key, api_version, body, self.host, self.port):
            return frame
        rewritten = frame[:body_offset] + encode(spec, api_version, body)
        self.frame_log.add(
            Frame(
                label, connection, "response", api_key, api_version, correlation_id, rewritten, rewritten=True
            )
        )
        return rewritten


# --------------------------------------------------------------------------------------------------
# Capturing the golden frames: each stock client, through the proxy, against a fresh pybroker.

RECORDS_PER_RUN = 5


def _records() -> list:
    from compat_tests.clients.base import Record

    return [
        Record(key=f"k{i}".encode(), value=f"golden value {i}".encode(), headers=(("h", b"v"),))
        for i in range(RECORDS_PER_RUN)
    ]


def _attempt(client, what: str, operation: Callable[[], object]) -> None:  # noqa: ANN001
    """Run an operation whose frames are wanted even if pybroker answers it with an error."""
    try:
        operation()
    except Exception as exc:  # noqa: BLE001 - the request frames are captured either way
        log.warning("%s: %s failed: %r", client.name, what, exc)


def _admin_round(client, bootstrap: str, topic: str) -> None:  # noqa: ANN001
    client.create_topic(bootstrap, topic, partitions=2)
    client.describe_topic(bootstrap, topic)
    _attempt(client, "create_partitions", lambda: client.create_partitions(bootstrap, topic, 3))
    _attempt(
        client, "alter_configs", lambda: client.alter_configs(bootstrap, topic, {"retention.ms": "3600000"})
    )
    _attempt(client, "describe_configs", lambda: client.describe_configs(bootstrap, topic))
    client.delete_topic(bootstrap, topic)


def _offsets_round(client, bootstrap: str, topic: str) -> None:  # noqa: ANN001
    for spec in ("earliest", "latest", "max-timestamp"):
        _attempt(
            client, f"list_offsets {spec}", lambda spec=spec: client.list_offsets(bootstrap, topic, 0, spec)
        )
    _attempt(client, "delete_records", lambda: client.delete_records(bootstrap, topic, 0, 1))


def _data_round(client, bootstrap: str, topic: str, *, idempotent: bool) -> None:  # noqa: ANN001
    deliveries = client.produce(bootstrap, topic, _records(), idempotent=idempotent)
    if len(deliveries) != RECORDS_PER_RUN:
        raise RuntimeError(f"{client.name}: {len(deliveries)} deliveries for {RECORDS_PER_RUN} records")
    consumed = client.consume(bootstrap, topic, 0, start=1, count=RECORDS_PER_RUN - 1, timeout_s=20)
    if len(consumed) != RECORDS_PER_RUN - 1:
        raise RuntimeError(f"{client.name}: consumed {len(consumed)} of {RECORDS_PER_RUN - 1} records")


def run_kafka_python(bootstrap: str, setup: Callable[[str], None]) -> None:
    from compat_tests.clients.kafka_python import KafkaPythonClient

    client = KafkaPythonClient()
    topic = "golden-kafka-python"
    setup(topic)
    _data_round(client, bootstrap, topic, idempotent=True)
    client.offset_for_time(bootstrap, topic, 0, int(time.time() * 1000) - 60_000)
    _offsets_round(client, bootstrap, topic)
    _admin_round(client, bootstrap, "golden-kafka-python-admin")


def run_confluent(bootstrap: str, setup: Callable[[str], None]) -> None:
    from compat_tests.clients.confluent import ConfluentClient

    client = ConfluentClient()
    topic = "golden-confluent"
    setup(topic)
    _data_round(client, bootstrap, topic, idempotent=True)
    _offsets_round(client, bootstrap, topic)
    _admin_round(client, bootstrap, "golden-confluent-admin")


def run_aiokafka(bootstrap: str, setup: Callable[[str], None]) -> None:
    from compat_tests.clients.aiokafka_client import AiokafkaClient

    client = AiokafkaClient()
    topic = "golden-aiokafka"
    setup(topic)
    _data_round(client, bootstrap, topic, idempotent=True)
    _offsets_round(client, bootstrap, topic)
    _admin_round(client, bootstrap, "golden-aiokafka-admin")


def run_kcat(bootstrap: str, setup: Callable[[str], None]) -> None:
    from compat_tests.clients.kcat import KcatClient, kcat_binary

    client = KcatClient()
    topic = "golden-kcat"
    setup(topic)
    client.produce(bootstrap, topic, _records())
    # -C -e: consume from the beginning and exit at the end of the partition.
    proc = subprocess.run(
        [kcat_binary(), "-b", bootstrap, "-t", topic, "-C", "-e", "-q", "-o", "beginning"],
        capture_output=True,
        timeout=30,
    )
    if proc.returncode != 0 or proc.stdout.count(b"\n") != RECORDS_PER_RUN:
        raise RuntimeError(f"kcat -C -e failed ({proc.returncode}): {proc.stderr[-500:]!r}")


def run_java(bootstrap: str, setup: Callable[[str], None]) -> None:
    from compat_tests.clients.java import JavaClient

    client = JavaClient()
    topic = "golden-java"
    setup(topic)
    _data_round(client, bootstrap, topic, idempotent=True)
    client.describe_cluster(bootstrap)
    _offsets_round(client, bootstrap, topic)
    _admin_round(client, bootstrap, "golden-java-admin")


RUNNERS: dict[str, Callable[[str, Callable[[str], None]], None]] = {
    "kafka-python": run_kafka_python,
    "confluent": run_confluent,
    "aiokafka": run_aiokafka,
    "kcat": run_kcat,
    "java": run_java,
}
# Responses worth keeping as fixtures for decoding with kafka-python's own protocol classes.
RESPONSE_FIXTURE_CLIENT = "kafka-python"


def select_golden(
    frames: list[Frame],
) -> tuple[dict[tuple[str, int, int], Frame], dict[tuple[int, int], Frame]]:
    """The first request per (client, api key, version), and the first pybroker response (as the broker
    sent it, before any rewrite) per (api key, version) seen by RESPONSE_FIXTURE_CLIENT."""
    requests: dict[tuple[str, int, int], Frame] = {}
    responses: dict[tuple[int, int], Frame] = {}
    for frame in frames:
        if frame.direction == "request":
            requests.setdefault((frame.label, frame.api_key, frame.api_version), frame)
        elif frame.label == RESPONSE_FIXTURE_CLIENT and not frame.rewritten and frame.api_key >= 0:
            responses.setdefault((frame.api_key, frame.api_version), frame)
    return requests, responses


def _golden_name(api_key: int, api_version: int) -> str:
    return f"{API_NAMES.get(api_key, f'api{api_key}')}-v{api_version}.bin"


def write_golden(
    out: Path,
    requests: dict[tuple[str, int, int], Frame],
    responses: dict[tuple[int, int], Frame],
    tools: dict,
) -> dict:
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    index: dict = {
        "format": "each .bin is one frame exactly as it crossed the wire, without its int32 size prefix",
        "clients": tools,
        "requests": [],
        "responses": [],
    }
    for (label, api_key, api_version), frame in sorted(requests.items()):
        path = Path(label) / _golden_name(api_key, api_version)
        (out / path).parent.mkdir(parents=True, exist_ok=True)
        (out / path).write_bytes(frame.data)
        index["requests"].append(
            {
                "file": str(path),
                "client": label,
                "api_key": api_key,
                "api_name": API_NAMES.get(api_key),
                "api_version": api_version,
                "correlation_id": frame.correlation_id,
                "size": len(frame.data),
            }
        )
    for (api_key, api_version), frame in sorted(responses.items()):
        path = Path(RESPONSE_FIXTURE_CLIENT) / "responses" / _golden_name(api_key, api_version)
        (out / path).parent.mkdir(parents=True, exist_ok=True)
        (out / path).write_bytes(frame.data)
        index["responses"].append(
            {
                "file": str(path),
                "client": RESPONSE_FIXTURE_CLIENT,
                "api_key": api_key,
                "api_name": API_NAMES.get(api_key),
                "api_version": api_version,
                "correlation_id": frame.correlation_id,
                "size": len(frame.data),
            }
        )
    (out / "index.json").write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")
    return index


def _client_versions() -> dict[str, str]:
    from importlib.metadata import version

    versions = {}
    for label, dist in (
        ("kafka-python", "kafka-python"),
        ("confluent", "confluent-kafka"),
        ("aiokafka", "aiokafka"),
    ):
        try:
            versions[label] = version(dist)
        except Exception:  # noqa: BLE001 - a missing library is just not listed
            pass
    try:
        import confluent_kafka

        versions["librdkafka"] = confluent_kafka.libversion()[0]
    except ImportError:
        pass
    try:
        out = subprocess.run(["kcat", "-V"], capture_output=True, timeout=10).stdout.decode()
        line = next((line for line in out.splitlines() if line.startswith("Version")), "")
        match = re.match(r"Version (\S+) .*librdkafka (\S+)", line)
        versions["kcat"] = f"{match.group(1)} (librdkafka {match.group(2)})" if match else line
    except OSError:
        pass
    pom = (REPO_ROOT / "compat_tests" / "java" / "pom.xml").read_text()
    match = re.search(r"<kafka-clients.version>([^<]+)</kafka-clients.version>", pom)
    versions["java"] = f"kafka-clients {match.group(1) if match else '?'}"
    return versions


def capture_golden(out: Path, clients: list[str]) -> int:
    from kafka.admin import KafkaAdminClient, NewTopic

    from compat_tests.brokers import PyBroker

    frame_log = FrameLog()
    with tempfile.TemporaryDirectory(prefix="capture-frames-") as workdir:
        broker = PyBroker(workdir)
        broker.start()
        proxy = RecordingProxy(("127.0.0.1", broker.port), frame_log)
        try:
            bootstrap = proxy.start_in_thread()

            def setup(topic: str) -> None:
                # Directly on the broker, not through the proxy: not part of any client's capture.
                admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
                try:
                    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
                finally:
                    admin.close()

            failures = 0
            captured: list[str] = []
            for name in clients:
                proxy.label = name
                started = time.monotonic()
                try:
                    RUNNERS[name](bootstrap, setup)
                    captured.append(name)
                except Exception:  # noqa: BLE001 - report and go on with the other clients
                    failures += 1
                    log.exception("capture with %s failed", name)
                log.info("%s done in %.1fs", name, time.monotonic() - started)
        finally:
            proxy.stop()
            broker.stop()
    requests, responses = select_golden(frame_log.frames)
    versions = _client_versions()
    index = write_golden(out, requests, responses, {name: versions.get(name, "") for name in clients})
    total = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    log.info(
        "wrote %d request and %d response frames (%d bytes) to %s; clients captured: %s",
        len(index["requests"]),
        len(index["responses"]),
        total,
        out,
        ", ".join(captured),
    )
    return failures


def run_proxy(upstream: str, listen_port: int, out: Path) -> None:
    host, _, port = upstream.rpartition(":")
    out.mkdir(parents=True, exist_ok=True)
    proxy = RecordingProxy((host, int(port)), FrameLog(out_dir=out), listen_port)

    async def main() -> None:
        await proxy.start()
        log.info("recording %s -> %s into %s", proxy.bootstrap, upstream, out)
        await asyncio.Event().wait()

    asyncio.run(main())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    proxy_cmd = sub.add_parser("proxy", help="record frames between clients and one broker")
    proxy_cmd.add_argument("--upstream", required=True, help="broker HOST:PORT")
    proxy_cmd.add_argument("--listen-port", type=int, default=0)
    proxy_cmd.add_argument("--out", type=Path, required=True)
    golden_cmd = sub.add_parser("golden", help="capture tests/protocol/golden/ from every stock client")
    golden_cmd.add_argument("--out", type=Path, default=REPO_ROOT / "tests" / "protocol" / "golden")
    golden_cmd.add_argument(
        "--clients", default=",".join(RUNNERS), help="comma-separated, from: " + ", ".join(RUNNERS)
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kafka").setLevel(logging.WARNING)
    logging.getLogger("aiokafka").setLevel(logging.WARNING)
    if args.command == "proxy":
        run_proxy(args.upstream, args.listen_port, args.out)
        return 0
    clients = [c for c in args.clients.split(",") if c]
    unknown = set(clients) - set(RUNNERS)
    if unknown:
        parser.error(f"unknown clients: {sorted(unknown)}")
    return 1 if capture_golden(args.out, clients) else 0


if __name__ == "__main__":
    sys.exit(main())
