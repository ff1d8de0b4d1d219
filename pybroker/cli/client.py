"""A small synchronous Kafka client for the command line, built on pybroker's own protocol codec.

It speaks to any Kafka-protocol broker: ApiVersions negotiation on every connection, Metadata for the
brokers and partition leaders, requests routed to the leader of a partition or the coordinator of a
group (FindCoordinator). One blocking socket per broker; the CLI sends one request at a time.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pybroker.protocol import codec
from pybroker.protocol.api import API_NAMES, REQUESTS
from pybroker.protocol.errors import ErrorCode

T = TypeVar("T")
DEFAULT_BROKERS = "127.0.0.1:9092"
CLIENT_ID = "pybroker-cli"

# Api keys used here (Kafka's numbers).
PRODUCE, FETCH, LIST_OFFSETS, METADATA = 0, 1, 2, 3
OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR = 8, 9, 10
DESCRIBE_GROUPS, LIST_GROUPS, API_VERSIONS = 15, 16, 18
CREATE_TOPICS, DELETE_TOPICS, DELETE_RECORDS = 19, 20, 21
DESCRIBE_CONFIGS, ALTER_CONFIGS, CREATE_PARTITIONS = 32, 33, 37
DELETE_GROUPS, INCREMENTAL_ALTER_CONFIGS, DESCRIBE_CLUSTER = 42, 44, 60
CONSUMER_GROUP_DESCRIBE = 69
STREAMS_GROUP_DESCRIBE = 89

# The highest version of each API whose field layout this client writes and reads. Later versions
# change shape (topic ids instead of names in Fetch 13+, OffsetFetch 10+, Produce 13+), so the client
# caps there; anything a broker supports from the bottom of each range up to the cap works.
MAX_VERSIONS: dict[int, int] = {
    PRODUCE: 11,
    FETCH: 12,
    LIST_OFFSETS: 8,
    METADATA: 12,
    OFFSET_COMMIT: 9,
    OFFSET_FETCH: 9,
    FIND_COORDINATOR: 6,
    DESCRIBE_GROUPS: 5,
    LIST_GROUPS: 5,
    API_VERSIONS: 0,
    CREATE_TOPICS: 7,
    DELETE_TOPICS: 6,
    DELETE_RECORDS: 2,
    DESCRIBE_CONFIGS: 4,
    ALTER_CONFIGS: 2,
    CREATE_PARTITIONS: 3,
    DELETE_GROUPS: 2,
    INCREMENTAL_ALTER_CONFIGS: 1,
    DESCRIBE_CLUSTER: 1,
    CONSUMER_GROUP_DESCRIBE: 0,
    STREAMS_GROUP_DESCRIBE: 0,
}

RETRIABLE_COORDINATOR_ERRORS = (
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.NOT_COORDINATOR,
)
RETRY_BACKOFF_S = 0.1  # Kafka clients' retry.backoff.ms default

# ListOffsets special timestamps.
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2


class CliError(Exception):
    """A failure to report on stderr as one line, with a non-zero exit status."""


class BrokerError(CliError):
    """A Kafka error code in a response."""

    def __init__(self, code: int, context: str, message: str | None = None) -> None:
        self.code = code
        name = error_name(code)
        detail = f": {message}" if message else ""
        super().__init__(f"{context}: {name}{detail}")


def error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error code {code}"


def check(code: int, context: str, message: str | None = None) -> None:
    if code:
        raise BrokerError(code, context, message)


def parse_address(address: str) -> tuple[str, int]:
    host, sep, port = address.strip().rpartition(":")
    if not sep or not port.isdigit():
        raise CliError(f"invalid broker address {address!r}: expected HOST:PORT")
    return host.strip("[]") or "127.0.0.1", int(port)


@dataclass
class BrokerNode:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass
class PartitionInfo:
    partition: int
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    offline: list[int]
    error_code: int = 0


@dataclass
class TopicInfo:
    name: str
    topic_id: Any
    internal: bool
    error_code: int
    partitions: dict[int, PartitionInfo] = field(default_factory=dict)


@dataclass
class ClusterMetadata:
    cluster_id: str | None
    controller_id: int
    brokers: dict[int, BrokerNode]
    topics: dict[str, TopicInfo]


class Connection:
    """One blocking socket to one broker, with the API versions it advertised."""

    def __init__(self, host: str, port: int, timeout_s: float) -> None:
        self.address = f"{host}:{port}"
        try:
            self.sock = socket.create_connection((host, port), timeout=timeout_s)
        except OSError as e:
            raise CliError(f"cannot connect to broker {self.address}: {e.strerror or e}") from None
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.correlation_id = 0
        self.versions: dict[int, tuple[int, int]] = {}
        response = self.request(API_VERSIONS, 0, {})
        check(response["error_code"], f"ApiVersions from {self.address}")
        self.versions = {k["api_key"]: (k["min_version"], k["max_version"]) for k in response["api_keys"]}

    def version(self, api_key: int) -> int:
        """The highest version both this client and the broker speak."""
        name = API_NAMES.get(api_key, str(api_key))
        if api_key not in self.versions:
            raise CliError(f"broker {self.address} does not support {name} (api key {api_key})")
        low, high = self.versions[api_key]
        ours = min(MAX_VERSIONS.get(api_key, REQUESTS[api_key].max_version), REQUESTS[api_key].max_version)
        if ours < low:
            raise CliError(f"broker {self.address} supports {name} v{low}-{high} only, this client v{ours}")
        return min(ours, high)

    def request(self, api_key: int, version: int, body: dict) -> dict:
        self.correlation_id += 1
        correlation_id = self.correlation_id
        frame_out = codec.encode_request(api_key, version, correlation_id, CLIENT_ID, body)
        try:
            self.sock.sendall(frame_out)
            (size,) = struct.unpack(">i", self._recv(4))
            frame = self._recv(size)
        except TimeoutError:
            raise CliError(f"broker {self.address} did not answer {API_NAMES[api_key]} in time") from None
        except OSError as e:
            raise CliError(f"connection to broker {self.address} failed: {e.strerror or e}") from None
        try:
            got, message = codec.decode_response(api_key, version, frame)
        except codec.DecodeError as e:
            raise CliError(
                f"malformed {API_NAMES[api_key]} v{version} response from {self.address}: {e}"
            ) from None
        if got != correlation_id:
            raise CliError(f"broker {self.address} answered correlation id {got}, expected {correlation_id}")
        return message

    def _recv(self, size: int) -> bytes:
        chunks = bytearray()
        while len(chunks) < size:
            chunk = self.sock.recv(min(size - len(chunks), 1 << 20))
            if not chunk:
                raise CliError(f"broker {self.address} closed the connection")
            chunks += chunk
        return bytes(chunks)

    def close(self) -> None:
        self.sock.close()


class KafkaClient:
    """Connections by node id, metadata, and routing to leaders and coordinators."""

    def __init__(self, bootstrap: str, timeout_s: float = 15.0) -> None:
        self.timeout_s = timeout_s
        self.bootstrap = [parse_address(a) for a in bootstrap.split(",") if a.strip()]
        if not self.bootstrap:
            raise CliError("no broker address given")
        self._bootstrap_conn: Connection | None = None
        self._conns: dict[int, Connection] = {}
        self._brokers: dict[int, BrokerNode] = {}

    def __enter__(self) -> KafkaClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for conn in {id(c): c for c in [*self._conns.values(), self._bootstrap_conn] if c}.values():
            conn.close()
        self._conns.clear()
        self._bootstrap_conn = None

    # --- connections ---------------------------------------------------------------------------------

    def any_connection(self) -> Connection:
        if self._conns:
            return next(iter(self._conns.values()))
        if self._bootstrap_conn is None:
            errors = []
            for host, port in self.bootstrap:
                try:
                    self._bootstrap_conn = Connection(host, port, self.timeout_s)
                    break
                except CliError as e:
                    errors.append(str(e))
            else:
                raise CliError("; ".join(errors))
        return self._bootstrap_conn

    def connection(self, node_id: int) -> Connection:
        conn = self._conns.get(node_id)
        if conn is not None:
            return conn
        if node_id not in self._brokers:
            self.metadata([])
        node = self._brokers.get(node_id)
        if node is None:
            raise CliError(f"broker {node_id} is not in the cluster metadata")
        bootstrap = self._bootstrap_conn
        if bootstrap is not None and bootstrap.address == f"{node.host}:{node.port}":
            conn = bootstrap
        else:
            conn = Connection(node.host, node.port, self.timeout_s)
        self._conns[node_id] = conn
        return conn

    def send(self, api_key: int, body: dict, node: int | None = None, version: int | None = None) -> dict:
        conn = self.any_connection() if node is None else self.connection(node)
        return conn.request(api_key, conn.version(api_key) if version is None else version, body)

    def version(self, api_key: int, node: int | None = None) -> int:
        conn = self.any_connection() if node is None else self.connection(node)
        return conn.version(api_key)

    # --- metadata ------------------------------------------------------------------------------------

    def metadata(self, topics: list[str] | None = None) -> ClusterMetadata:
        """Metadata for ``topics`` (None: every topic; []: brokers only). No auto-creation."""
        body = {
            "topics": None if topics is None else [{"name": t} for t in topics],
            "allow_auto_topic_creation": False,
        }
        response = self.send(METADATA, body)
        brokers = {
            b["node_id"]: BrokerNode(b["node_id"], b["host"], b["port"], b.get("rack"))
            for b in response["brokers"]
        }
        self._brokers = brokers
        result: dict[str, TopicInfo] = {}
        for t in response["topics"]:
            info = TopicInfo(t["name"], t.get("topic_id"), t.get("is_internal", False), t["error_code"])
            for p in t["partitions"]:
                info.partitions[p["partition_index"]] = PartitionInfo(
                    p["partition_index"],
                    p["leader_id"],
                    p.get("leader_epoch", -1),
                    list(p["replica_nodes"]),
                    list(p["isr_nodes"]),
                    list(p.get("offline_replicas") or []),
                    p["error_code"],
                )
            result[info.name] = info
        return ClusterMetadata(response.get("cluster_id"), response.get("controller_id", -1), brokers, result)

    def topic(self, name: str) -> TopicInfo:
        """One existing topic's metadata, or UNKNOWN_TOPIC_OR_PARTITION as a CliError."""
        info = self.metadata([name]).topics.get(name)
        if info is None:
            raise BrokerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name}")
        check(info.error_code, f"topic {name}")
        return info

    def leaders(self, topic: str, partitions: list[int] | None = None) -> dict[int, int]:
        info = self.topic(topic)
        chosen = sorted(info.partitions) if partitions is None else partitions
        result = {}
        for p in chosen:
            if p not in info.partitions:
                raise BrokerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"partition {topic}-{p}")
            result[p] = info.partitions[p].leader
        return result

    # --- offsets -------------------------------------------------------------------------------------

    def list_offsets(self, requests: dict[tuple[str, int], int]) -> dict[tuple[str, int], tuple[int, int]]:
        """{(topic, partition): timestamp} -> {(topic, partition): (offset, timestamp)}; routed to leaders."""
        by_leader: dict[int, dict[str, list[dict]]] = {}
        meta = self.metadata(sorted({t for t, _ in requests}))
        for (topic, partition), timestamp in requests.items():
            info = meta.topics.get(topic)
            if info is None or info.error_code or partition not in info.partitions:
                code = info.error_code if info and info.error_code else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                raise BrokerError(code, f"partition {topic}-{partition}")
            leader = info.partitions[partition].leader
            by_leader.setdefault(leader, {}).setdefault(topic, []).append(
                {"partition_index": partition, "timestamp": timestamp, "current_leader_epoch": -1}
            )
        result: dict[tuple[str, int], tuple[int, int]] = {}
        for leader, topics in by_leader.items():
            body = {
                "replica_id": -1,
                "isolation_level": 0,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
            }
            response = self.send(LIST_OFFSETS, body, node=leader)
            for t in response["topics"]:
                for p in t["partitions"]:
                    check(p["error_code"], f"ListOffsets {t['name']}-{p['partition_index']}")
                    result[(t["name"], p["partition_index"])] = (p["offset"], p["timestamp"])
        return result

    # --- groups --------------------------------------------------------------------------------------

    def coordinator(self, group: str) -> int:
        """The group's coordinator, retrying while it is not available yet (Kafka creates
        __consumer_offsets on the first FindCoordinator, and loads a partition after a restart)."""
        return self.with_coordinator(group, lambda node: node)

    def with_coordinator(self, group: str, call: Callable[[int], T]) -> T:
        """``call(coordinator)``, finding the coordinator again and retrying while the answer is a
        retriable coordinator error (not available, loading, moved), until the client's timeout."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                return call(self._find_coordinator(group))
            except BrokerError as e:
                if e.code not in RETRIABLE_COORDINATOR_ERRORS or time.monotonic() > deadline:
                    raise
            time.sleep(RETRY_BACKOFF_S)

    def _find_coordinator(self, group: str) -> int:
        conn = self.any_connection()
        version = conn.version(FIND_COORDINATOR)
        if version >= 4:
            response = conn.request(FIND_COORDINATOR, version, {"key_type": 0, "coordinator_keys": [group]})
            entry = response["coordinators"][0]
            check(entry["error_code"], f"FindCoordinator for group {group}", entry.get("error_message"))
            node = BrokerNode(entry["node_id"], entry["host"], entry["port"])
        else:
            response = conn.request(FIND_COORDINATOR, version, {"key": group, "key_type": 0})
            check(response["error_code"], f"FindCoordinator for group {group}", response.get("error_message"))
            node = BrokerNode(response["node_id"], response["host"], response["port"])
        self._brokers.setdefault(node.node_id, node)
        return node.node_id

    def committed_offsets(self, group: str) -> dict[tuple[str, int], int]:
        return self.with_coordinator(group, lambda node: self._committed_offsets(group, node))

    def _committed_offsets(self, group: str, coordinator: int) -> dict[tuple[str, int], int]:
        version = self.version(OFFSET_FETCH, coordinator)
        if version >= 8:
            body = {"groups": [{"group_id": group, "topics": None}], "require_stable": False}
            response = self.send(OFFSET_FETCH, body, node=coordinator, version=version)
            entry = response["groups"][0]
            check(entry["error_code"], f"OffsetFetch for group {group}")
            topics = entry["topics"]
        else:
            body = {"group_id": group, "topics": None}
            response = self.send(OFFSET_FETCH, body, node=coordinator, version=version)
            check(response.get("error_code", 0), f"OffsetFetch for group {group}")
            topics = response["topics"]
        result = {}
        for t in topics:
            for p in t["partitions"]:
                check(p["error_code"], f"OffsetFetch {t['name']}-{p['partition_index']}")
                if p["committed_offset"] >= 0:
                    result[(t["name"], p["partition_index"])] = p["committed_offset"]
        return result

    def commit_offsets(self, group: str, offsets: dict[tuple[str, int], int]) -> None:
        """Commit as an admin (no member id, generation -1): Kafka accepts it only for an empty group."""
        self.with_coordinator(group, lambda node: self._commit_offsets(group, node, offsets))

    def _commit_offsets(self, group: str, coordinator: int, offsets: dict[tuple[str, int], int]) -> None:
        topics: dict[str, list[dict]] = {}
        for (topic, partition), offset in sorted(offsets.items()):
            topics.setdefault(topic, []).append(
                {"partition_index": partition, "committed_offset": offset, "committed_metadata": ""}
            )
        body = {
            "group_id": group,
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "group_instance_id": None,
            "retention_time_ms": -1,
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
        }
        response = self.send(OFFSET_COMMIT, body, node=coordinator)
        for t in response["topics"]:
            for p in t["partitions"]:
                check(p["error_code"], f"OffsetCommit {t['name']}-{p['partition_index']} for group {group}")
