"""The transaction coordinator's state machine, driven directly (memory store, recorded markers,
fake clock): the states and error codes of Kafka's TransactionCoordinator for transaction version 1."""

import asyncio

import pytest

from pybroker.coordinator.clock import FakeClock
from pybroker.coordinator.transaction import records
from pybroker.coordinator.transaction.coordinator import (
    MemoryTransactionStore,
    TransactionConfig,
    TransactionCoordinator,
)
from pybroker.coordinator.transaction.metadata import (
    MAX_EPOCH,
    IllegalTransition,
    TransactionMetadata,
    TransactionState,
)
from pybroker.protocol.errors import ErrorCode

S = TransactionState


class Harness:
    def __init__(self, **config):
        self.store = MemoryTransactionStore()
        self.markers = []
        self.marker_versions = []
        self.clock = FakeClock()
        self.next_pid = 1000
        self.c = self.make(**config)

    def make(self, **config):
        def allocate():
            self.next_pid += 1
            return self.next_pid

        def write(pid, epoch, commit, coordinator_epoch, partitions, transaction_version):
            self.markers.append((pid, epoch, commit, sorted(partitions)))
            self.marker_versions.append(transaction_version)
            return {tp: ErrorCode.NONE for tp in partitions}

        return TransactionCoordinator(
            allocate_producer_id=allocate,
            write_markers=write,
            store=self.store,
            config=TransactionConfig(**config),
            clock=self.clock,
        )

    def states(self, txn_id):
        return [
            S(records.decode_value(v)["transaction_status"])
            for k, v in self.store.entries
            if records.decode_key(k) == txn_id and v is not None
        ]


def run(coro):
    return asyncio.run(coro)


def test_records_round_trip_kafkas_layout():
    md = TransactionMetadata("tx", 5, 2, 60000, S.ONGOING, {("t", 1), ("t", 0), ("u", 3)}, 10, 20)
    key = records.key("tx")
    assert key == b"\x00\x00\x00\x02tx"  # int16 version 0, then the string
    value = records.value(md.to_value())
    assert value[:2] == b"\x00\x00"  # value version 0
    back = TransactionMetadata.from_value("tx", records.decode_value(value))
    assert (back.producer_id, back.producer_epoch, back.state, back.partitions) == (
        5,
        2,
        S.ONGOING,
        md.partitions,
    )
    assert (
        records.decode_value(records.value(TransactionMetadata("tx", 5, 2, 1, S.EMPTY).to_value()))[
            "transaction_partitions"
        ]
        is None
    )


def test_illegal_transition_is_refused():
    md = TransactionMetadata("tx", 1, 0, 1000)
    with pytest.raises(IllegalTransition):
        md.transition(S.PREPARE_COMMIT, 0)


def test_commit_flow_and_epoch_bump_on_reinit():
    h = Harness()

    async def go():
        err, pid, epoch = await h.c.init_producer_id("tx", 60000)
        assert (err, epoch) == (ErrorCode.NONE, 0)
        assert await h.c.add_partitions("tx", pid, 0, [("t", 0), ("t", 1)]) == ErrorCode.NONE
        assert h.c.verify_partitions("tx", pid, 0, [("t", 0), ("t", 2)]) == {
            ("t", 0): ErrorCode.NONE,
            ("t", 2): ErrorCode.TRANSACTION_ABORTABLE,
        }
        assert await h.c.end_transaction("tx", pid, 0, True) == ErrorCode.NONE
        assert h.markers == [(pid, 0, True, [("t", 0), ("t", 1)])]
        assert h.marker_versions == [0]
        # a retried EndTxn(commit) is answered NONE; an abort after a commit is INVALID_TXN_STATE
        assert await h.c.end_transaction("tx", pid, 0, True) == ErrorCode.NONE
        assert await h.c.end_transaction("tx", pid, 0, False) == ErrorCode.INVALID_TXN_STATE
        assert h.states("tx") == [S.EMPTY, S.ONGOING, S.PREPARE_COMMIT, S.COMPLETE_COMMIT]
        err, pid2, epoch2 = await h.c.init_producer_id("tx", 60000)
        assert (err, pid2, epoch2) == (ErrorCode.NONE, pid, 1)
        # the old epoch is fenced
        assert await h.c.add_partitions("tx", pid, 0, [("t", 0)]) == ErrorCode.PRODUCER_FENCED
        assert await h.c.end_transaction("tx", pid, 0, True) == ErrorCode.PRODUCER_FENCED
        assert await h.c.add_partitions("tx", pid + 1, 1, [("t", 0)]) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
        assert await h.c.end_transaction("nope", pid, 1, True) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
        assert await h.c.end_transaction("tx", pid, 1, True) == ErrorCode.INVALID_TXN_STATE  # Empty

    run(go())


