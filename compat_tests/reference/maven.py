"""Maven invocations shared by the Java compat client and the Apache Kafka launcher.

Everything Maven resolves lands in one project-local repository (``.cache/m2`` at the repo root,
git-ignored) so a checkout is self-contained and CI can cache a single directory.  Set
``PYBROKER_MAVEN_REPO`` to point at another local repository (e.g. ``~/.m2/repository``).
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

logger = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]
CACHE_DIR = REPO_ROOT / ".cache"


class MavenError(RuntimeError):
    """Maven failed; the message carries the tail of its output."""


def local_repository() -> Path:
    override = os.environ.get("PYBROKER_MAVEN_REPO")
    return Path(override).expanduser() if override else CACHE_DIR / "m2"


def run_maven(project_dir: Path, goals: Sequence[str], *, timeout_s: float = 1200) -> None:
    """Run ``mvn`` offline first (fast when everything is resolved), then online if that fails."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise MavenError("mvn is not installed (scripts/install-deps.sh installs it)")
    base = [mvn, "-B", "-q", "-Dstyle.color=never", f"-Dmaven.repo.local={local_repository()}", *goals]
    offline = subprocess.run(
        [*base, "-o"], cwd=project_dir, capture_output=True, text=True, timeout=timeout_s
    )
    if offline.returncode == 0:
        return
    logger.info("offline maven run in %s failed; resolving from Maven Central", project_dir)
    online = subprocess.run(base, cwd=project_dir, capture_output=True, text=True, timeout=timeout_s)
    if online.returncode != 0:
        tail = "\n".join((online.stdout + online.stderr).splitlines()[-30:])
        raise MavenError(f"mvn {' '.join(goals)} failed in {project_dir}:\n{tail}")


@contextmanager
def build_lock(name: str) -> Iterator[None]:
    """Serialise builds across processes (parallel test workers must not run Maven twice at once)."""
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    with open(CACHE_DIR / f"{name}.lock", "w") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock_file, fcntl.LOCK_UN)
