"""Run a benchmark module the way a user does (``python -m bench.X``), on this checkout's code."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def run_bench(module: str, *args: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
    """The finished process (stdout/stderr captured); an assertion with its output tail if it failed."""
    path = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    argv = [sys.executable, "-m", module, *args]
    result = subprocess.run(
        argv, cwd=REPO_ROOT, env=dict(os.environ, PYTHONPATH=path), capture_output=True, text=True, timeout=timeout_s
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result
