"""A server.properties written for Apache Kafka starts pybroker (one warning per key it does not use);
every problem of a bad file is reported in one start, with the key named, before any data is written.
Through real `python -m pybroker serve` processes."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from compat_tests.brokers import PyBroker, free_port

REPO = Path(__file__).resolve().parents[2]

# The settings of config/server.properties as shipped in Apache Kafka 4.x's distribution (a combined
# broker + controller, KRaft), key for key and value for value; the comments are ours. Ports and the
# log dir are placeholders the test fills in, as a user edits them.
KAFKA_4_SERVER_PROPERTIES = """\
# Server basics: a combined broker and controller
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=localhost:{controller_port}

# Socket server
listeners=PLAINTEXT://:{port},CONTROLLER://:{controller_port}
inter.broker.listener.name=PLAINTEXT
advertised.listeners=PLAINTEXT://localhost:{port},CONTROLLER://localhost:{controller_port}
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600

# Log basics
log.dirs={log_dir}
num.partitions=1
num.recovery.threads.per.data.dir=1

# Internal topics
offsets.topic.replication.factor=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1

# Flush policy (commented out in the distribution as well)
#log.flush.interval.messages=10000
#log.flush.interval.ms=1000

# Retention
log.retention.hours=168
#log.retention.bytes=1073741824
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
"""
KAFKA_4_UNUSED = [
    "process.roles",
    "controller.quorum.bootstrap.servers",
    "controller.listener.names",
    "num.network.threads",
    "num.io.threads",
    "num.recovery.threads.per.data.dir",
]

# Kafka 3.x's config/kraft/server.properties named the quorum by its voters instead.
KAFKA_3_KRAFT_SERVER_PROPERTIES = (
    KAFKA_4_SERVER_PROPERTIES.replace(
        "controller.quorum.bootstrap.servers=localhost:{controller_port}",
        "controller.quorum.voters=1@localhost:{controller_port}",
    )
    .replace("advertised.listeners=PLAINTEXT://localhost:{port},CONTROLLER://localhost:{controller_port}",
             "advertised.listeners=PLAINTEXT://localhost:{port}")
    .replace("share.coordinator.state.topic.replication.factor=1\nshare.coordinator.state.topic.min.isr=1\n", "")
)
KAFKA_3_UNUSED = [
    k for k in KAFKA_4_UNUSED if k != "controller.quorum.bootstrap.servers"
] + ["controller.quorum.voters"]


def serve(tmp_path: Path, properties: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "server.properties"
    path.write_text(properties)
    return subprocess.run(
        [sys.executable, "-m", "pybroker", "serve", str(path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    "template, unused",
    [(KAFKA_4_SERVER_PROPERTIES, KAFKA_4_UNUSED), (KAFKA_3_KRAFT_SERVER_PROPERTIES, KAFKA_3_UNUSED)],
    ids=["kafka-4-server.properties", "kafka-3-kraft-server.properties"],
)
def test_kafka_server_properties_starts_with_one_warning_per_unused_key(
    tmp_path: Path, template: str, unused: list[str]
) -> None:
    port, controller_port = free_port(), free_port()
    log_dir = tmp_path / "kraft-combined-logs"
    path = tmp_path / "server.properties"
    path.write_text(template.format(port=port, controller_port=controller_port, log_dir=log_dir))
    broker = PyBroker(tmp_path, port=port)
    broker.command = lambda: [sys.executable, "-m", "pybroker", "serve", str(path)]  # type: ignore[method-assign]
    broker.start()
    try:
        # The advertised address works: a client bootstraps, then reconnects to localhost:<port>.
        metadata = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"}).list_topics(timeout=20)
        assert [(b.host, b.port) for b in metadata.brokers.values()] == [("localhost", port)]
        # The controller listener is not opened.
        with pytest.raises(OSError):
            __import__("socket").create_connection(("127.0.0.1", controller_port), timeout=2).close()
    finally:
        assert broker.stop() == 0, broker.log_tail()
    log = broker.log_text()
    warnings = [line for line in log.splitlines() if " WARNING " in line]
    for key in unused:
        assert len([w for w in warnings if f"ignoring {key}=" in w]) == 1, (key, warnings)
    assert len([w for w in warnings if "not opening listener CONTROLLER" in w]) == 1, warnings
    assert len(warnings) == len(unused) + 1, warnings
    assert "ERROR" not in log and "Traceback" not in log, log


def test_every_problem_of_a_file_is_reported_in_one_start(tmp_path: Path) -> None:
    port = free_port()
    text = KAFKA_4_SERVER_PROPERTIES.format(port=port, controller_port=free_port(), log_dir=tmp_path / "data")
    text = text.replace("num.partitions=1", "num.partition=1")  # misspelt
    text = text.replace("log.segment.bytes=1073741824", "log.segment.bytes=1k")  # not a number
    text += "log.retention.check.interval.msec=1000\n"  # misspelt
    done = serve(tmp_path, text)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines[0] == "pybroker: 3 configuration errors:", done.stderr
    assert "num.partition (value 1)" in lines[1] and "Did you mean 'num.partitions'?" in lines[1]
    assert "Invalid value 1k for configuration log.segment.bytes" in lines[2]
    assert "log.retention.check.interval.msec" in lines[3] and "log.retention.check.interval.ms" in lines[3]
    assert len(lines) == 4, done.stderr
    assert not (tmp_path / "data").exists()  # nothing was written before the check


def test_one_misspelt_key_is_named_on_one_line(tmp_path: Path) -> None:
    done = serve(tmp_path, f"listeners=PLAINTEXT://127.0.0.1:{free_port()}\nlog.dir=data\nnum.partitons=3\n")
    assert done.returncode == 1
    assert re.fullmatch(
        r"pybroker: configuration error: Unknown broker config name: num\.partitons \(value 3\)\. "
        r"Did you mean 'num\.partitions'\?.*\n",
        done.stderr,
    ), done.stderr
