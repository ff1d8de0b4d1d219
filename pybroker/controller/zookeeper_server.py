"""Install and run Apache ZooKeeper (standalone mode, loopback) for cluster mode and its tests.

Where the server jars come from, first match wins:

1. ``$ZOOKEEPER_HOME`` (a ZooKeeper distribution: ``$ZOOKEEPER_HOME/lib/*.jar`` and the top-level jar);
2. Maven Central: ``org.apache.zookeeper:zookeeper:3.9.5`` with slf4j-simple, resolved by ``mvn`` through
   ``zookeeper-pom.xml`` beside this file into the project-local Maven repository (``.cache/m2``, or
   ``$PYBROKER_MAVEN_REPO``) — what ``scripts/install-deps.sh zookeeper`` does;
3. Debian's ``zookeeper`` package (``/usr/share/java/zookeeper.jar`` and its dependencies).

    python -m pybroker.controller.zookeeper_server install            # resolve the jars only
    python -m pybroker.controller.zookeeper_server run --dir D --port P  # foreground until Ctrl-C/SIGTERM

``ZooKeeperServer(data_dir, port).start()`` launches ``ZooKeeperServerMain`` on a ``zoo.cfg`` it writes
into ``data_dir``, waits until the server's ``srvr`` four-letter word reports its mode (it is serving), and
``stop()`` ends that process by its pid (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import argparse
import fcntl
import glob
import hashlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import IO

logger = logging.getLogger(__name__)

ZOOKEEPER_VERSION = "3.9.5"
POM = Path(__file__).resolve().with_name("zookeeper-pom.xml")
_REPO_ROOT = Path(__file__).resolve().parents[2]
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
DEBIAN_JARS = "/usr/share/java"


class ZooKeeperError(RuntimeError):
    """ZooKeeper could not be installed or started; the message says why."""


def _cache_dir() -> Path:
    override = os.environ.get("PYBROKER_CACHE_DIR")
    return Path(override) if override else _REPO_ROOT / ".cache"


def _maven_repository() -> Path:
    override = os.environ.get("PYBROKER_MAVEN_REPO")
    return Path(override).expanduser() if override else _cache_dir() / "m2"


def _classpath_file() -> Path:
    digest = hashlib.sha256(POM.read_bytes()).hexdigest()[:12]
    return _cache_dir() / "zookeeper" / f"classpath-{digest}.txt"


def _valid(classpath: str) -> bool:
    return bool(classpath) and all(Path(jar).exists() for jar in classpath.split(os.pathsep))


def _zookeeper_home_classpath() -> str | None:
    home = os.environ.get("ZOOKEEPER_HOME")
    if not home:
        return None
    jars = sorted(glob.glob(os.path.join(home, "lib", "*.jar")) + glob.glob(os.path.join(home, "*.jar")))
    if not any("zookeeper" in Path(jar).name for jar in jars):
        raise ZooKeeperError(f"ZOOKEEPER_HOME={home} holds no zookeeper jar (looked in lib/ and the top level)")
    return os.pathsep.join(jars)


def _debian_classpath() -> str | None:
    # Debian's zookeeper package: its own jar plus the jars /usr/share/zookeeper/bin/zkEnv.sh puts beside it.
    names = ("zookeeper.jar", "zookeeper-jute.jar", "slf4j-api.jar", "slf4j-simple.jar", "netty-all.jar",
             "netty4-all.jar", "commons-io.jar", "audience-annotations.jar", "log4j-1.2.jar", "slf4j-log4j12.jar")
    jars = [os.path.join(DEBIAN_JARS, name) for name in names if os.path.exists(os.path.join(DEBIAN_JARS, name))]
    if not jars or not jars[0].endswith("zookeeper.jar"):
        return None
    return os.pathsep.join(jars)


def _resolve_with_maven(target: Path) -> str:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ZooKeeperError("mvn is not installed (bash scripts/install-deps.sh system installs it)")
    work = target.parent / "pom"
    work.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(POM, work / "pom.xml")
    base = [mvn, "-B", "-q", "-Dstyle.color=never", f"-Dmaven.repo.local={_maven_repository()}",
            "dependency:build-classpath", f"-Dmdep.outputFile={target}"]
    # Offline first: fast when everything is resolved already; then online from Maven Central.
    for args in ([*base, "-o"], base):
        result = subprocess.run(args, cwd=work, capture_output=True, text=True, timeout=1200)
        if result.returncode == 0 and target.exists():
            return target.read_text().strip()
    tail = "\n".join((result.stdout + result.stderr).splitlines()[-30:])
    raise ZooKeeperError(f"resolving ZooKeeper {ZOOKEEPER_VERSION} with Maven failed:\n{tail}")


def install() -> str:
    """The ZooKeeper server classpath (idempotent: resolved once, then read from the cache)."""
    from_home = _zookeeper_home_classpath()
    if from_home is not None:
        return from_home
    target = _classpath_file()
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / "install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # parallel test workers must not run Maven twice at once
        if target.exists() and _valid(target.read_text().strip()):
            return target.read_text().strip()
        try:
            return _resolve_with_maven(target)
        except ZooKeeperError:
            debian = _debian_classpath()
            if debian is not None:
                logger.warning("Maven could not resolve ZooKeeper; using Debian's zookeeper package")
                return debian
            raise


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def four_letter_word(host: str, port: int, word: str, timeout_s: float = 2.0) -> str:
    """Send a ZooKeeper four-letter command (``ruok``, ``srvr``, ``mntr``) and return the answer."""
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        sock.sendall(word.encode())
        chunks = []
        while True:
            chunk = sock.recv(4096)
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


class ZooKeeperServer:
    """One standalone ZooKeeper on 127.0.0.1:``port`` keeping its data in ``data_dir``.

    ``tick_time_ms`` bounds session timeouts (a client gets between 2 and 20 ticks); tests pass a short
    tick so a session expires in a second or two. The data survives a stop/start on the same directory.
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        port: int | None = None,
        *,
        tick_time_ms: int = 2000,
        host: str = "127.0.0.1",
        heap: str = "-Xmx256m",
    ) -> None:
        self.data_dir = Path(data_dir)
        self.requested_port = port
        self.port = port or 0
        self.host = host
        self.tick_time_ms = tick_time_ms
        self.heap = heap
        self.process: subprocess.Popen[bytes] | None = None
        self._log_file: IO[bytes] | None = None

    @property
    def connect_string(self) -> str:
        """The value of ``zookeeper.connect`` for brokers of this ensemble."""
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def log_path(self) -> Path:
        return self.data_dir / "zookeeper.log"

    def _write_config(self) -> Path:
        config = self.data_dir / "zoo.cfg"
        config.write_text(
            "\n".join(
                [
                    f"tickTime={self.tick_time_ms}",
                    f"dataDir={self.data_dir / 'data'}",
                    f"clientPort={self.port}",
                    f"clientPortAddress={self.host}",
                    "maxClientCnxns=0",
                    "admin.enableServer=false",
                    "4lw.commands.whitelist=ruok,srvr,mntr,stat",
                    # Snapshots and transaction-log purges, so a long-lived local cluster stays small.
                    "autopurge.snapRetainCount=3",
                    "autopurge.purgeInterval=1",
                    "",
                ]
            )
        )
        return config

    def start(self, timeout_s: float = 60.0) -> ZooKeeperServer:
        classpath = install()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        (self.data_dir / "data").mkdir(exist_ok=True)
        deadline = time.monotonic() + timeout_s
        attempts = 1 if self.requested_port else 3
        for attempt in range(1, attempts + 1):
            self.port = self.requested_port or free_port()
            config = self._write_config()
            self._log_file = open(self.log_path, "ab")
            command = [
                "java", self.heap, "-XX:+UseSerialGC", "-Dzookeeper.jmx.log4j.disable=true",
                "-Dzookeeper.admin.enableServer=false", "-cp", classpath, MAIN_CLASS, str(config),
            ]
            self.process = subprocess.Popen(
                command, stdout=self._log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
            try:
                self._wait_until_ready(deadline)
                logger.info("ZooKeeper serving on %s (pid %d)", self.connect_string, self.process.pid)
                return self
            except ZooKeeperError:
                clash = "Address already in use" in self.log_tail()
                self.stop()
                if not clash or attempt == attempts:
                    raise
        raise AssertionError("unreachable")

    def _wait_until_ready(self, deadline: float) -> None:
        assert self.process is not None
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ZooKeeperError(
                    f"ZooKeeper exited with status {self.process.returncode}:\n{self.log_tail()}"
                )
            try:
                # ruok answers imok as soon as the port is open; srvr names the mode once requests are served.
                if "Mode:" in four_letter_word(self.host, self.port, "srvr", timeout_s=1.0):
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise ZooKeeperError(f"ZooKeeper did not start serving on {self.connect_string}:\n{self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout_s: float = 15.0) -> None:
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=timeout_s)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def __enter__(self) -> ZooKeeperServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pybroker.controller.zookeeper_server")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("install", help="resolve the ZooKeeper jars and print the classpath's jar count")
    run = sub.add_parser("run", help="run a standalone ZooKeeper in the foreground until Ctrl-C/SIGTERM")
    run.add_argument("--dir", required=True, help="data directory (kept across runs)")
    run.add_argument("--port", type=int, default=2181)
    run.add_argument("--tick-time-ms", type=int, default=2000)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if args.command == "install":
        classpath = install()
        logger.info("ZooKeeper classpath: %d jars", len(classpath.split(os.pathsep)))
        return 0
    server = ZooKeeperServer(args.dir, args.port, tick_time_ms=args.tick_time_ms).start()
    stopped = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stopped.set())
    try:
        while not stopped.wait(0.5):
            if server.process is None or server.process.poll() is not None:
                logger.error("ZooKeeper exited:\n%s", server.log_tail())
                return 1
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
