"""A pybroker running inside the calling process, on its own event loop in a daemon thread.

This is what the `kafka_broker` pytest fixture starts: no interpreter start-up, no second import of
the broker's modules, so it is ready in a few tens of milliseconds (`python -m bench.fixture_start`
compares it with a `python -m pybroker serve` subprocess). The broker owns its loop and thread;
clients in the test talk to it over a real socket, exactly as they would to a separate process.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import tempfile
import threading
from collections.abc import Callable, Coroutine, Mapping
from concurrent.futures import Future
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from pybroker.broker import Broker
    from pybroker.config import BrokerConfig

log = logging.getLogger(__name__)
T = TypeVar("T")

# Settings that suit a broker in a test: one __consumer_offsets partition instead of 50 (start-up
# creates it, and a test rarely has more than a few groups), and no 3 s wait before a new group's
# first rebalance (Kafka's own integration tests and its docker quick-start set the same to 0).
TEST_BROKER_DEFAULTS: dict[str, str] = {
    "offsets.topic.num.partitions": "1",
    "group.initial.rebalance.delay.ms": "0",
}
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0


def free_port(host: str = "127.0.0.1") -> int:
    """A port the kernel just handed out (bind to port 0), released for the broker to take."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


class EmbeddedBroker:
    """`start()` returns the bootstrap string once the listener accepts connections; `stop()` shuts
    the broker down cleanly and, if the broker made its own temporary log dir, removes it.

        with EmbeddedBroker() as broker:
            Producer({"bootstrap.servers": broker.bootstrap}) ...
    """

    def __init__(
        self,
        log_dir: str | os.PathLike[str] | None = None,
        overrides: Mapping[str, str] | None = None,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
    ) -> None:
        self._own_dir: tempfile.TemporaryDirectory[str] | None = None
        if log_dir is None:
            self._own_dir = tempfile.TemporaryDirectory(prefix="pybroker-")
            log_dir = self._own_dir.name
        self.log_dir = Path(log_dir)
        self.host = host
        self.port = port or free_port(host)
        self.overrides = {**TEST_BROKER_DEFAULTS, **(overrides or {})}
        self.broker: Broker | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopped: Future[None] | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout_s: float = START_TIMEOUT_S) -> str:
        if self._thread is not None:
            raise RuntimeError("broker already started")
        from pybroker.config import BrokerConfig

        try:
            config = BrokerConfig(
                {"listeners": f"PLAINTEXT://{self.host}:{self.port}", "log.dirs": str(self.log_dir), **self.overrides}
            )
        except BaseException:
            self._cleanup_dir()
            raise
        started: Future[None] = Future()
        self._stopped = Future()
        self._thread = threading.Thread(
            target=self._run, args=(config, started), name=f"pybroker-{self.port}", daemon=True
        )
        self._thread.start()
        try:
            started.result(timeout_s)
        except BaseException:
            self._thread.join(STOP_TIMEOUT_S)
            self._thread = None
            self._cleanup_dir()
            raise
        return self.bootstrap

    def _run(self, config: BrokerConfig, started: Future[None]) -> None:
        import uvloop

        from pybroker.broker import Broker

        loop = uvloop.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            self.broker = Broker(config)
            try:
                loop.run_until_complete(self.broker.start())
            except BaseException as e:
                # A half-started broker holds the log dir lock and maybe a listening socket.
                loop.run_until_complete(self.broker.stop())
                started.set_exception(e if isinstance(e, Exception) else RuntimeError(repr(e)))
                return
            started.set_result(None)
            loop.run_forever()
            loop.run_until_complete(self.broker.stop())
        except BaseException as e:
            if not started.done():
                started.set_exception(e if isinstance(e, Exception) else RuntimeError(repr(e)))
            else:
                log.exception("embedded broker on %s failed", self.bootstrap)
            assert self._stopped is not None
            if not self._stopped.done():
                self._stopped.set_exception(e if isinstance(e, Exception) else RuntimeError(repr(e)))
        finally:
            try:
                loop.run_until_complete(loop.shutdown_default_executor())
            finally:
                loop.close()
                assert self._stopped is not None
                if not self._stopped.done():
                    self._stopped.set_result(None)

    def call(self, coro_fn: Callable[[Broker], Coroutine[Any, Any, T]], timeout_s: float = START_TIMEOUT_S) -> T:
        """Run `coro_fn(broker)` on the broker's loop (which owns all broker state) and return its result."""
        if self._loop is None or self.broker is None or self._thread is None:
            raise RuntimeError("broker is not running")
        broker = self.broker
        return asyncio.run_coroutine_threadsafe(coro_fn(broker), self._loop).result(timeout_s)

    def create_topic(self, name: str, partitions: int = 1, configs: Mapping[str, str] | None = None) -> str:
        """Create a topic as CreateTopics would (same validation and errors, as `KafkaError`)."""
        self.call(lambda b: b.create_topic_async(name, partitions, dict(configs or {})))
        return name

    def delete_topic(self, name: str) -> None:
        """Delete a topic if it still exists (a test may have deleted it itself)."""

        async def delete(b: Broker) -> None:
            if b.topic(name) is not None:
                b.delete_topic(name)

        self.call(delete)

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Shut the broker down as SIGTERM would (clean shutdown, checkpoints) and wait for it."""
        thread, loop = self._thread, self._loop
        if thread is None or loop is None:
            self._cleanup_dir()
            return
        if thread.is_alive() and not loop.is_closed():
            loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout_s)
        if thread.is_alive():
            raise RuntimeError(f"embedded broker on {self.bootstrap} did not stop within {timeout_s}s")
        self._thread = None
        assert self._stopped is not None
        error = self._stopped.exception()
        self._cleanup_dir()
        if error is not None:
            raise error

    def _cleanup_dir(self) -> None:
        if self._own_dir is not None:
            self._own_dir.cleanup()
            self._own_dir = None

    def __enter__(self) -> EmbeddedBroker:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
