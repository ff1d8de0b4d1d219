"""The deposed-leader probe: a write sent straight to a leader frozen past its session, after another
broker was elected in its place.

A stock client would be redirected to the new leader by Metadata; the probe is not.  It connects to the
node's real port (past its fault proxy) while the node runs, sends one acks=all Produce (v7, one
single-record batch per partition the node led) while the node is frozen, once every one of those
partitions has a new leader, and reads the answer after SIGCONT.  The kernel holds the request, so the
node reads it first thing after it wakes, before it can have heard from ZooKeeper (or the KRaft quorum)
that it was deposed: the most adversarial moment.  It must not acknowledge: a deposed leader's ISR
still names followers that now fetch from the new leader, so its high watermark cannot pass the write,
and when it learns of the new leader the wait ends with NOT_LEADER_OR_FOLLOWER (or the request times
out).  An acknowledged probe record is reported, and the checker looks for it in the final log.
"""

from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass, field

from pybroker.protocol.codec import DecodeError, decode_response, encode_request
from pybroker.protocol.errors import ErrorCode
from pybroker.records.builder import SimpleRecord, build_batch
from tools.chaos.workload import WriterLog, encode

PRODUCE = 0
PRODUCE_VERSION = 7  # non-flexible, record batch v2: every Kafka since 2.1 and pybroker answer it


def produce_request(topic: str, batches: dict[int, bytes], timeout_ms: int, correlation_id: int = 1) -> bytes:
    """A size-prefixed Produce request, acks=-1, no transactional id."""
    body = {
        "transactional_id": None, "acks": -1, "timeout_ms": timeout_ms,
        "topic_data": [{"name": topic, "partition_data": [
            {"index": partition, "records": batch} for partition, batch in sorted(batches.items())
        ]}],
    }  # fmt: skip
    return encode_request(PRODUCE, PRODUCE_VERSION, correlation_id, "chaos-deposed-probe", body)


def parse_produce_response(frame: bytes) -> dict[int, tuple[int, int]]:
    """{partition: (error code, base offset)} of a Produce response frame (without its size)."""
    _, body = decode_response(PRODUCE, PRODUCE_VERSION, frame)
    return {
        answer["index"]: (answer["error_code"], answer["base_offset"])
        for topic in body["responses"]
        for answer in topic["partition_responses"]
    }


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"


def _read_exact(sock: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("the node closed the connection")
        data += chunk
    return bytes(data)


@dataclass
class DeposedLeaderProbe:
    """connect() while the node runs; send() while it is frozen and deposed; result() after SIGCONT."""

    node: int
    port: int
    topic: str
    partitions: list[int]
    timeout_ms: int = 10_000
    log: WriterLog = field(init=False)
    sock: socket.socket | None = None
    sent_at: float | None = None
    answered_at: float | None = None  # monotonic time the answer (or the connection's end) came
    answers: dict[int, str] = field(default_factory=dict)
    error: str | None = None

    def __post_init__(self) -> None:
        self.log = WriterLog(f"probe{self.node}.0")

    def connect(self) -> None:
        self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=5)

    def send(self) -> None:
        assert self.sock is not None, "connect() first"
        batches = {}
        for partition in self.partitions:
            batches[partition] = build_batch([SimpleRecord(None, encode(self.log.name, partition, 0))])
            self.log.sent[(partition, 0)] = time.monotonic()
        self.sock.sendall(produce_request(self.topic, batches, self.timeout_ms))
        self.sent_at = time.monotonic()

    def result(self, wait_s: float = 60) -> dict[int, str]:
        """Read the answer (bounded); every partition's outcome, also recorded in ``log`` as the
        workload's writers record theirs (acknowledged with its offset, or failed with the error)."""
        if self.sock is None or self.sent_at is None:
            return {}
        try:
            self.sock.settimeout(wait_s)
            (size,) = struct.unpack(">i", _read_exact(self.sock, 4))
            answers = parse_produce_response(_read_exact(self.sock, size))
        except (OSError, DecodeError, struct.error) as error:
            self.error = repr(error)
            answers = {}
        finally:
            self.sock.close()
            self.sock = None
        now = self.answered_at = time.monotonic()
        for partition in self.partitions:
            code, base_offset = answers.get(partition, (-1, -1))
            name = _error_name(code) if partition in answers else "NO_ANSWER"
            self.answers[partition] = name
            if code == 0:
                self.log.acked[(partition, 0)] = (now, base_offset)
            else:
                self.log.failed[(partition, 0)] = name
        return dict(self.answers)

    @property
    def acknowledged(self) -> list[int]:
        """The partitions whose probe write the deposed leader acknowledged (must be none)."""
        return sorted(partition for partition, _ in self.log.acked)
