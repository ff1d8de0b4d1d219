"""Start and stop a real Apache Kafka (single-node KRaft, broker+controller) for reference runs.

The server jars come from Maven Central through ``pom.xml`` beside this file, resolved into the
project-local Maven repository (see ``maven.py``); nothing is downloaded from anywhere else.

    python -m compat_tests.reference.apache_kafka install              # resolve the jars only
    python -m compat_tests.reference.apache_kafka run --dir D [--port P]  # foreground until Ctrl-C/SIGTERM
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from compat_tests.reference.kafka_probe import ProbeError, broker_count
from compat_tests.reference.maven import CACHE_DIR, build_lock, run_maven
from pybroker.config import random_kafka_uuid

logger = logging.getLogger(__name__)

REFERENCE_DIR = Path(__file__).resolve().parent
POM = REFERENCE_DIR / "pom.xml"
LOG4J_CONFIG = REFERENCE_DIR / "log4j2.properties"

# The settings pybroker runs with, so both systems answer the same scenario the same way.
DEFAULT_SETTINGS: dict[str, str] = {
    "auto.create.topics.enable": "true",
    "num.partitions": "1",
    "default.replication.factor": "1",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
    "delete.topic.enable": "true",
}

# The JVM options Kafka's own scripts start the broker with: kafka-server-start.sh sets
# KAFKA_HEAP_OPTS and passes -loggc, kafka-run-class.sh sets KAFKA_JVM_PERFORMANCE_OPTS (both 4.3).
STOCK_HEAP_OPTS = ("-Xmx1G", "-Xms1G")
STOCK_PERFORMANCE_OPTS = (
    "-server",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-XX:MaxInlineLevel=15",
    "-Djava.awt.headless=true",
)


@dataclass(frozen=True)
class JvmProfile:
    """How the broker's JVM is started: ``stock`` for benchmarks (what kafka-server-start.sh does),
    ``constrained`` (the default) for the compat suite, where a small heap lets several Kafkas run
    at once, and for the benchmark's second, labelled Kafka row (what it ran with before 2026-11)."""

    name: str
    options: tuple[str, ...]
    gc_log: bool = False  # -Xlog:gc* into <workdir>/logs, as kafka-server-start.sh's -loggc

    def describe(self) -> str:
        return " ".join(self.options) + (" -Xlog:gc*:file=…" if self.gc_log else "")


STOCK = JvmProfile("stock", STOCK_HEAP_OPTS + STOCK_PERFORMANCE_OPTS, gc_log=True)
# A small, growable heap and G1's defaults: cheap to run beside other JVMs; not a tuned broker.
CONSTRAINED = JvmProfile(
    "constrained", ("-Xmx512m", "-Xms128m", "-Xshare:auto", "-XX:+UseG1GC", "-Djava.awt.headless=true")
)
JVM_PROFILES = {profile.name: profile for profile in (STOCK, CONSTRAINED)}

# The broker's own principal when it runs with an authorizer (ApacheKafka(authorizer=True)).
INTERNAL_USER, INTERNAL_PASSWORD = "broker", "broker-secret"
INTERNAL_PRINCIPAL = f"User:{INTERNAL_USER}"


def internal_sasl_settings(*, controller: bool) -> dict[str, str]:
    """With an authorizer: the nodes' own traffic on INTERNAL (and, with ``controller``, KRaft's CONTROLLER
    listener) is SASL/PLAIN as INTERNAL_PRINCIPAL, a super user, so replication never depends on the ACLs
    clients make and PLAINTEXT clients stay User:ANONYMOUS."""
    jaas = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="{INTERNAL_USER}" password="{INTERNAL_PASSWORD}" user_{INTERNAL_USER}="{INTERNAL_PASSWORD}";'
    )
    settings = {
        "inter.broker.listener.name": "INTERNAL",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.internal.plain.sasl.jaas.config": jaas,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": INTERNAL_PRINCIPAL,
    }
    if controller:
        settings["sasl.mechanism.controller.protocol"] = "PLAIN"
        settings["listener.name.controller.plain.sasl.jaas.config"] = jaas
    return settings

# Always added: keep logging alive while Kafka's own shutdown hook runs, so it shows in kafka.out.
COMMON_JVM_OPTIONS = ("-Dlog4j2.shutdownHookEnabled=false",)


def classpath_file() -> Path:
    """Keyed by the POM's content, so changing the Kafka version re-resolves."""
    digest = hashlib.sha256(POM.read_bytes()).hexdigest()[:12]
    return CACHE_DIR / "apache-kafka" / f"classpath-{digest}.txt"


def install() -> str:
    """Resolve the Kafka server jars (idempotent, offline when already resolved); returns the classpath."""
    target = classpath_file()
    with build_lock("apache-kafka"):
        if target.exists():
            classpath = target.read_text().strip()
            if classpath and all(Path(jar).exists() for jar in classpath.split(os.pathsep)):
                return classpath
        target.parent.mkdir(parents=True, exist_ok=True)
        run_maven(REFERENCE_DIR, ["dependency:build-classpath", f"-Dmdep.outputFile={target}"])
        return target.read_text().strip()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ApacheKafkaError(RuntimeError):
    """Apache Kafka failed to format or start; the message carries its log tail."""


