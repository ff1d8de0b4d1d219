"""ShareGroupService.share_partition in a cluster: a share partition's state is loaded once, through the
persister (its share coordinator on another broker) or in-process (this broker coordinates it), never both.

Found by the compat scenario test_share_groups::test_share_state_survives_a_broker_restart on a 3-node
pybroker cluster (2 runs in 8): the first share fetch came while ``__share_group_state`` was being made, so
the load went through the persister and waited for a coordinator; the state partition then opened on this
broker, the next fetch loaded the share partition in-process and handed it out, the consumer's
acknowledgements went to it, and then the remote load finished and replaced it with the state it had read
before them: an accepted record was delivered again with delivery count 1."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from pybroker.coordinator.clock import FakeClock
from pybroker.coordinator.share.manager import ShareGroupService
from pybroker.coordinator.share.state_records import SharePartitionKey
from pybroker.protocol.errors import ErrorCode

TOPIC_ID = uuid.UUID(int=7)


class _Partition:
    leader_epoch = 0
    is_leader = True
    log_start_offset = 0
    high_watermark = 4


class _Services:
    def partition(self, topic: str, index: int) -> _Partition:
        return _Partition()


class _Coordinator:
    """The in-process share coordinator: this broker owns the key once ``local`` is set."""

    def __init__(self) -> None:
        self.local = False

    def ensure_topic(self) -> None:
        pass

    def owns(self, key: SharePartitionKey) -> bool:
        return self.local

    def read_state_and_maybe_update_leader_epoch(self, key: SharePartitionKey, epoch: int) -> tuple[dict[str, Any], None]:
        return {"error_code": ErrorCode.INVALID_REQUEST, "error_message": "no state"}, None

    def initialize_state(self, key: SharePartitionKey, state_epoch: int, start: int) -> tuple[dict[str, Any], None]:
        return {"error_code": ErrorCode.NONE, "error_message": None}, None


class _Persister:
    """ReadShareGroupState to a coordinator that answers only once ``answer`` is set (its retries)."""

    def __init__(self) -> None:
        self.answer = asyncio.Event()

    async def read_state(self, key: SharePartitionKey, leader_epoch: int) -> dict[str, Any]:
        await self.answer.wait()
        return {"partition": key.partition, "error_code": ErrorCode.INVALID_REQUEST, "error_message": "no state"}

    async def initialize_state(self, key: SharePartitionKey, state_epoch: int, start: int) -> dict[str, Any]:
        return {"partition": key.partition, "error_code": ErrorCode.NONE, "error_message": None}


def _service(coordinator: _Coordinator, persister: _Persister) -> ShareGroupService:
    svc = ShareGroupService.__new__(ShareGroupService)  # only what share_partition() uses
    svc.services = _Services()  # type: ignore[assignment]
    svc.coordinator = coordinator  # type: ignore[assignment]
    svc.persister = persister  # type: ignore[assignment]
    svc.clock = FakeClock()
    svc.delivery_count_limit, svc.record_lock_duration_ms, svc.max_record_locks = 5, 30_000, 200
    svc.group_configs = {"g": {"share.auto.offset.reset": "earliest"}}
    svc.share_partitions, svc._loading, svc._leader_epochs, svc._writers = {}, {}, {}, {}
    svc._remote_keys, svc._local_waits, svc._last_wait = set(), {}, None
    return svc


def test_a_load_through_the_persister_under_way_is_not_raced_by_an_in_process_one() -> None:
    asyncio.run(_load_race())


async def _load_race() -> None:
    coordinator, persister = _Coordinator(), _Persister()
    svc = _service(coordinator, persister)
    key = SharePartitionKey("g", TOPIC_ID, 0)
    # The state topic is being made: the load goes to the persister, which is still retrying.
    assert await svc.share_partition("g", TOPIC_ID, "t", 0, timeout=0.05) is None
    coordinator.local = True  # the state partition opened here meanwhile
    handed_out = await svc.share_partition("g", TOPIC_ID, "t", 0, timeout=0.05)
    persister.answer.set()
    loaded = await svc.share_partition("g", TOPIC_ID, "t", 0, timeout=5)
    assert loaded is not None and svc.share_partitions[key] is loaded
    # Whatever was handed out is the share partition from then on (its acknowledgements are kept).
    assert handed_out is None or handed_out is loaded
    await asyncio.sleep(0)
    assert await svc.share_partition("g", TOPIC_ID, "t", 0, timeout=5) is loaded
