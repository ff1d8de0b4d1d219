"""Client telemetry (KIP-714) over a raw socket: a client-metrics subscription made with
IncrementalAlterConfigs on a CLIENT_METRICS resource and read back with DescribeConfigs, then
GetTelemetrySubscriptions and PushTelemetry as a client sends them (a new instance id, the subscribed
metric prefixes and interval, an OTLP push accepted, an unknown subscription refused).

Every expectation holds on both brokers (``--broker kafka`` runs it against Apache Kafka 4.3.1).
"""

from __future__ import annotations

import time
import uuid

import pytest

from compat_tests.scenarios.support import wait_for
from compat_tests.scenarios.test_newest_versions import call

LEDGER_COLUMN = "raw-socket"

DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS, GET_SUBSCRIPTIONS, PUSH, LIST_CONFIG_RESOURCES = (
    32,
    44,
    71,
    72,
    74,
)
NONE, INVALID_REQUEST, UNKNOWN_SUBSCRIPTION_ID = 0, 42, 117
CLIENT_METRICS = 16
SET, DELETE = 0, 1
ZERO_UUID = uuid.UUID(int=0)


def alter(bootstrap: str, name: str, configs: dict[str, str | None]) -> int:
    ops = [
        {"name": k, "config_operation": DELETE if v is None else SET, "value": v} for k, v in configs.items()
    ]
    body = {"resources": [{"resource_type": CLIENT_METRICS, "resource_name": name, "configs": ops}]}
    (result,) = call(bootstrap, INCREMENTAL_ALTER_CONFIGS, 1, {**body, "validate_only": False})["responses"]
    return result["error_code"]


def described(bootstrap: str, name: str) -> dict[str, str]:
    body = {
        "resources": [{"resource_type": CLIENT_METRICS, "resource_name": name, "configuration_keys": None}]
    }
    (result,) = call(bootstrap, DESCRIBE_CONFIGS, 4, body)["results"]
    assert result["error_code"] == NONE
    return {c["name"]: c["value"] for c in result["configs"]}


def _varint(n: int) -> bytes:
    out = b""
    while True:
        b, n = n & 0x7F, n >> 7
        out += bytes([b | (0x80 if n else 0)])
        if not n:
            return out


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def otlp_metrics(*names: str) -> bytes:
    """An OTLP MetricsData with one resource and scope holding metrics of these names."""
    scope = b"".join(_field(2, _field(1, n.encode())) for n in names)
    return _field(1, _field(2, scope))


@pytest.fixture
def subscription(bootstrap: str, unique_topic: str):
    name = "sub-" + unique_topic[-8:]
    prefix = "org.apache.kafka.pybroker.compat." + unique_topic[-8:]
    # Only this test's raw requests (client id "compat") match; a long interval keeps the timing checks
    # below deterministic.
    configs = {"metrics": prefix, "interval.ms": "60000", "match": "client_id=compat"}
    assert alter(bootstrap, name, configs) == NONE
    yield name, prefix
    alter(bootstrap, name, {"metrics": None, "interval.ms": None, "match": None})


def test_subscription_round_trip(bootstrap: str, subscription) -> None:
    name, prefix = subscription
    configs = wait_for(lambda: described(bootstrap, name), what="described subscription")
    assert configs["metrics"] == prefix and configs["interval.ms"] == "60000"
    assert configs["match"] == "client_id=compat"
    # ListConfigResources lists it, v0 (ListClientMetricsResources) and v1 by type.
    for version, body in ((0, {}), (1, {"resource_types": [CLIENT_METRICS]})):
        listed = call(bootstrap, LIST_CONFIG_RESOURCES, version, body)["config_resources"]
        assert name in [r["resource_name"] for r in listed]


def test_bad_interval_is_refused(bootstrap: str, unique_topic: str) -> None:
    assert alter(bootstrap, "bad-" + unique_topic[-8:], {"interval.ms": "10"}) == INVALID_REQUEST


def get(bootstrap: str, instance: uuid.UUID = ZERO_UUID) -> dict:
    return call(bootstrap, GET_SUBSCRIPTIONS, 0, {"client_instance_id": instance})


def test_get_subscriptions_and_push(bootstrap: str, subscription) -> None:
    _, prefix = subscription

    def subscribed() -> dict | None:
        answer = get(bootstrap)
        return answer if prefix in answer["requested_metrics"] else None

    # Apache Kafka applies the config change to the broker asynchronously: wait until it is served.
    answer = wait_for(subscribed, what="subscription served")
    assert answer["error_code"] == NONE and answer["client_instance_id"] != ZERO_UUID
    assert answer["requested_metrics"] == [prefix] and answer["push_interval_ms"] == 60000
    assert answer["telemetry_max_bytes"] > 0 and answer["delta_temporality"] is True
    assert sorted(answer["accepted_compression_types"]) == [1, 2, 3, 4]
    instance, subscription_id = answer["client_instance_id"], answer["subscription_id"]
    push = {
        "client_instance_id": instance,
        "subscription_id": subscription_id + 1,
        "terminating": False,
        "compression_type": 0,
        "metrics": otlp_metrics(prefix + ".requests"),
    }
    assert call(bootstrap, PUSH, 0, push)["error_code"] == UNKNOWN_SUBSCRIPTION_ID
    # After an unknown-subscription answer the client may fetch its subscription again at once.
    # (Kafka accepts a push after a Get only when the Get's millisecond timestamp is later than the last
    # push's: let the clock tick between requests, as a real client's would.)
    time.sleep(0.005)
    again = get(bootstrap, instance)
    assert (again["error_code"], again["subscription_id"]) == (NONE, subscription_id)
    push["subscription_id"] = subscription_id
    time.sleep(0.005)
    assert call(bootstrap, PUSH, 0, push)["error_code"] == NONE
    # A terminating push is accepted whatever the interval. (The interval's throttling of Gets and pushes
    # and the refusal of pushes after the terminating one are not asserted here: Apache Kafka re-evaluates a client's
    # instance, resetting both, whenever any subscription changes, and other scenarios change theirs.)
    assert call(bootstrap, PUSH, 0, {**push, "terminating": True})["error_code"] == NONE


def test_push_without_a_subscription_fetch(bootstrap: str) -> None:
    push = {
        "client_instance_id": uuid.uuid4(),
        "subscription_id": 12345,
        "terminating": False,
        "compression_type": 0,
        "metrics": b"",
    }
    assert call(bootstrap, PUSH, 0, push)["error_code"] == UNKNOWN_SUBSCRIPTION_ID
    assert (
        call(bootstrap, PUSH, 0, {**push, "client_instance_id": ZERO_UUID})["error_code"] == INVALID_REQUEST
    )
