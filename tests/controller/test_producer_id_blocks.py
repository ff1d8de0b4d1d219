"""Producer ids in cluster mode come from blocks claimed in ZooKeeper (Kafka's ZkProducerIdManager): two
brokers never hand out the same id, and allocation on the event loop never waits on ZooKeeper."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from kazoo.client import KazooClient

from pybroker.controller.producer_id_manager import PRODUCER_ID_BLOCK_SIZE, ProducerIdManager
from pybroker.controller.zk_client import KafkaZkClient
from pybroker.protocol.errors import ErrorCode, KafkaError

pytestmark = pytest.mark.timeout(120)


def test_brokers_racing_for_blocks_get_disjoint_ones_in_kafkas_znode_format(zk_connect: str) -> None:
    clients = [KafkaZkClient(zk_connect, session_timeout_ms=6000) for _ in range(3)]
    for client in clients:
        client.start()
    try:
        with ThreadPoolExecutor(6) as pool:
            futures = [
                pool.submit(clients[i % 3].claim_producer_id_block, i % 3 + 1, 1000) for i in range(30)
            ]
            blocks = [f.result(60) for f in futures]
        assert all(last - first == 999 for first, last in blocks)
        assert sorted(first for first, _ in blocks) == [1000 * i for i in range(30)]  # disjoint, none lost
        kazoo = KazooClient(zk_connect)
        kazoo.start(timeout=10)
        try:
            znode = json.loads(kazoo.get("/latest_producer_id_block")[0])
        finally:
            kazoo.stop()
            kazoo.close()
        assert znode["version"] == 1 and znode["block_end"] == "29999" and znode["block_start"] == "29000"
        assert znode["broker"] in (1, 2, 3)
    finally:
        for client in clients:
            client.close()


def test_two_managers_on_one_zookeeper_never_repeat_an_id(zk_connect: str) -> None:
    clients = [KafkaZkClient(zk_connect, session_timeout_ms=6000) for _ in range(2)]
    for client in clients:
        client.start()
    try:
        managers = [
            ProducerIdManager(lambda c=c, b=b: c.claim_producer_id_block(b, PRODUCER_ID_BLOCK_SIZE))
            for b, c in enumerate(clients, start=1)
        ]
        for manager in managers:
            manager.start()
        seen: list[int] = []
        deadline = time.monotonic() + 60
        while len(seen) < 2 * 2500 and time.monotonic() < deadline:
            for manager in managers:
                try:
                    seen.append(manager.generate_producer_id())
                except KafkaError as exc:  # the next block is on its way: retry, as a client would
                    assert exc.code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
                    time.sleep(0.01)
        assert len(seen) >= 5000
        assert len(set(seen)) == len(seen)
    finally:
        for client in clients:
            client.close()


def next_id_once_a_block_is_there(manager: ProducerIdManager, timeout_s: float = 10) -> int:
    """The next id, retried while the manager answers COORDINATOR_LOAD_IN_PROGRESS, as a client retries."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return manager.generate_producer_id()
        except KafkaError as exc:
            assert exc.code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
            assert time.monotonic() < deadline
            time.sleep(0.01)


def test_next_block_is_claimed_before_the_current_one_runs_out() -> None:
    claimed = threading.Event()
    blocks = iter([(0, 999), (5000, 5999)])
    calls: list[float] = []

    def claim() -> tuple[int, int]:
        calls.append(time.monotonic())
        block = next(blocks)
        if len(calls) == 2:
            claimed.set()
        return block

    manager = ProducerIdManager(claim)
    manager.start()
    ids = [manager.generate_producer_id() for _ in range(901)]
    assert ids == list(range(901))
    assert claimed.wait(10)  # prefetched at 90 % of the block, in a thread
    ids += [manager.generate_producer_id() for _ in range(99)]
    assert ids == list(range(1000))
    # The claim returned just now: the block is stored a moment later.
    assert next_id_once_a_block_is_there(manager) == 5000
    assert len(calls) == 2  # one prefetch, no claim on the allocating thread


def test_allocation_fails_retriably_while_no_block_is_available() -> None:
    release = threading.Event()
    first = [True]

    def claim() -> tuple[int, int]:
        if first[0]:
            first[0] = False
            return 0, 9
        release.wait(10)  # ZooKeeper is slow
        return 10, 19

    manager = ProducerIdManager(claim)
    manager.start()
    assert [manager.generate_producer_id() for _ in range(10)] == list(range(10))
    with pytest.raises(KafkaError) as refused:
        manager.generate_producer_id()
    assert refused.value.code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    release.set()
    assert next_id_once_a_block_is_there(manager) == 10
