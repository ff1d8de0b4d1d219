"""RemoteStatePersister: the share-state RPCs to the share coordinator on another broker. The sender here is
two ShareCoordinators behind a function (the request and response bodies of the wire); the cluster test
(tests/cluster/test_share_persister.py) runs the same over sockets."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from pybroker.coordinator.share.persister import (
    DELETE_SHARE_GROUP_STATE,
    INITIALIZE_SHARE_GROUP_STATE,
    READ_SHARE_GROUP_STATE,
    READ_SHARE_GROUP_STATE_SUMMARY,
    WRITE_SHARE_GROUP_STATE,
    RemoteStatePersister,
    ShareStatePersister,
)
from pybroker.coordinator.share.share_partition import RecordState, StateBatch
from pybroker.coordinator.share.state_records import SharePartitionKey
from pybroker.protocol.errors import ErrorCode
from tests.coordinator.share.test_share_coordinator import ListLog, coordinator

TOPIC = uuid.uuid4()


class Brokers:
    """Broker 1 answers NOT_COORDINATOR (or is unreachable), broker 2 is the share coordinator."""

    def __init__(self) -> None:
        self.coordinator = coordinator(ListLog())
        self.coordinator_node = 1
        self.sent: list[tuple[int, int, dict[str, Any]]] = []
        self.unreachable: set[int] = set()

    def locate(self, _key: SharePartitionKey) -> int | None:
        return self.coordinator_node

    async def send(self, node: int, api_key: int, body: dict[str, Any]) -> dict[str, Any] | None:
        self.sent.append((node, api_key, body))
        if node in self.unreachable:
            return None
        results = []
        for t in body["topics"]:
            parts = []
            for p in t["partitions"]:
                key = SharePartitionKey(body["group_id"], t["topic_id"], p["partition"])
                if node != 2:
                    parts.append({"partition": key.partition, "error_code": ErrorCode.NOT_COORDINATOR, "error_message": None})
                elif api_key == INITIALIZE_SHARE_GROUP_STATE:
                    parts.append(self.coordinator.initialize_state(key, p["state_epoch"], p["start_offset"])[0])
                elif api_key == READ_SHARE_GROUP_STATE:
                    parts.append(self.coordinator.read_state_and_maybe_update_leader_epoch(key, p["leader_epoch"])[0])
                elif api_key == READ_SHARE_GROUP_STATE_SUMMARY:
                    parts.append(self.coordinator.read_state_summary(key))
                elif api_key == DELETE_SHARE_GROUP_STATE:
                    parts.append(self.coordinator.delete_state(key)[0])
                else:
                    batches = [StateBatch(b["first_offset"], b["last_offset"], RecordState(b["delivery_state"]),
                                          b["delivery_count"]) for b in p["state_batches"]]  # fmt: skip
                    parts.append(self.coordinator.write_state(key, p["state_epoch"], p["leader_epoch"],
                                                              p["start_offset"], batches)[0])  # fmt: skip
            results.append({"topic_id": t["topic_id"], "partitions": parts})
        return {"results": results}


def persister(brokers: Brokers, **kwargs: int) -> RemoteStatePersister:
    return RemoteStatePersister(brokers.locate, brokers.send, backoff_ms=1, max_backoff_ms=2, **kwargs)


def test_not_coordinator_is_retried_after_a_fresh_lookup() -> None:
    brokers = Brokers()
    key = SharePartitionKey("g", TOPIC, 0)

    async def run() -> dict[str, Any]:
        p = persister(brokers)
        first = asyncio.ensure_future(p.initialize_state(key, 0, 5))
        while not brokers.sent:
            await asyncio.sleep(0)
        brokers.coordinator_node = 2  # the state partition's leader moved
        return await first

    assert asyncio.run(run())["error_code"] == ErrorCode.NONE
    assert [node for node, _, _ in brokers.sent] == [1, 2]
    assert brokers.coordinator.read_state(key).start_offset == 5


def test_an_unreachable_coordinator_ends_in_coordinator_not_available_after_the_attempts() -> None:
    brokers = Brokers()
    brokers.coordinator_node = 2
    brokers.unreachable.add(2)
    key = SharePartitionKey("g", TOPIC, 0)
    result = asyncio.run(persister(brokers, max_attempts=3).read_state(key, 0))
    assert result["error_code"] == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert len(brokers.sent) == 3


def test_calls_of_one_group_in_one_loop_turn_go_as_one_request() -> None:
    brokers = Brokers()
    brokers.coordinator_node = 2
    keys = [SharePartitionKey("g", TOPIC, i) for i in range(3)] + [SharePartitionKey("other", TOPIC, 0)]

    async def run() -> list[dict[str, Any]]:
        p = persister(brokers)
        return await asyncio.gather(*(p.initialize_state(k, 0, 0) for k in keys))

    assert [r["error_code"] for r in asyncio.run(run())] == [ErrorCode.NONE] * 4
    assert sorted((body["group_id"], len(body["topics"][0]["partitions"])) for _, _, body in brokers.sent) == [
        ("g", 3), ("other", 1)]  # fmt: skip

    async def write_twice() -> list[dict[str, Any]]:
        p = persister(brokers)
        batch = [StateBatch(0, 0, RecordState.ACKNOWLEDGED, 1)]
        return await asyncio.gather(p.write_state(keys[0], 0, 0, 1, batch, 1), p.write_state(keys[0], 0, 0, 1, batch, 1))

    brokers.sent.clear()
    assert [r["error_code"] for r in asyncio.run(write_twice())] == [ErrorCode.NONE] * 2
    # one share partition appears once per request: the second write of it is a request of its own
    assert [(api, len(body["topics"][0]["partitions"])) for _, api, body in brokers.sent] == [
        (WRITE_SHARE_GROUP_STATE, 1), (WRITE_SHARE_GROUP_STATE, 1)]  # fmt: skip


class ElsewhereLog(ListLog):
    """The state topic exists but its partition is led by another broker."""

    def leads(self, key: str) -> bool:
        return False


def test_offsets_apis_reach_the_share_coordinator_here_or_on_another_broker() -> None:
    """ShareStatePersister (the share-group offsets APIs' persister): in-process when this broker leads the
    key's state partition, else through the RemoteStatePersister; with neither, COORDINATOR_NOT_AVAILABLE."""
    key = SharePartitionKey("g", TOPIC, 1)

    async def alter_describe_delete(state: ShareStatePersister) -> list[tuple[int, int]]:
        seen = []
        assert (await state.initialize_state(key, 1, 7))["error_code"] == ErrorCode.NONE
        summary = await state.read_state_summary(key)
        seen.append((summary["state_epoch"], summary["start_offset"]))
        assert (await state.delete_state(key))["error_code"] == ErrorCode.NONE
        summary = await state.read_state_summary(key)
        seen.append((summary["error_code"], summary["start_offset"]))
        return seen

    here = coordinator(ListLog())
    brokers = Brokers()
    assert asyncio.run(alter_describe_delete(ShareStatePersister(here, persister(brokers)))) == [(1, 7), (0, -1)]
    assert brokers.sent == []  # all in-process

    brokers.coordinator_node = 2
    elsewhere = coordinator(ElsewhereLog())
    assert asyncio.run(alter_describe_delete(ShareStatePersister(elsewhere, persister(brokers)))) == [(1, 7), (0, -1)]
    assert [api for _, api, _ in brokers.sent] == [
        INITIALIZE_SHARE_GROUP_STATE, READ_SHARE_GROUP_STATE_SUMMARY, DELETE_SHARE_GROUP_STATE,
        READ_SHARE_GROUP_STATE_SUMMARY]  # fmt: skip
    assert elsewhere.read_state(key) is None  # nothing was written here

    alone = ShareStatePersister(coordinator(ElsewhereLog()), None)
    assert asyncio.run(alone.read_state_summary(key))["error_code"] == ErrorCode.COORDINATOR_NOT_AVAILABLE
