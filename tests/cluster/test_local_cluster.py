"""`pybroker cluster --brokers 3`: ZooKeeper and three brokers on loopback, a bootstrap string that
works, data reused on the next start, and no process left after SIGTERM."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.brokers import free_port

pytestmark = pytest.mark.timeout(180)


def processes_mentioning(text: str) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(int(pid))
    return found


def consecutive_free_ports(n: int) -> int:
    """A port p with p..p+n-1 all free now (ephemeral ports are handed out at random; try a few)."""
    for _ in range(50):
        base = free_port()
        if base + n > 65535:
            continue
        sockets = []
        try:
            for port in range(base, base + n):
                s = socket.socket()
                sockets.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in sockets:
                s.close()
    raise RuntimeError(f"no {n} consecutive free ports")


def start(data: Path, base_port: int) -> tuple[subprocess.Popen[str], str]:
    p = subprocess.Popen(
        [sys.executable, "-m", "pybroker", "cluster", "--brokers", "3", "--dir", str(data),
         "--base-port", str(base_port), "--override", "zookeeper.session.timeout.ms=6000"],
        stdout=subprocess.PIPE, text=True, env={**os.environ},
    )
    assert p.stdout is not None
    line = p.stdout.readline().strip()  # printed once all three serve
    return p, line


def stop(p: subprocess.Popen[str], data: Path) -> None:
    p.send_signal(signal.SIGTERM)
    assert p.wait(60) == 0
    assert processes_mentioning(str(data)) == [], "a broker or ZooKeeper outlived the command"


def test_local_cluster_prints_a_working_bootstrap_and_leaves_nothing(tmp_path: Path) -> None:
    data = tmp_path / "local"
    base = consecutive_free_ports(3)
    p, bootstrap = start(data, base)
    try:
        assert bootstrap == f"127.0.0.1:{base},127.0.0.1:{base + 1},127.0.0.1:{base + 2}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("kept", 1, 3)])["kept"].result(60)
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        for i in range(10):
            producer.produce("kept", str(i).encode())
        assert producer.flush(30) == 0
    finally:
        stop(p, data)
    # The same directory again: the topic and its records are still there.
    p, bootstrap = start(data, base)
    try:
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "g", "enable.auto.commit": False})
        c.assign([TopicPartition("kept", 0, 0)])
        seen = []
        deadline = time.monotonic() + 30
        while len(seen) < 10 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                seen.append(m.value())
        c.close()
        assert seen == [str(i).encode() for i in range(10)]
    finally:
        stop(p, data)
