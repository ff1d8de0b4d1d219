from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
SPEC_DIR = REPO_ROOT.parent / "shared" / "kafka-protocol"


@pytest.fixture(scope="session")
def spec_dir() -> Path:
    """Apache Kafka's JSON message definitions (``../shared/kafka-protocol`` from the repo root)."""
    if not SPEC_DIR.is_dir():
        message = f"Kafka's message definitions are missing: expected ../shared/kafka-protocol ({SPEC_DIR})"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message + " (not in CI, so skipping; CI fails instead)")
    return SPEC_DIR