def test_new_instance_aborts_the_ongoing_transaction_of_the_zombie():
    h = Harness()

    async def go():
        _, pid, _ = await h.c.init_producer_id("tx", 60000)
        await h.c.add_partitions("tx", pid, 0, [("t", 0)])
        err, pid2, epoch = await h.c.init_producer_id("tx", 60000)
        assert (err, pid2) == (ErrorCode.NONE, pid)
        assert epoch == 2  # one bump fences and aborts, one is the new instance's
        assert h.markers == [(pid, 1, False, [("t", 0)])]
        assert h.states("tx")[-3:] == [S.PREPARE_ABORT, S.COMPLETE_ABORT, S.EMPTY]

    run(go())


def test_timeouts_and_kip360_recovery():
    h = Harness(max_timeout_ms=1000)

    async def go():
        assert (await h.c.init_producer_id("tx", 1001))[0] == ErrorCode.INVALID_TRANSACTION_TIMEOUT
        assert (await h.c.init_producer_id("tx", 0))[0] == ErrorCode.INVALID_TRANSACTION_TIMEOUT
        assert (await h.c.init_producer_id("", 100))[0] == ErrorCode.INVALID_REQUEST
        _, pid, epoch = await h.c.init_producer_id("tx", 1000)
        # KIP-360: the current producer names itself and gets a bump; a stranger is fenced
        err, _, epoch1 = await h.c.init_producer_id("tx", 1000, pid, epoch)
        assert (err, epoch1) == (ErrorCode.NONE, epoch + 1)
        assert (await h.c.init_producer_id("tx", 1000, pid + 7, 0))[0] == ErrorCode.PRODUCER_FENCED
        # a retry of the same request (with the previous epoch) gets the same answer, no second bump
        assert await h.c.init_producer_id("tx", 1000, pid, epoch) == (ErrorCode.NONE, pid, epoch1)

    run(go())


def test_hanging_transaction_is_aborted_after_its_timeout_and_idle_ids_expire():
    h = Harness(abort_check_interval_ms=100, id_expiration_ms=50_000, expiration_check_interval_ms=10_000)

    async def go():
        await h.c.start()
        _, pid, _ = await h.c.init_producer_id("tx", 500)
        await h.c.add_partitions("tx", pid, 0, [("t", 0)])
        h.clock.advance(400)
        for _ in range(5):
            await asyncio.sleep(0)
        assert h.c.transactions["tx"].state == S.ONGOING
        h.clock.advance(200)
        for _ in range(5):
            await asyncio.sleep(0)
        assert h.c.transactions["tx"].state == S.COMPLETE_ABORT
        assert h.markers == [(pid, 1, False, [("t", 0)])]
        assert await h.c.end_transaction("tx", pid, 0, True) == ErrorCode.PRODUCER_FENCED
        h.clock.advance(60_000)
        for _ in range(5):
            await asyncio.sleep(0)
        assert "tx" not in h.c.transactions
        assert h.store.entries[-1] == (records.key("tx"), None)
        await h.c.stop()

    run(go())


def test_replay_completes_a_prepared_commit():
    h = Harness()

    async def go():
        _, pid, _ = await h.c.init_producer_id("tx", 60000)
        await h.c.add_partitions("tx", pid, 0, [("t", 0)])
        md = h.c.transactions["tx"]
        # as if the broker died right after writing PrepareCommit
        await h.c._persist(md, S.PREPARE_COMMIT)
        fresh = h.make()
        fresh.load(list(h.store.entries))
        assert fresh.transactions["tx"].state == S.PREPARE_COMMIT
        await fresh.start()
        assert fresh.transactions["tx"].state == S.COMPLETE_COMMIT
        assert h.markers[-1] == (pid, 0, True, [("t", 0)])
        await fresh.stop()

    run(go())


