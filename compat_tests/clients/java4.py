"""Java kafka-clients 4.x adapter: the same ``compat_tests/java`` program, built against 4.4.0.

``mvn -Pkafka4 package`` compiles the unchanged sources against kafka-clients 4.4.0 (the newest 4.x
on Maven Central) in ``target/kafka4`` and writes ``target/compat-client-4.jar``; everything else —
command line, JSON lines, error objects — is exactly ``JavaClient``'s.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from compat_tests.reference.maven import build_lock, run_maven

from .java import JAVA_PROJECT, JVM_OPTIONS, PROCESS_SLACK_S, JavaClient, JavaClientError

logger = logging.getLogger(__name__)

JAR4 = JAVA_PROJECT / "target" / "compat-client-4.jar"
CDS_ARCHIVE4 = JAVA_PROJECT / "target" / "compat-client-4.jsa"


def _stale(jar: Path) -> bool:
    if not jar.exists():
        return True
    jar_mtime = jar.stat().st_mtime
    sources = [JAVA_PROJECT / "pom.xml", *(JAVA_PROJECT / "src").rglob("*")]
    return any(path.is_file() and path.stat().st_mtime > jar_mtime for path in sources)


def ensure_jar4() -> Path:
    """Build ``target/compat-client-4.jar`` (and its CDS archive) if missing or stale."""
    # The same lock as the 3.9 build: both read the sources and the local Maven repository.
    with build_lock("compat-client"):
        if _stale(JAR4):
            logger.info("building %s", JAR4)
            run_maven(JAVA_PROJECT, ["-Pkafka4", "package", "-DskipTests"])
            if not JAR4.exists():
                raise RuntimeError(f"maven finished but {JAR4} is missing")
        if not CDS_ARCHIVE4.exists() or CDS_ARCHIVE4.stat().st_mtime < JAR4.stat().st_mtime:
            _build_cds_archive()
    return JAR4


def _build_cds_archive() -> None:
    """Only a speed-up: on failure the client still runs, just slower to start."""
    CDS_ARCHIVE4.unlink(missing_ok=True)
    argv = ["java", *JVM_OPTIONS, f"-XX:ArchiveClassesAtExit={CDS_ARCHIVE4}", "-jar", str(JAR4)]
    argv += ["warmup", "--bootstrap", "127.0.0.1:9"]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if result.returncode != 0 or not CDS_ARCHIVE4.exists():
        logger.warning(
            "could not build the 4.x CDS archive (exit %s): %s", result.returncode, result.stderr[-2000:]
        )
        CDS_ARCHIVE4.unlink(missing_ok=True)


class Java4Client(JavaClient):
    """The stock Java client, kafka-clients 4.4.0 (KIP-896: no pre-2.1 protocol versions)."""

    name = "java4"

    def _run(
        self,
        command: str,
        bootstrap: str,
        options: list[str],
        *,
        stdin: str = "",
        timeout_s: float | None = None,
    ) -> list[dict[str, Any]]:
        # Mirrors JavaClient._run with the 4.x jar; kept separate so java.py stays untouched.
        java = shutil.which(self.java) or self.java
        client_timeout_s = timeout_s if timeout_s is not None else self.timeout_s
        jar = ensure_jar4()
        cds = [f"-XX:SharedArchiveFile={CDS_ARCHIVE4}"] if CDS_ARCHIVE4.exists() else []
        argv = [java, *JVM_OPTIONS, *cds, "-jar", str(jar), command, "--bootstrap", bootstrap]
        argv += ["--timeout-ms", str(int(client_timeout_s * 1000)), *options]
        for name, value in self.properties.items():
            argv += ["--property", f"{name}={value}"]
        env = dict(os.environ)
        if level := os.environ.get("COMPAT_CLIENT_LOG_LEVEL"):
            env["JAVA_TOOL_OPTIONS"] = (
                f"{env.get('JAVA_TOOL_OPTIONS', '')} -Dorg.slf4j.simpleLogger.defaultLogLevel={level}".strip()
            )
        result = subprocess.run(
            argv,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=client_timeout_s + PROCESS_SLACK_S,
            env=env,
        )
        lines = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
        if result.returncode != 0:
            error = lines[-1] if lines and "error" in lines[-1] else None
            if error is None:
                raise RuntimeError(
                    f"java4 {command} exited {result.returncode} without an error object:\n{result.stderr[-4000:]}"
                )
            raise JavaClientError(
                error.get("kafka_error", "UNKNOWN"),
                error["error"],
                error.get("message") or "",
                error.get("error_class", ""),
                result.returncode,
            )
        if result.stderr.strip():
            logger.debug("java4 %s stderr:\n%s", command, result.stderr[-4000:])
        return lines
