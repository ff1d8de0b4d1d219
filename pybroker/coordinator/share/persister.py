"""Kafka's DefaultStatePersister / PersisterStateManager: a share-partition leader's state calls to the share
coordinator of another broker, over the inter-broker listener.

The share coordinator of a share partition (group, topic id, partition) is the leader of its
``__share_group_state`` partition. When that is this broker the share-group service calls its own
``ShareCoordinator`` directly (no network hop); otherwise it calls this persister, which sends the share
coordinator's RPCs (InitializeShareGroupState, ReadShareGroupState, WriteShareGroupState,
DeleteShareGroupState, ReadShareGroupStateSummary) to that broker, as Kafka's persister does:

- the coordinator is looked up for every attempt (Kafka's handlers look it up in the metadata cache when the
  state topic exists, and ask FindCoordinator key type SHARE otherwise, which creates the topic);
- NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS and an unreachable broker are
  retried after an exponential backoff, with the coordinator looked up again (Kafka's BackoffManager);
- requests of one RPC for one group to one coordinator made in the same event-loop turn go as one request
  (Kafka's sender thread combines the queued requests per coordinator node and RPC type).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pybroker.coordinator.share.share_partition import StateBatch
from pybroker.coordinator.share.state_records import SharePartitionKey
from pybroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from pybroker.coordinator.share.share_coordinator import ShareCoordinator

log = logging.getLogger(__name__)

INITIALIZE_SHARE_GROUP_STATE = 83
READ_SHARE_GROUP_STATE = 84
WRITE_SHARE_GROUP_STATE = 85
DELETE_SHARE_GROUP_STATE = 86
READ_SHARE_GROUP_STATE_SUMMARY = 87

# Kafka's PersisterStateManager retries these after looking the coordinator up again.
RETRIABLE = frozenset(
    {ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}
)
DEFAULT_MAX_ATTEMPTS = 10
DEFAULT_BACKOFF_MS = 100
DEFAULT_MAX_BACKOFF_MS = 2_000

# broker id, api key, request body -> the response, or None when the broker could not be reached.
Sender = Callable[[int, int, dict[str, Any]], Awaitable[dict[str, Any] | None]]
# A share partition -> the broker coordinating it now (None: unknown, e.g. the state topic is being made).
Locator = Callable[[SharePartitionKey], int | None]


def _unavailable(partition: int, message: str) -> dict[str, Any]:
    return {"partition": partition, "error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE, "error_message": message}


@dataclass
class _Pending:
    """One share partition's part of a request waiting to be sent."""

    key: SharePartitionKey
    body: dict[str, Any]
    answer: asyncio.Future[dict[str, Any]]


@dataclass
class _Batch:
    entries: list[_Pending] = field(default_factory=list)


class RemoteStatePersister:
    def __init__(
        self,
        locate: Locator,
        send: Sender,
        *,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        backoff_ms: int = DEFAULT_BACKOFF_MS,
        max_backoff_ms: int = DEFAULT_MAX_BACKOFF_MS,
    ) -> None:
        self.locate = locate
        self.send = send
        self.max_attempts = max_attempts
        self.backoff_ms = backoff_ms
        self.max_backoff_ms = max_backoff_ms
        self._batches: dict[tuple[int, int, str], _Batch] = {}

    # -- the five operations ----------------------------------------------------------------------------
    # Each returns the PartitionResult of its response (a retriable error once the attempts ran out).

    async def read_state(self, key: SharePartitionKey, leader_epoch: int) -> dict[str, Any]:
        return await self._call(READ_SHARE_GROUP_STATE, key, {"partition": key.partition, "leader_epoch": leader_epoch})

    async def initialize_state(self, key: SharePartitionKey, state_epoch: int, start_offset: int) -> dict[str, Any]:
        body = {"partition": key.partition, "state_epoch": state_epoch, "start_offset": start_offset}
        return await self._call(INITIALIZE_SHARE_GROUP_STATE, key, body)

    async def write_state(  # noqa: PLR0913
        self,
        key: SharePartitionKey,
        state_epoch: int,
        leader_epoch: int,
        start_offset: int,
        batches: Sequence[StateBatch],
        delivery_complete_count: int,
    ) -> dict[str, Any]:
        body = {
            "partition": key.partition,
            "state_epoch": state_epoch,
            "leader_epoch": leader_epoch,
            "start_offset": start_offset,
            "delivery_complete_count": delivery_complete_count,
            "state_batches": [
                {
                    "first_offset": b.first_offset,
                    "last_offset": b.last_offset,
                    "delivery_state": int(b.delivery_state),
                    "delivery_count": b.delivery_count,
                }
                for b in batches
            ],
        }
        return await self._call(WRITE_SHARE_GROUP_STATE, key, body)

    async def delete_state(self, key: SharePartitionKey) -> dict[str, Any]:
        return await self._call(DELETE_SHARE_GROUP_STATE, key, {"partition": key.partition})

    async def read_state_summary(self, key: SharePartitionKey, leader_epoch: int) -> dict[str, Any]:
        body = {"partition": key.partition, "leader_epoch": leader_epoch}
        return await self._call(READ_SHARE_GROUP_STATE_SUMMARY, key, body)

    # -- retries ------------------------------------------------------------------------------------------

    async def _call(self, api_key: int, key: SharePartitionKey, body: dict[str, Any]) -> dict[str, Any]:
        result = _unavailable(key.partition, "no share coordinator")
        backoff = self.backoff_ms
        for attempt in range(self.max_attempts):
            if attempt:
                await asyncio.sleep(backoff / 1000)
                backoff = min(backoff * 2, self.max_backoff_ms)
            node = self.locate(key)
            if node is None:
                result = _unavailable(key.partition, "the share coordinator is not known yet")
                continue
            result = await self._enqueue(node, api_key, key, body)
            if result["error_code"] not in RETRIABLE:
                return result
            log.debug("share state api %d for %s at broker %d: %s, retrying", api_key, key, node, result["error_code"])
        log.warning("share state api %d for %s failed after %d attempts: %s", api_key, key, self.max_attempts,
                    ErrorCode(result["error_code"]).name)
        return result

    # -- batching -----------------------------------------------------------------------------------------

    def _enqueue(self, node: int, api_key: int, key: SharePartitionKey, body: dict[str, Any]) -> asyncio.Future[dict[str, Any]]:
        loop = asyncio.get_running_loop()
        slot = (node, api_key, key.group_id)
        batch = self._batches.get(slot)
        if batch is None:
            batch = self._batches[slot] = _Batch()
            loop.call_soon(lambda: loop.create_task(self._flush(slot, batch)))
        answer: asyncio.Future[dict[str, Any]] = loop.create_future()
        batch.entries.append(_Pending(key, body, answer))
        return answer

    async def _flush(self, slot: tuple[int, int, str], batch: _Batch) -> None:
        if self._batches.get(slot) is batch:
            del self._batches[slot]
        node, api_key, group_id = slot
        # one request per share partition at most: a second entry for the same key goes in the next request
        while batch.entries:
            this: list[_Pending] = []
            rest: list[_Pending] = []
            seen: set[SharePartitionKey] = set()
            for entry in batch.entries:
                (rest if entry.key in seen else this).append(entry)
                seen.add(entry.key)
            batch.entries = rest
            await self._send(node, api_key, group_id, this)

    async def _send(self, node: int, api_key: int, group_id: str, entries: list[_Pending]) -> None:
        topics: dict[uuid.UUID, list[dict[str, Any]]] = {}
        for entry in entries:
            topics.setdefault(entry.key.topic_id, []).append(entry.body)
        request = {"group_id": group_id, "topics": [{"topic_id": t, "partitions": ps} for t, ps in topics.items()]}
        try:
            response = await self.send(node, api_key, request)
        except Exception as exc:  # noqa: BLE001 - whatever failed, each caller retries or reports it
            log.info("share state api %d to broker %d failed: %s", api_key, node, exc)
            response = None
        answers: dict[tuple[uuid.UUID, int], dict[str, Any]] = {}
        for t in (response or {}).get("results") or []:
            for p in t["partitions"]:
                answers[(t["topic_id"], p["partition"])] = p
        for entry in entries:
            got = answers.get((entry.key.topic_id, entry.key.partition))
            if got is None:
                why = f"broker {node} not reachable" if response is None else f"broker {node} did not answer it"
                got = _unavailable(entry.key.partition, why)
            if not entry.answer.done():
                entry.answer.set_result(got)


