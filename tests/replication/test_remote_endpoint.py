"""RemoteLeaderEndpoint over real sockets: a follower in the test process fetches from a real broker
with replica Fetch requests (ReplicaState / ReplicaId as the negotiated version carries it),
OffsetForLeaderEpoch and ListOffsets, through pybroker's own codec."""

from __future__ import annotations

import asyncio
import os
import threading
import time

import pytest

from compat_tests.brokers import PyBroker
from pybroker.protocol.errors import ErrorCode
from pybroker.records import SimpleRecord, build_batch
from pybroker.replication.alter_partition import InMemoryAlterPartition, LeaderAndIsr
from pybroker.replication.fetcher import InitialFetchState, ReplicaFetcherConfig, ReplicaFetcherManager
from pybroker.replication.leader_endpoint import FetchParams, FetchPartition, RemoteLeaderEndpoint
from pybroker.replication.partition import Partition
from pybroker.storage import LogConfig, LogManager
from pybroker.testing.embedded import EmbeddedBroker
from tests.replication.cluster import wait_for
from tests.wire import WireClient

PRODUCE, CREATE_TOPICS = 0, 19
LEADER, FOLLOWER = 0, 1
STRANGER = 5  # a replica id no test broker has (Apache Kafka's test node is 1)


def produce(
    c: WireClient, topic: str, values: list[bytes], acks: int = 1, timeout_ms: int = 10_000, version: int = 9
) -> dict:
    batch = build_batch([SimpleRecord(b"k", v, (), 1_700_000_000_000) for v in values])
    r = c.request(
        PRODUCE,
        version,
        {
            "acks": acks,
            "timeout_ms": timeout_ms,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}],
        },
    )
    return r["responses"][0]["partition_responses"][0]


def create_topic(c: WireClient, name: str) -> None:
    r = c.request(
        CREATE_TOPICS,
        7,
        {
            "topics": [{"name": name, "num_partitions": 1, "replication_factor": 1, "configs": []}],
            "timeout_ms": 10000,
        },
    )
    assert r["topics"][0]["error_code"] == 0, r


def test_follower_replicates_from_a_broker_over_sockets(tmp_path):
    """The leader is a broker serving on a real socket (on its own event loop and thread); it is
    told that node 1 is a replica (what the controller wiring will do).  Node 1, in the test
    process, fetches over the socket: it copies the log byte for byte, joins the ISR through
    AlterPartition, and an acks=all produce completes once it has fetched."""
    controller = InMemoryAlterPartition()
    with EmbeddedBroker(tmp_path / "leader", {"node.id": str(LEADER)}) as leader:
        host, port = leader.host, leader.port
        with WireClient(leader.bootstrap) as c:
            create_topic(c, "r")
            for i in range(5):
                assert produce(c, "r", [b"before-%d-%d" % (i, j) for j in range(4)])["error_code"] == 0

        async def make_leader(b):
            p = b.partition("r", 0)
            controller.states[("r", 0)] = LeaderAndIsr(LEADER, 1, (LEADER,), 1)
            p.alter_partition = controller
            p.min_insync_replicas = 1
            assert p.make_leader(1, (LEADER,), (LEADER, FOLLOWER), 1)
            return p.topic_id

        topic_id = leader.call(make_leader)

        def leader_state(b):
            async def read():
                p = b.partition("r", 0)
                return p.isr, p.high_watermark, p.log_end_offset, p.log.read(0, 1 << 20).read()

            return read()

        async def follower_side():
            log_manager = LogManager([tmp_path / "follower"])
            log = log_manager.create_log("r", 0, LogConfig(), topic_id)
            p = Partition("r", 0, topic_id, log, FOLLOWER)
            assert p.make_follower(LEADER, 1, (LEADER,), (LEADER, FOLLOWER), 1)
            endpoints: list[RemoteLeaderEndpoint] = []

            def endpoint_for(leader_id: int) -> RemoteLeaderEndpoint:
                assert leader_id == LEADER
                endpoints.append(RemoteLeaderEndpoint(LEADER, host, port, FOLLOWER))
                return endpoints[-1]

            config = ReplicaFetcherConfig(replica_fetch_wait_max_ms=100, replica_fetch_backoff_ms=50)
            manager = ReplicaFetcherManager(
                FOLLOWER, endpoint_for, lambda t, i: p if (t, i) == ("r", 0) else None, config
            )
            manager.add_fetcher_for_partitions({("r", 0): InitialFetchState(LEADER, 1, p.high_watermark)})
            try:
                await wait_for(
                    lambda: p.log_end_offset == 20, timeout_s=20, what="the follower to copy 20 records"
                )
                isr, hw, leo, data = leader.call(leader_state)
                assert leo == 20
                assert p.log.read(0, 1 << 20).read() == data  # byte for byte, offsets and epochs kept
                # The follower reached the high watermark within epoch 1: the leader adds it to the ISR.
                await wait_for_leader(
                    lambda: leader.call(leader_state)[0] == (LEADER, FOLLOWER), "ISR expansion"
                )
                assert controller.states[("r", 0)].isr == (LEADER, FOLLOWER)
                await wait_for(
                    lambda: p.high_watermark == 20, timeout_s=20, what="the follower's high watermark"
                )
                # acks=all now needs the follower: it completes because the follower fetches it.
                result: dict = {}

                def produce_all():
                    with WireClient(leader.bootstrap) as c2:
                        result.update(produce(c2, "r", [b"acks-all"], acks=-1))

                t = threading.Thread(target=produce_all)
                t.start()
                await wait_for(lambda: not t.is_alive(), timeout_s=20, what="the acks=all produce")
                assert result["error_code"] == 0 and result["base_offset"] == 20
                await wait_for(lambda: p.log_end_offset == 21, timeout_s=20, what="the follower to fetch it")
                assert endpoints[0].version(1) == 16  # Fetch v16: the replica id went in ReplicaState
            finally:
                await manager.shutdown()
                log_manager.shutdown()

        asyncio.run(follower_side())


