"""A deleted topic's files are removed off the event loop.

Found by tools/fuzz_broker.py: DeleteTopics of a topic that CreatePartitions had grown to 1,030
partitions, on a disk that discards freed blocks synchronously, stalled every client for 75 s while
the retention task removed the files on the event loop. The removal now runs in an executor thread.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pybroker.broker as broker_module
from compat_tests.brokers import free_port
from pybroker.broker import Broker
from pybroker.config import BrokerConfig
from pybroker.storage.manager import remove_directories


def test_deleted_partitions_are_removed_on_another_thread(tmp_path: Path, monkeypatch) -> None:
    threads: list[threading.Thread] = []

    def recording(paths: list[Path]) -> list[Path]:
        threads.append(threading.current_thread())
        return remove_directories(paths)

    monkeypatch.setattr(broker_module, "remove_directories", recording)

    async def scenario() -> None:
        config = BrokerConfig.load(
            overrides={
                "listeners": f"PLAINTEXT://127.0.0.1:{free_port()}",
                "log.dirs": str(tmp_path),
                "log.segment.delete.delay.ms": "0",
                "log.retention.check.interval.ms": "3600000",
            }
        )
        broker = Broker(config)
        await broker.start()
        try:
            broker.create_topic("doomed", 3, {})
            broker.delete_topic("doomed")
            assert any(p.name.endswith("-delete") for p in tmp_path.iterdir())
            broker._retention()
            async with asyncio.timeout(10):
                while any(p.name.endswith("-delete") for p in tmp_path.iterdir()):
                    await asyncio.sleep(0.01)  # polling the directory for a condition, with a deadline
        finally:
            await broker.stop()

    asyncio.run(scenario())
    assert threads and all(t is not threading.main_thread() for t in threads)
