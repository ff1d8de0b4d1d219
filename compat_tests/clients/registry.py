"""Every client adapter by name, imported lazily so a missing library fails only its own tests."""

from __future__ import annotations

import importlib
from typing import Any

ADAPTERS: dict[str, tuple[str, str]] = {
    "confluent": ("compat_tests.clients.confluent", "ConfluentClient"),
    "kafka-python": ("compat_tests.clients.kafka_python", "KafkaPythonClient"),
    "aiokafka": ("compat_tests.clients.aiokafka_client", "AiokafkaClient"),
    "kcat": ("compat_tests.clients.kcat", "KcatClient"),
    "java": ("compat_tests.clients.java", "JavaClient"),
    "java4": ("compat_tests.clients.java4", "Java4Client"),
    "franz-go": ("compat_tests.clients.franz_go", "FranzGoClient"),
    "sarama": ("compat_tests.clients.sarama", "SaramaClient"),
}
CLIENT_NAMES: list[str] = list(ADAPTERS)


def make_client(name: str) -> Any:
    module_name, class_name = ADAPTERS[name]
    return getattr(importlib.import_module(module_name), class_name)()
