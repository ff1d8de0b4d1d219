"""Several brokers in one process for the replication unit tier: each has its own LogManager in a
temporary directory, its partitions and a ReplicaFetcherManager whose LeaderEndpoints call the
leader broker's partitions directly; the controller is an InMemoryAlterPartition that also makes
leaders and followers as a ZooKeeper controller would.  Time is a hand-moved clock."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

from pybroker.protocol.errors import ErrorCode
from pybroker.records import SimpleRecord, build_batch, validate_produce_batches
from pybroker.replication.alter_partition import InMemoryAlterPartition, LeaderAndIsr
from pybroker.replication.fetcher import ReplicaFetcherConfig, ReplicaFetcherManager
from pybroker.replication.leader_endpoint import LocalLeaderEndpoint
from pybroker.replication.partition import Partition
from pybroker.replication.replica_manager import ReplicaManager
from pybroker.replication.state_change import PartitionState, become_leader_or_follower
from pybroker.storage import LogConfig, LogManager

LAG_MS = 10_000
FAST = ReplicaFetcherConfig(replica_fetch_wait_max_ms=50, replica_fetch_backoff_ms=20)


class Clock:
    def __init__(self) -> None:
        self.ms = 1_700_000_000_000

    def __call__(self) -> int:
        return self.ms

    def advance(self, ms: int) -> None:
        self.ms += ms


class InProcessBroker:
    def __init__(self, cluster: Cluster, broker_id: int, directory: Path) -> None:
        self.cluster = cluster
        self.id = broker_id
        self.log_manager = LogManager([directory], clock=lambda: cluster.clock() / 1000)
        self.replica_manager = ReplicaManager(broker_id)
        self.partitions = self.replica_manager.partitions
        self.endpoints: dict[int, LocalLeaderEndpoint] = {}
        self.fetchers = ReplicaFetcherManager(
            broker_id, self.endpoint_for, self.partition, cluster.fetcher_config, cluster.clock
        )

    def endpoint_for(self, leader_id: int) -> LocalLeaderEndpoint:
        endpoint = self.endpoints.get(leader_id)
        if endpoint is None:
            leader = self.cluster.brokers[leader_id]
            endpoint = LocalLeaderEndpoint(leader_id, self.id, leader.served_partition, self.cluster.clock)
            endpoint.reachable = self.id not in self.cluster.isolated
            self.endpoints[leader_id] = endpoint
        return endpoint

    def partition(self, topic: str, index: int) -> Partition | None:
        return self.partitions.get((topic, index))

    def served_partition(self, topic: str, index: int) -> Partition | None:
        """What a request reaching this broker finds: nothing while the broker is down."""
        return None if self.id in self.cluster.down else self.partitions.get((topic, index))

    def create(self, topic: str, index: int, topic_id: uuid.UUID, config: LogConfig) -> Partition:
        log = self.log_manager.create_log(topic, index, config, topic_id)
        p = Partition(topic, index, topic_id, log, self.id)
        p.clock = self.cluster.clock
        p.alter_partition = self.cluster.controller
        p.replica_lag_time_max_ms = LAG_MS
        self.replica_manager.add_partition(p)
        return p

    def apply(self, topic: str, index: int, state: LeaderAndIsr, replicas: tuple[int, ...]) -> bool:
        """The controller's state for one partition, as the ZooKeeper wiring will apply it."""
        results = become_leader_or_follower(
            self.id,
            self.partition,
            self.fetchers,
            [
                PartitionState(
                    topic, index, state.leader, state.leader_epoch, state.isr, replicas, state.partition_epoch
                )
            ],
        )
        return results[(topic, index)] == ErrorCode.NONE

    def produce(
        self, topic: str, index: int, values: list[bytes], *, producer_id: int = -1, base_sequence: int = -1
    ):
        p = self.partitions[(topic, index)]
        buf = bytearray(
            build_batch(
                [SimpleRecord(b"k", v, (), self.cluster.clock()) for v in values],
                producer_id=producer_id,
                producer_epoch=0 if producer_id >= 0 else -1,
                base_sequence=base_sequence,
            )
        )
        return p.append_as_leader(buf, validate_produce_batches(buf), self.cluster.clock())

    def log_bytes(self, topic: str, index: int) -> bytes:
        log = self.partitions[(topic, index)].log
        out = b""
        offset = log.log_start_offset
        while offset < log.log_end_offset:
            sl = log.read(offset, 1 << 20)
            if sl is None:
                break
            data = sl.read()
            out += data
            offset = list(_headers(data))[-1].last_offset + 1
        return out

    async def shutdown(self) -> None:
        await self.fetchers.shutdown()
        self.log_manager.shutdown()


def _headers(data: bytes):
    from pybroker.records.batch import iter_batch_headers

    return iter_batch_headers(data)


class Cluster:
    def __init__(self, root: Path, size: int, fetcher_config: ReplicaFetcherConfig = FAST) -> None:
        self.clock = Clock()
        self.fetcher_config = fetcher_config
        self.controller = InMemoryAlterPartition()
        self.replicas: dict[tuple[str, int], tuple[int, ...]] = {}
        self.down: set[int] = set()
        self.isolated: set[int] = set()  # brokers whose fetchers reach no one
        self.brokers = {i: InProcessBroker(self, i, root / f"broker-{i}") for i in range(1, size + 1)}
        self.config = LogConfig(segment_bytes=64 * 1024)

    def create_topic(
        self, topic: str, replicas: tuple[int, ...], leader: int | None = None, min_isr: int = 1
    ) -> uuid.UUID:
        topic_id = uuid.uuid4()
        for b in replicas:
            self.brokers[b].create(topic, 0, topic_id, self.config).min_insync_replicas = min_isr
        self.replicas[(topic, 0)] = replicas
        state = LeaderAndIsr(leader or replicas[0], 0, replicas, 0)
        self.controller.states[(topic, 0)] = state
        self.propagate(topic, 0)
        return topic_id

    def propagate(self, topic: str, index: int) -> None:
        state = self.controller.states[(topic, index)]
        for b in self.replicas[(topic, index)]:
            if b not in self.down:
                self.brokers[b].apply(topic, index, state, self.replicas[(topic, index)])

    def elect(self, topic: str, new_leader: int, isr: tuple[int, ...] | None = None) -> LeaderAndIsr:
        """A controller's leader election: a new leader epoch, told to every live replica."""
        old = self.controller.states[(topic, 0)]
        state = LeaderAndIsr(new_leader, old.leader_epoch + 1, isr or old.isr, old.partition_epoch + 1)
        self.controller.states[(topic, 0)] = state
        self.propagate(topic, 0)
        return state

    def partition(self, broker: int, topic: str) -> Partition:
        return self.brokers[broker].partitions[(topic, 0)]

    def cut(self, broker: int) -> None:
        """The broker's fetchers can no longer reach anyone."""
        self.isolated.add(broker)
        for endpoint in self.brokers[broker].endpoints.values():
            endpoint.reachable = False

    def heal(self, broker: int) -> None:
        self.isolated.discard(broker)
        for endpoint in self.brokers[broker].endpoints.values():
            endpoint.reachable = True

    async def shutdown(self) -> None:
        for b in self.brokers.values():
            await b.shutdown()


async def wait_for(condition, timeout_s: float = 5.0, what: str = "condition") -> None:
    """Yield to the fetchers until ``condition()`` holds (generous deadline: a shared machine)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


__all__ = ["Cluster", "ErrorCode", "wait_for"]
