"""A minimal Kafka wire probe: is a broker up and serving metadata?

Hand-rolled (ApiVersions v0 + Metadata v1..7) so the launcher depends on no client library and
on nothing in pybroker; it is the same first exchange every stock client starts with.
"""

from __future__ import annotations

import socket
import struct
import time

API_VERSIONS = 18
METADATA = 3
CLIENT_ID = b"pybroker-readiness-probe"


class ProbeError(Exception):
    """The broker answered, but not with a ready cluster."""


def _request(sock: socket.socket, api_key: int, version: int, correlation_id: int, body: bytes) -> bytes:
    header = struct.pack(">hhih", api_key, version, correlation_id, len(CLIENT_ID)) + CLIENT_ID
    payload = header + body
    sock.sendall(struct.pack(">i", len(payload)) + payload)
    (size,) = struct.unpack(">i", _read_exact(sock, 4))
    response = _read_exact(sock, size)
    (echoed,) = struct.unpack_from(">i", response)
    if echoed != correlation_id:
        raise ProbeError(f"correlation id {echoed} != {correlation_id}")
    return response[4:]


def _read_exact(sock: socket.socket, size: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = sock.recv(size - len(chunks))
        if not chunk:
            raise ConnectionError("broker closed the connection")
        chunks += chunk
    return bytes(chunks)


def _metadata_version(api_versions_body: bytes) -> int:
    error_code, count = struct.unpack_from(">hi", api_versions_body)
    if error_code != 0:
        raise ProbeError(f"ApiVersions error code {error_code}")
    for index in range(count):
        key, low, high = struct.unpack_from(">hhh", api_versions_body, 6 + 6 * index)
        if key == METADATA:
            version = max(low, 1)
            if version > min(high, 7):
                raise ProbeError(f"no Metadata version in 1..7 (broker offers {low}..{high})")
            return min(high, 7)
    raise ProbeError("broker does not offer Metadata")


def broker_count(host: str, port: int, timeout_s: float = 2.0) -> int:
    """How many brokers a Metadata response lists (KRaft lists only registered, unfenced ones)."""
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        version = _metadata_version(_request(sock, API_VERSIONS, 0, 1, b""))
        body = struct.pack(">i", -1)  # null topic list: all topics
        if version >= 4:
            body += b"\x00"  # allow_auto_topic_creation=false
        response = _request(sock, METADATA, version, 2, body)
        offset = 4 if version >= 3 else 0  # throttle_time_ms
        (count,) = struct.unpack_from(">i", response, offset)
        return count


def _skip_string(data: bytes, offset: int) -> int:
    (length,) = struct.unpack_from(">h", data, offset)
    return offset + 2 + max(length, 0)


def broker_ids(host: str, port: int, timeout_s: float = 2.0) -> set[int]:
    """The node ids a Metadata response lists (KRaft lists only registered, unfenced brokers)."""
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        version = _metadata_version(_request(sock, API_VERSIONS, 0, 1, b""))
        body = struct.pack(">i", 0)  # an empty topic list: brokers only
        if version >= 4:
            body += b"\x00"
        response = _request(sock, METADATA, version, 2, body)
        offset = 4 if version >= 3 else 0
        (count,) = struct.unpack_from(">i", response, offset)
        offset += 4
        ids = set()
        for _ in range(count):
            (node_id,) = struct.unpack_from(">i", response, offset)
            offset = _skip_string(response, offset + 4)  # host
            offset += 4  # port
            offset = _skip_string(response, offset)  # rack (v1+)
            ids.add(node_id)
        return ids


def _read_string(data: bytes, offset: int) -> tuple[str | None, int]:
    (length,) = struct.unpack_from(">h", data, offset)
    if length < 0:
        return None, offset + 2
    return data[offset + 2 : offset + 2 + length].decode(), offset + 2 + length


def _read_int32s(data: bytes, offset: int) -> tuple[list[int], int]:
    (count,) = struct.unpack_from(">i", data, offset)
    count = max(count, 0)
    return list(struct.unpack_from(f">{count}i", data, offset + 4)), offset + 4 + 4 * count


def topic_metadata(
    host: str, port: int, topic: str | None, timeout_s: float = 2.0
) -> tuple[dict[int, tuple[str, int]], dict[int, dict[str, object]]]:
    """One broker's view of ``topic`` (Metadata v7, the first version with the leader epoch): the
    brokers' endpoints {node id: (host, port)} and {partition: {leader, leader_epoch, replicas, isr,
    error}} ({} when the broker does not know the topic; topic None asks for the brokers only)."""
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        if _metadata_version(_request(sock, API_VERSIONS, 0, 1, b"")) < 7:
            raise ProbeError("broker offers no Metadata v7")
        if topic is None:
            body = struct.pack(">i", 0) + b"\x00"  # no topic
        else:
            name = topic.encode()
            body = struct.pack(">ih", 1, len(name)) + name + b"\x00"  # one topic, no auto-creation
        response = _request(sock, METADATA, 7, 2, body)
    offset = 4  # throttle_time_ms
    (count,) = struct.unpack_from(">i", response, offset)
    offset += 4
    brokers: dict[int, tuple[str, int]] = {}
    for _ in range(count):
        (node_id,) = struct.unpack_from(">i", response, offset)
        broker_host, offset = _read_string(response, offset + 4)
        (broker_port,) = struct.unpack_from(">i", response, offset)
        offset = _skip_string(response, offset + 4)  # rack
        brokers[node_id] = (broker_host or "", broker_port)
    offset = _skip_string(response, offset)  # cluster id
    offset += 4  # controller id
    (topics,) = struct.unpack_from(">i", response, offset)
    offset += 4
    states: dict[int, dict[str, object]] = {}
    for _ in range(topics):
        (topic_error,) = struct.unpack_from(">h", response, offset)
        found, offset = _read_string(response, offset + 2)
        offset += 1  # is_internal
        (partitions,) = struct.unpack_from(">i", response, offset)
        offset += 4
        for _ in range(max(partitions, 0)):
            error, index, leader, epoch = struct.unpack_from(">hiii", response, offset)
            replicas, offset = _read_int32s(response, offset + 14)
            isr, offset = _read_int32s(response, offset)
            _, offset = _read_int32s(response, offset)  # offline replicas
            if found == topic and topic_error == 0:
                states[index] = {"leader": leader, "leader_epoch": epoch, "replicas": replicas, "isr": isr,
                                 "error": error}  # fmt: skip
    return brokers, states


def partition_states(host: str, port: int, topic: str, timeout_s: float = 2.0) -> dict[int, dict[str, object]]:
    """One broker's view of ``topic``: {partition: {leader, leader_epoch, replicas, isr, error}}."""
    return topic_metadata(host, port, topic, timeout_s)[1]


def leader_endpoint(bootstrap: str, topic: str, partition: int = 0, timeout_s: float = 30.0) -> tuple[str, int]:
    """(host, port) of the partition's leader, as a client finds it."""
    return partition_leader(bootstrap, topic, partition, timeout_s)[1]


def partition_leader(
    bootstrap: str, topic: str, partition: int = 0, timeout_s: float = 30.0
) -> tuple[int, tuple[str, int]]:
    """(node id, (host, port)) of the partition's leader: Metadata from the first bootstrap address,
    retried while the partition has no leader there yet (a topic just created: the brokers learn of it,
    and elect its leaders, a moment after CreateTopics answers)."""
    host, _, port = bootstrap.split(",")[0].rpartition(":")
    deadline = time.monotonic() + timeout_s
    while True:
        brokers, states = topic_metadata(host, int(port), topic)
        leader = states.get(partition, {}).get("leader", -1)
        if isinstance(leader, int) and leader in brokers:
            return leader, brokers[leader]
        if time.monotonic() > deadline:
            raise ProbeError(f"{topic}-{partition} has no leader after {timeout_s}s: {states.get(partition)}")
        time.sleep(0.1)
