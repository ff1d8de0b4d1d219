"""The small things an operator meets first, through real processes: a log dir already in use, the
first start on an empty dir, `pybroker --version`, and scripts/install-deps.sh's output."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pybroker
from compat_tests.brokers import PyBroker, free_port

REPO = Path(__file__).resolve().parents[2]


def snapshot(directory: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(directory)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def test_second_broker_on_a_dir_in_use_fails_in_one_line_before_any_work(tmp_path: Path) -> None:
    first = PyBroker(tmp_path / "first")
    first.start()
    try:
        before = snapshot(first.data_dir)
        done = subprocess.run(
            [
                sys.executable, "-m", "pybroker", "serve",
                "--override", f"listeners=PLAINTEXT://127.0.0.1:{free_port()}",
                "--override", f"log.dirs={first.data_dir}",
            ],
            capture_output=True, text=True, timeout=60, cwd=tmp_path,
        )  # fmt: skip
        assert done.returncode == 1, done.stderr
        lines = done.stderr.strip().splitlines()
        errors = [line for line in lines if " ERROR " in line]
        assert len(errors) == 1, done.stderr
        assert f"Failed to acquire lock on file .lock in {first.data_dir}" in errors[0]
        assert "Traceback" not in done.stderr
        # Nothing but the start-up banner before the error: no formatting, no __consumer_offsets.
        assert len(lines) == 2 and "starting pybroker" in lines[0], done.stderr
        assert snapshot(first.data_dir) == before
    finally:
        assert first.stop() == 0


def test_first_start_on_an_empty_dir_is_not_an_unclean_shutdown(tmp_path: Path) -> None:
    broker = PyBroker(tmp_path)
    broker.start()
    broker.kill9()
    first = broker.log_text()
    assert "(new, no logs yet)" in first and "unclean" not in first, first
    # The same words do appear when there was one: after kill -9 the next start recovers.
    broker.start()
    assert broker.stop() == 0
    assert "(unclean shutdown)" in broker.log_text()[len(first) :]
    seen = len(broker.log_text())
    broker.start()
    assert broker.stop() == 0
    assert "(clean shutdown)" in broker.log_text()[seen:]


def test_version() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pybroker", "--version"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout == f"pybroker {pybroker.__version__}\n"
    assert pybroker.__version__.count(".") == 2


def install_deps(*steps: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(REPO / "scripts" / "install-deps.sh"), *steps],
        capture_output=True, text=True, timeout=600, env=dict(os.environ, **(env or {})),
    )  # fmt: skip


def test_install_deps_prints_one_line_per_step() -> None:
    # The reference Apache Kafka jars are resolved by the time tests run, so this step is quick.
    done = install_deps("apache-kafka")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr == ""
    lines = done.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("[install-deps] apache-kafka: "), done.stdout
    assert "\x1b" not in done.stdout


def test_install_deps_shows_a_failed_steps_output_without_colour_codes(tmp_path: Path) -> None:
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\nprintf 'resolving\\n\\033[1;31m[ERROR]\\033[m repository not reachable\\n'\nexit 3\n")
    fake.chmod(0o755)
    done = install_deps("apache-kafka", "spark", env={"PYTHON": str(fake)})
    assert done.returncode == 3
    assert re.fullmatch(r"\[install-deps\] step apache-kafka FAILED \(exit 3 after \d+s\); its output:\n", done.stdout)
    assert done.stderr == "resolving\n[ERROR] repository not reachable\n"


def test_install_deps_names_the_steps_for_an_unknown_one() -> None:
    done = install_deps("everything")
    assert done.returncode == 2
    assert "unknown step: everything" in done.stdout and "java-client" in done.stdout
