"""Client quotas on any broker: AlterClientQuotas / DescribeClientQuotas through Apache Kafka's
kafka-configs and raw requests (entities user, client-id, both, defaults; match types EXACT, DEFAULT,
SPECIFIED; strict), Kafka's INVALID_REQUEST for bad entities, keys and values, and a producer over its
producer_byte_rate told throttle_time_ms (librdkafka's throttle callback)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer

from compat_tests.kafka_tools import run_tool
from tests.wire import WireClient

from .support import wait_for

EXACT, DEFAULT, SPECIFIED = 0, 1, 2
NONE, INVALID_REQUEST, THROTTLING_QUOTA_EXCEEDED = 0, 42, 89


@pytest.fixture
def wire(bootstrap: str) -> Iterator[WireClient]:
    with WireClient(bootstrap) as client:
        yield client


def _configs(bootstrap: str, *args: str) -> str:
    return run_tool("kafka-configs", "--bootstrap-server", bootstrap, *args, timeout_s=180).check().stdout


def _alter(wire: WireClient, entries: list[tuple[dict, dict]], validate_only: bool = False) -> list[int]:
    """entries: ({entity type: name or None}, {key: value, or None to remove}) -> error code per entry."""
    response = wire.request(
        49,
        1,
        {
            "entries": [
                {
                    "entity": [{"entity_type": t, "entity_name": n} for t, n in entity.items()],
                    "ops": [
                        {"key": k, "value": 0.0 if v is None else v, "remove": v is None}
                        for k, v in ops.items()
                    ],
                }
                for entity, ops in entries
            ],
            "validate_only": validate_only,
        },
    )
    return [e["error_code"] for e in response["entries"]]


def _describe(wire: WireClient, components: list[tuple[str, int, str | None]], strict: bool = False):
    response = wire.request(
        48,
        1,
        {
            "components": [{"entity_type": t, "match_type": m, "match": n} for t, m, n in components],
            "strict": strict,
        },
    )
    if response["error_code"] != NONE:
        return response["error_code"], None
    found = {
        tuple(sorted((e["entity_type"], e["entity_name"]) for e in entry["entity"])): {
            v["key"]: v["value"] for v in entry["values"]
        }
        for entry in response["entries"]
    }
    return NONE, found


def test_kafka_configs_round_trip_user_client_and_both(bootstrap: str, wire: WireClient) -> None:
    user, client = f"u-{uuid.uuid4().hex[:8]}", f"c-{uuid.uuid4().hex[:8]}"
    _configs(
        bootstrap,
        "--alter",
        "--entity-type",
        "users",
        "--entity-name",
        user,
        "--entity-type",
        "clients",
        "--entity-name",
        client,
        "--add-config",
        "producer_byte_rate=1024,request_percentage=50.5",
    )
    _configs(
        bootstrap,
        "--alter",
        "--entity-type",
        "users",
        "--entity-name",
        user,
        "--add-config",
        "consumer_byte_rate=4096",
    )
    _configs(
        bootstrap,
        "--alter",
        "--entity-type",
        "clients",
        "--entity-name",
        client,
        "--add-config",
        "controller_mutation_rate=10",
    )
    both = _configs(
        bootstrap,
        "--describe",
        "--entity-type",
        "users",
        "--entity-name",
        user,
        "--entity-type",
        "clients",
        "--entity-name",
        client,
    )
    assert "producer_byte_rate=1024.0" in both and "request_percentage=50.5" in both, both
    # (kafka-configs --describe of a user alone also asks for SCRAM credentials: raw requests below.)

    error, found = _describe(wire, [("user", EXACT, user)])
    assert error == NONE
    assert found == {
        (("user", user),): {"consumer_byte_rate": 4096.0},
        (("client-id", client), ("user", user)): {"producer_byte_rate": 1024.0, "request_percentage": 50.5},
    }
    error, found = _describe(wire, [("user", EXACT, user)], strict=True)
    assert found == {(("user", user),): {"consumer_byte_rate": 4096.0}}
    error, found = _describe(wire, [("user", EXACT, user), ("client-id", SPECIFIED, None)])
    assert found == {
        (("client-id", client), ("user", user)): {"producer_byte_rate": 1024.0, "request_percentage": 50.5}
    }
    error, found = _describe(wire, [("client-id", EXACT, client)], strict=True)
    assert found == {(("client-id", client),): {"controller_mutation_rate": 10.0}}

    _configs(
        bootstrap,
        "--alter",
        "--entity-type",
        "users",
        "--entity-name",
        user,
        "--entity-type",
        "clients",
        "--entity-name",
        client,
        "--delete-config",
        "producer_byte_rate,request_percentage",
    )
    _configs(
        bootstrap,
        "--alter",
        "--entity-type",
        "users",
        "--entity-name",
        user,
        "--delete-config",
        "consumer_byte_rate",
    )
    _configs(
        bootstrap,
        "--alter",
        "--entity-type",
        "clients",
        "--entity-name",
        client,
        "--delete-config",
        "controller_mutation_rate",
    )
    assert _describe(wire, [("user", EXACT, user)]) == (NONE, {})
    assert _describe(wire, [("client-id", EXACT, client)]) == (NONE, {})


def test_default_entities_and_validate_only(wire: WireClient) -> None:
    user = f"u-{uuid.uuid4().hex[:8]}"
    # validate_only changes nothing.
    assert _alter(wire, [({"user": user}, {"producer_byte_rate": 2048.0})], validate_only=True) == [NONE]
    assert _describe(wire, [("user", EXACT, user)]) == (NONE, {})
    # The default user (a None name) with a key no other scenario is slowed by.
    assert _alter(wire, [({"user": None, "client-id": None}, {"controller_mutation_rate": 1e9})]) == [NONE]
    try:
        # Apache Kafka answers from the broker's metadata image, which follows the controller shortly after.
        wait_for(
            lambda: _describe(wire, [("user", DEFAULT, None), ("client-id", DEFAULT, None)], strict=True)[1],
            what="the default entity's quota to be described",
        )
        error, found = _describe(wire, [("user", DEFAULT, None), ("client-id", DEFAULT, None)], strict=True)
        assert found == {(("client-id", None), ("user", None)): {"controller_mutation_rate": 1e9}}
        error, found = _describe(wire, [("user", EXACT, "nobody-" + user)])
        assert found == {}
    finally:
        assert _alter(wire, [({"user": None, "client-id": None}, {"controller_mutation_rate": None})]) == [
            NONE
        ]
    wait_for(
        lambda: (
            _describe(wire, [("user", DEFAULT, None), ("client-id", DEFAULT, None)], strict=True)
            == (NONE, {})
        ),
        what="the default entity's quota to be removed",
    )


def test_invalid_alterations_and_filters(wire: WireClient) -> None:
    user = f"u-{uuid.uuid4().hex[:8]}"
    codes = _alter(
        wire,
        [
            ({"user": user + "-1"}, {"no_such_quota": 1.0}),
            ({"user": user + "-2"}, {"producer_byte_rate": -5.0}),
            ({"user": user + "-3"}, {"producer_byte_rate": 10.5}),
            ({"user": user, "ip": "127.0.0.1"}, {"producer_byte_rate": 10.0}),
            ({"ip": "127.0.0.1"}, {"producer_byte_rate": 10.0}),
            ({"nonsense": user}, {"producer_byte_rate": 10.0}),
        ],
    )
    assert codes == [INVALID_REQUEST] * 6, codes
    for n in range(1, 4):
        assert _describe(wire, [("user", EXACT, f"{user}-{n}")]) == (NONE, {})
    # The same entity twice in one request: one result for it (Kafka answers per entity).
    assert len(_alter(wire, [({"user": user}, {"no_such_quota": 1.0}), ({"user": user}, {"x": 1.0})])) == 1
    assert _describe(wire, [("user", EXACT, user), ("user", EXACT, user)])[0] == INVALID_REQUEST
    assert _describe(wire, [("user", EXACT, user), ("ip", SPECIFIED, None)])[0] == INVALID_REQUEST


def test_producer_over_its_quota_is_told_throttle_time(bootstrap: str, make_topic) -> None:
    topic = make_topic()
    client = f"slow-{uuid.uuid4().hex[:8]}"
    _configs(
        bootstrap,
        "--alter",
        "--entity-type",
        "clients",
        "--entity-name",
        client,
        "--add-config",
        "producer_byte_rate=102400",
    )
    throttles: list[int] = []
    try:
        producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "client.id": client,
                "linger.ms": 5,
                "throttle_cb": lambda event: throttles.append(event.throttle_time),
            }
        )
        value = b"q" * 10240
        started = time.monotonic()
        # 2 MiB in four rounds: Kafka's Rate lets (quota.window.num - 1) = 10 windows (1 MiB) through
        # at once; the third round is throttled (about 5 s) after its response, the fourth waits, so the client is held back, not only told.
        for _ in range(4):
            for _ in range(50):
                producer.produce(topic, value=value)
                producer.poll(0)
            assert producer.flush(120) == 0
        wait_for(
            lambda: (producer.poll(0.2), any(t > 0 for t in throttles))[1],
            timeout_s=60,
            what="a throttle callback with throttle_time_ms > 0",
        )
        assert time.monotonic() - started > 2.0
    finally:
        _configs(
            bootstrap,
            "--alter",
            "--entity-type",
            "clients",
            "--entity-name",
            client,
            "--delete-config",
            "producer_byte_rate",
        )


def test_controller_mutation_rate_refuses_strict_creations_over_the_quota(
    bootstrap: str, wire: WireClient
) -> None:
    client = f"mut-{uuid.uuid4().hex[:8]}"
    topic = f"compat-mutation-{uuid.uuid4().hex[:8]}"
    assert _alter(wire, [({"client-id": client}, {"controller_mutation_rate": 1.0})]) == [NONE]
    wait_for(lambda: _describe(wire, [("client-id", EXACT, client)])[1], what="the quota to be in place")

    def create(name: str, partitions: int) -> dict:
        with WireClient(bootstrap, client_id=client.encode()) as own:  # a fresh, unmuted connection
            response = own.request(
                19,
                7,
                {
                    "topics": [
                        {
                            "name": name,
                            "num_partitions": partitions,
                            "replication_factor": 1,
                            "assignments": [],
                            "configs": [],
                        }
                    ],
                    "timeout_ms": 30000,
                    "validate_only": False,
                },
            )
        return response

    try:
        # Within the quota before it: created (both brokers answer it unthrottled), and its 20
        # partitions push the rate over the quota, so the next creation is refused.
        first = create(topic, 20)
        assert first["topics"][0]["error_code"] == NONE
        refused = create(topic + "-2", 1)
        assert refused["topics"][0]["error_code"] == THROTTLING_QUOTA_EXCEEDED
        assert refused["throttle_time_ms"] > 0
    finally:
        assert _alter(wire, [({"client-id": client}, {"controller_mutation_rate": None})]) == [NONE]
        with WireClient(bootstrap) as own:
            own.request(20, 4, {"topic_names": [topic], "timeout_ms": 30000})


def test_controller_mutation_rate_counts_the_partitions_of_deleted_topics(bootstrap: str, wire: WireClient) -> None:
    """DeleteTopics records each deleted topic's partition count against controller_mutation_rate: a
    20-partition deletion within the quota passes and pushes the rate over it, so the next strict
    (v5+) deletion is refused with THROTTLING_QUOTA_EXCEEDED and the topic stays."""
    client = f"mutdel-{uuid.uuid4().hex[:8]}"
    big, small = (f"compat-mutdel-{uuid.uuid4().hex[:8]}-{n}" for n in ("big", "small"))
    with WireClient(bootstrap) as own:
        created = own.request(
            19,
            7,
            {
                "topics": [
                    {"name": name, "num_partitions": n, "replication_factor": 1, "assignments": [], "configs": []}
                    for name, n in ((big, 20), (small, 1))
                ],
                "timeout_ms": 30000,
                "validate_only": False,
            },
        )
    assert [t["error_code"] for t in created["topics"]] == [NONE, NONE]
    assert _alter(wire, [({"client-id": client}, {"controller_mutation_rate": 1.0})]) == [NONE]
    wait_for(lambda: _describe(wire, [("client-id", EXACT, client)])[1], what="the quota to be in place")

    def delete(name: str) -> dict:
        with WireClient(bootstrap, client_id=client.encode()) as own:  # a fresh, unmuted connection
            return own.request(20, 6, {"topics": [{"name": name, "topic_id": uuid.UUID(int=0)}], "timeout_ms": 30000})

    try:
        first = delete(big)
        assert first["responses"][0]["error_code"] == NONE
        refused = delete(small)
        assert refused["responses"][0]["error_code"] == THROTTLING_QUOTA_EXCEEDED
        assert refused["throttle_time_ms"] > 0
    finally:
        assert _alter(wire, [({"client-id": client}, {"controller_mutation_rate": None})]) == [NONE]
        with WireClient(bootstrap) as own:
            own.request(20, 4, {"topic_names": [small], "timeout_ms": 30000})


def test_request_percentage_throttles_a_busy_client(bootstrap: str, wire: WireClient) -> None:
    client = f"busy-{uuid.uuid4().hex[:8]}"
    assert _alter(wire, [({"client-id": client}, {"request_percentage": 0.01})]) == [NONE]
    wait_for(lambda: _describe(wire, [("client-id", EXACT, client)])[1], what="the quota to be in place")
    try:
        throttled = 0
        with WireClient(bootstrap, client_id=client.encode()) as own:
            for _ in range(2000):
                response = own.request(
                    3,
                    12,
                    {
                        "topics": None,
                        "allow_auto_topic_creation": False,
                        "include_topic_authorized_operations": False,
                    },
                )
                throttled = response["throttle_time_ms"]
                if throttled:
                    break  # the channel is muted after this response: stop here
        assert throttled > 0, "2000 Metadata requests at 0.01 % of a handler thread were never throttled"
    finally:
        assert _alter(wire, [({"client-id": client}, {"request_percentage": None})]) == [NONE]
