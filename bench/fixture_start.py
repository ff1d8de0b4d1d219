"""Start-to-ready time of a test broker: in-process (`pybroker.testing.EmbeddedBroker`, what the
`kafka_broker` pytest fixture uses) against a `python -m pybroker serve` subprocess.

    python -m bench.fixture_start            # 20 starts of each, interleaved; prints a table
    python -m bench.fixture_start --runs 5

"Ready" is the first ApiVersions round trip answered on the listener, timed from the moment the
start is requested; each start uses a fresh empty temporary log dir and the fixture's settings
(`TEST_BROKER_DEFAULTS`). Stopping is timed too, from the request until the broker is gone.
The subprocess runs with the malloc tuning already in its environment, so it does not re-exec
itself (one interpreter start, the cheapest a subprocess fixture could be).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.stats import median, percentile
from compat_tests.brokers import api_versions_probe
from pybroker.__main__ import MALLOC_TUNING
from pybroker.testing import TEST_BROKER_DEFAULTS, EmbeddedBroker, free_port

READY_TIMEOUT_S = 60.0
REPO_ROOT = Path(__file__).resolve().parent.parent


def wait_ready(port: int, deadline: float, process: subprocess.Popen[bytes] | None = None) -> None:
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"broker exited with {process.returncode}")
        try:
            if api_versions_probe("127.0.0.1", port, timeout_s=1.0)[0] == 0:
                return
        except OSError:
            pass
        time.sleep(0.002)  # poll interval of the readiness probe
    raise RuntimeError(f"broker on port {port} not ready within {READY_TIMEOUT_S}s")


def in_process(log_dir: str) -> tuple[float, float]:
    t0 = time.perf_counter()
    broker = EmbeddedBroker(log_dir)
    broker.start()
    wait_ready(broker.port, time.monotonic() + READY_TIMEOUT_S)
    ready = time.perf_counter() - t0
    t1 = time.perf_counter()
    broker.stop()
    return ready, time.perf_counter() - t1


def subprocess_broker(log_dir: str) -> tuple[float, float]:
    port = free_port()
    argv = [sys.executable, "-m", "pybroker", "serve", "--log-level", "WARNING"]
    settings = {"listeners": f"PLAINTEXT://127.0.0.1:{port}", "log.dirs": log_dir, **TEST_BROKER_DEFAULTS}
    for key, value in settings.items():
        argv += ["--override", f"{key}={value}"]
    env = dict(os.environ, **MALLOC_TUNING)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    t0 = time.perf_counter()
    process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_ready(port, time.monotonic() + READY_TIMEOUT_S, process)
        ready = time.perf_counter() - t0
        t1 = time.perf_counter()
        process.send_signal(signal.SIGTERM)
        process.wait(READY_TIMEOUT_S)
        return ready, time.perf_counter() - t1
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fixture_start", description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20, help="starts of each kind (default 20)")
    args = parser.parse_args(argv)
    # The first start of each kind is reported apart: in-process it carries the broker's imports, which
    # a test session pays once (a session-scoped fixture starts one broker).
    results: dict[str, list[tuple[float, float]]] = {"in-process": [], "subprocess": []}
    first: dict[str, float] = {}
    kinds = (("in-process", in_process), ("subprocess", subprocess_broker))
    for run in range(args.runs + 1):
        for name, start in kinds:
            with tempfile.TemporaryDirectory(prefix="fixture-start-") as log_dir:
                measured = start(log_dir)
            if run > 0:
                results[name].append(measured)
            else:
                first[name] = measured[0]
    print(f"start-to-ready of a test broker, {args.runs} interleaved starts each (first start of each discarded)")
    print(f"{'kind':<12} {'ready p50 ms':>13} {'min':>7} {'max':>7} {'first start':>12} {'stop p50 ms':>12}")
    for name, rows in results.items():
        ready = sorted(r for r, _ in rows)
        stop = [s for _, s in rows]
        print(
            f"{name:<12} {median(ready) * 1000:>13.1f} {ready[0] * 1000:>7.1f} "
            f"{percentile(ready, 1.0) * 1000:>7.1f} {first[name] * 1000:>12.1f} {median(stop) * 1000:>12.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
