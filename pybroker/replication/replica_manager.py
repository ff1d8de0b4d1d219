"""ReplicaManager: the partitions this broker hosts, and the produce and fetch paths over them.

Kafka's ``kafka.server.ReplicaManager`` in small: it owns ``(topic, index) -> Partition``, answers
"which partition, and may this broker serve it" (``get_partition_or_error``: UNKNOWN_TOPIC_OR_PARTITION,
NOT_LEADER_OR_FOLLOWER), appends produced batches as the leader and waits for acks=all
(``append_records``), and reads the local logs for fetches, long-polling until enough bytes arrive
(``fetch_messages``).  The API handlers turn requests into these calls and results into responses;
the broker (or, in a cluster, the controller's decisions) adds and removes partitions.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from pybroker.metadata.store import is_internal_topic
from pybroker.protocol.errors import ErrorCode, KafkaError
from pybroker.records.batch import COMPRESSION_MASK, LOG_OVERHEAD, BatchHeader, validate_produce_batches
from pybroker.records.compression import CompressionType
from pybroker.records.errors import RecordFormatError
from pybroker.records.validator import check_produce_batch
from pybroker.replication.append import (
    REFUSED,
    ZSTD_MIN_PRODUCE_VERSION,
    Appended,
    error_response,
    executor,
    partition_response,
    validate,
    validation_rules,
    writable,
)
from pybroker.replication.partition import NotLeaderOrFollowerError
from pybroker.storage.errors import KafkaStorageError, OffsetOutOfRangeError, StorageError

if TYPE_CHECKING:
    from pybroker.metrics.recorder import BrokerMetrics
    from pybroker.protocol.typed.fetch import FetchResponsePartitionData
    from pybroker.records.validator import ValidationRules
    from pybroker.replication.partition import Partition

    # A compressed partition validated off the loop: its topic's response parts and its slot in them,
    # the partition and its index, the records, their first batch's header and the rules to apply.
    _Deferred = tuple[list[dict | None], int, Partition, int, Any, BatchHeader, ValidationRules]

log = logging.getLogger(__name__)

NOT_HOSTED = "This server does not host this topic-partition."
_NONE = ErrorCode.NONE
# Produce v12+ adds partitions to the transaction (KIP-890 part 2) rather than only verifying them.
IMPLICIT_ADD_PARTITIONS_VERSION = 12
# Coordinator errors a producer would not retry, answered as NOT_ENOUGH_REPLICAS so that it does
# (Kafka's ReplicaManager.appendRecords after transaction verification).  CONCURRENT_TRANSACTIONS stays
# itself from Produce v12 (TV2 clients retry it), as in Kafka.
_RETRIABLE_AS_NOT_ENOUGH_REPLICAS = frozenset(
    {
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
    }
)
EMPTY = b""


class TransactionVerifier(Protocol):
    """What a transactional Produce asks of the transaction coordinator (KIP-890's verification)."""

    @property
    def started(self) -> bool: ...

    def verify_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: list[tuple[str, int]]
    ) -> dict[tuple[str, int], ErrorCode]: ...


class FetchPartitionStatus:
    """One partition of a fetch: what was asked, the partition, and the response entry it fills
    (Kafka's FetchPartitionStatus with its LogReadResult written straight into the entry)."""

    __slots__ = ("partition", "fetch_offset", "max_bytes", "leader_epoch", "resp")

    def __init__(
        self,
        partition: Partition,
        fetch_offset: int,
        max_bytes: int,
        leader_epoch: int,
        resp: FetchResponsePartitionData,
    ):
        self.partition = partition
        self.fetch_offset = fetch_offset
        self.max_bytes = max_bytes
        self.leader_epoch = leader_epoch
        self.resp = resp


