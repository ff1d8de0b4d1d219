"""Apache Kafka 4.3.1's own command-line tools, run from the Maven Central jars against any broker.

Where each tool's main class lives in 4.3.1:
- org.apache.kafka:kafka-tools — TopicCommand, ConsumerGroupCommand, ShareGroupCommand, StreamsGroupCommand, ConsoleProducer, ConsoleConsumer,
  GetOffsetShell, DeleteRecordsCommand, LogDirsCommand, DumpLogSegments, AclCommand, DelegationTokenCommand, FeatureCommand,
  ReassignPartitionsCommand (resolved by
  bench/java/pom.xml);
- org.apache.kafka:kafka_2.13 (the broker's core jar) — kafka.admin.ConfigCommand (resolved with the
  reference broker, compat_tests/reference/pom.xml).
The shell scripts of a Kafka distribution (kafka-topics.sh, ...) are one-line wrappers around these.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

TOOLS: dict[str, tuple[str, str]] = {
    # script name: (classpath, main class)
    "kafka-topics": ("tools", "org.apache.kafka.tools.TopicCommand"),
    "kafka-consumer-groups": ("tools", "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"),
    "kafka-streams-groups": ("tools", "org.apache.kafka.tools.streams.StreamsGroupCommand"),
    "kafka-share-groups": ("tools", "org.apache.kafka.tools.consumer.group.ShareGroupCommand"),
    "kafka-console-producer": ("tools", "org.apache.kafka.tools.ConsoleProducer"),
    "kafka-console-consumer": ("tools", "org.apache.kafka.tools.consumer.ConsoleConsumer"),
    "kafka-get-offsets": ("tools", "org.apache.kafka.tools.GetOffsetShell"),
    "kafka-delete-records": ("tools", "org.apache.kafka.tools.DeleteRecordsCommand"),
    "kafka-log-dirs": ("tools", "org.apache.kafka.tools.LogDirsCommand"),
    "kafka-dump-log": ("tools", "org.apache.kafka.tools.DumpLogSegments"),
    "kafka-acls": ("tools", "org.apache.kafka.tools.AclCommand"),
    "kafka-delegation-tokens": ("tools", "org.apache.kafka.tools.DelegationTokenCommand"),
    "kafka-features": ("tools", "org.apache.kafka.tools.FeatureCommand"),
    "kafka-reassign-partitions": ("tools", "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"),
    "kafka-configs": ("core", "kafka.admin.ConfigCommand"),
}
JVM_OPTIONS = [
    "-Xms64m",
    "-Xmx256m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Djava.awt.headless=true",
]


@dataclass(frozen=True)
class ToolResult:
    command: list[str]
    returncode: int
    stdout: str
    stderr: str

    def check(self) -> ToolResult:
        if self.returncode != 0:
            raise AssertionError(
                f"{' '.join(self.command[-8:])} exited {self.returncode}\nstdout:\n{self.stdout[-3000:]}\n"
                f"stderr:\n{self.stderr[-3000:]}"
            )
        return self


def classpath(which: str) -> str:
    if which == "core":
        from compat_tests.reference.apache_kafka import install

        return install()
    from bench.kafka_tools import install as install_tools

    return install_tools()


def run_tool(tool: str, *args: str, input_text: str | None = None, timeout_s: float = 120) -> ToolResult:
    """Run one Kafka tool to completion; the caller checks the exit status (``.check()``)."""
    which, main_class = TOOLS[tool]
    command = ["java", *JVM_OPTIONS, "-cp", classpath(which), main_class, *args]
    done = subprocess.run(
        command,
        input=input_text,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    return ToolResult(command, done.returncode, done.stdout, done.stderr)


def parse_table(text: str, first_header: str) -> list[dict[str, str]]:
    """Rows of a whitespace-aligned table whose header line starts with ``first_header``."""
    lines = text.splitlines()
    for index, line in enumerate(lines):
        if line.split()[:1] == [first_header]:
            headers = line.split()
            rows = []
            for row in lines[index + 1 :]:
                cells = row.split()
                if len(cells) != len(headers):
                    break
                rows.append(dict(zip(headers, cells, strict=True)))
            return rows
    raise AssertionError(f"no table with header {first_header} in:\n{text}")
