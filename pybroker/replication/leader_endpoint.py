"""How a follower reaches its partitions' leader (Kafka's LeaderEndPoint).

Two implementations of one Protocol: ``LocalLeaderEndpoint`` calls the leader broker's Partition
objects directly (several brokers in one process, for the unit tier), ``RemoteLeaderEndpoint``
speaks the ordinary Fetch, OffsetForLeaderEpoch and ListOffsets requests over a socket with
pybroker's own codec (Kafka's RemoteLeaderEndPoint over a BlockingSend).  The fetcher does not
know which one it has.
"""

from __future__ import annotations

import asyncio
import logging
import ssl as ssl_module
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from pybroker.protocol import codec
from pybroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from pybroker.replication.partition import Partition

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1

FETCH, LIST_OFFSETS, OFFSET_FOR_LEADER_EPOCH, API_VERSIONS = 1, 2, 23, 18
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
# The newest versions of these requests this endpoint writes (pybroker's Fetch goes to 16; 15+
# carries the replica id in ReplicaState, 13+ names topics by id).
ADD_PARTITIONS_TO_TXN, WRITE_TXN_MARKERS = 24, 27
# The highest version this broker sends of each inter-broker request (negotiated down to the peer's).
MAX_VERSIONS = {
    FETCH: 16,
    LIST_OFFSETS: 8,
    OFFSET_FOR_LEADER_EPOCH: 4,
    ADD_PARTITIONS_TO_TXN: 5,
    WRITE_TXN_MARKERS: 2,
    # the share coordinator's RPCs (a share-partition leader's persister): Initialize, Read, Write, Delete,
    # ReadSummary ShareGroupState
    83: 0,
    84: 0,
    85: 1,
    86: 0,
    87: 1,
    SASL_HANDSHAKE: 1,
    SASL_AUTHENTICATE: 2,
}
EARLIEST_TIMESTAMP, LATEST_TIMESTAMP = -2, -1


class LeaderEndpointError(Exception):
    """The leader could not be reached or answered nonsense (the fetcher backs off)."""


@dataclass(frozen=True)
class SaslPlainLogin:
    """The credentials this broker authenticates with on a SASL inter-broker listener (Kafka:
    sasl.mechanism.inter.broker.protocol=PLAIN and the listener's PlainLoginModule username/password):
    the principal a peer's authorizer sees, which super.users names so replication never depends on
    the ACLs clients make."""

    username: str
    password: str

    def initial_response(self) -> bytes:
        """RFC 4616: authzid NUL authcid NUL passwd (no authzid)."""
        return b"\0" + self.username.encode() + b"\0" + self.password.encode()


@dataclass
class FetchPartition:
    topic: str
    partition: int
    topic_id: uuid.UUID
    fetch_offset: int
    current_leader_epoch: int
    log_start_offset: int
    max_bytes: int


@dataclass
class FetchPartitionResult:
    error: ErrorCode
    high_watermark: int = -1
    log_start_offset: int = -1
    records: bytes | memoryview = b""


@dataclass
class EpochEndOffset:
    error: ErrorCode
    leader_epoch: int = UNDEFINED_EPOCH
    end_offset: int = UNDEFINED_OFFSET


@dataclass(frozen=True)
class FetchParams:
    """A fetch's waiting and size limits (replica.fetch.* of the follower's config)."""

    max_wait_ms: int = 500
    min_bytes: int = 1
    max_bytes: int = 10 * 1024 * 1024  # replica.fetch.response.max.bytes


class LeaderEndpoint(Protocol):
    leader_id: int

    async def fetch(
        self, partitions: list[FetchPartition], params: FetchParams
    ) -> dict[TopicPartition, FetchPartitionResult]: ...

    async def fetch_epoch_end_offsets(
        self, partitions: dict[TopicPartition, tuple[int, int]]
    ) -> dict[TopicPartition, EpochEndOffset]:
        """For each partition (current leader epoch, the follower's latest epoch): where that
        epoch ends on the leader (OffsetForLeaderEpoch)."""
        ...

    async def fetch_earliest_offset(self, tp: TopicPartition, current_leader_epoch: int) -> int: ...

    async def fetch_latest_offset(self, tp: TopicPartition, current_leader_epoch: int) -> int: ...

    async def close(self) -> None: ...


class LeaderOffsetError(Exception):
    """ListOffsets on the leader answered an error code."""

    def __init__(self, error: ErrorCode) -> None:
        super().__init__(error.name)
        self.error = error


# -- in-process -------------------------------------------------------------------------------------


