"""The transaction coordinator (Kafka's TransactionCoordinator / TransactionStateManager: InitProducerId,
AddPartitionsToTxn, AddOffsetsToTxn, EndTxn; EndTxn v5+ is transaction version 2, ``end_transaction_v2``).

Each state change of a transactional id is written to ``__transaction_state`` before it takes
effect and before the client is answered; another request for the same id meanwhile gets
CONCURRENT_TRANSACTIONS.  EndTxn writes PrepareCommit/PrepareAbort, then the markers to every
partition of the transaction (through ``write_markers``), then CompleteCommit/CompleteAbort.  At
start-up the log is replayed and transactions found in a Prepare state are completed; open ones
are aborted once past their timeout.

No import of the broker: the coordinator gets its store, producer ids, marker writer and clock
passed in.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from pybroker.coordinator.clock import Clock, LoopClock
from pybroker.coordinator.transaction import records
from pybroker.coordinator.transaction.metadata import (
    COMPLETE_STATES,
    MAX_EPOCH,
    NO_PRODUCER_EPOCH,
    IllegalTransition,
    TransactionMetadata,
    TransactionState,
)
from pybroker.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

S = TransactionState
COORDINATOR_EPOCH = 0  # one broker: the __transaction_state partitions never change leader
RETRY_BACKOFF_MS = 1000  # before writing markers / the Complete record again after a failure
TopicPartition = tuple[str, int]


class TransactionStore(Protocol):
    def append(self, key: str, entries: list[tuple[bytes, bytes | None]]) -> Awaitable[object] | None: ...


class MemoryTransactionStore:
    def __init__(self) -> None:
        self.entries: list[tuple[bytes, bytes | None]] = []

    def append(self, key: str, entries: list[tuple[bytes, bytes | None]]) -> None:
        self.entries.extend(entries)


# (producer id, epoch, commit, coordinator epoch, partitions, transaction version) -> per-partition error
# (or an awaitable of it: in a cluster the markers of partitions led elsewhere travel to their leaders)
MarkerWriter = Callable[
    [int, int, bool, int, Iterable[TopicPartition], int],
    dict[TopicPartition, ErrorCode] | Awaitable[dict[TopicPartition, ErrorCode]],
]


@dataclass(slots=True)
class TransactionConfig:
    max_timeout_ms: int = 900_000
    id_expiration_ms: int = 604_800_000
    abort_check_interval_ms: int = 10_000
    expiration_check_interval_ms: int = 3_600_000


class StoreError(Exception):
    pass


class TransactionCoordinator:
    def __init__(
        self,
        *,
        allocate_producer_id: Callable[[], int],
        write_markers: MarkerWriter,
        store: TransactionStore | None = None,
        config: TransactionConfig | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.allocate_producer_id = allocate_producer_id
        self.write_markers = write_markers
        self.store: TransactionStore = store or MemoryTransactionStore()
        self.config = config or TransactionConfig()
        self.clock: Clock = clock or LoopClock()
        self.transactions: dict[str, TransactionMetadata] = {}
        self._timers: list[Any] = []
        self._retries: dict[str, Any] = {}  # transactional id -> timer completing it again
        self._tasks: set[asyncio.Future] = set()
        self.started = False
        # Cluster mode (Kafka's TransactionStateManager): this broker coordinates the transactional ids of
        # the __transaction_state partitions it leads, loaded when it becomes their leader
        # (``on_election``) and dropped when it stops being one (``on_resignation``).
        self.leadership_driven = False
        self.partition_of: Callable[[str], int] = lambda _txn_id: 0
        self.replay_partition: Callable[[int], Iterable[tuple[bytes, bytes | None]]] = lambda _p: ()
        self.owned: dict[int, int] = {}  # partition led -> coordinator epoch (its leader epoch)

    # -- lifecycle ------------------------------------------------------------------------------------
    @staticmethod
    def _decode(entries: Iterable[tuple[bytes, bytes | None]]) -> dict[str, TransactionMetadata | None]:
        """``__transaction_state`` records replayed (later records win, None: removed)."""
        found: dict[str, TransactionMetadata | None] = {}
        for key_bytes, value in entries:
            txn_id = records.decode_key(key_bytes)
            if txn_id is None:
                continue
            found[txn_id] = None if value is None else TransactionMetadata.from_value(
                txn_id, records.decode_value(value)
            )
        return found

    def load(self, entries: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Replay ``__transaction_state`` records (later records win, a null value removes)."""
        for txn_id, md in self._decode(entries).items():
            if md is None:
                self.transactions.pop(txn_id, None)
            else:
                self.transactions[txn_id] = md
        log.info("loaded %d transactional ids", len(self.transactions))

    def is_coordinator_for(self, transactional_id: str) -> bool:
        return not self.leadership_driven or self.partition_of(transactional_id) in self.owned

    def _coordinator_epoch(self, transactional_id: str) -> int:
        if not self.leadership_driven:
            return COORDINATOR_EPOCH
        return self.owned.get(self.partition_of(transactional_id), COORDINATOR_EPOCH)

    def on_election(self, partition: int, coordinator_epoch: int) -> None:
        """This broker now leads ``partition`` of __transaction_state: load its transactional ids and
        finish what the previous coordinator left in a Prepare state (Kafka's loadTransactionsForTxnTopicPartition)."""
        if self.owned.get(partition) == coordinator_epoch:
            return
        self.owned[partition] = coordinator_epoch
        loaded = {
            txn_id: md
            for txn_id, md in self._decode(self.replay_partition(partition)).items()
            if md is not None and self.partition_of(txn_id) == partition
        }
        self.transactions.update(loaded)
        log.info(
            "coordinating the %d transactional ids of __transaction_state-%d (coordinator epoch %d)",
            len(loaded), partition, coordinator_epoch,
        )  # fmt: skip
        for md in loaded.values():
            if md.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                self._spawn(self._send_markers_and_complete(md, md.state == S.PREPARE_COMMIT))
            elif md.state == S.PREPARE_EPOCH_FENCE:
                md.state = S.ONGOING
                self._spawn(self._abort(md, bump_epoch=False))

    def on_resignation(self, partition: int) -> None:
        """Another broker leads ``partition`` now: its transactional ids are no longer ours."""
        if self.owned.pop(partition, None) is None:
            return
        for txn_id in [t for t in self.transactions if self.partition_of(t) == partition]:
            del self.transactions[txn_id]
            timer = self._retries.pop(txn_id, None)
            if timer is not None:
                timer.cancel()
        log.info("no longer coordinating the transactional ids of __transaction_state-%d", partition)

    def _spawn(self, work: Awaitable[Any]) -> None:
        async def run() -> None:
            try:
                await work
            except StoreError:
                pass  # retried by the next request or timer
            except Exception:
                log.exception("transaction coordinator task failed")

        task = asyncio.ensure_future(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def start(self) -> None:
        """Complete what a crash left half done, then run the timeout and expiration checks."""
        for md in list(self.transactions.values()):
            if md.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                await self._send_markers_and_complete(md, md.state == S.PREPARE_COMMIT)
            elif md.state == S.PREPARE_EPOCH_FENCE:
                md.state = S.ONGOING
                await self._abort(md, bump_epoch=False)
        self._schedule(self.config.abort_check_interval_ms, self._abort_timed_out)
        self._schedule(self.config.expiration_check_interval_ms, self._expire_ids)
        self.started = True

    async def stop(self) -> None:
        self.started = False
        for t in [*self._timers, *self._retries.values()]:
            t.cancel()
        self._timers.clear()
        self._retries.clear()
        for task in list(self._tasks):
            task.cancel()

    def _schedule(self, interval_ms: int, job: Callable[[], Awaitable[None]]) -> None:
        def run() -> None:
            task = asyncio.ensure_future(self._run_job(job, interval_ms))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

        self._timers.append(self.clock.call_later(interval_ms, run))

    async def _run_job(self, job: Callable[[], Awaitable[None]], interval_ms: int) -> None:
        try:
            await job()
        except Exception:
            log.exception("transaction coordinator task %s failed", getattr(job, "__name__", job))
        if self.started:
            self._schedule(interval_ms, job)

    # -- persistence ----------------------------------------------------------------------------------
    async def _persist(self, md: TransactionMetadata, state: TransactionState, **changes: Any) -> None:
        """Write ``md`` moved to ``state`` and apply it once durable; raises StoreError (nothing applied)."""
        target = dataclasses.replace(md, partitions=set(md.partitions), pending_state=None)
        target.transition(state, self.clock.now_ms(), **changes)
        md.pending_state = state
        try:
            wait = self.store.append(
                md.transactional_id, [(records.key(md.transactional_id), records.value(target.to_value()))]
            )
            if wait is not None:
                await wait
        except Exception as e:  # a failed append or replication wait: the state did not change
            log.warning(
                "transactional id %s: writing %s failed: %s", md.transactional_id, state.kafka_name, e
            )
            raise StoreError(str(e)) from e
        finally:
            md.pending_state = None
        for f in dataclasses.fields(TransactionMetadata):
            if f.name != "pending_state":
                setattr(md, f.name, getattr(target, f.name))

    # -- InitProducerId --------------------------------------------------------------------------------
    async def init_producer_id(
        self, transactional_id: str, timeout_ms: int, expected_producer_id: int = -1, expected_epoch: int = -1
    ) -> tuple[ErrorCode, int, int]:
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST, -1, -1
        if not self.is_coordinator_for(transactional_id):
            return ErrorCode.NOT_COORDINATOR, -1, -1
        if timeout_ms <= 0 or timeout_ms > self.config.max_timeout_ms:
            return ErrorCode.INVALID_TRANSACTION_TIMEOUT, -1, -1
        md = self.transactions.get(transactional_id)
        if md is None or md.state == S.DEAD:
            md = TransactionMetadata(
                transactional_id, self.allocate_producer_id(), NO_PRODUCER_EPOCH, timeout_ms
            )
            md.last_update_timestamp_ms = self.clock.now_ms()
            self.transactions[transactional_id] = md
        if md.pending_state is not None:
            return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
        if expected_producer_id >= 0:
            # KIP-360: a producer that names its id and epoch is recovering; it must be the current one.
            if expected_producer_id != md.producer_id or expected_epoch not in (
                md.producer_epoch,
                md.last_producer_epoch,
            ):
                return ErrorCode.PRODUCER_FENCED, -1, -1
        try:
            if md.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
            if md.state in (S.ONGOING, S.PREPARE_EPOCH_FENCE):
                # A new producer instance fences the old one: the open transaction is aborted with a
                # bumped epoch first (Kafka answers CONCURRENT_TRANSACTIONS and the client retries;
                # here the retry's work is done at once).
                await self._abort(md, bump_epoch=True)
            if (
                expected_producer_id >= 0
                and expected_epoch == md.last_producer_epoch
                and md.producer_epoch != md.last_producer_epoch
                and md.state in COMPLETE_STATES
            ):
                return ErrorCode.NONE, md.producer_id, md.producer_epoch  # a retried request: already bumped
            if md.producer_epoch >= MAX_EPOCH - 1:
                await self._persist(
                    md,
                    S.EMPTY,
                    producer_id=self.allocate_producer_id(),
                    producer_epoch=0,
                    timeout_ms=timeout_ms,
                )
                md.last_producer_epoch = NO_PRODUCER_EPOCH
            else:
                await self._persist(md, S.EMPTY, producer_epoch=md.producer_epoch + 1, timeout_ms=timeout_ms)
        except StoreError:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, -1
        except IllegalTransition as e:
            log.warning("%s", e)
            return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
        log.debug(
            "transactional id %s: producer id %d epoch %d",
            transactional_id,
            md.producer_id,
            md.producer_epoch,
        )
        return ErrorCode.NONE, md.producer_id, md.producer_epoch

    # -- AddPartitionsToTxn / AddOffsetsToTxn ----------------------------------------------------------
    def _check_producer(
        self, transactional_id: str, producer_id: int, producer_epoch: int
    ) -> tuple[ErrorCode, TransactionMetadata | None]:
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST, None
        if not self.is_coordinator_for(transactional_id):
            return ErrorCode.NOT_COORDINATOR, None
        md = self.transactions.get(transactional_id)
        if md is None or md.state == S.DEAD:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING, None
        if md.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING, None
        if md.producer_epoch != producer_epoch:
            return ErrorCode.PRODUCER_FENCED, None
        if md.pending_state is not None:
            return ErrorCode.CONCURRENT_TRANSACTIONS, None
        return ErrorCode.NONE, md

    async def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> ErrorCode:
        error, md = self._check_producer(transactional_id, producer_id, producer_epoch)
        if md is None:
            return error
        wanted = set(partitions)
        if md.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return ErrorCode.CONCURRENT_TRANSACTIONS
        if md.state == S.PREPARE_EPOCH_FENCE:
            return ErrorCode.PRODUCER_FENCED
        if md.state == S.ONGOING and wanted <= md.partitions:
            return ErrorCode.NONE
        try:
            await self._persist(md, S.ONGOING, partitions=md.partitions | wanted)
        except StoreError:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        except IllegalTransition:
            return ErrorCode.INVALID_TXN_STATE
        return ErrorCode.NONE

    def verify_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        """KIP-890 verification: is each partition part of this producer's ongoing transaction?"""
        error, md = self._check_producer(transactional_id, producer_id, producer_epoch)
        if error == ErrorCode.CONCURRENT_TRANSACTIONS:
            error, md = ErrorCode.NONE, self.transactions[transactional_id]
        out = {}
        for tp in partitions:
            if md is None:
                out[tp] = error
            elif md.state == S.ONGOING and tp in md.partitions:
                out[tp] = ErrorCode.NONE
            else:
                # What Kafka's coordinator answers a verification (KIP-890); callers of older
                # request versions turn it into INVALID_TXN_STATE.
                out[tp] = ErrorCode.TRANSACTION_ABORTABLE
        return out

    # -- EndTxn ------------------------------------------------------------------------------------------
    async def end_transaction(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> ErrorCode:
        error, md = self._check_producer(transactional_id, producer_id, producer_epoch)
        if md is None:
            return error
        state = md.state
        if state == S.ONGOING:
            try:
                await self._persist(md, S.PREPARE_COMMIT if commit else S.PREPARE_ABORT)
                await self._send_markers_and_complete(md, commit)
            except StoreError:
                return ErrorCode.COORDINATOR_NOT_AVAILABLE
            return ErrorCode.NONE
        if state == S.COMPLETE_COMMIT:
            return ErrorCode.NONE if commit else ErrorCode.INVALID_TXN_STATE
        if state == S.COMPLETE_ABORT:
            return ErrorCode.INVALID_TXN_STATE if commit else ErrorCode.NONE
        if state == S.PREPARE_COMMIT:
            return ErrorCode.CONCURRENT_TRANSACTIONS if commit else ErrorCode.INVALID_TXN_STATE
        if state == S.PREPARE_ABORT:
            return ErrorCode.INVALID_TXN_STATE if commit else ErrorCode.CONCURRENT_TRANSACTIONS
        if state == S.PREPARE_EPOCH_FENCE:
            return ErrorCode.PRODUCER_FENCED
        return ErrorCode.INVALID_TXN_STATE  # Empty: nothing to end

    async def end_transaction_v2(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> tuple[ErrorCode, int, int]:
        """EndTxn v5+ (transaction version 2, KIP-890 part 2): every EndTxn bumps the producer epoch
        (the markers carry the new epoch, so a late write of the old epoch is fenced) and answers the new
        producer id and epoch; on an epoch about to overflow a new producer id is allocated.  A retry with
        the previous id/epoch of a completed end gets the current ones; an abort with nothing ongoing
        (the client adds partitions implicitly, so it cannot know) is still an epoch bump."""
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST, -1, -1
        if not self.is_coordinator_for(transactional_id):
            return ErrorCode.NOT_COORDINATOR, -1, -1
        md = self.transactions.get(transactional_id)
        if md is None or md.state == S.DEAD:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING, -1, -1
        state = md.state
        done_state = S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT
        prepare_state = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
        # The request of an end already done (the response was lost): the id/epoch before the bump.
        retry_on_overflow = (
            md.previous_producer_id == producer_id
            and md.producer_id != producer_id
            and md.producer_epoch == 0
            and producer_epoch >= MAX_EPOCH - 1
        )
        retry_on_bump = md.producer_id == producer_id and producer_epoch == md.producer_epoch - 1
        is_retry = retry_on_overflow or retry_on_bump
        if md.producer_id != producer_id and not retry_on_overflow:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING, -1, -1
        if producer_epoch != md.producer_epoch and not is_retry:
            return ErrorCode.PRODUCER_FENCED, -1, -1
        if md.pending_state is not None:
            return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
        if is_retry:  # as Kafka: the other outcome, or an end not yet done, is an invalid state
            if state == done_state:
                return ErrorCode.NONE, md.producer_id, md.producer_epoch
            if state == prepare_state:
                return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
            return ErrorCode.INVALID_TXN_STATE, -1, -1
        if state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return (
                ErrorCode.CONCURRENT_TRANSACTIONS if state == prepare_state else ErrorCode.INVALID_TXN_STATE
            ), -1, -1
        if state == S.PREPARE_EPOCH_FENCE:
            return ErrorCode.PRODUCER_FENCED, -1, -1
        if state != S.ONGOING and (commit or state not in COMPLETE_STATES):
            return ErrorCode.INVALID_TXN_STATE, -1, -1
        changes: dict[str, Any] = {"producer_epoch": md.producer_epoch + 1, "client_transaction_version": 2}
        if md.producer_epoch >= MAX_EPOCH - 1:
            # The bumped epoch is the last usable one: the markers go out with it, and the transaction
            # completes with a fresh producer id at epoch 0 (Kafka's TV2 overflow handling).
            changes["next_producer_id"] = self.allocate_producer_id()
        try:
            await self._persist(md, prepare_state, **changes)
            await self._send_markers_and_complete(md, commit)
        except StoreError:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, -1
        except IllegalTransition as e:
            log.warning("%s", e)
            return ErrorCode.INVALID_TXN_STATE, -1, -1
        return ErrorCode.NONE, md.producer_id, md.producer_epoch

    async def _send_markers_and_complete(
        self, md: TransactionMetadata, commit: bool, partitions: Iterable[TopicPartition] | None = None
    ) -> bool:
        """Write the markers, then CompleteCommit/CompleteAbort.  The outcome is already durable in
        the Prepare record, so a failure is retried later for what is left (Kafka's marker channel
        retries until it succeeds); meanwhile the id answers CONCURRENT_TRANSACTIONS.  Returns
        whether the transaction is complete."""
        remaining = set(md.partitions if partitions is None else partitions)
        written = self.write_markers(
            md.producer_id,
            md.producer_epoch,
            commit,
            self._coordinator_epoch(md.transactional_id),
            remaining,
            md.client_transaction_version,  # TV2: the partition leader checks the marker's epoch is bumped
        )
        errors = await written if inspect.isawaitable(written) else written
        if self.transactions.get(md.transactional_id) is not md:
            return False  # this broker stopped coordinating it meanwhile: the new coordinator finishes it
        # Gone, or fenced by a newer producer or coordinator epoch there: not retried (as Kafka's
        # marker handler).
        done = (
            ErrorCode.NONE,
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            ErrorCode.INVALID_PRODUCER_EPOCH,
            ErrorCode.TRANSACTION_COORDINATOR_FENCED,
        )
        failed = {tp for tp, code in errors.items() if code not in done}
        for tp in sorted(failed):
            log.error("transaction marker for %s-%d failed (%s): retrying", tp[0], tp[1], errors[tp].name)
        if not failed:
            try:
                changes: dict[str, Any] = {}
                if md.next_producer_id >= 0:
                    changes = {"producer_id": md.next_producer_id, "producer_epoch": 0, "next_producer_id": -1}
                await self._persist(md, S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT, **changes)
                log.debug(
                    "transactional id %s: %s", md.transactional_id, "committed" if commit else "aborted"
                )
                return True
            except StoreError:
                pass
        self._retry_completion(md, commit, failed)
        return False

    def _retry_completion(
        self, md: TransactionMetadata, commit: bool, partitions: set[TopicPartition]
    ) -> None:
        def run() -> None:
            self._retries.pop(md.transactional_id, None)
            if not self.started or self.transactions.get(md.transactional_id) is not md:
                return
            task = asyncio.ensure_future(self._send_markers_and_complete(md, commit, partitions))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

        self._retries[md.transactional_id] = self.clock.call_later(RETRY_BACKOFF_MS, run)

    async def _abort(self, md: TransactionMetadata, bump_epoch: bool) -> None:
        """Abort the ongoing transaction of ``md`` (a fencing producer or a timeout); with
        ``bump_epoch`` the markers carry a new epoch, so the old producer is fenced everywhere."""
        changes: dict[str, Any] = {}
        if bump_epoch and md.producer_epoch < MAX_EPOCH:
            changes["producer_epoch"] = md.producer_epoch + 1
        await self._persist(md, S.PREPARE_ABORT, **changes)
        await self._send_markers_and_complete(md, False)

    # -- timers ------------------------------------------------------------------------------------------
    async def _abort_timed_out(self) -> None:
        now = self.clock.now_ms()
        for md in list(self.transactions.values()):
            if (
                md.state == S.ONGOING
                and md.pending_state is None
                and md.start_timestamp_ms + md.timeout_ms < now
            ):
                log.info(
                    "transactional id %s: aborting a transaction open past its timeout of %d ms",
                    md.transactional_id,
                    md.timeout_ms,
                )
                try:
                    await self._abort(md, bump_epoch=True)
                except StoreError:
                    pass

    async def _expire_ids(self) -> None:
        now = self.clock.now_ms()
        for md in list(self.transactions.values()):
            if (
                md.state in COMPLETE_STATES
                and md.pending_state is None
                and md.last_update_timestamp_ms + self.config.id_expiration_ms <= now
            ):
                wait = self.store.append(md.transactional_id, [(records.key(md.transactional_id), None)])
                if wait is not None:
                    await wait
                if self.transactions.get(md.transactional_id) is md and md.pending_state is None:
                    md.state = S.DEAD
                    del self.transactions[md.transactional_id]
                    log.info("transactional id %s expired", md.transactional_id)

    # -- describe ---------------------------------------------------------------------------------------
    def describe(self, transactional_id: str) -> TransactionMetadata | None:
        return self.transactions.get(transactional_id) if self.is_coordinator_for(transactional_id) else None