class ShareStatePersister:
    """Kafka's Persister as the group coordinator uses it for the share-group offsets APIs (describe: readSummary;
    alter: initializeState; delete: deleteState): each call reaches the share partition's share coordinator,
    in-process when this broker leads its ``__share_group_state`` partition, otherwise (in a cluster) through
    ``RemoteStatePersister``. The answer is the share coordinator's PartitionResult, given once what it wrote
    is replicated."""

    def __init__(self, coordinator: ShareCoordinator, remote: RemoteStatePersister | None) -> None:
        self.coordinator = coordinator
        self.remote = remote

    async def read_state_summary(self, key: SharePartitionKey) -> dict[str, Any]:
        local = await self._local(key, lambda: (self.coordinator.read_state_summary(key), None))
        if local is not None:
            return local
        if self.remote is None:
            return _unavailable(key.partition, "the share coordinator is not available")
        return await self.remote.read_state_summary(key, -1)

    async def initialize_state(self, key: SharePartitionKey, state_epoch: int, start_offset: int) -> dict[str, Any]:
        local = await self._local(key, lambda: self.coordinator.initialize_state(key, state_epoch, start_offset))
        if local is not None:
            return local
        if self.remote is None:
            return _unavailable(key.partition, "the share coordinator is not available")
        return await self.remote.initialize_state(key, state_epoch, start_offset)

    async def delete_state(self, key: SharePartitionKey) -> dict[str, Any]:
        local = await self._local(key, lambda: self.coordinator.delete_state(key))
        if local is not None:
            return local
        if self.remote is None:
            return _unavailable(key.partition, "the share coordinator is not available")
        return await self.remote.delete_state(key)

    async def _local(
        self, key: SharePartitionKey, call: Callable[[], tuple[dict[str, Any], Awaitable[Any] | None]]
    ) -> dict[str, Any] | None:
        """The in-process answer, or None when another broker coordinates ``key`` (or the state topic is not
        loaded here yet: the remote persister looks the coordinator up and retries)."""
        self.coordinator.ensure_topic()
        if not self.coordinator.owns(key):
            return None
        try:
            result, wait = call()
        except RuntimeError as exc:  # the state partition closed under us
            return _unavailable(key.partition, str(exc))
        if wait is not None:
            outcome = await wait
            if isinstance(outcome, ErrorCode) and outcome != ErrorCode.NONE:
                # Kafka's CoordinatorOperationExceptionHelper: a lost leadership is NOT_COORDINATOR, else unavailable
                code = ErrorCode.NOT_COORDINATOR if outcome == ErrorCode.NOT_LEADER_OR_FOLLOWER else ErrorCode.COORDINATOR_NOT_AVAILABLE
                return {"partition": key.partition, "error_code": code, "error_message": code.message}
        return result