class ApacheKafka:
    """One single-node KRaft Apache Kafka listening on 127.0.0.1."""

    def __init__(
        self,
        workdir: Path,
        port: int | None = None,
        overrides: dict[str, str] | None = None,
        jvm: JvmProfile = CONSTRAINED,
        command_prefix: Sequence[str] = (),
        extra_listeners: dict[str, tuple[str, int]] | None = None,
        authorizer: bool = False,
        log_dirs: int = 1,
    ):
        self.workdir = Path(workdir)
        # log.dirs: <workdir>/data, or with several, <workdir>/data-1 ... data-<n> (AlterReplicaLogDirs).
        self.log_dirs = [self.workdir / "data"] if log_dirs == 1 else [self.workdir / f"data-{i}" for i in range(1, log_dirs + 1)]
        self.requested_port = port
        self.overrides = dict(overrides or {})
        # More client listeners beside PLAINTEXT: name -> (security protocol, port), e.g. an SSL one
        # whose ssl.* settings the overrides give (listener.name.<name>.ssl.*).
        self.extra_listeners = dict(extra_listeners or {})
        self.jvm = jvm
        self.command_prefix = list(command_prefix)  # e.g. ["taskset", "-c", "0"]: the broker only
        self.port: int | None = None
        self.controller_port: int | None = None
        # With an authorizer, the broker's own traffic (controller channel, inter-broker requests such
        # as WriteTxnMarkers) needs a principal of its own: it goes over SASL_PLAINTEXT listeners as
        # INTERNAL_PRINCIPAL, a super user, and clients keep the PLAINTEXT listener (User:ANONYMOUS).
        self.authorizer = authorizer
        self.internal_port: int | None = None
        self.bootstrap: str = ""
        self._process: subprocess.Popen[bytes] | None = None
        self.cluster_id: str | None = None  # the nodes of one cluster share it (kafka_cluster.py)

    @property
    def pid(self) -> int:
        if self._process is None:
            raise RuntimeError("Apache Kafka is not running")
        return self._process.pid

    def is_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def data_dir(self) -> Path:
        """The first log dir (the one holding meta.properties' first copy and __cluster_metadata)."""
        return self.log_dirs[0]

    @property
    def log_file(self) -> Path:
        return self.workdir / "kafka.out"

    def start(self, timeout_s: float = 120) -> str:
        """Format (first time only), start, and wait until Metadata lists the broker."""
        if self._process is not None:
            raise RuntimeError("already started")
        classpath = install()
        self.workdir.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + timeout_s
        # A free port can be taken between probing and binding; with chosen ports, retry on new ones.
        attempts = 1 if self.requested_port is not None else 3
        for attempt in range(1, attempts + 1):
            self.port = self.requested_port or free_port()
            self.controller_port = free_port()
            while self.controller_port == self.port:
                self.controller_port = free_port()
            self.internal_port = free_port()
            while self.internal_port in (self.port, self.controller_port):
                self.internal_port = free_port()
            config = self._write_config()
            self._format(classpath, config)
            self._launch(classpath, config)
            try:
                self._wait_until_ready(deadline)
            except ApacheKafkaError:
                port_clash = "Address already in use" in self._log_tail()
                self.stop()
                if port_clash and attempt < attempts:
                    logger.warning("port clash starting Apache Kafka; retrying on other ports")
                    continue
                raise
            self.bootstrap = f"127.0.0.1:{self.port}"
            logger.info("Apache Kafka pid %d ready at %s", self.pid, self.bootstrap)
            return self.bootstrap
        raise AssertionError("unreachable")

    def stop(self, timeout_s: float = 30) -> None:
        """SIGTERM (Kafka shuts down cleanly), wait, then SIGKILL if it is still there."""
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                logger.warning(
                    "Apache Kafka pid %d ignored SIGTERM for %.0fs; killing", process.pid, timeout_s
                )
                process.kill()
                process.wait(timeout=timeout_s)
        logger.info("Apache Kafka pid %d exited with code %s", process.pid, process.returncode)
        self._process = None

    def __enter__(self) -> ApacheKafka:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _write_config(self) -> Path:
        extra = "".join(f",{name}://127.0.0.1:{port}" for name, (_, port) in self.extra_listeners.items())
        protocols = "".join(f",{name}:{protocol}" for name, (protocol, _) in self.extra_listeners.items())
        settings = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}{extra}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}{extra}",
            "inter.broker.listener.name": "PLAINTEXT",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": f"PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT{protocols}",
            "log.dirs": ",".join(str(d) for d in self.log_dirs),
            **DEFAULT_SETTINGS,
            **(self._authorizer_settings(extra, protocols) if self.authorizer else {}),
            **self.overrides,
        }
        config = self.workdir / "server.properties"
        config.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
        return config

    def _authorizer_settings(self, extra: str, protocols: str) -> dict[str, str]:
        return {
            "listeners": (
                f"PLAINTEXT://127.0.0.1:{self.port},INTERNAL://127.0.0.1:{self.internal_port},"
                f"CONTROLLER://127.0.0.1:{self.controller_port}{extra}"
            ),
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port},INTERNAL://127.0.0.1:{self.internal_port}{extra}",
            "listener.security.protocol.map": (
                f"PLAINTEXT:PLAINTEXT,INTERNAL:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT{protocols}"
            ),
            **internal_sasl_settings(controller=True),
        }

    def _java(self, classpath: str, main_class: str, *args: str, jvm: JvmProfile | None = None) -> list[str]:
        jvm = jvm or self.jvm
        gc_log = []
        if jvm.gc_log:
            gc_file = self.workdir / "logs" / "kafkaServer-gc.log"
            gc_file.parent.mkdir(parents=True, exist_ok=True)
            gc_log = [f"-Xlog:gc*:file={gc_file}:time,tags:filecount=10,filesize=100M"]
        return [
            "java",
            *jvm.options,
            *gc_log,
            *COMMON_JVM_OPTIONS,
            f"-Dlog4j2.configurationFile={LOG4J_CONFIG}",
            f"-Dkafka.logs.dir={self.workdir / 'logs'}",
            "-cp",
            classpath,
            main_class,
            *args,
        ]

    def _format(self, classpath: str, config: Path) -> None:
        if (self.data_dir / "meta.properties").exists():
            return  # formatted by an earlier start: keep the data (restart scenarios)
        # kafka-storage.sh is a short tool: the small profile whatever the broker's JVM.
        command = self._java(
            classpath, "kafka.tools.StorageTool", "format", "-t", self.cluster_id or random_kafka_uuid(), "-c", str(config),
            jvm=CONSTRAINED,
        )  # fmt: skip
        result = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            raise ApacheKafkaError(f"kafka-storage format failed:\n{result.stdout}{result.stderr}")

    def _launch(self, classpath: str, config: Path) -> None:
        with open(self.log_file, "ab") as log:
            self._process = subprocess.Popen(
                [*self.command_prefix, *self._java(classpath, "kafka.Kafka", str(config))],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                # Own session: a Ctrl-C aimed at the test runner must not kill the broker mid-scenario.
                start_new_session=True,
            )

    def _wait_until_ready(self, deadline: float) -> None:
        assert self._process is not None and self.port is not None
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise ApacheKafkaError(
                    f"Apache Kafka exited with code {self._process.returncode}:\n{self._log_tail()}"
                )
            try:
                if broker_count("127.0.0.1", self.port) >= 1:
                    return
            except (OSError, struct.error, ProbeError) as error:
                # Refused while the JVM boots, or a half-started broker answering oddly: keep polling.
                last_error = error
            # Poll interval while the JVM boots; readiness itself is the condition we wait on.
            self._process_exit_or_timeout(0.2)
        raise ApacheKafkaError(
            f"Apache Kafka not ready in time (last probe error: {last_error}):\n{self._log_tail()}"
        )

    def _process_exit_or_timeout(self, seconds: float) -> None:
        assert self._process is not None
        try:
            self._process.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            pass

    def _log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"


