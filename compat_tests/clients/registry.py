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
}
CLIENT_NAMES: list[str] = list(ADAPTERS)


def make_client(name: str) -> Any:
    module_name, class_name = ADAPTERS[name]
    return getattr(importlib.import_module(module_name), class_name)()
