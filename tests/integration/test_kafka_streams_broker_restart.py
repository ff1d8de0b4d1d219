"""Kafka Streams (kafka-streams 4.3.1, unmodified) word count with exactly_once_v2 through a kill -9
(and, separately, a clean SIGTERM) and restart of pybroker while the Streams instance has a transaction open, then a kill -9 of the
instance itself (again with a transaction open): the output (read_committed) is exactly the counts
of the input, each word's count going up by one per occurrence.  INTEGRATION_BROKER=kafka runs the
same against Apache Kafka.  The broker-agnostic part (instance restart, at_least_once, internal topics on both
brokers) is compat_tests/scenarios/test_kafka_streams.py; this needs its own broker to restart."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest

from compat_tests.brokers import PyBroker, free_port
from compat_tests.clients.confluent import ConfluentClient
from compat_tests.streams.wordcount import expected_counts, run_word_count, sentences

from .conftest import against_kafka

PARTITIONS = 2


@pytest.mark.parametrize("stop_signal", [signal.SIGKILL, signal.SIGTERM], ids=["kill9", "sigterm"])
def test_exactly_once_v2_word_count_through_a_broker_restart(tmp_path: Path, stop_signal: int) -> None:
    broker: Any
    if against_kafka():  # INTEGRATION_BROKER=kafka: the same run against Apache Kafka
        from compat_tests.reference.apache_kafka import ApacheKafka

        broker = ApacheKafka(tmp_path / "broker", port=free_port())
    else:
        broker = PyBroker(tmp_path / "broker")
    broker.start()
    restarted: list[int] = []

    def restart_broker() -> None:
        """kill -9 (or SIGTERM: a clean shutdown) by pid, then start again on the same port and data."""
        old_pid = broker.pid
        os.kill(old_pid, stop_signal)
        code = broker.stop()  # waits for the process to go
        if stop_signal == signal.SIGTERM and isinstance(broker, PyBroker):
            assert code == 0, f"pybroker's clean shutdown exited {code}"
        broker.start()
        restarted.append(old_pid)

    try:
        admin = ConfluentClient()
        admin.create_topic(broker.bootstrap, "wc-in", partitions=PARTITIONS)
        admin.create_topic(broker.bootstrap, "wc-out", partitions=PARTITIONS)
        lines = sentences(300)
        run = run_word_count(
            broker.bootstrap,
            admin,
            tmp_path,
            guarantee="exactly_once_v2",
            input_topic="wc-in",
            output_topic="wc-out",
            partitions=PARTITIONS,
            lines=lines,
            while_running=restart_broker,
        )
        assert restarted, "the broker was not restarted"
        assert run.killed_in_flight, "the instance was not killed with a transaction open"
        seqs = run.sequences
        want = expected_counts(lines)
        assert {word: seq[-1] for word, seq in seqs.items()} == want
        for word, seq in seqs.items():
            assert seq == list(range(1, want[word] + 1)), word
    finally:
        broker.stop()