def test_a_failed_marker_is_retried_and_the_commit_still_answered():
    h = Harness()
    failing = {("t", 1)}

    def flaky(pid, epoch, commit, coordinator_epoch, partitions, transaction_version):
        h.markers.append((pid, epoch, commit, sorted(partitions)))
        return {tp: ErrorCode.KAFKA_STORAGE_ERROR if tp in failing else ErrorCode.NONE for tp in partitions}

    h.c.write_markers = flaky

    async def go():
        await h.c.start()
        _, pid, _ = await h.c.init_producer_id("tx", 60000)
        await h.c.add_partitions("tx", pid, 0, [("t", 0), ("t", 1)])
        # The decision is durable in PrepareCommit: the client gets its answer.
        assert await h.c.end_transaction("tx", pid, 0, True) == ErrorCode.NONE
        assert h.c.transactions["tx"].state == S.PREPARE_COMMIT
        assert (await h.c.init_producer_id("tx", 60000))[0] == ErrorCode.CONCURRENT_TRANSACTIONS
        failing.clear()
        h.clock.advance(1000)
        for _ in range(5):
            await asyncio.sleep(0)
        assert h.c.transactions["tx"].state == S.COMPLETE_COMMIT
        # only the partition whose marker failed got it again
        assert h.markers == [(pid, 0, True, [("t", 0), ("t", 1)]), (pid, 0, True, [("t", 1)])]
        await h.c.stop()

    run(go())


def test_tv2_end_txn_bumps_the_epoch_and_overflows_to_a_new_producer_id():
    """EndTxn v5 (KIP-890 part 2): the markers carry the bumped epoch; near Short.MAX_VALUE the
    transaction completes with a new producer id at epoch 0; the Prepare record (version 1 with the
    tagged fields) replays to the same completion after a crash."""
    h = Harness()

    async def go():
        _, pid, _ = await h.c.init_producer_id("tx", 60000)
        await h.c.add_partitions("tx", pid, 0, [("t", 0)])
        assert await h.c.end_transaction_v2("tx", pid, 0, True) == (ErrorCode.NONE, pid, 1)
        assert h.markers[-1] == (pid, 1, True, [("t", 0)])
        assert h.marker_versions[-1] == 2  # the leader checks a TV2 marker's epoch (KIP-1228)
        assert await h.c.end_transaction_v2("tx", pid, 0, True) == (ErrorCode.NONE, pid, 1)  # a retry
        assert (await h.c.end_transaction_v2("tx", pid, 1, True))[0] == ErrorCode.INVALID_TXN_STATE
        assert await h.c.end_transaction_v2("tx", pid, 1, False) == (ErrorCode.NONE, pid, 2)  # empty abort
        # epoch exhaustion
        md = h.c.transactions["tx"]
        await h.c._persist(md, S.ONGOING, producer_epoch=MAX_EPOCH - 1, partitions={("t", 0)})
        err, new_pid, epoch = await h.c.end_transaction_v2("tx", pid, MAX_EPOCH - 1, True)
        assert (err, epoch) == (ErrorCode.NONE, 0) and new_pid != pid
        assert h.markers[-1] == (pid, MAX_EPOCH, True, [("t", 0)])
        assert await h.c.end_transaction_v2("tx", pid, MAX_EPOCH - 1, True) == (ErrorCode.NONE, new_pid, 0)
        # a crash after the Prepare record of a TV2 commit: replay completes it with the bumped epoch
        await h.c._persist(md, S.ONGOING, partitions={("t", 1)})
        await h.c._persist(md, S.PREPARE_COMMIT, producer_epoch=1, client_transaction_version=2)
        fresh = h.make()
        fresh.load(list(h.store.entries))
        await fresh.start()
        assert fresh.transactions["tx"].state == S.COMPLETE_COMMIT
        assert fresh.transactions["tx"].client_transaction_version == 2
        assert h.markers[-1] == (new_pid, 1, True, [("t", 1)])
        await fresh.stop()

    run(go())
