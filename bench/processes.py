"""Child processes of a benchmark (load tools, consumers), ended by pid whatever happens.

Every child started here is remembered until it exits; ``stop_all`` ends the ones still running
(SIGTERM, then SIGKILL).  ``sigterm_as_interrupt`` turns SIGTERM into KeyboardInterrupt, so the
``finally`` blocks that stop brokers and delete temp dirs also run when the benchmark is killed.
"""

from __future__ import annotations

import logging
import signal
import subprocess
from collections.abc import Sequence

logger = logging.getLogger(__name__)

_running: dict[int, subprocess.Popen[str]] = {}


class ToolError(RuntimeError):
    """A load tool exited non-zero or timed out; the message carries its output tail."""


def start(argv: Sequence[str], env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    _running[process.pid] = process
    return process


def stop(process: subprocess.Popen[str], grace_s: float = 5) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(grace_s)
        except subprocess.TimeoutExpired:
            logger.warning("pid %d ignored SIGTERM; killing", process.pid)
            process.kill()
            process.wait(grace_s)
    _running.pop(process.pid, None)


def wait_output(process: subprocess.Popen[str], timeout_s: float, what: str) -> str:
    """Wait for a started child and return its output; stop it if waiting fails or is interrupted."""
    try:
        output, _ = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        stop(process)
        raise ToolError(f"{what} did not finish within {timeout_s:.0f} s") from exc
    except BaseException:
        stop(process)
        raise
    _running.pop(process.pid, None)
    if process.returncode != 0:
        tail = "\n".join(output.splitlines()[-20:])
        raise ToolError(f"{what} exited with code {process.returncode}:\n{tail}")
    return output


def run(argv: Sequence[str], timeout_s: float, what: str, env: dict[str, str] | None = None) -> str:
    return wait_output(start(argv, env), timeout_s, what)


def stop_all() -> None:
    for process in list(_running.values()):
        stop(process)


def sigterm_as_interrupt() -> None:
    def interrupt(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupt)
