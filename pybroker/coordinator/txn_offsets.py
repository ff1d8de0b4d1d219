"""Offsets committed inside a transaction (TxnOffsetCommit, KIP-98/KIP-447).

They are written to ``__consumer_offsets`` at once, in a transactional batch of the producer, and
held here as pending per producer id; the transaction's marker on that ``__consumer_offsets``
partition makes them the group's committed offsets (COMMIT) or drops them (ABORT), as Kafka's
GroupMetadata.prepareTxnOffsetCommit / completePendingTxnOffsetCommit do.  OffsetFetch sees only
committed offsets.  At start-up, records of transactions still open at the end of the log come back
as pending (the transaction coordinator completes or aborts them).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from pybroker.coordinator import records
from pybroker.coordinator.group import ClassicGroup, GroupState, OffsetAndMetadata
from pybroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from pybroker.coordinator.coordinator import GroupCoordinator

log = logging.getLogger(__name__)

Offsets = dict[tuple[str, int], OffsetAndMetadata]


class TransactionalOffsets:
    def __init__(self, coordinator: GroupCoordinator) -> None:
        self.coordinator = coordinator
        # producer id -> group id -> pending offsets
        self.pending: dict[int, dict[str, Offsets]] = {}

    def commit(
        self,
        *,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: list[tuple[str, int, int, int, str | None]],
        topic_exists: Callable[[str, int], bool] | None = None,
    ) -> tuple[dict[tuple[str, int], ErrorCode], Awaitable[None] | None]:
        c = self.coordinator

        def all_(error: ErrorCode) -> tuple[dict[tuple[str, int], ErrorCode], None]:
            return {(t, p): error for t, p, *_ in offsets}, None

        if not group_id:
            return all_(ErrorCode.INVALID_GROUP_ID)
        check = None
        manager, cgroup = c.epoch_group(group_id)
        if cgroup is not None:
            # A KIP-848 or streams group: the generation is the member epoch, checked as for OffsetCommit
            # (a transactional commit is not bound to OffsetCommit v9+, hence no api version).
            error, check = manager.validate_offset_commit(cgroup, member_id, generation_id, None)
            if error != ErrorCode.NONE:
                return all_(error)
        group = c.groups.get(group_id)
        if group is not None and cgroup is None:
            if group.is_(GroupState.DEAD):
                return all_(ErrorCode.COORDINATOR_NOT_AVAILABLE)
            if group.is_static_member_fenced(group_instance_id, member_id):
                return all_(ErrorCode.FENCED_INSTANCE_ID)
            # KIP-447: a v3+ request names its member and generation; they must be current.
            if member_id and member_id not in group.members:
                return all_(ErrorCode.UNKNOWN_MEMBER_ID)
            if generation_id >= 0 and generation_id != group.generation_id:
                return all_(ErrorCode.ILLEGAL_GENERATION)
        now = c.clock.now_ms()
        errors: dict[tuple[str, int], ErrorCode] = {}
        entries: list[tuple[bytes, bytes | None]] = []
        accepted: Offsets = {}
        for topic, partition, offset, leader_epoch, metadata in offsets:
            tp = (topic, partition)
            text = metadata or ""
            if len(text.encode()) > 4096:
                errors[tp] = ErrorCode.OFFSET_METADATA_TOO_LARGE
                continue
            if topic_exists is not None and not topic_exists(topic, partition):
                errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            refused = check(topic, partition) if check is not None else ErrorCode.NONE
            if refused != ErrorCode.NONE:
                errors[tp] = refused
                continue
            entries.append(
                (
                    records.offset_key(group_id, topic, partition),
                    records.offset_value(offset, leader_epoch, text, now),
                )
            )
            accepted[tp] = OffsetAndMetadata(offset, leader_epoch, text, now)
            errors[tp] = ErrorCode.NONE
        if not entries:
            return errors, None
        wait = c.store.append(group_id, entries, producer_id=producer_id, producer_epoch=producer_epoch)
        self.pending.setdefault(producer_id, {}).setdefault(group_id, {}).update(accepted)
        return errors, wait

    def load_open(self, open_transactions: dict[int, list[tuple[bytes, bytes | None]]]) -> None:
        """Pending offsets of transactions still open at the end of ``__consumer_offsets``."""
        for producer_id, entries in open_transactions.items():
            for key_bytes, value in entries:
                key = records.decode_key(key_bytes)
                if not isinstance(key, records.OffsetKey) or value is None:
                    continue
                v = records.decode_offset_value(value)
                om = OffsetAndMetadata(
                    v["offset"], v.get("leader_epoch", -1), v["metadata"], v["commit_timestamp"]
                )
                self.pending.setdefault(producer_id, {}).setdefault(key.group, {})[
                    (key.topic, key.partition)
                ] = om

    def complete(self, producer_id: int, commit: bool, partition: int | None = None) -> None:
        """A marker for ``producer_id`` reached ``__consumer_offsets`` partition ``partition``
        (None: every partition): its pending offsets of the groups there become committed or go."""
        c = self.coordinator
        groups = self.pending.get(producer_id)
        if not groups:
            return
        for group_id in list(groups):
            if partition is not None and c.partition_for(group_id) != partition:
                continue
            offsets = groups.pop(group_id)
            if not commit:
                continue
            _, cgroup = c.epoch_group(group_id)
            if cgroup is not None:
                cgroup.offsets.update(offsets)
                continue
            group = c.groups.get(group_id)
            if group is None:
                group = ClassicGroup(group_id, state_timestamp_ms=c.clock.now_ms())
                c.groups[group_id] = group
            group.offsets.update(offsets)
            log.debug("group %s: %d transactional offsets committed", group_id, len(offsets))
        if not groups:
            del self.pending[producer_id]

    def is_pending(self, group_id: str, tp: tuple[str, int]) -> bool:
        return any(tp in groups.get(group_id, ()) for groups in self.pending.values())
