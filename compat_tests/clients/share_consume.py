"""The ``share-consume`` programs: one command line and JSON-lines protocol, two clients.

``java`` is Kafka's ``KafkaShareConsumer`` 4.3.1 (the compat jar's ``share-consume`` command),
``confluent`` is confluent-kafka's ``ShareConsumer`` (librdkafka; ``confluent_share_consume``).
Run the argv with ``cwd=REPO_ROOT`` so ``python -m`` finds ``compat_tests``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from compat_tests.clients.java43 import java43_command

REPO_ROOT = Path(__file__).resolve().parents[2]
SHARE_CLIENTS = ("java", "confluent")


def share_consume_command(client: str, *args: str) -> list[str]:
    if client == "java":
        return java43_command("share-consume", *args)
    if client == "confluent":
        return [sys.executable, "-m", "compat_tests.clients.confluent_share_consume", *args]
    raise ValueError(f"no share consumer for client {client!r}; known: {SHARE_CLIENTS}")
