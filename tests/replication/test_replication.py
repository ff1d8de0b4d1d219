"""The replication unit tier: two and three brokers in one process (in-process LeaderEndpoints, an
in-memory controller), covering the leader's ISR/high-watermark logic and the follower's data path."""

from __future__ import annotations

import asyncio

import pytest

from pybroker.protocol.errors import ErrorCode
from pybroker.storage.errors import OutOfOrderSequenceError
from tests.replication.cluster import LAG_MS, Cluster, wait_for


def run(root, size, body):
    async def main():
        cluster = Cluster(root, size)
        try:
            await body(cluster)
        finally:
            await cluster.shutdown()

    asyncio.run(main())


def in_sync(cluster: Cluster, topic: str, brokers) -> bool:
    leader = cluster.partition(cluster.controller.states[(topic, 0)].leader, topic)
    return all(
        cluster.partition(b, topic).log_end_offset == leader.log_end_offset
        and cluster.partition(b, topic).high_watermark == leader.high_watermark == leader.log_end_offset
        for b in brokers
    )


def test_followers_copy_the_leader_and_the_high_watermark_advances(tmp_path):
    async def body(c: Cluster):
        c.create_topic("t", (1, 2, 3))
        leader = c.partition(1, "t")
        for i in range(5):
            c.brokers[1].produce("t", 0, [b"v%d-%d" % (i, j) for j in range(3)])
        assert leader.log_end_offset == 15
        assert leader.high_watermark == 0  # nothing is committed before the followers have it
        await wait_for(lambda: in_sync(c, "t", (2, 3)), what="followers to catch up")
        assert leader.high_watermark == 15
        # Byte for byte: the same batches, offsets and leader epochs.
        assert c.brokers[2].log_bytes("t", 0) == c.brokers[1].log_bytes("t", 0)
        assert c.brokers[3].log_bytes("t", 0) == c.brokers[1].log_bytes("t", 0)
        assert c.partition(2, "t").log.leader_epochs.entries == [(0, 0)]

    run(tmp_path, 3, body)


def test_acks_all_completes_once_the_isr_has_the_batch(tmp_path):
    async def body(c: Cluster):
        c.create_topic("t", (1, 2, 3), min_isr=2)
        leader = c.partition(1, "t")
        c.cut(3)
        info = c.brokers[1].produce("t", 0, [b"a", b"b"])
        fut = leader.wait_replicated(info.last_offset)
        assert fut is not None
        await wait_for(lambda: c.partition(2, "t").log_end_offset == 2, what="broker 2 to fetch")
        await asyncio.sleep(0.1)
        assert not fut.done(), "acks=all must wait for broker 3, still in the ISR"
        assert leader.high_watermark == 0
        # Broker 3 lags past replica.lag.time.max.ms: the ISR shrinks and the write is committed.
        c.clock.advance(LAG_MS + 1)
        assert leader.out_of_sync_replicas(c.clock()) == [3]
        assert leader.maybe_shrink_isr()
        await wait_for(fut.done, what="the acks=all write")
        assert fut.result() == ErrorCode.NONE
        assert leader.isr == (1, 2)
        assert c.controller.states[("t", 0)].isr == (1, 2)
        assert leader.high_watermark == 2

    run(tmp_path, 3, body)


