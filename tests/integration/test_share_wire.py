"""Share groups over raw sockets: ShareGroupHeartbeat, ShareGroupDescribe, ListGroups' share rows,
ShareFetch share-session epochs and acknowledgement errors, ShareAcknowledge (Kafka's error codes)."""

from __future__ import annotations

import uuid

from confluent_kafka.admin import AdminClient, NewTopic

from pybroker.protocol.errors import ErrorCode
from pybroker.records import SimpleRecord, build_batch
from tests.wire import WireClient

PRODUCE, METADATA, LIST_GROUPS, INCREMENTAL_ALTER_CONFIGS = 0, 3, 16, 44
HEARTBEAT, DESCRIBE, SHARE_FETCH, SHARE_ACK = 76, 77, 78, 79
ACCEPT, RELEASE, REJECT = 1, 2, 3


def setup_topic(bootstrap: str, wire: WireClient, group: str, count: int) -> tuple[str, uuid.UUID]:
    topic = f"sw-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    records = build_batch([SimpleRecord(b"k", b"v%d" % i) for i in range(count)])
    produced = wire.request(
        PRODUCE, 9,
        {"transactional_id": None, "acks": -1, "timeout_ms": 10_000,
         "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}]},
    )  # fmt: skip
    assert produced["responses"][0]["partition_responses"][0]["error_code"] == 0
    altered = wire.request(
        INCREMENTAL_ALTER_CONFIGS, 1,
        {"validate_only": False, "resources": [{"resource_type": 32, "resource_name": group, "configs": [
            {"name": "share.auto.offset.reset", "config_operation": 0, "value": "earliest"}]}]},
    )  # fmt: skip
    assert altered["responses"][0]["error_code"] == 0
    meta = wire.request(METADATA, 12, {"topics": [{"topic_id": uuid.UUID(int=0), "name": topic}],
                                       "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
    return topic, meta["topics"][0]["topic_id"]


def heartbeat(wire: WireClient, group: str, member: str, epoch: int, topics: list[str] | None) -> dict:
    return wire.request(
        HEARTBEAT, 1,
        {"group_id": group, "member_id": member, "member_epoch": epoch, "rack_id": None, "subscribed_topic_names": topics},
    )  # fmt: skip


def share_fetch(wire: WireClient, group: str, member: str, epoch: int, topic_id: uuid.UUID, acks: list | None = None,
                max_wait_ms: int = 0) -> dict:
    return wire.request(
        SHARE_FETCH, 1,
        {"group_id": group, "member_id": member, "share_session_epoch": epoch, "max_wait_ms": max_wait_ms,
         "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 100, "batch_size": 100,
         "topics": [{"topic_id": topic_id, "partitions": [
             {"partition_index": 0, "partition_max_bytes": 0, "acknowledgement_batches": acks or []}]}],
         "forgotten_topics_data": []},
    )  # fmt: skip


def share_fetch_v2(wire: WireClient, group: str, member: str, epoch: int, topic_id: uuid.UUID, max_records: int,
                   mode: int) -> dict:
    return wire.request(
        SHARE_FETCH, 2,
        {"group_id": group, "member_id": member, "share_session_epoch": epoch, "max_wait_ms": 0,
         "min_bytes": 1, "max_bytes": 1 << 20, "max_records": max_records, "batch_size": max_records,
         "share_acquire_mode": mode, "is_renew_ack": False,
         "topics": [{"topic_id": topic_id, "partitions": [
             {"partition_index": 0, "acknowledgement_batches": []}]}],
         "forgotten_topics_data": []},
    )  # fmt: skip


def ack_batch(first: int, last: int, kind: int) -> dict:
    return {"first_offset": first, "last_offset": last, "acknowledge_types": [kind]}


def test_share_group_over_the_wire(shared_broker) -> None:  # noqa: ANN001
    bootstrap = shared_broker.bootstrap
    group, member = f"g-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    with WireClient(bootstrap) as wire:
        topic, topic_id = setup_topic(bootstrap, wire, group, 3)

        hb = heartbeat(wire, group, member, 0, [topic])
        assert (hb["error_code"], hb["member_epoch"]) == (0, 1)
        assert hb["assignment"] == {"topic_partitions": [{"topic_id": topic_id, "partitions": [0]}]}
        assert heartbeat(wire, group, member, 5, None)["error_code"] == ErrorCode.FENCED_MEMBER_EPOCH
        assert heartbeat(wire, group, "stranger", 3, None)["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID
        assert heartbeat(wire, group, member, 1, None)["assignment"] is None

        described = wire.request(DESCRIBE, 1, {"group_ids": [group], "include_authorized_operations": False})
        g = described["groups"][0]
        assert (g["error_code"], g["group_state"], g["assignor_name"]) == (0, "Stable", "simple")
        assert [m["member_id"] for m in g["members"]] == [member]
        listed = wire.request(LIST_GROUPS, 5, {"states_filter": [], "types_filter": ["share"]})
        assert {"group_id": group, "protocol_type": "share", "group_state": "Stable", "group_type": "share"} in listed["groups"]

        # no session yet
        assert share_fetch(wire, group, member, 1, topic_id)["error_code"] == ErrorCode.SHARE_SESSION_NOT_FOUND
        first = share_fetch(wire, group, member, 0, topic_id)
        part = first["responses"][0]["partitions"][0]
        assert part["acquired_records"] == [{"first_offset": 0, "last_offset": 2, "delivery_count": 1}]
        assert first["acquisition_lock_timeout_ms"] == 30_000
        # the session's next epoch is 1; 0 again would open a new session, 7 is out of order
        assert share_fetch(wire, group, member, 7, topic_id)["error_code"] == ErrorCode.INVALID_SHARE_SESSION_EPOCH
        second = share_fetch(wire, group, member, 1, topic_id, [ack_batch(0, 0, ACCEPT), ack_batch(1, 1, RELEASE)])
        part = second["responses"][0]["partitions"][0]
        assert part["acknowledge_error_code"] == 0
        assert part["acquired_records"] == [{"first_offset": 1, "last_offset": 1, "delivery_count": 2}]
        # acknowledging a record this member does not hold
        bad = wire.request(
            SHARE_ACK, 1,
            {"group_id": group, "member_id": member, "share_session_epoch": 2, "topics": [
                {"topic_id": topic_id, "partitions": [{"partition_index": 0, "acknowledgement_batches": [
                    ack_batch(0, 0, ACCEPT)]}]}]},
        )  # fmt: skip
        assert bad["responses"][0]["partitions"][0]["error_code"] == ErrorCode.INVALID_RECORD_STATE
        # the final epoch applies the acks and closes the session; nothing is left acquired
        done = wire.request(
            SHARE_ACK, 1,
            {"group_id": group, "member_id": member, "share_session_epoch": -1, "topics": [
                {"topic_id": topic_id, "partitions": [{"partition_index": 0, "acknowledgement_batches": [
                    ack_batch(1, 2, REJECT)]}]}]},
        )  # fmt: skip
        assert (done["error_code"], done["responses"][0]["partitions"][0]["error_code"]) == (0, 0)
        assert share_fetch(wire, group, member, 3, topic_id)["error_code"] == ErrorCode.SHARE_SESSION_NOT_FOUND
        again = share_fetch(wire, group, member, 0, topic_id)
        assert again["responses"] == []  # all three records are done

        left = heartbeat(wire, group, member, -1, None)
        assert (left["error_code"], left["member_epoch"]) == (0, -1)


def test_describe_share_group_offsets(shared_broker) -> None:  # noqa: ANN001
    bootstrap = shared_broker.bootstrap
    group, member = f"g-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    with WireClient(bootstrap) as wire:
        topic, topic_id = setup_topic(bootstrap, wire, group, 5)
        heartbeat(wire, group, member, 0, [topic])
        share_fetch(wire, group, member, 0, topic_id)
        share_fetch(wire, group, member, 1, topic_id, [ack_batch(0, 1, ACCEPT), ack_batch(3, 3, REJECT)])
        described = wire.request(90, 1, {"groups": [{"group_id": group, "topics": None}]})
        [g] = described["groups"]
        assert g["error_code"] == 0
        [t] = g["topics"]
        assert (t["topic_name"], t["topic_id"]) == (topic, topic_id)
        [p] = t["partitions"]
        # the acknowledgement's state write carried the start offset from before it (0), as Kafka's does:
        # 0-1 accepted and 3 archived count as delivered, 2 and 4 are the lag
        assert (p["partition_index"], p["start_offset"], p["lag"], p["error_code"]) == (0, 0, 2, 0)
        other = wire.request(90, 1, {"groups": [{"group_id": "nobody-" + group, "topics": [
            {"topic_name": topic, "partitions": [0]}]}]})
        assert other["groups"][0]["topics"][0]["partitions"][0]["start_offset"] == -1


def test_alter_and_delete_share_group_offsets(shared_broker) -> None:  # noqa: ANN001
    bootstrap = shared_broker.bootstrap
    group, member = f"g-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    with WireClient(bootstrap) as wire:
        topic, topic_id = setup_topic(bootstrap, wire, group, 5)
        heartbeat(wire, group, member, 0, [topic])
        share_fetch(wire, group, member, 0, topic_id)
        alter = {"group_id": group, "topics": [{"topic_name": topic, "partitions": [
            {"partition_index": 0, "start_offset": 3}]}]}
        assert wire.request(91, 0, alter)["error_code"] == ErrorCode.NON_EMPTY_GROUP
        assert wire.request(92, 0, {"group_id": group, "topics": [{"topic_name": topic}]})["error_code"] == (
            ErrorCode.NON_EMPTY_GROUP
        )
        heartbeat(wire, group, member, -1, None)
        altered = wire.request(91, 0, alter)
        assert (altered["error_code"], altered["responses"][0]["partitions"][0]["error_code"]) == (0, 0)

        def start_offset() -> int:
            d = wire.request(90, 0, {"groups": [{"group_id": group, "topics": [{"topic_name": topic, "partitions": [0]}]}]})
            return d["groups"][0]["topics"][0]["partitions"][0]["start_offset"]

        assert start_offset() == 3
        # a new member starts at the altered offset
        member2 = uuid.uuid4().hex
        heartbeat(wire, group, member2, 0, [topic])
        fetched = share_fetch(wire, group, member2, 0, topic_id)
        assert fetched["responses"][0]["partitions"][0]["acquired_records"] == [
            {"first_offset": 3, "last_offset": 4, "delivery_count": 1}
        ]
        heartbeat(wire, group, member2, -1, None)
        deleted = wire.request(92, 0, {"group_id": group, "topics": [{"topic_name": topic}]})
        assert (deleted["error_code"], deleted["responses"][0]["error_code"]) == (0, 0)
        assert start_offset() == -1


def test_max_records_is_soft_in_batch_optimized_mode_and_strict_in_record_limit_mode(shared_broker) -> None:  # noqa: ANN001
    """KIP-1206: ShareAcquireMode 0 (batch_optimized, the clients' default and v1's only mode) acquires the
    batch holding the MaxRecords-th record to its end, since that batch goes out whole; 1 (record_limit)
    acquires MaxRecords records and no more."""
    bootstrap = shared_broker.bootstrap
    group = f"g-{uuid.uuid4().hex[:8]}"
    a, b, c = uuid.uuid4().hex, uuid.uuid4().hex, uuid.uuid4().hex
    with WireClient(bootstrap) as wire:
        topic, topic_id = setup_topic(bootstrap, wire, group, 10)  # one batch, offsets 0-9
        for member in (a, b, c):
            heartbeat(wire, group, member, 0, [topic])
        strict = share_fetch_v2(wire, group, a, 0, topic_id, 4, mode=1)["responses"][0]["partitions"][0]
        assert strict["acquired_records"] == [{"first_offset": 0, "last_offset": 3, "delivery_count": 1}]
        soft = share_fetch_v2(wire, group, b, 0, topic_id, 2, mode=0)["responses"][0]["partitions"][0]
        assert soft["acquired_records"] == [{"first_offset": 4, "last_offset": 9, "delivery_count": 1}]
        # both got the whole batch
        assert len(strict["records"]) == len(soft["records"]) > 0
        assert share_fetch(wire, group, c, 0, topic_id)["responses"] == []  # nothing left
