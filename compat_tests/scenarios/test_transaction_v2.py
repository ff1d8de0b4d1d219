"""Transaction version 2 (KIP-890 part 2) over a raw socket: the ``transaction.version`` feature in
ApiVersions, and EndTxn v5's producer-epoch bump at every EndTxn (the response carries the new id and
epoch; a retry of a completed end gets the same answer; an abort with nothing ongoing is an epoch bump
too, since a TV2 client adds partitions implicitly and cannot know); the partition leader's check of a
TV2 marker's epoch (WriteTxnMarkers v2); and the log cleaner keeping a TV2 producer's last marker.

Every expectation holds on both brokers (``--broker kafka`` runs it against Apache Kafka 4.3.1).
"""

from __future__ import annotations

import socket
import struct
import time

import pytest

from compat_tests.brokers import read_response, split_bootstrap
from pybroker.protocol import codec
from pybroker.protocol.api import REQUESTS, RESPONSES

from .test_newest_versions import (
    END_TXN,
    NONE,
    RECORDS,
    call,
    leader_of,
    list_offset_committed,
    transaction_coordinator,
    transaction_coordinator_ready,
    transactional_produce,
)
from .test_txn_marker_cleaning import (
    COMPACTED,
    DELETE_RETENTION_MS,
    Rounds,
    data_records,
    markers,
    produce_plain,
)

LEDGER_COLUMN = "raw-socket"
API_VERSIONS = 18
INVALID_TXN_STATE, PRODUCER_FENCED = 48, 90


@pytest.fixture
def topic(make_topic) -> str:
    return make_topic()


def test_api_versions_finalizes_transaction_version_2(bootstrap: str) -> None:
    # ApiVersions' response header is v0 (no tagged fields) at every version.
    body = {"client_software_name": "compat", "client_software_version": "1.0"}
    payload = (
        struct.pack(">hhih", API_VERSIONS, 4, 78, 6)
        + b"compat\x00"
        + codec.encode(REQUESTS[API_VERSIONS], 4, body)
    )
    with socket.create_connection(split_bootstrap(bootstrap.split(",")[0]), timeout=30) as s:
        s.sendall(struct.pack(">i", len(payload)) + payload)
        frame = read_response(s)
    answer, _ = codec.decode(RESPONSES[API_VERSIONS], 4, frame, 4)
    assert answer["error_code"] == NONE
    supported = {f["name"]: (f["min_version"], f["max_version"]) for f in answer["supported_features"]}
    finalized = {
        f["name"]: (f["min_version_level"], f["max_version_level"]) for f in answer["finalized_features"]
    }
    assert supported.get("transaction.version") == (0, 2), supported
    assert finalized.get("transaction.version") == (2, 2), finalized
    assert answer["finalized_features_epoch"] >= 0
    versions = {k["api_key"]: k["max_version"] for k in answer["api_keys"]}
    assert versions[END_TXN] >= 5 and versions[27] >= 2  # EndTxn v5, WriteTxnMarkers v2


def end_txn(bootstrap: str, transactional_id: str, producer_id: int, epoch: int, commit: bool) -> dict:
    return call(
        transaction_coordinator(bootstrap, transactional_id),
        END_TXN,
        5,
        {
            "transactional_id": transactional_id,
            "producer_id": producer_id,
            "producer_epoch": epoch,
            "committed": commit,
        },
    )


def test_end_txn_v5_bumps_the_epoch(bootstrap: str, topic: str, unique_topic: str) -> None:
    transactional_id = f"{unique_topic}-tv2"
    init = transaction_coordinator_ready(bootstrap, transactional_id)
    pid, epoch = init["producer_id"], init["producer_epoch"]
    added = transactional_produce(bootstrap, 12, transactional_id, topic, init)
    assert added["error_code"] == NONE, added
    ended = end_txn(bootstrap, transactional_id, pid, epoch, True)
    assert (ended["error_code"], ended["producer_id"], ended["producer_epoch"]) == (NONE, pid, epoch + 1)
    # The retry of that commit (its response lost) with the old epoch gets the same answer.
    deadline = time.monotonic() + 30
    while True:
        retried = end_txn(bootstrap, transactional_id, pid, epoch, True)
        if retried["error_code"] == NONE:
            break
        assert retried["error_code"] == 51 and time.monotonic() < deadline, retried  # markers pending
        time.sleep(0.1)
    assert (retried["producer_id"], retried["producer_epoch"]) == (pid, epoch + 1)
    # ... but an abort with the old epoch is the other outcome: an invalid state; an older epoch is fenced.
    assert end_txn(bootstrap, transactional_id, pid, epoch, False)["error_code"] == INVALID_TXN_STATE
    if epoch > 0:
        assert end_txn(bootstrap, transactional_id, pid, epoch - 1, True)["error_code"] == PRODUCER_FENCED
    # A commit with nothing ongoing is an invalid state; an abort bumps the epoch again.
    assert end_txn(bootstrap, transactional_id, pid, epoch + 1, True)["error_code"] == INVALID_TXN_STATE
    aborted = end_txn(bootstrap, transactional_id, pid, epoch + 1, False)
    assert (aborted["error_code"], aborted["producer_id"], aborted["producer_epoch"]) == (
        NONE,
        pid,
        epoch + 2,
    )
    # The next transaction runs on the new epoch; the old one is fenced by the markers' epoch.
    stale = transactional_produce(bootstrap, 12, transactional_id, topic, init)
    assert stale["error_code"] != NONE, stale
    fresh = transactional_produce(
        bootstrap, 12, transactional_id, topic, {"producer_id": pid, "producer_epoch": epoch + 2}
    )
    assert fresh["error_code"] == NONE, fresh
    ended = end_txn(bootstrap, transactional_id, pid, epoch + 2, True)
    assert (ended["error_code"], ended["producer_epoch"]) == (NONE, epoch + 3)
    deadline = time.monotonic() + 30
    # Two transactions of RECORDS records, each with its commit marker.
    while list_offset_committed(bootstrap, topic) != 2 * (RECORDS + 1):
        assert time.monotonic() < deadline, "the commits never became visible to read_committed"
        time.sleep(0.1)


