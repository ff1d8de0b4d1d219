"""Transaction version 2 (KIP-890 part 2) over a raw socket: the ``transaction.version`` feature in
ApiVersions, and EndTxn v5's producer-epoch bump at every EndTxn (the response carries the new id and
epoch; a retry of a completed end gets the same answer; an abort with nothing ongoing is an epoch bump
too, since a TV2 client adds partitions implicitly and cannot know).

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
    list_offset_committed,
    transaction_coordinator,
    transaction_coordinator_ready,
    transactional_produce,
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
    payload = struct.pack(">hhih", API_VERSIONS, 4, 78, 6) + b"compat\x00" + codec.encode(
        REQUESTS[API_VERSIONS], 4, body
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
    assert (aborted["error_code"], aborted["producer_id"], aborted["producer_epoch"]) == (NONE, pid, epoch + 2)
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
