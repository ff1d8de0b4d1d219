"""The transaction APIs request by request over a raw socket: the error codes of Kafka's
TransactionCoordinator and of a transactional Produce, and what DescribeTransactions,
ListTransactions and DescribeProducers report.

Broker-agnostic: ``INTEGRATION_BROKER=kafka`` runs the same checks against Apache Kafka.
"""

from __future__ import annotations

import time
import uuid

from confluent_kafka.admin import AdminClient, NewTopic

from pybroker.protocol.errors import ErrorCode
from pybroker.records import SimpleRecord, build_batch
from tests.wire import WireClient

PRODUCE, FIND_COORDINATOR, INIT_PRODUCER_ID = 0, 10, 22
ADD_PARTITIONS, END_TXN = 24, 26
DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 61, 65, 66


def make_topic(bootstrap: str) -> str:
    topic = f"txw-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    return topic


def retry(
    call,
    retriable=(
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.CONCURRENT_TRANSACTIONS,
        ErrorCode.NOT_COORDINATOR,
    ),
):  # noqa: ANN001, ANN201
    """Kafka loads __transaction_state on first use and writes markers after answering EndTxn:
    clients retry these codes, so does the test (with a deadline)."""
    deadline = time.monotonic() + 30
    while True:
        response, code = call()
        if code not in retriable or time.monotonic() > deadline:
            return response, code
        time.sleep(0.2)


def produce(
    wire: WireClient,
    txn_id: str,
    topic: str,
    partition: int,
    pid: int,
    epoch: int,
    seq: int,
    version: int = 9,
) -> int:
    records = build_batch(
        [SimpleRecord(b"k", b"v%d" % seq)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=True,
    )
    response = wire.request(
        PRODUCE,
        version,
        {
            "transactional_id": txn_id,
            "acks": -1,
            "timeout_ms": 10_000,
            "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": records}]}],
        },
    )
    return response["responses"][0]["partition_responses"][0]["error_code"]


def add_partitions(  # noqa: ANN201
    wire: WireClient, txn_id: str, pid: int, epoch: int, topic: str, parts: list[int]
):
    def call():  # noqa: ANN202
        r = wire.request(
            ADD_PARTITIONS,
            3,
            {
                "v3_and_below_transactional_id": txn_id,
                "v3_and_below_producer_id": pid,
                "v3_and_below_producer_epoch": epoch,
                "v3_and_below_topics": [{"name": topic, "partitions": parts}],
            },
        )
        codes = {
            p["partition_index"]: p["partition_error_code"]
            for t in r["results_by_topic_v3_and_below"]
            for p in t["results_by_partition"]
        }
        return codes, next(iter(codes.values()))

    return retry(call)[0]


