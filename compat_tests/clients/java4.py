"""Java kafka-clients 4.x adapter: the same ``compat_tests/java`` program, built against 4.4.0.

``mvn -Pkafka4 package`` compiles the unchanged sources against kafka-clients 4.4.0 (the newest 4.x
on Maven Central) in ``target/kafka4`` and writes ``target/compat-client-4.jar``; everything else —
command line, JSON lines, error objects — is exactly ``JavaClient``'s.
"""

from __future__ import annotations

from .java import JAVA_PROJECT, JavaBuild, JavaClient

KAFKA4_BUILD = JavaBuild(
    JAVA_PROJECT / "target" / "compat-client-4.jar",
    JAVA_PROJECT / "target" / "compat-client-4.jsa",
    ("-Pkafka4", "package", "-DskipTests"),
)


class Java4Client(JavaClient):
    """The stock Java client, kafka-clients 4.4.0 (KIP-896: no pre-2.1 protocol versions)."""

    name = "java4"
    build = KAFKA4_BUILD