async def wait_for_leader(condition, what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A broker process: pybroker, or Apache Kafka with INTEGRATION_BROKER=kafka (the expectations
    of test_requests_against_a_broker_process are Kafka's)."""
    workdir = tmp_path_factory.mktemp("remote")
    if os.environ.get("INTEGRATION_BROKER", "pybroker") == "kafka":
        from compat_tests.reference.apache_kafka import ApacheKafka

        broker = ApacheKafka(workdir)
    else:
        broker = PyBroker(workdir)
    broker.start()
    try:
        with WireClient(broker.bootstrap) as c:
            create_topic(c, "solo")
            produce(c, "solo", [b"a", b"b", b"c"])
            produce(c, "solo", [b"d"])
        yield broker.bootstrap
    finally:
        broker.stop()


def test_requests_against_a_broker_process(served):
    """Against a `python -m pybroker serve` process (a single broker: node 5 is no replica of its
    partitions), or Apache Kafka with INTEGRATION_BROKER=kafka.  The endpoint's
    OffsetForLeaderEpoch and ListOffsets are answered as to a follower, and its replica fetch is
    refused as a non-replica's."""
    host, port = served.rsplit(":", 1)

    async def main():
        endpoint = RemoteLeaderEndpoint(0, host, int(port), STRANGER)
        try:
            ends = await endpoint.fetch_epoch_end_offsets({("solo", 0): (0, 0), ("missing", 0): (-1, 0)})
            assert (
                ends[("solo", 0)].error,
                ends[("solo", 0)].leader_epoch,
                ends[("solo", 0)].end_offset,
            ) == (
                ErrorCode.NONE,
                0,
                4,
            )
            assert ends[("missing", 0)].error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            stale = await endpoint.fetch_epoch_end_offsets({("solo", 0): (5, 0)})
            assert stale[("solo", 0)].error == ErrorCode.UNKNOWN_LEADER_EPOCH
            assert await endpoint.fetch_earliest_offset(("solo", 0), 0) == 0
            assert await endpoint.fetch_latest_offset(("solo", 0), 0) == 4
            fetched = await endpoint.fetch(
                [FetchPartition("solo", 0, await topic_id(endpoint), 0, 0, 0, 1 << 20)],
                FetchParams(max_wait_ms=0),
            )
            # Kafka's answer to a fetch from a replica it does not know: the follower's metadata
            # may be newer than the leader's (followerReplicaOrThrow).
            assert fetched[("solo", 0)].error == ErrorCode.UNKNOWN_LEADER_EPOCH
            assert fetched[("solo", 0)].records == b""
        finally:
            await endpoint.close()

    asyncio.run(main())


async def topic_id(endpoint: RemoteLeaderEndpoint):
    """The topic's id, from Metadata over the endpoint's own connection helpers."""
    from pybroker.cli.client import KafkaClient

    host, port = endpoint.host, endpoint.port
    with KafkaClient(f"{host}:{port}") as client:
        return client.topic("solo").topic_id


def test_a_follower_broker_answers_clients_not_leader_or_follower(tmp_path):
    """A broker told it follows another (node 7) refuses Produce with NOT_LEADER_OR_FOLLOWER and
    the KIP-951 current leader (Produce v10+), and consumer Fetch and ListOffsets too; made leader
    again at a newer epoch, it takes writes."""
    with EmbeddedBroker(tmp_path / "b", {"node.id": "0"}) as broker:
        with WireClient(broker.bootstrap) as c:
            create_topic(c, "f")
            assert produce(c, "f", [b"a"])["error_code"] == 0

            async def follow(b):
                assert b.partition("f", 0).make_follower(7, 1, (7, 0), (7, 0), 1)

            broker.call(follow)
            resp = produce(c, "f", [b"b"], version=11)
            assert resp["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
            assert resp["current_leader"] == {"leader_id": 7, "leader_epoch": 1}
            resp = produce(c, "f", [b"b"], version=9)  # no CurrentLeader before v10
            assert resp["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER

            async def topic_id_of(b):
                return b.partition("f", 0).topic_id

            topic_id_ = broker.call(topic_id_of)
            fetch = c.request(
                1,
                16,
                {
                    "max_wait_ms": 0,
                    "min_bytes": 1,
                    "topics": [
                        {
                            "topic_id": topic_id_,
                            "partitions": [
                                {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}
                            ],
                        }
                    ],
                },
            )
            assert fetch["responses"][0]["partitions"][0]["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
            offsets = c.request(
                2,
                7,
                {
                    "replica_id": -1,
                    "topics": [{"name": "f", "partitions": [{"partition_index": 0, "timestamp": -1}]}],
                },
            )
            assert offsets["topics"][0]["partitions"][0]["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER

            async def lead(b):
                p = b.partition("f", 0)
                assert not p.make_leader(0, (0,), (0,), 0)  # older than epoch 1: ignored
                assert p.make_leader(2, (0,), (0,), 2)

            broker.call(lead)
            resp = produce(c, "f", [b"c"], acks=-1)
            assert (resp["error_code"], resp["base_offset"]) == (0, 1)


def test_the_fetcher_backs_off_and_reconnects_when_the_leader_restarts(tmp_path):
    """The leader's process goes away and comes back on the same address: the fetcher backs off on
    the connection errors, reconnects, and goes on copying from where it was."""
    from pybroker.testing.embedded import free_port

    port = free_port()
    controller = InMemoryAlterPartition()

    def start_leader() -> EmbeddedBroker:
        broker = EmbeddedBroker(tmp_path / "leader", {"node.id": str(LEADER)}, port=port)
        broker.start()
        return broker

    async def make_leader(b):
        p = b.partition("r", 0)
        controller.states[("r", 0)] = LeaderAndIsr(LEADER, 1, (LEADER,), 1)
        p.alter_partition = controller
        p.make_leader(1, (LEADER,), (LEADER, FOLLOWER), 1)
        return p.topic_id

    leader = start_leader()
    try:
        with WireClient(leader.bootstrap) as c:
            create_topic(c, "r")
            assert produce(c, "r", [b"one", b"two"])["error_code"] == 0
        topic_id = leader.call(make_leader)

        async def follower_side():
            nonlocal leader
            log_manager = LogManager([tmp_path / "follower"])
            p = Partition("r", 0, topic_id, log_manager.create_log("r", 0, LogConfig(), topic_id), FOLLOWER)
            p.make_follower(LEADER, 1, (LEADER,), (LEADER, FOLLOWER), 1)
            endpoint = RemoteLeaderEndpoint(LEADER, "127.0.0.1", port, FOLLOWER, socket_timeout_ms=2000)
            config = ReplicaFetcherConfig(replica_fetch_wait_max_ms=100, replica_fetch_backoff_ms=50)
            manager = ReplicaFetcherManager(FOLLOWER, lambda _: endpoint, lambda t, i: p, config)
            manager.add_fetcher_for_partitions({("r", 0): InitialFetchState(LEADER, 1, 0)})
            try:
                await wait_for(lambda: p.log_end_offset == 2, timeout_s=20, what="the first records")
                await asyncio.get_running_loop().run_in_executor(None, leader.stop)
                await asyncio.sleep(0.3)  # fetches fail meanwhile: connection refused, backed off
                leader = await asyncio.get_running_loop().run_in_executor(None, start_leader)
                await asyncio.get_running_loop().run_in_executor(None, leader.call, make_leader)
                with WireClient(leader.bootstrap) as c:
                    assert produce(c, "r", [b"three"])["error_code"] == 0
                await wait_for(lambda: p.log_end_offset == 3, timeout_s=20, what="fetching after the restart")
            finally:
                await manager.shutdown()
                log_manager.shutdown()

        asyncio.run(follower_side())
    finally:
        leader.stop()
