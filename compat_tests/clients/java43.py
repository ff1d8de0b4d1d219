"""The compat Java program built against kafka-clients 4.3.1 (``mvn -Pkafka43 package``), Apache Kafka
4.3.1's own client: the share-group scenario runs its ``KafkaShareConsumer`` (``share-consume``)."""

from __future__ import annotations

from .java import JAVA_PROJECT, JVM_OPTIONS, JavaBuild, ensure_jar

KAFKA43_BUILD = JavaBuild(
    JAVA_PROJECT / "target" / "compat-client-43.jar",
    JAVA_PROJECT / "target" / "compat-client-43.jsa",
    ("-Pkafka43", "package", "-DskipTests"),
)


def java43_command(command: str, *args: str) -> list[str]:
    """The argv running the 4.3.1 compat program's ``command`` (the jar is built first if stale)."""
    jar = ensure_jar(KAFKA43_BUILD)
    cds = [f"-XX:SharedArchiveFile={KAFKA43_BUILD.cds_archive}"] if KAFKA43_BUILD.cds_archive.exists() else []
    return ["java", *JVM_OPTIONS, *cds, "-jar", str(jar), command, *args]
