"""ListConfigResources (74) over a raw socket: v0 (ListClientMetricsResources) and v1 (KIP-1142) by
resource type, every type when none is named, and an unsupported type.

Every expectation holds on both brokers (``--broker kafka`` runs it against Apache Kafka 4.3.1).
"""

from __future__ import annotations

from compat_tests.scenarios.test_newest_versions import call

LEDGER_COLUMN = "raw-socket"

LIST_CONFIG_RESOURCES = 74
NONE, UNSUPPORTED_VERSION = 0, 35
TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 2, 4, 8, 16, 32


def listed(bootstrap: str, version: int, types: list[int] | None = None) -> tuple[int, set[tuple[str, int]]]:
    body = {} if version == 0 else {"resource_types": types or []}
    answer = call(bootstrap, LIST_CONFIG_RESOURCES, version, body)
    return answer["error_code"], {
        (r["resource_name"], r["resource_type"]) for r in answer["config_resources"]
    }


def test_topics_by_type(bootstrap: str, make_topic) -> None:
    topic = make_topic()
    code, resources = listed(bootstrap, 1, [TOPIC])
    assert code == NONE and (topic, TOPIC) in resources
    assert {t for _, t in resources} == {TOPIC}


def test_brokers_by_type(bootstrap: str) -> None:
    code, resources = listed(bootstrap, 1, [BROKER])
    assert code == NONE and resources and {t for _, t in resources} == {BROKER}
    assert all(name.isdigit() for name, _ in resources)


def test_every_type_when_none_named(bootstrap: str, make_topic) -> None:
    topic = make_topic()
    code, resources = listed(bootstrap, 1, [])
    assert code == NONE and (topic, TOPIC) in resources
    assert any(t == BROKER for _, t in resources)


def test_v0_lists_client_metrics_only(bootstrap: str, make_topic) -> None:
    make_topic()
    code, resources = listed(bootstrap, 0)
    assert code == NONE and all(t == CLIENT_METRICS for _, t in resources)


def test_unsupported_type(bootstrap: str) -> None:
    code, resources = listed(bootstrap, 1, [TOPIC, 3])
    assert (code, resources) == (UNSUPPORTED_VERSION, set())
