"""The writers: sequence-numbered records from stock client libraries, every acknowledgement recorded.

Each record's value is ``"<writer> <partition> <seq> <padding>"``: the writer's name (library plus a
generation, bumped when a producer has to be recreated after a fatal error), the partition it was
sent to explicitly, and a sequence number that only grows within (writer, partition).  Each writer
keeps when it sent every record, when (and at which offset) the broker acknowledged it, or why it
failed; the checker compares that with what is in the log at the end.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from dataclasses import dataclass, field

logger = logging.getLogger(__name__)

PADDING = b"x" * 64


def encode(writer: str, partition: int, seq: int) -> bytes:
    return f"{writer} {partition} {seq} ".encode() + PADDING


def decode(value: bytes) -> tuple[str, int, int]:
    writer, partition, seq, _ = value.split(b" ", 3)
    return writer.decode(), int(partition), int(seq)


@dataclass
class WriterLog:
    """What one writer did; written by the writer's own thread, read after it stopped (or under ``lock``)."""

    name: str
    sent: dict[tuple[int, int], float] = field(default_factory=dict)  # (partition, seq) -> monotonic
    acked: dict[tuple[int, int], tuple[float, int]] = field(default_factory=dict)  # -> (time, offset)
    failed: dict[tuple[int, int], str] = field(default_factory=dict)  # -> error name
    lock: threading.Lock = field(default_factory=threading.Lock)

    def ack_times(self) -> list[tuple[float, float, int]]:
        """(ack time, send time, partition) of every acknowledged record."""
        with self.lock:
            return [(t_ack, self.sent[key], key[0]) for key, (t_ack, _) in self.acked.items()]


class Writer(threading.Thread):
    """Produces round-robin over ``partitions`` at about ``rate`` records/s until ``stop()``."""

    library = "?"

    def __init__(self, bootstrap: str, topic: str, partitions: int, acks: str, rate: float, index: int) -> None:
        super().__init__(daemon=True, name=f"writer-{self.library}-{index}")
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.acks = acks
        self.rate = rate
        self.index = index
        self.logs: list[WriterLog] = []
        self.stopping = threading.Event()
        self.max_in_flight = 2000
        self.error: BaseException | None = None

    def new_log(self) -> WriterLog:
        log = WriterLog(f"{self.library}{self.index}.{len(self.logs)}")
        self.logs.append(log)
        return log

    def stop(self) -> None:
        self.stopping.set()

    def run(self) -> None:
        try:
            self.produce_loop()
        except BaseException as error:  # reported by the harness, never swallowed
            logger.exception("writer %s failed", self.name)
            self.error = error

    def produce_loop(self) -> None:
        raise NotImplementedError

    def paced(self) -> float:
        """Seconds between records at the configured rate."""
        return 1.0 / self.rate if self.rate > 0 else 0.0


class ConfluentWriter(Writer):
    """librdkafka through confluent-kafka: idempotent when acks=all."""

    library = "confluent"

    def _producer(self):  # noqa: ANN202 - confluent_kafka.Producer
        from confluent_kafka import Producer

        return Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "acks": self.acks,
                "enable.idempotence": self.acks == "all",
                "linger.ms": 2,
                "message.timeout.ms": 90000,
                "socket.timeout.ms": 10000,
                "logger": logging.getLogger("librdkafka.chaos"),
            }
        )

    def produce_loop(self) -> None:
        from confluent_kafka import KafkaError

        producer, log = self._producer(), self.new_log()
        seqs = [0] * self.partitions
        outstanding = 0
        fatal = threading.Event()
        interval = self.paced()
        next_at = time.monotonic()

        def callback_for(current: WriterLog, key: tuple[int, int]):  # noqa: ANN202
            def on_delivery(err: KafkaError | None, msg) -> None:  # noqa: ANN001
                nonlocal outstanding
                outstanding -= 1
                now = time.monotonic()
                with current.lock:
                    if err is None:
                        current.acked[key] = (now, msg.offset())
                    else:
                        current.failed[key] = err.name()
                        if err.fatal():
                            fatal.set()

            return on_delivery

        partition = 0
        while not self.stopping.is_set():
            if fatal.is_set():
                # An idempotent producer's fatal error (e.g. an unrecoverable sequence gap): recreate it
                # under a new writer name, as an application would; the old one's pending records fail.
                logger.warning("%s: fatal producer error, recreating", log.name)
                producer.flush(5)
                producer, log = self._producer(), self.new_log()
                fatal.clear()
            if outstanding >= self.max_in_flight:
                producer.poll(0.05)
                continue
            seq = seqs[partition]
            seqs[partition] += 1
            key = (partition, seq)
            with log.lock:
                log.sent[key] = time.monotonic()
            while True:
                try:
                    producer.produce(
                        self.topic, encode(log.name, partition, seq), partition=partition,
                        on_delivery=callback_for(log, key),
                    )  # fmt: skip
                    outstanding += 1
                    break
                except BufferError:
                    producer.poll(0.05)
            partition = (partition + 1) % self.partitions
            next_at += interval
            producer.poll(max(0.0, next_at - time.monotonic()))
        producer.flush(60)


class AiokafkaWriter(Writer):
    """aiokafka (pure Python asyncio): idempotent when acks=all; its own event loop in this thread."""

    library = "aiokafka"

    def produce_loop(self) -> None:
        asyncio.run(self._produce())

    async def _producer(self):  # noqa: ANN202 - aiokafka.AIOKafkaProducer
        from aiokafka import AIOKafkaProducer

        producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap,
            acks="all" if self.acks == "all" else int(self.acks),
            enable_idempotence=self.acks == "all",
            linger_ms=2,
            request_timeout_ms=30000,
        )
        while True:
            try:
                await producer.start()
                return producer
            except Exception:  # the bootstrap broker may be the one a fault took down: retry
                logger.warning("aiokafka producer start failed; retrying", exc_info=True)
                await asyncio.sleep(1)

    async def _produce(self) -> None:
        from aiokafka.errors import KafkaError

        producer, log = await self._producer(), self.new_log()
        seqs = [0] * self.partitions
        in_flight = asyncio.Semaphore(self.max_in_flight)
        interval = self.paced()
        next_at = time.monotonic()
        pending: set[asyncio.Future] = set()
        partition = 0

        def done_for(current: WriterLog, key: tuple[int, int]):  # noqa: ANN202
            def done(future: asyncio.Future) -> None:
                in_flight.release()
                pending.discard(future)
                now = time.monotonic()
                with current.lock:
                    if future.cancelled():
                        current.failed[key] = "CANCELLED"
                    elif future.exception() is not None:
                        current.failed[key] = type(future.exception()).__name__
                    else:
                        current.acked[key] = (now, future.result().offset)

            return done

        while not self.stopping.is_set():
            await in_flight.acquire()
            seq = seqs[partition]
            seqs[partition] += 1
            key = (partition, seq)
            with log.lock:
                log.sent[key] = time.monotonic()
            try:
                future = await producer.send(self.topic, encode(log.name, partition, seq), partition=partition)
            except KafkaError as error:
                in_flight.release()
                with log.lock:
                    log.failed[key] = type(error).__name__
            else:
                pending.add(future)
                future.add_done_callback(done_for(log, key))
            partition = (partition + 1) % self.partitions
            next_at += interval
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
        if pending:
            await asyncio.wait(pending, timeout=60)
        await producer.stop()


WRITERS: dict[str, type[Writer]] = {"confluent": ConfluentWriter, "aiokafka": AiokafkaWriter}