def test_transaction_apis_over_the_wire(shared_broker) -> None:
    bootstrap = shared_broker.bootstrap
    topic = make_topic(bootstrap)
    txn_id = f"wire-{uuid.uuid4().hex[:8]}"
    with WireClient(bootstrap) as wire:
        found, code = retry(
            lambda: (
                r := wire.request(FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": [txn_id]}),
                r["coordinators"][0]["error_code"],
            )
        )
        assert code == ErrorCode.NONE and found["coordinators"][0]["node_id"] >= 0

        def init(timeout_ms: int, pid: int = -1, epoch: int = -1):  # noqa: ANN202
            return retry(
                lambda: (
                    r := wire.request(
                        INIT_PRODUCER_ID,
                        4,
                        {
                            "transactional_id": txn_id,
                            "transaction_timeout_ms": timeout_ms,
                            "producer_id": pid,
                            "producer_epoch": epoch,
                        },
                    ),
                    r["error_code"],
                )
            )[0]

        assert init(900_001)["error_code"] == ErrorCode.INVALID_TRANSACTION_TIMEOUT
        first = init(60_000)
        assert first["error_code"] == ErrorCode.NONE
        pid, epoch = first["producer_id"], first["producer_epoch"]

        # A transactional batch to a partition not in the transaction is refused, nothing written
        # (Produce v3-10: INVALID_TXN_STATE, v11: TRANSACTION_ABORTABLE).
        assert produce(wire, txn_id, topic, 1, pid, epoch, 0) == ErrorCode.INVALID_TXN_STATE
        assert produce(wire, txn_id, topic, 1, pid, epoch, 0, version=11) == ErrorCode.TRANSACTION_ABORTABLE
        assert add_partitions(wire, txn_id, pid, epoch, topic, [0]) == {0: ErrorCode.NONE}
        unknown = add_partitions(wire, txn_id, pid, epoch, "no-such-topic-" + txn_id, [0])
        assert unknown == {0: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        assert add_partitions(wire, txn_id, pid + 1, epoch, topic, [0]) == {
            0: ErrorCode.INVALID_PRODUCER_ID_MAPPING
        }
        assert produce(wire, txn_id, topic, 0, pid, epoch, 0) == ErrorCode.NONE
        assert produce(wire, txn_id, topic, 0, pid, epoch, 1) == ErrorCode.NONE
        # KIP-890 verification (AddPartitionsToTxn v4, verify_only): is each partition in the transaction?
        verified = wire.request(
            ADD_PARTITIONS,
            4,
            {
                "transactions": [
                    {
                        "transactional_id": txn_id,
                        "producer_id": pid,
                        "producer_epoch": epoch,
                        "verify_only": True,
                        "topics": [{"name": topic, "partitions": [0, 1]}],
                    }
                ]
            },
        )
        codes = {
            p["partition_index"]: p["partition_error_code"]
            for p in verified["results_by_transaction"][0]["topic_results"][0]["results_by_partition"]
        }
        assert codes == {0: ErrorCode.NONE, 1: ErrorCode.TRANSACTION_ABORTABLE}
        fenced = wire.request(
            ADD_PARTITIONS,
            4,
            {
                "transactions": [
                    {
                        "transactional_id": txn_id,
                        "producer_id": pid,
                        "producer_epoch": epoch + 5,
                        "verify_only": True,
                        "topics": [{"name": topic, "partitions": [0]}],
                    }
                ]
            },
        )
        assert (
            fenced["results_by_transaction"][0]["topic_results"][0]["results_by_partition"][0][
                "partition_error_code"
            ]
            == ErrorCode.PRODUCER_FENCED
        )

        described = wire.request(
            DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [txn_id, "nobody-" + txn_id]}
        )
        mine, nobody = described["transaction_states"]
        assert (mine["error_code"], mine["transaction_state"], mine["producer_id"]) == (
            ErrorCode.NONE,
            "Ongoing",
            pid,
        )
        assert mine["topics"] == [{"topic": topic, "partitions": [0]}]
        assert nobody["error_code"] == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
        listed = wire.request(
            LIST_TRANSACTIONS,
            1,
            {
                "state_filters": ["Ongoing", "NoSuchState"],
                "producer_id_filters": [pid],
                "duration_filter": -1,
            },
        )
        assert listed["unknown_state_filters"] == ["NoSuchState"]
        assert [(t["transactional_id"], t["transaction_state"]) for t in listed["transaction_states"]] == [
            (txn_id, "Ongoing")
        ]
        producers = wire.request(
            DESCRIBE_PRODUCERS, 0, {"topics": [{"name": topic, "partition_indexes": [0]}]}
        )
        (state,) = producers["topics"][0]["partitions"][0]["active_producers"]
        assert (
            state["producer_id"],
            state["producer_epoch"],
            state["last_sequence"],
            state["current_txn_start_offset"],
        ) == (pid, epoch, 1, 0)

        def end(e: int, commit: bool):  # noqa: ANN202
            return wire.request(
                END_TXN,
                3,
                {"transactional_id": txn_id, "producer_id": pid, "producer_epoch": e, "committed": commit},
            )["error_code"]

        assert end(epoch, True) == ErrorCode.NONE
        state_now, _ = retry(
            lambda: (
                s := wire.request(DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [txn_id]})[
                    "transaction_states"
                ][0],
                ErrorCode.CONCURRENT_TRANSACTIONS
                if s["transaction_state"] == "PrepareCommit"
                else ErrorCode.NONE,
            )
        )
        assert (state_now["transaction_state"], state_now["topics"]) == ("CompleteCommit", [])
        producers = wire.request(
            DESCRIBE_PRODUCERS, 0, {"topics": [{"name": topic, "partition_indexes": [0]}]}
        )
        (state,) = producers["topics"][0]["partitions"][0]["active_producers"]
        # the COMMIT marker ended the transaction; it carried the coordinator's epoch
        assert (state["current_txn_start_offset"], state["coordinator_epoch"]) == (-1, 0)
        assert end(epoch, True) == ErrorCode.NONE  # a retried commit
        assert end(epoch, False) == ErrorCode.INVALID_TXN_STATE
        # A new instance bumps the epoch; the old one is fenced.
        again = init(60_000)
        assert (again["producer_id"], again["producer_epoch"]) == (pid, epoch + 1)
        assert end(epoch, True) == ErrorCode.PRODUCER_FENCED
        # KIP-360 with a stranger's producer id: fenced.
        assert init(60_000, pid + 1000, 0)["error_code"] == ErrorCode.PRODUCER_FENCED


