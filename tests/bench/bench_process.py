"""Run a benchmark module the way a user does (``python -m bench.X``), on this checkout's code."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def run_bench(module: str, *args: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
    """The finished process (stdout/stderr captured); an assertion with its output tail if it failed.

    The benchmark runs in its own process group: on a timeout the whole group (the benchmark and the
    brokers, ZooKeeper and loaders it started) gets SIGTERM, then SIGKILL, so nothing outlives the test."""
    path = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    argv = [sys.executable, "-m", module, *args]
    process = subprocess.Popen(
        argv, cwd=REPO_ROOT, env=dict(os.environ, PYTHONPATH=path), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except BaseException:
        _end_group(process)
        raise
    assert process.returncode == 0, stdout[-3000:] + stderr[-3000:]
    return subprocess.CompletedProcess(argv, process.returncode, stdout, stderr)


def _end_group(process: subprocess.Popen[str]) -> None:
    for sig, grace_s in ((signal.SIGTERM, 20), (signal.SIGKILL, 5)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.communicate(timeout=grace_s)
            return
        except subprocess.TimeoutExpired:
            continue
