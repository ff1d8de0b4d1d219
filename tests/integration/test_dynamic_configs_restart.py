"""Dynamic broker configs survive a restart and keep applying to topics; log levels (BROKER_LOGGER) do
not, as in Kafka. A persisted value the broker no longer accepts is skipped with a warning."""

from __future__ import annotations

import json
import os

from compat_tests.brokers import PyBroker
from compat_tests.clients.base import ClientError, Record
from compat_tests.clients.confluent import ConfluentClient
from pybroker.metadata.store import FILE_NAME
from tests.wire import WireClient

CLIENT = ConfluentClient()
TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8
SET = 0
DYNAMIC_BROKER, DYNAMIC_DEFAULT = 2, 3


def alter(bootstrap: str, rtype: int, name: str, configs: dict[str, str]) -> tuple[int, str | None]:
    with WireClient(bootstrap) as wire:
        response = wire.request(
            44,
            1,
            {
                "resources": [
                    {
                        "resource_type": rtype,
                        "resource_name": name,
                        "configs": [{"name": k, "value": v, "config_operation": SET} for k, v in configs.items()],
                    }
                ],
                "validate_only": False,
            },
        )
    (result,) = response["responses"]
    return result["error_code"], result["error_message"]


def describe(bootstrap: str, rtype: int, name: str, keys: list[str]) -> dict[str, tuple[str | None, int]]:
    with WireClient(bootstrap) as wire:
        response = wire.request(
            32,
            4,
            {
                "resources": [{"resource_type": rtype, "resource_name": name, "configuration_keys": keys}],
                "include_synonyms": False,
                "include_documentation": False,
            },
        )
    (result,) = response["results"]
    assert result["error_code"] == 0, result
    return {c["name"]: (c["value"], c["config_source"]) for c in result["configs"]}


def too_large(bootstrap: str, topic: str, size: int) -> bool:
    try:
        CLIENT.produce(bootstrap, topic, [Record(b"k", os.urandom(size))], compression="none")
    except ClientError as e:
        assert e.error == "MESSAGE_TOO_LARGE", e
        return True
    return False


def test_dynamic_configs_survive_a_restart_and_still_apply(own_pybroker: PyBroker) -> None:
    bootstrap = own_pybroker.bootstrap
    topic = "inherits"
    CLIENT.create_topic(bootstrap, topic, partitions=1)
    assert alter(bootstrap, BROKER, "", {"message.max.bytes": "5000", "log.retention.ms": "3600000"}) == (0, None)
    assert alter(bootstrap, BROKER, "0", {"log.retention.ms": "7200000"}) == (0, None)
    assert alter(bootstrap, BROKER_LOGGER, "0", {"pybroker.server": "DEBUG"}) == (0, None)
    assert too_large(bootstrap, topic, 8000)

    assert own_pybroker.stop() == 0, own_pybroker.log_tail()
    own_pybroker.start()

    assert describe(bootstrap, BROKER, "", ["message.max.bytes", "log.retention.ms"]) == {
        "message.max.bytes": ("5000", DYNAMIC_DEFAULT),
        "log.retention.ms": ("3600000", DYNAMIC_DEFAULT),
    }
    assert describe(bootstrap, BROKER, "0", ["log.retention.ms"]) == {"log.retention.ms": ("7200000", DYNAMIC_BROKER)}
    assert describe(bootstrap, TOPIC, topic, ["retention.ms", "max.message.bytes"]) == {
        "retention.ms": ("7200000", DYNAMIC_BROKER),
        "max.message.bytes": ("5000", DYNAMIC_DEFAULT),
    }
    assert too_large(bootstrap, topic, 8000)
    assert not too_large(bootstrap, topic, 3000)
    # Log levels are not persisted.
    assert describe(bootstrap, BROKER_LOGGER, "0", ["pybroker.server"]) == {"pybroker.server": ("INFO", 6)}


def test_a_stored_value_no_longer_valid_is_skipped_with_a_warning(own_pybroker: PyBroker) -> None:
    bootstrap = own_pybroker.bootstrap
    assert alter(bootstrap, BROKER, "", {"log.retention.ms": "3600000", "log.segment.bytes": "2097152"}) == (0, None)
    assert own_pybroker.stop() == 0
    path = own_pybroker.data_dir / FILE_NAME
    doc = json.loads(path.read_text())
    doc["broker_configs"][""]["log.segment.bytes"] = "12"  # below Kafka's 1 MiB floor
    path.write_text(json.dumps(doc))
    own_pybroker.start()
    assert describe(bootstrap, BROKER, "", ["log.retention.ms", "log.segment.bytes"]) == {
        "log.retention.ms": ("3600000", DYNAMIC_DEFAULT)
    }
    warnings = [line for line in own_pybroker.log_text().splitlines() if " WARNING " in line]
    assert any("log.segment.bytes" in w and "at least 1048576" in w for w in warnings), warnings