ADD_OFFSETS, TXN_OFFSET_COMMIT, OFFSET_FETCH = 25, 28, 9


def test_txn_offsets_are_pending_until_the_commit(shared_broker) -> None:
    bootstrap = shared_broker.bootstrap
    topic = make_topic(bootstrap)
    txn_id = f"offs-{uuid.uuid4().hex[:8]}"
    group = f"g-{uuid.uuid4().hex[:8]}"
    with WireClient(bootstrap) as wire:
        retry(
            lambda: (
                r := wire.request(FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": [txn_id]}),
                r["coordinators"][0]["error_code"],
            )
        )
        retry(
            lambda: (
                r := wire.request(FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": [group]}),
                r["coordinators"][0]["error_code"],
            )
        )
        init, _ = retry(
            lambda: (
                r := wire.request(
                    INIT_PRODUCER_ID,
                    4,
                    {
                        "transactional_id": txn_id,
                        "transaction_timeout_ms": 60_000,
                        "producer_id": -1,
                        "producer_epoch": -1,
                    },
                ),
                r["error_code"],
            )
        )
        pid, epoch = init["producer_id"], init["producer_epoch"]

        def commit_offset(offset: int) -> int:
            # Kafka may still be loading the group's __consumer_offsets partition: retried.
            return retry(lambda: (c := commit_offset_once(offset), c))[1]

        def commit_offset_once(offset: int) -> int:
            r = wire.request(
                TXN_OFFSET_COMMIT,
                3,
                {
                    "transactional_id": txn_id,
                    "group_id": group,
                    "producer_id": pid,
                    "producer_epoch": epoch,
                    "generation_id": -1,
                    "member_id": "",
                    "group_instance_id": None,
                    "topics": [
                        {
                            "name": topic,
                            "partitions": [
                                {
                                    "partition_index": 0,
                                    "committed_offset": offset,
                                    "committed_leader_epoch": -1,
                                    "committed_metadata": "",
                                }
                            ],
                        }
                    ],
                },
            )
            return r["topics"][0]["partitions"][0]["error_code"]

        def fetch(stable: bool) -> tuple[int, int]:
            r = wire.request(
                OFFSET_FETCH,
                7,
                {
                    "group_id": group,
                    "require_stable": stable,
                    "topics": [{"name": topic, "partition_indexes": [0]}],
                },
            )
            p = r["topics"][0]["partitions"][0]
            return p["error_code"], p["committed_offset"]

        added, _ = retry(
            lambda: (
                r := wire.request(
                    ADD_OFFSETS,
                    3,
                    {
                        "transactional_id": txn_id,
                        "producer_id": pid,
                        "producer_epoch": epoch,
                        "group_id": group,
                    },
                ),
                r["error_code"],
            )
        )
        assert added["error_code"] == ErrorCode.NONE
        assert commit_offset(5) == ErrorCode.NONE
        assert fetch(True) == (ErrorCode.UNSTABLE_OFFSET_COMMIT, -1)
        assert fetch(False) == (ErrorCode.NONE, -1)  # not visible before the commit
        assert (
            wire.request(
                END_TXN,
                3,
                {"transactional_id": txn_id, "producer_id": pid, "producer_epoch": epoch, "committed": True},
            )["error_code"]
            == 0
        )
        got, _ = retry(
            lambda: (f := fetch(True), ErrorCode.CONCURRENT_TRANSACTIONS if f[0] else ErrorCode.NONE)
        )
        assert got == (ErrorCode.NONE, 5)
        # An aborted transaction's offsets never show.
        retry(
            lambda: (
                r := wire.request(
                    ADD_OFFSETS,
                    3,
                    {
                        "transactional_id": txn_id,
                        "producer_id": pid,
                        "producer_epoch": epoch,
                        "group_id": group,
                    },
                ),
                r["error_code"],
            )
        )
        assert commit_offset(9) == ErrorCode.NONE
        assert (
            wire.request(
                END_TXN,
                3,
                {"transactional_id": txn_id, "producer_id": pid, "producer_epoch": epoch, "committed": False},
            )["error_code"]
            == 0
        )
        got, _ = retry(
            lambda: (f := fetch(True), ErrorCode.CONCURRENT_TRANSACTIONS if f[0] else ErrorCode.NONE)
        )
        assert got == (ErrorCode.NONE, 5)
