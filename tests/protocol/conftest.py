from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
# A worktree outside the usual layout names the folder in PYBROKER_KAFKA_PROTOCOL_DIR.
SPEC_DIR = Path(
    os.environ.get("PYBROKER_KAFKA_PROTOCOL_DIR") or REPO_ROOT.parent / "shared" / "kafka-protocol-4.3.1"
)


@pytest.fixture(scope="session")
def spec_dir() -> Path:
    """Apache Kafka's JSON message definitions (``../shared/kafka-protocol-4.3.1`` from the repo root)."""
    if not SPEC_DIR.is_dir():
        message = f"Kafka's message definitions are missing: expected ../shared/kafka-protocol-4.3.1 ({SPEC_DIR})"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message + " (not in CI, so skipping; CI fails instead)")
    return SPEC_DIR
