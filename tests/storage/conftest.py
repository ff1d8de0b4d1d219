from pathlib import Path

import pytest

from pybroker.records import SimpleRecord, build_batch, validate_produce_batches
from pybroker.storage import Log, LogConfig


def make_request(count: int = 3, ts: int = 1000, value_size: int = 10, **kwargs) -> bytearray:
    records = [SimpleRecord(b"k%d" % i, b"v" * value_size, timestamp_ms=ts + i) for i in range(count)]
    return bytearray(build_batch(records, **kwargs))


def append(log: Log, buf: bytearray, now_ms: int = 10_000, leader_epoch: int = 0):
    return log.append(buf, validate_produce_batches(buf), leader_epoch=leader_epoch, now_ms=now_ms)


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    return tmp_path / "topic-0"


@pytest.fixture
def small_config() -> LogConfig:
    return LogConfig(segment_bytes=600, index_interval_bytes=100)