class LocalLeaderEndpoint:
    """The leader broker's partitions, called directly (several brokers in one process).
    ``partitions`` looks a partition up on the leader broker (None: it has none)."""

    def __init__(
        self,
        leader_id: int,
        replica_id: int,
        partitions: Callable[[str, int], Partition | None],
        clock: Callable[[], int] | None = None,
    ) -> None:
        self.leader_id = leader_id
        self.replica_id = replica_id
        self._partitions = partitions
        self._clock = clock or (lambda: int(time.time() * 1000))
        self.reachable = True  # tests cut the link by setting it False

    def _check_reachable(self) -> None:
        if not self.reachable:
            raise LeaderEndpointError(f"broker {self.leader_id} is unreachable")

    def _read(
        self, wanted: list[FetchPartition], max_bytes: int
    ) -> dict[TopicPartition, FetchPartitionResult]:
        out: dict[TopicPartition, FetchPartitionResult] = {}
        total = 0
        now_ms = self._clock()
        for fp in wanted:
            p = self._partitions(fp.topic, fp.partition)
            if p is None:
                out[(fp.topic, fp.partition)] = FetchPartitionResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                continue
            budget = max(0, min(fp.max_bytes, max_bytes - total))
            r = p.fetch_for_follower(
                self.replica_id,
                fp.fetch_offset,
                fp.current_leader_epoch,
                budget,
                fp.log_start_offset,
                now_ms,
                min_one_batch=total == 0,
            )
            data = r.records.read() if r.records is not None else b""
            total += len(data)
            out[(fp.topic, fp.partition)] = FetchPartitionResult(
                r.error, r.high_watermark, r.log_start_offset, data
            )
        return out

    async def fetch(
        self, partitions: list[FetchPartition], params: FetchParams
    ) -> dict[TopicPartition, FetchPartitionResult]:
        self._check_reachable()
        out = self._read(partitions, params.max_bytes)
        if _enough(out, params.min_bytes) or params.max_wait_ms <= 0:
            return out
        # Long poll as the leader's Fetch handler does: wait for an append on any partition.
        woken = asyncio.Event()
        watched = [p for fp in partitions if (p := self._partitions(fp.topic, fp.partition)) is not None]
        for p in watched:
            p.add_data_listener(woken.set)
        try:
            await asyncio.wait_for(woken.wait(), params.max_wait_ms / 1000)
        except TimeoutError:
            pass
        finally:
            for p in watched:
                p.remove_data_listener(woken.set)
        self._check_reachable()
        # The fetch offsets were recorded by the first read; reading again records them again.
        return self._read(partitions, params.max_bytes)

    async def fetch_epoch_end_offsets(
        self, partitions: dict[TopicPartition, tuple[int, int]]
    ) -> dict[TopicPartition, EpochEndOffset]:
        self._check_reachable()
        out: dict[TopicPartition, EpochEndOffset] = {}
        for (topic, index), (current, epoch) in partitions.items():
            p = self._partitions(topic, index)
            if p is None:
                out[(topic, index)] = EpochEndOffset(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                continue
            error = p.check_leader(current)
            if error != ErrorCode.NONE:
                out[(topic, index)] = EpochEndOffset(error)
                continue
            found_epoch, end = p.log.end_offset_for_epoch(epoch)
            out[(topic, index)] = EpochEndOffset(ErrorCode.NONE, found_epoch, end)
        return out

    def _leader_partition(self, tp: TopicPartition, current_leader_epoch: int) -> Partition:
        self._check_reachable()
        p = self._partitions(*tp)
        if p is None:
            raise LeaderOffsetError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        error = p.check_leader(current_leader_epoch)
        if error != ErrorCode.NONE:
            raise LeaderOffsetError(error)
        return p

    async def fetch_earliest_offset(self, tp: TopicPartition, current_leader_epoch: int) -> int:
        return self._leader_partition(tp, current_leader_epoch).log_start_offset

    async def fetch_latest_offset(self, tp: TopicPartition, current_leader_epoch: int) -> int:
        return self._leader_partition(tp, current_leader_epoch).log_end_offset

    async def close(self) -> None:
        pass


def _enough(out: dict[TopicPartition, FetchPartitionResult], min_bytes: int) -> bool:
    size = 0
    for r in out.values():
        if r.error != ErrorCode.NONE:
            return True
        size += len(r.records)
    return size >= min_bytes


# -- over a socket ----------------------------------------------------------------------------------


class RemoteLeaderEndpoint:
    """One connection to the leader broker, one request at a time (the fetcher awaits each),
    reconnecting after a failure.  API versions are negotiated with ApiVersions on connect."""

    def __init__(
        self,
        leader_id: int,
        host: str,
        port: int,
        replica_id: int,
        *,
        client_id: str | None = None,
        socket_timeout_ms: int = 30_000,
        ssl: ssl_module.SSLContext | None = None,
        sasl: SaslPlainLogin | None = None,
    ) -> None:
        self.leader_id = leader_id
        self.host = host
        self.port = port
        self.replica_id = replica_id
        self.client_id = client_id or f"broker-{replica_id}-fetcher"
        self.socket_timeout_s = socket_timeout_ms / 1000
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._versions: dict[int, tuple[int, int]] = {}
        self._correlation_id = 0
        self._lock = asyncio.Lock()
        self._ssl = ssl  # the inter-broker listener's TLS context, when it is an SSL listener
        self._sasl = sasl  # the login on a SASL inter-broker listener

    # ---- connection ----
    async def _connect(self) -> None:
        try:
            self._reader, self._writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port, ssl=self._ssl), self.socket_timeout_s
            )
        except (OSError, TimeoutError) as e:
            raise LeaderEndpointError(
                f"cannot connect to broker {self.leader_id} at {self.address}: {e}"
            ) from e
        response = await self._roundtrip(API_VERSIONS, 0, {})
        if response["error_code"]:
            raise LeaderEndpointError(f"ApiVersions from {self.address}: error {response['error_code']}")
        self._versions = {k["api_key"]: (k["min_version"], k["max_version"]) for k in response["api_keys"]}
        if self._sasl is not None:
            await self._authenticate(self._sasl)

    async def _authenticate(self, login: SaslPlainLogin) -> None:
        """SaslHandshake then SaslAuthenticate (KIP-152), before any other request, as Kafka's
        SaslClientAuthenticator does on an inter-broker connection."""
        handshake = await self._roundtrip(SASL_HANDSHAKE, self.version(SASL_HANDSHAKE), {"mechanism": "PLAIN"})
        if handshake["error_code"]:
            raise LeaderEndpointError(
                f"SaslHandshake PLAIN refused by {self.address}: error {handshake['error_code']} "
                f"(enabled: {handshake['mechanisms']})"
            )
        answer = await self._roundtrip(
            SASL_AUTHENTICATE, self.version(SASL_AUTHENTICATE), {"auth_bytes": login.initial_response()}
        )
        if answer["error_code"]:
            raise LeaderEndpointError(
                f"SASL authentication as {login.username} refused by {self.address}: "
                f"{answer['error_message'] or answer['error_code']}"
            )

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def version(self, api_key: int) -> int:
        low, high = self._versions.get(api_key, (0, -1))
        ours = MAX_VERSIONS[api_key]
        if high < 0 or min(ours, high) < low:
            raise LeaderEndpointError(f"broker {self.address} does not support api {api_key} v{low}-{high}")
        return min(ours, high)

    async def send(self, api_key: int, body_for: Callable[[int], dict]) -> tuple[int, dict]:
        """One request to this broker (the version negotiated, the body made for it) and its answer:
        the channel other inter-broker requests share (transaction markers, KIP-890 verification).
        Raises LeaderEndpointError when the broker cannot be reached."""
        return await self._request(api_key, body_for)

    async def _request(self, api_key: int, body_for: Callable[[int], dict]) -> tuple[int, dict]:
        async with self._lock:
            try:
                if self._writer is None:
                    await self._connect()
                version = self.version(api_key)
                return version, await self._roundtrip(api_key, version, body_for(version))
            except LeaderEndpointError:
                await self._drop()
                raise

    async def _roundtrip(self, api_key: int, version: int, body: dict) -> dict:
        assert self._reader is not None and self._writer is not None
        self._correlation_id += 1
        correlation_id = self._correlation_id
        frame = codec.encode_request(api_key, version, correlation_id, self.client_id, body)
        try:
            self._writer.write(frame)
            await self._writer.drain()
            size_bytes = await asyncio.wait_for(self._reader.readexactly(4), self.socket_timeout_s)
            size = int.from_bytes(size_bytes, "big", signed=True)
            if size < 4:
                raise LeaderEndpointError(f"broker {self.address} sent a frame of {size} bytes")
            data = await asyncio.wait_for(self._reader.readexactly(size), self.socket_timeout_s)
        except (OSError, TimeoutError, asyncio.IncompleteReadError) as e:
            raise LeaderEndpointError(
                f"connection to broker {self.leader_id} at {self.address}: {e!r}"
            ) from e
        try:
            got, message = codec.decode_response(api_key, version, data)
        except codec.DecodeError as e:
            raise LeaderEndpointError(f"malformed response to api {api_key} from {self.address}: {e}") from e
        if got != correlation_id:
            raise LeaderEndpointError(
                f"{self.address} answered correlation id {got}, expected {correlation_id}"
            )
        return message

    async def _drop(self) -> None:
        writer, self._writer, self._reader = self._writer, None, None
        if writer is not None:
            writer.close()
            try:
                await writer.wait_closed()
            except OSError:
                pass

    async def close(self) -> None:
        await self._drop()

    # ---- requests ----
    async def fetch(
        self, partitions: list[FetchPartition], params: FetchParams
    ) -> dict[TopicPartition, FetchPartitionResult]:
        def body(version: int) -> dict:
            by_id = version >= 13
            topics: dict[object, list[dict]] = {}
            for fp in partitions:
                key = fp.topic_id if by_id else fp.topic
                topics.setdefault(key, []).append(
                    {
                        "partition": fp.partition,
                        "current_leader_epoch": fp.current_leader_epoch,
                        "fetch_offset": fp.fetch_offset,
                        "last_fetched_epoch": -1,
                        "log_start_offset": fp.log_start_offset,
                        "partition_max_bytes": fp.max_bytes,
                    }
                )
            request = {
                "max_wait_ms": params.max_wait_ms,
                "min_bytes": params.min_bytes,
                "max_bytes": params.max_bytes,
                "isolation_level": 0,
                "session_id": 0,
                "session_epoch": -1,  # FINAL_EPOCH: a full fetch without a session
                "topics": [
                    {("topic_id" if by_id else "topic"): key, "partitions": parts}
                    for key, parts in topics.items()
                ],
                "forgotten_topics_data": [],
                "rack_id": "",
            }
            # The Fetch request names its sender as a follower: ReplicaId up to v14, the tagged
            # ReplicaState from v15 (KIP-903).
            if version >= 15:
                request["replica_state"] = {"replica_id": self.replica_id, "replica_epoch": -1}
            else:
                request["replica_id"] = self.replica_id
            return request

        # The leader may wait up to max_wait_ms before answering: the socket timeout adds to it.
        version, response = await self._request(FETCH, body)
        if response.get("error_code"):
            raise LeaderEndpointError(f"Fetch from {self.address}: error {response['error_code']}")
        names = {fp.topic_id: fp.topic for fp in partitions}
        out: dict[TopicPartition, FetchPartitionResult] = {}
        for t in response["responses"]:
            topic = names.get(t["topic_id"]) if version >= 13 else t["topic"]
            if topic is None:
                continue  # a topic id this fetch did not name: nothing waits for it
            for pr in t["partitions"]:
                records = pr["records"]
                out[(topic, pr["partition_index"])] = FetchPartitionResult(
                    ErrorCode(pr["error_code"]),
                    pr["high_watermark"],
                    pr["log_start_offset"],
                    records if records is not None else b"",  # a view of the response frame: no copy
                )
        return out

    async def fetch_epoch_end_offsets(
        self, partitions: dict[TopicPartition, tuple[int, int]]
    ) -> dict[TopicPartition, EpochEndOffset]:
        def body(version: int) -> dict:
            topics: dict[str, list[dict]] = {}
            for (topic, index), (current, epoch) in partitions.items():
                topics.setdefault(topic, []).append(
                    {"partition": index, "current_leader_epoch": current, "leader_epoch": epoch}
                )
            return {
                "replica_id": self.replica_id,
                "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
            }

        _, response = await self._request(OFFSET_FOR_LEADER_EPOCH, body)
        out: dict[TopicPartition, EpochEndOffset] = {}
        for t in response["topics"]:
            for pr in t["partitions"]:
                out[(t["topic"], pr["partition"])] = EpochEndOffset(
                    ErrorCode(pr["error_code"]), pr["leader_epoch"], pr["end_offset"]
                )
        return out

    async def _list_offset(self, tp: TopicPartition, current_leader_epoch: int, timestamp: int) -> int:
        def body(version: int) -> dict:
            return {
                "replica_id": self.replica_id,
                "isolation_level": 0,
                "topics": [
                    {
                        "name": tp[0],
                        "partitions": [
                            {
                                "partition_index": tp[1],
                                "current_leader_epoch": current_leader_epoch,
                                "timestamp": timestamp,
                            }
                        ],
                    }
                ],
            }

        _, response = await self._request(LIST_OFFSETS, body)
        for t in response["topics"]:
            for pr in t["partitions"]:
                if pr["error_code"]:
                    raise LeaderOffsetError(ErrorCode(pr["error_code"]))
                return pr["offset"]
        raise LeaderEndpointError(f"ListOffsets from {self.address} did not name {tp}")

    async def fetch_earliest_offset(self, tp: TopicPartition, current_leader_epoch: int) -> int:
        return await self._list_offset(tp, current_leader_epoch, EARLIEST_TIMESTAMP)

    async def fetch_latest_offset(self, tp: TopicPartition, current_leader_epoch: int) -> int:
        return await self._list_offset(tp, current_leader_epoch, LATEST_TIMESTAMP)
