"""Start and stop a pybroker process for the compat and integration tests.

``PyBroker`` has the same shape as ``compat_tests.reference.apache_kafka.ApacheKafka`` so a test
can run against either: ``start() -> bootstrap``, ``stop()``, context manager.  Readiness is a
real Kafka ApiVersions v0 round trip on the listener, not a sleep.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

log = logging.getLogger(__name__)

API_VERSIONS_KEY = 18


class BrokerStartError(RuntimeError):
    """The broker process died or never answered ApiVersions."""


def free_port(host: str = "127.0.0.1") -> int:
    """A port the kernel just handed out (bind to port 0), released for the broker to take."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def encode_request(
    api_key: int,
    api_version: int,
    correlation_id: int,
    body: bytes = b"",
    client_id: bytes = b"probe",
    flexible_header: bool = False,
) -> bytes:
    """A size-prefixed request, then ``body``.

    Header v1 (int16-length client id), or v2 when ``flexible_header`` (v1 plus an empty tagged-field
    section) — what a client sends for a flexible request version, e.g. ApiVersions v3+.
    """
    header = struct.pack(">hhih", api_key, api_version, correlation_id, len(client_id)) + client_id
    if flexible_header:
        header += b"\x00"
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


def recv_exactly(sock: socket.socket, size: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = sock.recv(size - len(chunks))
        if not chunk:
            raise ConnectionError(f"connection closed after {len(chunks)} of {size} bytes")
        chunks += chunk
    return bytes(chunks)


def read_response(sock: socket.socket) -> bytes:
    """One size-prefixed response frame (without its size)."""
    (size,) = struct.unpack(">i", recv_exactly(sock, 4))
    return recv_exactly(sock, size)


def parse_api_versions_v0(frame: bytes) -> tuple[int, int, dict[int, tuple[int, int]]]:
    """(correlation id, error code, {api_key: (min, max)}) of a v0-encoded ApiVersions response."""
    correlation_id, error_code, count = struct.unpack_from(">ihi", frame, 0)
    ranges: dict[int, tuple[int, int]] = {}
    pos = 10
    for _ in range(max(count, 0)):
        api_key, min_version, max_version = struct.unpack_from(">hhh", frame, pos)
        ranges[api_key] = (min_version, max_version)
        pos += 6
    return correlation_id, error_code, ranges


def api_versions_probe(
    host: str, port: int, timeout_s: float = 2.0, api_version: int = 0
) -> tuple[int, dict[int, tuple[int, int]]]:
    """Send one ApiVersions request (no body) and return (error code, key ranges) of the v0 answer."""
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        # ApiVersions v3+ is flexible: header v2 and a body holding at least its tagged-field section.
        flexible = api_version >= 3
        sock.sendall(
            encode_request(
                API_VERSIONS_KEY, api_version, 7, body=b"\x00" if flexible else b"", flexible_header=flexible
            )
        )
        frame = read_response(sock)
    correlation_id, error_code, ranges = parse_api_versions_v0(frame)
    if correlation_id != 7:
        raise ConnectionError(f"ApiVersions answered with correlation id {correlation_id}, expected 7")
    return error_code, ranges


def split_bootstrap(bootstrap: str) -> tuple[str, int]:
    host, _, port = bootstrap.rpartition(":")
    return host, int(port)


class PyBroker:
    """``python -m pybroker serve`` on 127.0.0.1:<port> with its data in ``<workdir>/data``."""

    def __init__(
        self,
        workdir: str | os.PathLike[str],
        port: int | None = None,
        overrides: dict[str, str] | None = None,
        extra_args: list[str] | None = None,
        env: dict[str, str] | None = None,
        command_prefix: list[str] | None = None,
        log_dirs: int = 1,
    ) -> None:
        self.workdir = Path(workdir)
        # log.dirs: <workdir>/data, or with several, <workdir>/data-1 ... data-<n> (AlterReplicaLogDirs).
        self.log_dirs = [self.workdir / "data"] if log_dirs == 1 else [self.workdir / f"data-{i}" for i in range(1, log_dirs + 1)]
        self.port = port or free_port()
        self.overrides = dict(overrides or {})
        self.extra_args = list(extra_args or [])  # e.g. ["--event-loop", "asyncio"]
        self.extra_env = dict(env or {})
        self.command_prefix = list(command_prefix or [])  # e.g. ["taskset", "-c", "0"] (benchmarks)
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = self.workdir / "broker.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    @property
    def data_dir(self) -> Path:
        return self.log_dirs[0]

    def command(self) -> list[str]:
        settings = {
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "log.dirs": ",".join(str(d) for d in self.log_dirs),
            **self.overrides,
        }
        args = [*self.command_prefix, sys.executable, "-m", "pybroker", "serve"]
        for key, value in settings.items():
            args += ["--override", f"{key}={value}"]
        return args + self.extra_args

    def start(self, timeout_s: float = 30) -> str:
        if self.process is not None and self.process.poll() is None:
            raise RuntimeError(f"broker already running as pid {self.process.pid}")
        self.workdir.mkdir(parents=True, exist_ok=True)
        repo_root = Path(__file__).resolve().parent.parent
        env = dict(os.environ, **self.extra_env)
        # A crash in a C extension (or the interpreter) leaves its Python stack in the log.
        env.setdefault("PYTHONFAULTHANDLER", "1")
        # Run the working tree's pybroker even when it is not pip-installed.
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(repo_root), env.get("PYTHONPATH", "")) if p)
        with open(self.log_path, "ab") as log_file:
            self.process = subprocess.Popen(
                self.command(), stdout=log_file, stderr=subprocess.STDOUT, env=env, cwd=self.workdir
            )
        log.info("started pybroker pid %d on %s", self.process.pid, self.bootstrap)
        self._wait_until_ready(timeout_s)
        return self.bootstrap

    def _wait_until_ready(self, timeout_s: float) -> None:
        assert self.process is not None
        deadline = time.monotonic() + timeout_s
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise BrokerStartError(
                    f"pybroker exited with code {self.process.returncode}; log tail:\n{self.log_tail()}"
                )
            try:
                error_code, _ = api_versions_probe("127.0.0.1", self.port, timeout_s=1.0)
                if error_code == 0:
                    return
                last_error = RuntimeError(f"ApiVersions error code {error_code}")
            except OSError as exc:
                last_error = exc
            time.sleep(0.05)  # poll interval of the readiness check, not synchronisation
        self.kill9()
        raise BrokerStartError(
            f"pybroker did not answer ApiVersions within {timeout_s}s ({last_error}); log tail:\n{self.log_tail()}"
        )

    def stop(self, timeout_s: float = 20) -> int:
        """SIGTERM, wait, SIGKILL if it will not go; returns the exit code."""
        if self.process is None:
            return 0
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                log.warning("pybroker pid %d ignored SIGTERM for %ss, killing", self.process.pid, timeout_s)
                self.process.kill()
                self.process.wait(10)
        code = self.process.returncode
        assert code is not None, "broker process did not exit"
        return code

    def kill9(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
            assert self.process.returncode is not None

    def restart(self, timeout_s: float = 30) -> str:
        """Stop gracefully (if running) and start again on the same port and data dir."""
        self.stop()
        return self.start(timeout_s)

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def __enter__(self) -> PyBroker:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
