"""pybroker process lifecycle: graceful restart keeps everything; kill -9 loses no acknowledged record."""

from __future__ import annotations

import threading
import time

from confluent_kafka import KafkaError, Producer

from compat_tests.brokers import PyBroker
from compat_tests.clients.base import Record
from compat_tests.clients.confluent import ConfluentClient

CLIENT = ConfluentClient()


def test_graceful_stop_then_restart_keeps_everything(own_pybroker: PyBroker) -> None:
    bootstrap = own_pybroker.bootstrap
    topic = "restart-keeps"
    CLIENT.create_topic(bootstrap, topic, partitions=2, configs={"retention.ms": "86400000"})
    sent = {
        partition: [
            Record(
                f"k{partition}-{i}".encode(),
                f"v{partition}-{i}".encode(),
                (("h", b"x"),),
                partition=partition,
            )
            for i in range(25)
        ]
        for partition in (0, 1)
    }
    for partition, codec in ((0, "gzip"), (1, "zstd")):
        deliveries = CLIENT.produce(bootstrap, topic, sent[partition], compression=codec)
        assert [d.offset for d in deliveries] == list(range(25))

    assert own_pybroker.stop() == 0, own_pybroker.log_tail()
    own_pybroker.start()

    assert CLIENT.describe_topic(bootstrap, topic).partitions == 2
    assert CLIENT.describe_configs(bootstrap, topic)["retention.ms"] == "86400000"
    for partition in (0, 1):
        got = CLIENT.consume(bootstrap, topic, partition, start="beginning", count=25)
        assert [(r.offset, r.key, r.value, r.headers) for r in got] == [
            (i, r.key, r.value, r.headers) for i, r in enumerate(sent[partition])
        ]
        assert CLIENT.list_offsets(bootstrap, topic, partition, "latest").offset == 25
    # The log continues where it stopped.
    (delivery,) = CLIENT.produce(bootstrap, topic, [Record(b"after", b"restart", partition=0)])
    assert (delivery.partition, delivery.offset) == (0, 25)


class AckRecorder:
    """A confluent-kafka (acks=all) producer thread recording every acknowledged (partition, offset, value)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.acked: list[tuple[int, int, bytes]] = []
        self.failed = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "linger.ms": 2,
                "message.timeout.ms": 5000,
                "retries": 0,
            }
        )
        self._topic = topic
        self._thread = threading.Thread(target=self._run, name="ack-recorder", daemon=True)

    def _on_delivery(self, err: KafkaError | None, msg) -> None:  # noqa: ANN001
        with self._lock:
            if err is None:
                self.acked.append((msg.partition(), msg.offset(), msg.value()))
            else:
                self.failed += 1

    def _run(self) -> None:
        sequence = 0
        while not self._stop.is_set():
            try:
                self._producer.produce(
                    self._topic,
                    value=f"value-{sequence:08d}".encode(),
                    partition=sequence % 2,
                    on_delivery=self._on_delivery,
                )
                sequence += 1
            except BufferError:
                pass  # local queue full: serving delivery reports below frees it
            self._producer.poll(0.001)
        self._producer.flush(10)

    def start(self) -> None:
        self._thread.start()

    def acked_count(self) -> int:
        with self._lock:
            return len(self.acked)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        assert not self._thread.is_alive()


def test_kill9_under_load_loses_no_acknowledged_record(own_pybroker: PyBroker) -> None:
    bootstrap = own_pybroker.bootstrap
    topic = "kill9-under-load"
    CLIENT.create_topic(bootstrap, topic, partitions=2)
    recorder = AckRecorder(bootstrap, topic)
    recorder.start()
    deadline = time.monotonic() + 60
    while recorder.acked_count() < 2000:
        assert time.monotonic() < deadline, f"only {recorder.acked_count()} acks in 60s"
        time.sleep(0.05)  # polling the counter; the deadline bounds it
    own_pybroker.kill9()  # mid-stream: the producer is still sending
    recorder.stop()
    acked = list(recorder.acked)

    own_pybroker.start()
    for partition in (0, 1):
        expected = {offset: value for p, offset, value in acked if p == partition}
        end = CLIENT.list_offsets(bootstrap, topic, partition, "latest").offset
        assert end >= max(expected) + 1, (
            f"partition {partition} ends at {end}, below acknowledged {max(expected)}"
        )
        got = CLIENT.consume(bootstrap, topic, partition, start="beginning", count=end, timeout_s=60)
        stored = {r.offset: r.value for r in got}
        missing = [offset for offset, value in expected.items() if stored.get(offset) != value]
        assert not missing, (
            f"partition {partition}: {len(missing)} acknowledged records lost or changed, first {missing[:5]}"
        )