def test_isr_shrinks_when_a_follower_stops_and_expands_when_it_catches_up(tmp_path):
    async def body(c: Cluster):
        c.create_topic("t", (1, 2, 3))
        leader = c.partition(1, "t")
        c.brokers[1].produce("t", 0, [b"x"])
        await wait_for(lambda: in_sync(c, "t", (2, 3)), what="first sync")
        c.cut(3)
        c.brokers[1].produce("t", 0, [b"y"] * 10)
        await wait_for(lambda: c.partition(2, "t").log_end_offset == 11, what="broker 2")
        c.clock.advance(LAG_MS // 2)
        assert not leader.maybe_shrink_isr(), "not yet past the lag time"
        c.clock.advance(LAG_MS // 2 + 1)
        assert leader.maybe_shrink_isr()
        await wait_for(lambda: leader.isr == (1, 2), what="ISR shrink")
        assert leader.partition_epoch == 1
        await wait_for(lambda: leader.high_watermark == 11, what="HW without broker 3")
        # Broker 3 comes back, catches up to the high watermark and joins the ISR again.
        c.heal(3)
        await wait_for(lambda: leader.isr == (1, 2, 3), what="ISR expansion")
        assert c.controller.states[("t", 0)].isr == (1, 2, 3)
        assert c.partition(3, "t").log_end_offset == 11
        assert c.brokers[3].log_bytes("t", 0) == c.brokers[1].log_bytes("t", 0)

    run(tmp_path, 3, body)


def test_not_enough_replicas_before_append_and_after_append(tmp_path):
    async def body(c: Cluster):
        c.create_topic("t", (1, 2), min_isr=2)
        leader = c.partition(1, "t")
        assert leader.has_enough_replicas()
        c.cut(2)
        info = c.brokers[1].produce("t", 0, [b"a"])
        fut = leader.wait_replicated(info.last_offset)
        assert fut is not None and not fut.done()
        # The ISR shrinks to the leader alone while the write waits: it is committed (the HW moves)
        # but to fewer replicas than min.insync.replicas.
        c.clock.advance(LAG_MS + 1)
        assert leader.maybe_shrink_isr()
        await wait_for(fut.done, what="the waiting write")
        assert fut.result() == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        assert leader.isr == (1,)
        # From now on acks=all is refused before anything is appended.
        assert not leader.has_enough_replicas()
        assert leader.check_enough_replicas_reach_offset(1) == (
            True,
            ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        )

    run(tmp_path, 2, body)


def test_new_leader_and_divergent_follower_truncates_to_the_epoch_end(tmp_path):
    """KIP-101: the old leader wrote past what the new leader has; when it returns as a follower it
    cuts its log where its epoch ends on the new leader, then copies the new leader's epoch."""

    async def body(c: Cluster):
        c.create_topic("t", (1, 2))
        old = c.partition(1, "t")
        c.brokers[1].produce("t", 0, [b"committed"] * 4)
        await wait_for(lambda: in_sync(c, "t", (2,)), what="first sync")
        # Broker 2 stops fetching; broker 1 (leader, epoch 0) takes writes broker 2 never sees.
        c.cut(2)
        c.brokers[1].produce("t", 0, [b"lost-1", b"lost-2"])
        c.brokers[1].produce("t", 0, [b"lost-3"])
        assert old.log_end_offset == 7
        # Broker 1 dies; broker 2 is elected (epoch 1) and takes new writes.
        c.down.add(1)
        c.elect("t", 2, isr=(2,))
        new = c.partition(2, "t")
        assert new.is_leader and new.leader_epoch == 1
        assert new.log.leader_epochs.entries == [(0, 0), (1, 4)]
        c.brokers[2].produce("t", 0, [b"new-1", b"new-2", b"new-3", b"new-4", b"new-5"])
        # Broker 1 returns and is told it follows broker 2 at epoch 1.
        c.down.discard(1)
        c.heal(2)
        c.propagate("t", 0)
        assert not old.is_leader and old.leader_id == 2
        await wait_for(
            lambda: old.log_end_offset == 9 and old.high_watermark == 9, what="old leader to follow"
        )
        assert c.brokers[1].log_bytes("t", 0) == c.brokers[2].log_bytes("t", 0)
        assert old.log.leader_epochs.entries == [(0, 0), (1, 4)]
        values = _values(c, 1)
        assert b"lost-1" not in values and values[-1] == b"new-5"

    run(tmp_path, 2, body)


def test_truncation_asks_again_for_an_epoch_the_leader_never_had(tmp_path):
    """The follower's latest epoch is unknown to the leader, and the epoch the leader answers with
    is unknown to the follower: the first answer cuts the follower to where its own older epoch
    ends, and it asks again with that epoch (Kafka's getOffsetTruncationState, not complete)."""

    async def body(c: Cluster):
        c.create_topic("t", (1, 2, 3))
        c.brokers[1].produce("t", 0, [b"e0"] * 3)
        await wait_for(lambda: in_sync(c, "t", (2, 3)), what="first sync")
        c.cut(1)
        c.cut(2)
        c.cut(3)
        # Epoch 1: broker 3 leads and writes; broker 2 sees none of it.
        c.elect("t", 3, isr=(3,))
        c.brokers[3].produce("t", 0, [b"e1-a", b"e1-b"])
        # Epoch 2: broker 2 leads (broker 3 is down) and writes.
        c.down.add(3)
        c.elect("t", 2, isr=(2,))
        c.brokers[2].produce("t", 0, [b"e2-a", b"e2-b", b"e2-c"])
        assert c.partition(2, "t").log.leader_epochs.entries == [(0, 0), (2, 3)]
        # Epoch 3: broker 3 is back and leads (broker 2 is down), and writes.
        c.down.discard(3)
        c.down.add(2)
        c.elect("t", 3, isr=(3,))
        c.brokers[3].produce("t", 0, [b"e3-a"])
        assert c.partition(3, "t").log.leader_epochs.entries == [(0, 0), (1, 3), (3, 5)]
        # Broker 2 returns as broker 3's follower.
        asked: list[int] = []
        endpoint = c.brokers[2].endpoint_for(3)
        original = endpoint.fetch_epoch_end_offsets

        async def spy(partitions):
            asked.extend(epoch for _, epoch in partitions.values())
            return await original(partitions)

        endpoint.fetch_epoch_end_offsets = spy
        c.down.discard(2)
        c.heal(2)
        c.propagate("t", 0)
        p2 = c.partition(2, "t")
        # (Broker 2's own log also ends at 6: wait for the leader's epochs, not just the offset.)
        await wait_for(
            lambda: p2.log.leader_epochs.entries == [(0, 0), (1, 3), (3, 5)] and p2.high_watermark == 6,
            what="broker 2 to converge",
        )
        # Epoch 2 is unknown on broker 3, which answers epoch 1 (ending at 5); broker 2 never had
        # epoch 1, so it cuts where its epoch 0 ends (3) and asks again with epoch 0.
        assert asked == [2, 0]
        assert c.brokers[2].log_bytes("t", 0) == c.brokers[3].log_bytes("t", 0)
        assert p2.log.leader_epochs.entries == [(0, 0), (1, 3), (3, 5)]
        assert _values(c, 2) == [b"e0"] * 3 + [b"e1-a", b"e1-b", b"e3-a"]

    run(tmp_path, 3, body)


def test_idempotent_producer_state_survives_on_the_follower(tmp_path):
    async def body(c: Cluster):
        c.create_topic("t", (1, 2))
        c.brokers[1].produce("t", 0, [b"a", b"b"], producer_id=77, base_sequence=0)
        c.brokers[1].produce("t", 0, [b"c"], producer_id=77, base_sequence=2)
        await wait_for(lambda: in_sync(c, "t", (2,)), what="sync")
        follower = c.partition(2, "t")
        assert follower.log.producer_state.producers[77].last_sequence == 2
        # Failover: broker 2 leads; the producer's retry of the last batch is a duplicate there.
        c.elect("t", 2)
        retry = c.brokers[2].produce("t", 0, [b"c"], producer_id=77, base_sequence=2)
        assert retry.duplicate and retry.first_offset == 2
        with pytest.raises(OutOfOrderSequenceError):
            c.brokers[2].produce("t", 0, [b"e"], producer_id=77, base_sequence=5)
        nxt = c.brokers[2].produce("t", 0, [b"d"], producer_id=77, base_sequence=3)
        assert not nxt.duplicate and nxt.first_offset == 3

    run(tmp_path, 2, body)


def test_follower_behind_the_leaders_log_start_starts_over_there(tmp_path):
    async def body(c: Cluster):
        c.create_topic("t", (1, 2))
        leader = c.partition(1, "t")
        c.cut(2)
        for _ in range(4):
            c.brokers[1].produce("t", 0, [b"x"] * 5)
        # DeleteRecords on the leader past everything the follower has.
        leader.log.delete_records_before(12)
        c.heal(2)
        follower = c.partition(2, "t")
        await wait_for(lambda: follower.log_end_offset == 20, what="the follower to reset and catch up")
        assert follower.log_start_offset == 12
        # The log starts at the batch holding offset 12 (Kafka: the first fetched batch's base offset).
        assert follower.log.segments[0].base_offset == 10

    run(tmp_path, 2, body)


def test_stale_states_are_ignored_and_a_resigning_leader_fails_its_waiters(tmp_path):
    async def body(c: Cluster):
        c.create_topic("t", (1, 2))
        p1 = c.partition(1, "t")
        c.cut(2)
        info = c.brokers[1].produce("t", 0, [b"a"])
        fut = p1.wait_replicated(info.last_offset)
        state = c.elect("t", 2)  # epoch 1: broker 1 follows
        assert await asyncio.wait_for(fut, 2) == ErrorCode.NOT_LEADER_OR_FOLLOWER
        # An older epoch's state (a delayed controller message) changes nothing.
        assert not p1.make_leader(0, (1, 2), (1, 2), 0)
        assert p1.leader_id == 2 and p1.leader_epoch == state.leader_epoch
        # The old leader refuses writes; a fetch with an old epoch is fenced.
        r = c.partition(2, "t").fetch_for_follower(1, 0, 0, 1000, 0, c.clock())
        assert r.error == ErrorCode.FENCED_LEADER_EPOCH
        r = c.partition(2, "t").fetch_for_follower(1, 0, 5, 1000, 0, c.clock())
        assert r.error == ErrorCode.UNKNOWN_LEADER_EPOCH
        r = p1.fetch_for_follower(2, 0, 1, 1000, 0, c.clock())
        assert r.error == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert p1.check_leader() == ErrorCode.NOT_LEADER_OR_FOLLOWER

    run(tmp_path, 2, body)


def test_a_fenced_follower_waits_for_the_controllers_next_state(tmp_path):
    async def body(c: Cluster):
        c.create_topic("t", (1, 2))
        c.brokers[1].produce("t", 0, [b"a"])
        await wait_for(lambda: in_sync(c, "t", (2,)), what="sync")
        # The leader moves to epoch 1 but broker 2 has not heard yet: its fetches are fenced.
        p1 = c.partition(1, "t")
        p1.make_leader(1, (1, 2), (1, 2), 1)
        c.controller.states[("t", 0)] = c.controller.states[("t", 0)].__class__(1, 1, (1, 2), 1)
        c.brokers[1].produce("t", 0, [b"b"])
        fetcher = next(iter(c.brokers[2].fetchers.fetchers.values()))
        await wait_for(lambda: fetcher.states[("t", 0)].fenced, what="the follower to be fenced")
        assert c.partition(2, "t").log_end_offset == 1
        c.propagate("t", 0)  # the new state arrives
        await wait_for(lambda: c.partition(2, "t").log_end_offset == 2, what="fetching at epoch 1")

    run(tmp_path, 2, body)


def _values(c: Cluster, broker: int) -> list[bytes]:
    from pybroker.records.reader import read_records

    data = c.brokers[broker].log_bytes("t", 0)
    return [r.value for r in read_records(data)]


def _produce_request(values: list[bytes]) -> list[dict]:
    from pybroker.records import SimpleRecord, build_batch

    batch = build_batch([SimpleRecord(b"k", v, (), 1_700_000_000_000) for v in values])
    return [{"name": "t", "partition_data": [{"index": 0, "records": batch}]}]


async def _append(c: Cluster, broker: int, values: list[bytes], acks: int = -1) -> dict:
    result = c.brokers[broker].replica_manager.append_records(
        _produce_request(values),
        acks=acks,
        timeout_ms=5000,
        api_version=11,
        transactional_id=None,
        now_ms=c.clock(),
    )
    if not isinstance(result, list):
        result = await result
    return result[0]["partition_responses"][0]


def test_produce_through_the_replica_manager(tmp_path):
    """The Produce path (ReplicaManager.append_records) on a cluster: acks=all answers once the
    followers have the batch, a follower answers NOT_LEADER_OR_FOLLOWER with the leader it knows
    (KIP-951), and min.insync.replicas is enforced before and after the append."""

    async def body(c: Cluster):
        c.create_topic("t", (1, 2, 3), min_isr=2)
        resp = await _append(c, 1, [b"a", b"b"])
        assert (resp["error_code"], resp["base_offset"]) == (ErrorCode.NONE, 0)
        assert all(c.partition(b, "t").log_end_offset == 2 for b in (2, 3)), (
            "acks=all answered before the ISR had it"
        )
        resp = await _append(c, 2, [b"x"])
        assert resp["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert resp["current_leader"] == {"leader_id": 1, "leader_epoch": 0}
        # Brokers 2 and 3 stop fetching: the write waits, the ISR shrinks to the leader alone, and
        # the write is answered NOT_ENOUGH_REPLICAS_AFTER_APPEND.
        c.cut(2)
        c.cut(3)
        pending = asyncio.ensure_future(_append(c, 1, [b"c"]))
        await asyncio.sleep(0.05)
        assert not pending.done()
        c.clock.advance(LAG_MS + 1)
        assert c.partition(1, "t").maybe_shrink_isr()
        resp = await asyncio.wait_for(pending, 5)
        assert resp["error_code"] == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        assert c.partition(1, "t").log_end_offset == 3  # written, as Kafka does
        # Now refused before anything is written; acks=1 still appends.
        resp = await _append(c, 1, [b"d"])
        assert resp["error_code"] == ErrorCode.NOT_ENOUGH_REPLICAS
        assert c.partition(1, "t").log_end_offset == 3
        resp = await _append(c, 1, [b"e"], acks=1)
        assert (resp["error_code"], resp["base_offset"]) == (ErrorCode.NONE, 3)

    run(tmp_path, 3, body)


def test_replica_fetch_through_the_replica_manager(tmp_path):
    """The leader's Fetch path (ReplicaManager.fetch_messages with a replica id) reads past the
    high watermark up to the log end, records the follower's position and answers the new HW; a
    consumer fetch on the same partition stops at the HW."""
    from pybroker.replication.replica_manager import FetchPartitionStatus

    async def body(c: Cluster):
        c.create_topic("t", (1, 2))
        c.cut(2)
        c.brokers[1].produce("t", 0, [b"a", b"b", b"c"])
        leader = c.partition(1, "t")
        rm = c.brokers[1].replica_manager

        def status() -> FetchPartitionStatus:
            resp = {"partition_index": 0, "error_code": 0, "records": b""}
            return FetchPartitionStatus(leader, 0, 1 << 20, 0, resp)

        consumer = status()
        assert (
            rm.fetch_messages([consumer], max_bytes=1 << 20, min_bytes=1, max_wait_ms=0, read_committed=False)
            is None
        )
        assert consumer.resp["high_watermark"] == 0 and consumer.resp["records"] == b""
        replica = status()
        waiting = rm.fetch_messages(
            [replica], max_bytes=1 << 20, min_bytes=1, max_wait_ms=0, read_committed=False, replica_id=2
        )
        assert waiting is None
        assert replica.resp["error_code"] == ErrorCode.NONE and len(replica.resp["records"]) > 0
        assert replica.resp["high_watermark"] == 0  # the follower asked from 0: it has nothing yet
        again = FetchPartitionStatus(leader, 3, 1 << 20, 0, {"partition_index": 0, "error_code": 0})
        rm.fetch_messages(
            [again], max_bytes=1 << 20, min_bytes=1, max_wait_ms=0, read_committed=False, replica_id=2
        )
        assert again.resp["high_watermark"] == 3 == leader.high_watermark
        stale = FetchPartitionStatus(leader, 3, 1 << 20, 7, {"partition_index": 0, "error_code": 0})
        rm.fetch_messages(
            [stale], max_bytes=1 << 20, min_bytes=1, max_wait_ms=0, read_committed=False, replica_id=2
        )
        assert stale.resp["error_code"] == ErrorCode.UNKNOWN_LEADER_EPOCH

    run(tmp_path, 2, body)


def test_the_periodic_isr_check_shrinks_a_lagging_follower(tmp_path):
    from pybroker.replication.isr import run_isr_expiration

    async def body(c: Cluster):
        c.create_topic("t", (1, 2))
        leader = c.partition(1, "t")
        c.cut(2)
        c.brokers[1].produce("t", 0, [b"a"])
        task = asyncio.ensure_future(run_isr_expiration(c.brokers[1].replica_manager.all_partitions, 20))
        try:
            await asyncio.sleep(0.05)
            assert leader.isr == (1, 2), "not lagging for replica.lag.time.max.ms yet (the partition's clock)"
            c.clock.advance(LAG_MS + 1)
            await wait_for(lambda: leader.isr == (1,), what="the periodic check to shrink the ISR")
        finally:
            task.cancel()

    run(tmp_path, 2, body)


def test_num_replica_fetchers_spreads_partitions_over_fetcher_tasks(tmp_path):
    from dataclasses import replace

    from tests.replication.cluster import FAST

    async def main():
        c = Cluster(tmp_path, 2, replace(FAST, num_replica_fetchers=3))
        try:
            topics = [f"t{i}" for i in range(8)]
            for t in topics:
                c.create_topic(t, (1, 2))
                c.brokers[1].produce(t, 0, [t.encode()])
            await wait_for(
                lambda: all(c.partition(2, t).log_end_offset == 1 for t in topics), what="all topics"
            )
            keys = set(c.brokers[2].fetchers.fetchers)
            assert keys <= {(1, 0), (1, 1), (1, 2)} and len(keys) > 1
            assert sum(len(f.states) for f in c.brokers[2].fetchers.fetchers.values()) == len(topics)
        finally:
            await c.shutdown()

    asyncio.run(main())


def test_high_watermarks_survive_a_restart_through_their_checkpoint(tmp_path):
    from pybroker.replication.high_watermark_checkpoint import (
        checkpoint_high_watermarks,
        read_high_watermarks,
        restore_high_watermark,
    )

    async def body(c: Cluster):
        c.create_topic("t", (1, 2))
        c.create_topic("u", (1, 2))
        c.brokers[1].produce("t", 0, [b"a", b"b", b"c"])
        await wait_for(lambda: in_sync(c, "t", (2,)), what="sync")
        c.cut(2)
        c.brokers[1].produce("t", 0, [b"uncommitted"])
        follower = c.partition(2, "t")
        checkpoint_high_watermarks(c.brokers[2].replica_manager.all_partitions())
        saved = read_high_watermarks(c.brokers[2].log_manager.log_dirs)
        assert saved == {("t", 0): 3, ("u", 0): 0}
        # A restarted broker starts from the checkpoint, not from its log end.
        follower.high_watermark = follower.log_end_offset + 7
        restore_high_watermark(follower, saved)
        assert follower.high_watermark == 3
        restore_high_watermark(follower, {})
        assert follower.high_watermark == follower.log_start_offset == 0

    run(tmp_path, 2, body)


def test_isr_changes_through_an_alter_isr_coroutine_and_zk_partition_states(tmp_path):
    """The ZooKeeper wiring's shapes: ISR changes go through ``alter_isr(...) -> new zk version``
    (raising KafkaError on refusal) via AlterIsrManager, and the loader's PartitionState (zk_version
    as the partition epoch) is applied by become_leader_or_follower as it is."""
    from pybroker.controller.metadata_loader import PartitionState as ZkPartitionState
    from pybroker.protocol.errors import KafkaError
    from pybroker.replication.alter_partition import AlterIsrManager
    from pybroker.replication.state_change import become_leader_or_follower

    async def body(c: Cluster):
        c.create_topic("t", (1, 2))
        leader = c.partition(1, "t")
        calls = []

        async def alter_isr(topic, partition, leader_epoch, isr, zk_version):
            calls.append((topic, partition, leader_epoch, tuple(isr), zk_version))
            if len(calls) == 1:
                raise KafkaError(ErrorCode.INVALID_UPDATE_VERSION, "stale")
            return zk_version + 1

        leader.alter_partition = AlterIsrManager(alter_isr)
        c.cut(2)
        c.brokers[1].produce("t", 0, [b"a"])
        c.clock.advance(LAG_MS + 1)
        assert leader.maybe_shrink_isr()
        await wait_for(lambda: calls and not leader.isr_change_in_flight, what="the refusal")
        assert leader.isr == (1, 2), "a refused change leaves the ISR"
        assert leader.maybe_shrink_isr()  # proposed again on the next check
        await wait_for(lambda: leader.isr == (1,), what="the committed shrink")
        assert calls[-1] == ("t", 0, 0, (1,), 0) and leader.partition_epoch == 1
        # The loader then delivers the state znode (zk version 1) and later a new election.
        state = ZkPartitionState("t", 0, 1, 0, (1,), (1, 2), 1, 0)
        results = become_leader_or_follower(1, c.brokers[1].partition, c.brokers[1].fetchers, [state])
        assert results == {("t", 0): ErrorCode.NONE}
        old = ZkPartitionState("t", 0, 1, 0, (1, 2), (1, 2), 0, 0)
        assert become_leader_or_follower(1, c.brokers[1].partition, c.brokers[1].fetchers, [old]) == {
            ("t", 0): ErrorCode.FENCED_LEADER_EPOCH
        }
        assert leader.isr == (1,)

    run(tmp_path, 2, body)


def test_a_new_leader_answers_offset_not_available_until_its_high_watermark_reaches_its_epoch(tmp_path):
    """KIP-207: the new leader's high watermark (what it learnt as a follower) may lie below what the
    old leader had committed; until followers fetch from it, ListOffsets "latest" from a client answers
    OFFSET_NOT_AVAILABLE (retriable) instead of an offset that moved backwards, as Kafka's
    Partition.fetchOffsetForTimestamp does (Spark's failOnDataLoss fails a query on the latter)."""
    from pybroker.apis.offsets import EARLIEST, LATEST, MAX_TIMESTAMP, lookup_offset

    version = 7

    async def body(c: Cluster):
        c.create_topic("t", (1, 2, 3))
        c.brokers[1].produce("t", 0, [b"a", b"b", b"c", b"d"])
        await wait_for(lambda: in_sync(c, "t", (2, 3)), what="first sync")
        # Broker 3 stops fetching: broker 2 gets two more records, the high watermark stays at 4.
        c.cut(3)
        c.brokers[1].produce("t", 0, [b"e", b"f"])
        await wait_for(lambda: c.partition(2, "t").log_end_offset == 6, what="broker 2 to copy")
        assert c.partition(1, "t").high_watermark == 4
        c.down.add(1)
        c.elect("t", 2, isr=(2, 3))
        new = c.partition(2, "t")
        assert new.is_leader and new.leader_epoch_start_offset == 6 and new.high_watermark == 4
        assert lookup_offset(new, LATEST, False, version) == (ErrorCode.OFFSET_NOT_AVAILABLE, -1, -1)
        assert lookup_offset(new, LATEST, True, version) == (ErrorCode.OFFSET_NOT_AVAILABLE, -1, -1)
        # A follower (replica id >= 0) reads the log end; the earliest offset is always known.
        assert lookup_offset(new, LATEST, False, version, from_replica=True) == (ErrorCode.NONE, -1, 6)
        assert lookup_offset(new, EARLIEST, False, version) == (ErrorCode.NONE, -1, 0)
        # A timestamp found below the high watermark is answered; one beyond it is not available yet.
        ts = c.clock()
        assert lookup_offset(new, ts, False, version) == (ErrorCode.NONE, ts, 0)
        assert lookup_offset(new, ts + 1, False, version) == (ErrorCode.OFFSET_NOT_AVAILABLE, -1, -1)
        assert lookup_offset(new, MAX_TIMESTAMP, False, version)[0] == ErrorCode.NONE
        # Broker 3 fetches from the new leader: the high watermark reaches the epoch start, "latest" is 6.
        c.heal(3)
        await wait_for(lambda: new.high_watermark == 6, what="the new leader's high watermark")
        assert lookup_offset(new, LATEST, False, version) == (ErrorCode.NONE, -1, 6)
        assert lookup_offset(new, ts + 1, False, version) == (ErrorCode.NONE, -1, -1)

    run(tmp_path, 3, body)