WRITE_TXN_MARKERS, DESCRIBE_PRODUCERS = 27, 61
INVALID_PRODUCER_EPOCH, NOT_LEADER_OR_FOLLOWER, TRANSACTION_COORDINATOR_FENCED = 47, 6, 52


def write_marker(
    bootstrap: str, topic: str, pid: int, epoch: int, coordinator_epoch: int, version: int, tv: int = 0
) -> int:
    """One raw WriteTxnMarkers (COMMIT) for partition 0, as a coordinator sends it (to the partition's
    leader); its error code."""
    marker = {
        "producer_id": pid,
        "producer_epoch": epoch,
        "transaction_result": True,
        "topics": [{"name": topic, "partition_indexes": [0]}],
        "coordinator_epoch": coordinator_epoch,
        "transaction_version": tv,
    }
    answer = call(leader_of(bootstrap, topic), WRITE_TXN_MARKERS, version, {"markers": [marker]})
    return answer["markers"][0]["topics"][0]["partitions"][0]["error_code"]


def producer_state(bootstrap: str, topic: str, pid: int) -> dict:
    """DescribeProducers of partition 0, from its leader (where the admin clients send it)."""
    body = {"topics": [{"name": topic, "partition_indexes": [0]}]}
    answer = call(leader_of(bootstrap, topic), DESCRIBE_PRODUCERS, 0, body)
    part = answer["topics"][0]["partitions"][0]
    assert part["error_code"] == NONE, part
    (state,) = [p for p in part["active_producers"] if p["producer_id"] == pid]
    return state


def produce_in_txn(bootstrap: str, transactional_id: str, topic: str, producer: dict) -> None:
    """Produce v12 of one transactional batch, retried as a client does while the new topic's
    leadership is still propagating (NOT_LEADER_OR_FOLLOWER)."""
    deadline = time.monotonic() + 30
    while True:
        answer = transactional_produce(bootstrap, 12, transactional_id, topic, producer)
        if answer["error_code"] != NOT_LEADER_OR_FOLLOWER or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert answer["error_code"] == NONE, answer


def wait_committed(bootstrap: str, topic: str, offset: int) -> None:
    deadline = time.monotonic() + 30
    while list_offset_committed(bootstrap, topic) != offset:
        assert time.monotonic() < deadline, f"the last stable offset never reached {offset}"
        time.sleep(0.1)