def _run_foreground(workdir: Path, port: int | None, overrides: dict[str, str], jvm: JvmProfile) -> int:
    kafka = ApacheKafka(workdir, port=port, overrides=overrides, jvm=jvm)
    stopping = threading.Event()

    def request_stop(signum: int, _frame: object) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    try:
        bootstrap = kafka.start()
        print(bootstrap, flush=True)
        while not stopping.wait(timeout=1.0):
            if not kafka.is_running():
                logger.error("Apache Kafka exited unexpectedly; see %s", kafka.log_file)
                return 1
    finally:
        kafka.stop()
    return 0


def _parse_overrides(pairs: list[str]) -> dict[str, str]:
    overrides = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"--set expects key=value, got {pair!r}")
        overrides[key] = value
    return overrides


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    parser = argparse.ArgumentParser(prog="python -m compat_tests.reference.apache_kafka")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("install", help="resolve the Apache Kafka jars from Maven Central")
    run = commands.add_parser("run", help="start Apache Kafka in the foreground; prints the bootstrap")
    run.add_argument("--dir", type=Path, required=True, help="work directory (data, config, logs)")
    run.add_argument("--port", type=int, default=None, help="client port (default: a free one)")
    run.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override a broker setting"
    )
    run.add_argument(
        "--jvm", choices=sorted(JVM_PROFILES), default=CONSTRAINED.name,
        help="JVM options: stock (kafka-server-start.sh's) or constrained (small heap, the default)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.command == "install":
        classpath = install()
        print(f"{len(classpath.split(os.pathsep))} jars resolved", flush=True)
        return 0
    return _run_foreground(args.dir, args.port, _parse_overrides(args.set), JVM_PROFILES[args.jvm])


if __name__ == "__main__":
    sys.exit(main())
