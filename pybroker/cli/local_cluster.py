"""`pybroker cluster --brokers N`: ZooKeeper plus N brokers on loopback, for a user's local cluster.

Data lives under one directory (``--dir``: ``zookeeper/`` and ``broker-<id>/``, each with its log),
reused on the next start with the same arguments.  Broker ``i`` (1..N) listens on ``base-port + i - 1``.
Once every broker serves and sees all N, the bootstrap string is printed on stdout; Ctrl-C or SIGTERM
stops the brokers (SIGTERM, a controlled shutdown each) and then ZooKeeper, each by its pid, leaving no
process behind.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from pybroker.cli.client import CliError, KafkaClient

log = logging.getLogger(__name__)
STOP_TIMEOUT_S = 30.0


def start_broker(node: int, port: int, data: Path, zk_connect: str, extra: list[str]) -> subprocess.Popen[bytes]:
    workdir = data / f"broker-{node}"
    workdir.mkdir(parents=True, exist_ok=True)
    settings = {
        "listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "log.dirs": str(workdir / "data"),
        "node.id": str(node),
        "zookeeper.connect": zk_connect,
    }
    cmd = [sys.executable, "-m", "pybroker", "serve"]
    for key, value in settings.items():
        cmd += ["--override", f"{key}={value}"]
    for item in extra:
        cmd += ["--override", item]
    with open(workdir / "broker.log", "ab") as logfile:
        # Its own process group: Ctrl-C in the terminal reaches this command, which stops them in order.
        return subprocess.Popen(cmd, stdout=logfile, stderr=subprocess.STDOUT, start_new_session=True)


def _serving(bootstrap: str, brokers: int) -> bool:
    try:
        with KafkaClient(bootstrap, timeout_s=3) as client:
            return len(client.metadata([]).brokers) >= brokers
    except (CliError, OSError):
        return False


def stop_process(p: subprocess.Popen[bytes], timeout_s: float = STOP_TIMEOUT_S) -> None:
    if p.poll() is not None:
        return
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(timeout_s)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait(10)


def run_local_cluster(args: argparse.Namespace) -> int:
    from pybroker.controller.zookeeper_server import ZooKeeperServer

    n = args.local_brokers
    if n < 1:
        raise CliError("--brokers must be at least 1")
    data = Path(args.dir).resolve()
    data.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    zk = ZooKeeperServer(data / "zookeeper", args.zookeeper_port)
    procs: dict[int, subprocess.Popen[bytes]] = {}
    try:
        zk.start()
        ports = {node: args.base_port + node - 1 for node in range(1, n + 1)}
        for node, port in ports.items():
            procs[node] = start_broker(node, port, data, zk.connect_string, args.override or [])
        bootstrap = ",".join(f"127.0.0.1:{port}" for port in ports.values())
        deadline = time.monotonic() + args.startup_timeout
        pending = set(ports)
        while pending and not stop.is_set():
            for node in sorted(pending):
                if procs[node].poll() is not None:
                    raise CliError(
                        f"broker {node} exited with {procs[node].returncode}; see {data / f'broker-{node}' / 'broker.log'}"
                    )
                if _serving(f"127.0.0.1:{ports[node]}", n):
                    pending.discard(node)
            if time.monotonic() > deadline:
                raise CliError(f"brokers {sorted(pending)} not serving after {args.startup_timeout:.0f}s")
            stop.wait(0.3)
        if stop.is_set():
            return 130
        sys.stdout.write(bootstrap + "\n")
        sys.stdout.flush()
        while not stop.wait(1):
            for node, p in procs.items():
                if p.poll() is not None:
                    sys.stderr.write(f"pybroker: broker {node} exited with {p.returncode}\n")
                    stop.set()
        return 0
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs.values():
            stop_process(p)
        zk.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def add_arguments(family: argparse.ArgumentParser) -> None:
    family.add_argument("--brokers", dest="local_brokers", type=int, metavar="N", help="start ZooKeeper and N brokers on loopback")
    family.add_argument("--dir", default=os.path.join(os.getcwd(), "pybroker-cluster"),
                        help="data directory, reused on the next start (default ./pybroker-cluster)")
    family.add_argument("--base-port", type=int, default=9092, help="broker i listens on base-port + i - 1")
    family.add_argument("--zookeeper-port", type=int, default=None, help="ZooKeeper's port (default: a free one)")
    family.add_argument("--timeout", dest="startup_timeout", type=float, default=120.0, help="seconds to wait for every broker to serve")
    family.add_argument("--override", action="append", metavar="KEY=VALUE", help="a setting for every broker")