def test_write_txn_markers_v2_refuses_a_tv2_marker_without_a_bumped_epoch(
    bootstrap: str, topic: str, unique_topic: str
) -> None:
    """KIP-890 part 2 on the partition leader (Kafka's checkProducerEpoch with the transaction version
    WriteTxnMarkers v2 carries): a TV2 marker must carry an epoch newer than the producer's, since the
    coordinator bumps it at every EndTxn.  A late copy of the previous transaction's marker, arriving
    while the next transaction of that epoch is open, is refused with INVALID_PRODUCER_EPOCH and ends
    nothing; the same marker while nothing is open is a retry and is written again; with transaction
    version 0 (v1, or v2 with TransactionVersion 0) an older epoch is refused, the current one accepted.
    A marker from an older coordinator epoch than the producer's last one is fenced."""
    transactional_id = f"{unique_topic}-tv2-marker"
    init = transaction_coordinator_ready(bootstrap, transactional_id)
    pid, epoch = init["producer_id"], init["producer_epoch"]
    produce_in_txn(bootstrap, transactional_id, topic, init)
    ended = end_txn(bootstrap, transactional_id, pid, epoch, True)
    assert (ended["error_code"], ended["producer_epoch"]) == (NONE, epoch + 1)
    wait_committed(bootstrap, topic, RECORDS + 1)  # the coordinator's marker has the bumped epoch
    state = producer_state(bootstrap, topic, pid)
    assert (state["producer_epoch"], state["current_txn_start_offset"]) == (epoch + 1, -1)
    coordinator_epoch = state["coordinator_epoch"]
    # The next transaction, of epoch + 1, is open from offset RECORDS + 1.
    bumped = {"producer_id": pid, "producer_epoch": epoch + 1}
    produce_in_txn(bootstrap, transactional_id, topic, bumped)
    open_at = RECORDS + 1
    assert producer_state(bootstrap, topic, pid)["current_txn_start_offset"] == open_at
    # A TV2 marker of the producer's epoch (a late copy of the first commit's) ends nothing ...
    assert write_marker(bootstrap, topic, pid, epoch + 1, coordinator_epoch, 2, tv=2) == INVALID_PRODUCER_EPOCH
    # ... nor does one of an older epoch, in either transaction version.
    assert write_marker(bootstrap, topic, pid, epoch, coordinator_epoch, 2, tv=2) == INVALID_PRODUCER_EPOCH
    assert write_marker(bootstrap, topic, pid, epoch, coordinator_epoch, 1) == INVALID_PRODUCER_EPOCH
    assert list_offset_committed(bootstrap, topic) == open_at
    assert producer_state(bootstrap, topic, pid)["current_txn_start_offset"] == open_at
    # The coordinator ends it with its own marker, of epoch + 2.
    ended = end_txn(bootstrap, transactional_id, pid, epoch + 1, True)
    assert (ended["error_code"], ended["producer_epoch"]) == (NONE, epoch + 2)
    end = 2 * (RECORDS + 1)
    wait_committed(bootstrap, topic, end)
    # That marker again, nothing open now: an idempotent retry, written again (one more offset).
    assert write_marker(bootstrap, topic, pid, epoch + 2, coordinator_epoch, 2, tv=2) == NONE
    wait_committed(bootstrap, topic, end + 1)
    # Transaction version 0: a marker of the producer's own epoch is accepted, nothing open or not.
    assert write_marker(bootstrap, topic, pid, epoch + 2, coordinator_epoch, 2, tv=0) == NONE
    wait_committed(bootstrap, topic, end + 2)
    state = producer_state(bootstrap, topic, pid)
    assert (state["producer_epoch"], state["current_txn_start_offset"]) == (epoch + 2, -1)
    # A marker from a newer coordinator epoch moves the producer's; one from the older epoch is then
    # a zombie coordinator's (Kafka's checkCoordinatorEpoch).
    assert write_marker(bootstrap, topic, pid, epoch + 2, coordinator_epoch + 1, 2, tv=0) == NONE
    assert producer_state(bootstrap, topic, pid)["coordinator_epoch"] == coordinator_epoch + 1
    fenced = write_marker(bootstrap, topic, pid, epoch + 2, coordinator_epoch, 2, tv=0)
    assert fenced == TRANSACTION_COORDINATOR_FENCED
    wait_committed(bootstrap, topic, end + 3)  # nothing written for it


def test_the_cleaner_keeps_a_tv2_producers_last_marker_for_its_epoch(
    bootstrap: str, make_topic, unique_topic: str
) -> None:
    """KIP-534 with transaction version 2: the marker EndTxn v5 wrote carries the bumped epoch, and the
    producer's state has no data batch of that epoch, so the marker is the producer's last batch
    (Kafka's isBatchLastRecordOfProducer).  On a compacted topic whose later plain records supersede
    the transaction's, the cleaner removes the records (round 1), stamps the marker's delete horizon
    (round 2, its transaction has no record left), and past the horizon keeps it as an empty
    control batch (round 3) instead of removing it; consumers see the plain records only."""
    topic = make_topic(configs=COMPACTED)
    transactional_id = f"{unique_topic}-tv2-clean"
    init = transaction_coordinator_ready(bootstrap, transactional_id)
    produce_in_txn(bootstrap, transactional_id, topic, init)  # k0..k2 at 0-2
    ended = end_txn(bootstrap, transactional_id, init["producer_id"], init["producer_epoch"], True)
    assert ended["error_code"] == NONE, ended
    wait_committed(bootstrap, topic, RECORDS + 1)  # the COMMIT at 3
    rounds = Rounds(bootstrap, topic)
    plain = [produce_plain(bootstrap, topic, b"k%d" % i, b"plain%d" % i) for i in range(RECORDS)]  # supersede 0-2
    assert plain == [4, 5, 6]

    rounds.next()
    batches = rounds.wait(lambda bs: not any(r[0] < RECORDS for r in data_records(bs)), "round 1")
    assert markers(batches) == {RECORDS: ("COMMIT", False)}
    rounds.next()
    batches = rounds.wait(lambda bs: markers(bs) == {RECORDS: ("COMMIT", True)}, "round 2")
    time.sleep(DELETE_RETENTION_MS / 1000 + 0.5)
    rounds.next()
    batches = rounds.wait(lambda bs: markers(bs) == {RECORDS: ("control", False)}, "round 3")
    (kept,) = [b for b in batches if b["base"] == RECORDS]
    assert kept["records"] == []
    assert data_records(batches) == [
        *((4 + i, b"k%d" % i, b"plain%d" % i) for i in range(RECORDS)),
        (rounds.fillers[1], b"filler", b"2"),
        (rounds.fillers[2], b"filler", b"3"),
    ]
    assert list_offset_committed(bootstrap, topic) == rounds.fillers[2] + 1