class ReplicaManager:
    def __init__(
        self,
        node_id: int,
        metrics: BrokerMetrics | None = None,
        topic_exists: Callable[[str], bool] | None = None,
    ) -> None:
        self.node_id = node_id
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.metrics = metrics
        # Produce failures are counted per topic only for topics that exist (unknown names would grow
        # the totals without bound).
        self._topic_exists = topic_exists or (lambda _name: False)
        # The transaction coordinator once it runs (transactional Produce verification).
        self.transaction_verifier: TransactionVerifier | None = None

    # -- the partitions map --------------------------------------------------------------------
    def get_partition(self, topic: str, index: int) -> Partition | None:
        return self.partitions.get((topic, index))

    def get_partition_or_error(self, topic: str, index: int) -> Partition:
        """The partition if this broker leads it; KafkaError UNKNOWN_TOPIC_OR_PARTITION when it does
        not host it, NOT_LEADER_OR_FOLLOWER when it hosts it as a follower (Kafka's
        ReplicaManager.getPartitionOrException + Partition.leaderLogIfLocal)."""
        p = self.partitions.get((topic, index))
        if p is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, NOT_HOSTED)
        if p.leader_id != self.node_id:
            raise KafkaError(
                ErrorCode.NOT_LEADER_OR_FOLLOWER,
                f"Leader not local for partition {topic}-{index} on broker {self.node_id}",
            )
        return p

    def all_partitions(self) -> Iterator[Partition]:
        return iter(list(self.partitions.values()))

    def add_partition(self, partition: Partition) -> None:
        self.partitions[(partition.topic, partition.index)] = partition

    def remove_partition(self, topic: str, index: int) -> Partition | None:
        """Forget a partition (topic deleted); the caller closes it and deletes its log."""
        return self.partitions.pop((topic, index), None)

    def close(self) -> None:
        for p in self.partitions.values():
            p.close()

    # -- produce -------------------------------------------------------------------------------
    def append_records(
        self,
        topic_data: Iterable[Mapping[str, Any]],
        *,
        acks: int,
        timeout_ms: int,
        api_version: int,
        transactional_id: str | None,
        now_ms: int,
        added_to_transaction: dict[tuple[str, int], ErrorCode] | None = None,
    ) -> list[dict] | Awaitable[list[dict]]:
        """Append every partition's batch of a Produce request as the leader (Kafka's appendRecords):
        the per-topic ``partition_responses``, at once or, when a batch is walked in a thread or
        acks=-1 must wait for the ISR, through an awaitable.  Each partition succeeds or fails on
        its own; a failed partition writes nothing.  ``added_to_transaction`` (Produce v12+): the
        coordinator's answer for each transactional partition the request added to its transaction,
        used instead of verifying it."""
        responses = []
        waits: list[tuple[dict, Partition, int]] = []
        writes: list[tuple[dict, asyncio.Future, Partition, int]] = []  # appends the writer threads do
        deferred: list[_Deferred] = []
        invalid_acks = acks not in (0, 1, -1)
        for td in topic_data:
            name = td["name"]
            internal = is_internal_topic(name)
            parts: list[dict | None] = []
            for pd in td["partition_data"]:
                index, records = pd["index"], pd["records"]
                if invalid_acks:
                    parts.append(
                        partition_response(
                            index, ErrorCode.INVALID_REQUIRED_ACKS, f"acks={acks} is not one of 0, 1, -1"
                        )
                    )
                    continue
                if internal:  # Kafka's ReplicaManager: "Cannot append to internal topic"
                    parts.append(partition_response(index, ErrorCode.INVALID_TOPIC_EXCEPTION))
                    continue
                refused, checked = self._check_one(
                    name, index, records, acks, api_version, transactional_id, now_ms, added_to_transaction
                )
                if refused is not None:
                    parts.append(refused)
                    self._count_failure(name, refused)
                    continue
                p, header, rules, walked = checked
                if walked:  # an uncompressed batch, walked clean by the C check: validate() would pass it
                    buf, batches = writable(records), [header]
                elif header.attributes & COMPRESSION_MASK != CompressionType.NONE or (
                    rules.target_codec is not None and rules.recompresses(header)
                ):
                    # Decompressing (and recompressing) runs in a thread; the partition's slot in the
                    # response is filled once it is done, appends then made in request order.
                    parts.append(None)
                    deferred.append((parts, len(parts) - 1, p, index, records, header, rules))
                    continue
                else:
                    try:
                        buf, batches = validate(records, header, rules, now_ms)
                    except RecordFormatError as e:
                        failed = error_response(index, e)
                        parts.append(failed)
                        self._count_failure(name, failed)
                        continue
                resp, wait = self._append(p, index, buf, batches, now_ms, writes)
                parts.append(resp)
                if resp["error_code"] != _NONE:
                    self._count_failure(name, resp)
                if wait is not None and acks == -1:
                    waits.append((resp, *wait))
            responses.append({"name": name, "partition_responses": parts})
        if deferred:
            return self._validate_off_loop(responses, deferred, waits, writes, now_ms, acks, timeout_ms)
        if writes:
            # Answered once the writer threads have written (acks=0 too: the connection's next
            # request waits, so that its frame, still charged to the memory pool, bounds what is queued).
            return Appended(self._after_writes(responses, writes, waits, acks, timeout_ms))
        if acks == 0 or not waits:
            return responses  # nobody waits (acks=0: the handler sends nothing; acks=1: answered now)
        result = self._wait_for_acks(responses, waits, timeout_ms)
        return result if isinstance(result, list) else Appended(result)

    def _check_transactional(
        self,
        transactional_id: str | None,
        topic: str,
        index: int,
        batch: BatchHeader,
        api_version: int,
        added: dict[tuple[str, int], ErrorCode] | None = None,
    ) -> tuple[ErrorCode, str] | None:
        """Kafka's checks of a transactional producer's batch: no control batch from a client, and the
        partition must be in the producer's ongoing transaction: added by an earlier AddPartitionsToTxn
        and verified here (KIP-890 part 1), or, from Produce v12, added by this request (``added``:
        the coordinator's answers, KIP-890 part 2)."""
        if batch.is_control:
            return ErrorCode.INVALID_RECORD, "Clients are not allowed to write control records"
        if transactional_id is None or not batch.is_transactional:
            return None
        code = added.get((topic, index)) if added is not None else None
        if code is None:
            coordinator = self.transaction_verifier
            if coordinator is None or not coordinator.started:
                return ErrorCode.COORDINATOR_NOT_AVAILABLE, "the transaction coordinator is not available"
            code = coordinator.verify_partitions(
                transactional_id, batch.producer_id, batch.producer_epoch, [(topic, index)]
            )[(topic, index)]
        if code == ErrorCode.NONE:
            return None
        if code == ErrorCode.PRODUCER_FENCED:
            code = ErrorCode.INVALID_PRODUCER_EPOCH
        elif code == ErrorCode.TRANSACTION_ABORTABLE and api_version < 11:
            code = ErrorCode.INVALID_TXN_STATE  # what Kafka answers Produce v3-10 (v11: TRANSACTION_ABORTABLE)
        elif code in _RETRIABLE_AS_NOT_ENOUGH_REPLICAS or (
            code == ErrorCode.CONCURRENT_TRANSACTIONS and api_version < IMPLICIT_ADD_PARTITIONS_VERSION
        ):
            return ErrorCode.NOT_ENOUGH_REPLICAS, (
                "Unable to verify the partition has been added to the transaction. "
                f"Underlying error: {code.name}"
            )
        return code, f"{topic}-{index} is not part of an ongoing transaction of {transactional_id!r}"

    def _check_one(
        self,
        topic: str,
        index: int,
        records,
        acks: int,
        version: int,
        transactional_id: str | None,
        now_ms: int,
        added: dict[tuple[str, int], ErrorCode] | None = None,
    ):
        """Checks needing no record walk.  Returns (error response, None) or (None, (partition, header,
        validation rules, walked)): ``walked`` when the C check (check_produce_batch) walked the
        records of an uncompressed batch clean and the log keeps them as they are (no recompression),
        so that nothing is left to validate."""
        p = self.partitions.get((topic, index))
        try:
            if p is None or p.leader_id != self.node_id:  # (the common case without a call)
                p = self.get_partition_or_error(topic, index)
        except KafkaError as e:
            resp = partition_response(index, e.code, None if e.message == NOT_HOSTED else e.message)
            if e.code == ErrorCode.NOT_LEADER_OR_FOLLOWER:
                _add_current_leader(resp, self.partitions[(topic, index)])
            return resp, None
        if acks == -1 and not p.has_enough_replicas():
            # Checked before writing, as Kafka does: nothing is appended.
            return partition_response(
                index,
                ErrorCode.NOT_ENOUGH_REPLICAS,
                f"{len(p.isr)} in-sync replica(s), fewer than min.insync.replicas={p.effective_min_isr}",
            ), None
        if records is None or len(records) == 0:
            return partition_response(
                index, ErrorCode.INVALID_RECORD, "Produce request carries no record batch"
            ), None
        rules = validation_rules(p.log.config)
        fast = check_produce_batch(records, rules, now_ms)
        if fast is not None:  # one sound batch (and, uncompressed, its records walked)
            header, walked = fast
            if walked and rules.target_codec is not None and rules.recompresses(header):
                walked = False  # the walk of a batch to recompress is the recompression's
        else:  # the same checks in Python, which say what is wrong
            walked = False
            try:
                batches = validate_produce_batches(records)
            except RecordFormatError as e:
                return error_response(index, e), None
            if len(batches) != 1:
                return partition_response(
                    index,
                    ErrorCode.INVALID_RECORD,
                    "Produce requests with version 3 or later must contain exactly one record batch per partition",
                ), None
            header = batches[0]
        compression = header.attributes & COMPRESSION_MASK  # header.compression
        if compression > CompressionType.ZSTD:
            return partition_response(
                index,
                ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                f"unknown compression codec {compression}",
            ), None
        if compression == CompressionType.ZSTD and version < ZSTD_MIN_PRODUCE_VERSION:
            # Kafka's ProduceRequest.validateRecords: zstd needs Produce v7 (KIP-110).
            return partition_response(
                index,
                ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                f"Produce requests with version {version} are not allowed to use ZStandard compression",
            ), None
        max_message_bytes = p.log.config.max_message_bytes
        size = header.batch_length + LOG_OVERHEAD  # header.size
        if size > max_message_bytes:
            # Kafka checks the batch as sent before walking it (UnifiedLog.analyzeAndValidateRecords).
            return partition_response(
                index,
                ErrorCode.MESSAGE_TOO_LARGE,
                f"batch of {size} bytes exceeds max.message.bytes {max_message_bytes}",
            ), None
        # Without a transactional id only its control-batch check applies, which
        # validate_produce_batches made already (the same INVALID_RECORD).
        if transactional_id is not None:
            refused = self._check_transactional(transactional_id, topic, index, header, version, added)
            if refused is not None:
                return partition_response(index, *refused), None
        return None, (p, header, rules, walked)

    def _append(
        self,
        p: Partition,
        index: int,
        buf: bytearray | memoryview,
        batches: list[BatchHeader],
        now_ms: int,
        writes: list | None = None,
    ):
        """Returns (partition response, (partition, last offset) to wait on for acks=all, or None).
        With ``writes`` the log's writer thread writes the batch: the response is then added to
        ``writes`` with a future of the write's error, and is not final until that is done."""
        try:
            if writes is None:
                info = p.append_as_leader(buf, batches, now_ms)
            else:
                written = _WriteOutcome()
                info = p.append_as_leader(buf, batches, now_ms, written)
            if self.metrics is not None:
                self.metrics.produced(p.topic, len(buf), batches[0].records_count)
        except REFUSED as e:  # the client's doing (some are StorageErrors): no error log
            return error_response(index, e), None
        except NotLeaderOrFollowerError:  # leadership moved while the batch was validated
            resp = partition_response(index, ErrorCode.NOT_LEADER_OR_FOLLOWER)
            _add_current_leader(resp, p)
            return resp, None
        except StorageError as e:
            if not isinstance(e, KafkaStorageError):  # an I/O failure is logged by storage, once per cause
                log.error("append to %s-%d failed: %s", p.topic, index, e)
            return error_response(index, e), None
        resp = partition_response(
            index, ErrorCode.NONE, None, info.first_offset, info.log_append_time_ms, info.log_start_offset
        )
        if info.pending:
            assert writes is not None
            writes.append((resp, written.future(), p, info.last_offset))
            return resp, None  # acks=all waits after the write (_after_writes)
        return resp, (p, info.last_offset)

    async def _after_writes(
        self, responses: list[dict], writes: list, waits: list, acks: int, timeout_ms: int
    ) -> list[dict]:
        """Wait for the writer threads, then (acks=all) for the ISR; a failed write answers its
        partition KAFKA_STORAGE_ERROR (nothing of it was kept)."""
        for resp, written, p, last_offset in writes:
            error = written.result() if written.done() else await written
            if error is not None:
                index = resp["index"]
                resp.clear()
                resp.update(error_response(index, error))
                self._count_failure(p.topic, resp)
            elif acks == -1:
                waits.append((resp, p, last_offset))
        if acks == 0:
            return responses
        result = self._wait_for_acks(responses, waits, timeout_ms)
        if isinstance(result, list):
            return result
        return await result

    async def _validate_off_loop(
        self,
        responses: list[dict],
        deferred: list[_Deferred],
        waits: list,
        writes: list,
        now_ms: int,
        acks: int,
        timeout_ms: int,
    ) -> list[dict]:
        """Walk compressed batches in the executor, then append each in request order on the loop.
        The connection sends nothing else meanwhile (the server answers its requests in order)."""
        loop = asyncio.get_running_loop()
        jobs = [
            loop.run_in_executor(executor(), validate, records, header, rules, now_ms)
            for (_parts, _slot, _p, _index, records, header, rules) in deferred
        ]
        for (parts, slot, p, index, _records, _header, _rules), job in zip(deferred, jobs, strict=True):
            try:
                buf, batches = await job
            except RecordFormatError as e:
                failed = error_response(index, e)
                parts[slot] = failed
                self._count_failure(p.topic, failed)
                continue
            if self.partitions.get((p.topic, index)) is not p:  # deleted or recreated meanwhile
                parts[slot] = partition_response(index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                continue
            resp, wait = self._append(p, index, buf, batches, now_ms, writes)
            parts[slot] = resp
            self._count_failure(p.topic, resp)
            if wait is not None and acks == -1:
                waits.append((resp, *wait))
        return await self._after_writes(responses, writes, waits, acks, timeout_ms)

    def _count_failure(self, topic: str, resp: dict) -> None:
        if resp["error_code"] != ErrorCode.NONE and self.metrics is not None and self._topic_exists(topic):
            self.metrics.produce_failed(topic)

    @staticmethod
    def _wait_for_acks(
        responses: list[dict], waits: list, timeout_ms: int
    ) -> list[dict] | Awaitable[list[dict]]:
        pending = []
        for resp, p, last_offset in waits:
            fut = p.wait_replicated(last_offset)
            if fut is not None:
                pending.append((resp, fut))
        if not pending:
            return responses
        return _await_replication(responses, pending, timeout_ms)

    # -- fetch ---------------------------------------------------------------------------------
    def read_from_local_log(
        self, wanted: list[FetchPartitionStatus], max_bytes: int, read_committed: bool, replica_id: int = -1
    ) -> tuple[int, bool]:
        """Fill every response entry from the logs (file slices, no copy); returns (bytes gathered,
        whether any partition has an error).  ``replica_id`` >= 0: a follower's fetch, read up to
        the log end and recorded as the follower's position (Partition.fetch_for_follower)."""
        now_ms = int(time.time() * 1000)
        total = 0
        errored = False
        partitions = self.partitions
        for w in wanted:
            p = w.partition
            resp = w.resp
            if partitions.get((p.topic, p.index)) is not p:
                # Deleted (or recreated) while this fetch waited: its log is gone.
                resp["error_code"] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                resp["records"] = EMPTY
                errored = True
                continue
            if replica_id >= 0:
                budget = min(w.max_bytes, max_bytes - total)
                if budget <= 0 and total > 0:
                    continue
                r = p.fetch_for_follower(
                    replica_id, w.fetch_offset, w.leader_epoch, max(budget, 0), -1, now_ms, total == 0
                )
                resp["error_code"] = r.error
                resp["high_watermark"] = r.high_watermark
                resp["last_stable_offset"] = r.last_stable_offset
                resp["log_start_offset"] = r.log_start_offset
                resp["records"] = r.records if r.records is not None and r.records.size else EMPTY
                errored |= r.error != ErrorCode.NONE
                total += len(resp["records"])
                continue
            resp["high_watermark"] = p.high_watermark
            resp["last_stable_offset"] = p.last_stable_offset
            resp["log_start_offset"] = p.log_start_offset
            resp["aborted_transactions"] = [] if read_committed else None
            resp["records"] = EMPTY
            error = p.check_leader(w.leader_epoch)
            if error != ErrorCode.NONE:
                resp["error_code"] = error
                errored = True
                continue
            upper = p.fetch_upper_bound(read_committed)
            if w.fetch_offset == upper and w.fetch_offset >= p.log_start_offset:
                continue
            budget = min(w.max_bytes, max_bytes - total)
            if budget <= 0 and total > 0:
                continue
            try:
                # KIP-74: the first partition with data returns at least one whole batch, whatever the limits.
                sl = p.log.read(w.fetch_offset, max(budget, 0), upper, total == 0)
            except OffsetOutOfRangeError:
                resp["error_code"] = ErrorCode.OFFSET_OUT_OF_RANGE
                errored = True
                continue
            resp["error_code"] = ErrorCode.NONE
            if sl is not None and sl.size > 0:
                resp["records"] = sl
                total += sl.size
                if read_committed:
                    # The consumer drops the batches of these producers from their first offset on.
                    resp["aborted_transactions"] = [
                        {"producer_id": a.producer_id, "first_offset": a.first_offset}
                        for a in p.log.collect_aborted_transactions(w.fetch_offset, upper)
                    ]
        return total, errored

    def fetch_messages(
        self,
        wanted: list[FetchPartitionStatus],
        *,
        max_bytes: int,
        min_bytes: int,
        max_wait_ms: int,
        read_committed: bool,
        replica_id: int = -1,
    ) -> Awaitable[None] | None:
        """Read every partition (Kafka's fetchMessages).  None when the entries are final now: enough
        bytes, an error, no wait asked for or nothing to wait on.  Otherwise an awaitable that fills
        them again when appends arrive (long poll) until ``min_bytes`` or ``max_wait_ms``."""
        total, errored = self.read_from_local_log(wanted, max_bytes, read_committed, replica_id)
        if total >= min_bytes or max_wait_ms <= 0 or errored or not wanted:
            return None
        return self._long_poll(wanted, max_bytes, read_committed, min_bytes, max_wait_ms, replica_id)

    async def _long_poll(
        self,
        wanted: list[FetchPartitionStatus],
        max_bytes: int,
        read_committed: bool,
        min_bytes: int,
        max_wait_ms: int,
        replica_id: int,
    ) -> None:
        # Waits on the partitions' append notifications (Kafka's DelayedFetch), never on a timer loop.
        loop = asyncio.get_running_loop()
        woken = asyncio.Event()
        partitions = {id(w.partition): w.partition for w in wanted}.values()
        for p in partitions:
            p.add_data_listener(woken.set)
        deadline = loop.time() + max_wait_ms / 1000
        try:
            while True:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                try:
                    await asyncio.wait_for(woken.wait(), remaining)
                except TimeoutError:
                    break
                woken.clear()
                total, errored = self.read_from_local_log(wanted, max_bytes, read_committed, replica_id)
                if total >= min_bytes or errored:
                    return
            self.read_from_local_log(wanted, max_bytes, read_committed, replica_id)
        finally:
            for p in partitions:
                p.remove_data_listener(woken.set)


def _add_current_leader(resp: dict, p: Partition) -> None:
    """KIP-951: NOT_LEADER_OR_FOLLOWER carries the leader this broker knows (Produce v10+ has the
    tagged field; earlier versions drop it).  The leader's endpoint (NodeEndpoints) is the
    handler's to add, from the metadata image."""
    resp["current_leader"] = {"leader_id": p.leader_id, "leader_epoch": p.leader_epoch}


class _WriteOutcome:
    """The ``on_written`` callback of one append: a future of the write's error, made only for an
    append the writer thread does (most are written by the loop at once and never call it)."""

    __slots__ = ("_future", "_error", "_called")

    def __init__(self) -> None:
        self._future: asyncio.Future | None = None
        self._error: BaseException | None = None
        self._called = False

    def __call__(self, error: BaseException | None) -> None:
        fut = self._future
        if fut is None:  # before future() was asked for
            self._called, self._error = True, error
        elif not fut.done():  # cancelled: the request went away (broker stopping)
            fut.set_result(error)

    def future(self) -> asyncio.Future:
        if self._future is None:
            self._future = asyncio.get_running_loop().create_future()
            if self._called:
                self._future.set_result(self._error)
        return self._future


async def _await_replication(responses: list[dict], pending: list, timeout_ms: int) -> list[dict]:
    futs = [f for _, f in pending if not f.done()]
    if futs:
        await asyncio.wait(futs, timeout=max(timeout_ms, 0) / 1000)
    for resp, fut in pending:
        if fut.done() and not fut.cancelled():
            # NOT_ENOUGH_REPLICAS_AFTER_APPEND (the ISR shrank meanwhile) or NOT_LEADER_OR_FOLLOWER
            # (leadership moved): Kafka's checkEnoughReplicasReachOffset.
            error = fut.result()
            if error:
                resp["error_code"] = error
        else:
            fut.cancel()
            resp["error_code"] = ErrorCode.REQUEST_TIMED_OUT
            resp["error_message"] = "not enough in-sync replicas acknowledged the write in time"
    return responses
