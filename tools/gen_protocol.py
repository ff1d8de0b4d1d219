#!/usr/bin/env python3
"""Generates ``pybroker/protocol/messages/*.py`` from Apache Kafka's JSON message definitions.

Usage: ``python tools/gen_protocol.py ../shared/kafka-protocol-4.3.1``

(the definitions shipped in ``kafka-clients`` 4.3.1, ``common/message/`` inside the jar)

Only facts are copied (names, types, version ranges, nullable/tagged/flexible versions, defaults, tags);
the specs' prose ("about" texts and comments) is not. Output is deterministic: the same input gives
byte-identical files, which a test checks.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from pybroker.protocol.schema import (  # noqa: E402
    INHERIT,
    PRIMITIVE_TYPES,
    FieldSpec,
    MessageSpec,
    VersionRange,
    parse_versions,
    snake_case,
)

OUTPUT_DIR = REPO_ROOT / "pybroker" / "protocol" / "messages"

# API family of each message (name without the Request/Response suffix). Anything unlisted that a
# broker serves goes to "other".
FAMILIES: dict[str, tuple[str, ...]] = {
    "produce": ("Produce",),
    "fetch": ("Fetch", "ShareFetch", "ShareAcknowledge"),
    "metadata": ("Metadata",),
    "offsets": ("ListOffsets", "OffsetForLeaderEpoch"),
    "groups": (
        "FindCoordinator",
        "JoinGroup",
        "SyncGroup",
        "Heartbeat",
        "LeaveGroup",
        "OffsetCommit",
        "OffsetFetch",
        "DescribeGroups",
        "ListGroups",
        "DeleteGroups",
        "OffsetDelete",
        "ConsumerGroupHeartbeat",
        "ConsumerGroupDescribe",
        "ConsumerProtocolSubscription",
        "ConsumerProtocolAssignment",
        "ShareGroupHeartbeat",
        "ShareGroupDescribe",
        "DescribeShareGroupOffsets",
        "AlterShareGroupOffsets",
        "DeleteShareGroupOffsets",
        "StreamsGroupHeartbeat",
        "StreamsGroupDescribe",
    ),
    "admin": (
        "CreateTopics",
        "DeleteTopics",
        "CreatePartitions",
        "DescribeConfigs",
        "AlterConfigs",
        "IncrementalAlterConfigs",
        "DeleteRecords",
        "DescribeCluster",
        "DescribeTopicPartitions",
        "DescribeLogDirs",
        "AlterReplicaLogDirs",
        "ElectLeaders",
        "DescribeAcls",
        "CreateAcls",
        "DeleteAcls",
        "DescribeClientQuotas",
        "AlterClientQuotas",
        "DescribeUserScramCredentials",
        "AlterUserScramCredentials",
        "DescribeProducers",
        "DescribeTransactions",
        "ListTransactions",
        "UpdateFeatures",
        "DescribeQuorum",
        "UnregisterBroker",
        "ListConfigResources",
        "AddRaftVoter",
        "RemoveRaftVoter",
    ),
    "producer": (
        "InitProducerId",
        "AddPartitionsToTxn",
        "AddOffsetsToTxn",
        "EndTxn",
        "TxnOffsetCommit",
        "WriteTxnMarkers",
    ),
    "api_versions": ("ApiVersions",),
    "headers": ("RequestHeader", "ResponseHeader"),
}

# "data" messages that are not requests but that the broker needs to read (the consumer protocol
# embedded in JoinGroup/SyncGroup metadata and assignments).
DATA_MESSAGES = ("ConsumerProtocolSubscription", "ConsumerProtocolAssignment")

FAMILY_OF = {base: family for family, bases in FAMILIES.items() for base in bases}


def strip_json_comments(text: str) -> str:
    """Removes ``//`` and ``/* */`` comments, leaving anything inside string literals alone."""
    out: list[str] = []
    index = 0
    length = len(text)
    in_string = False
    while index < length:
        char = text[index]
        if in_string:
            out.append(char)
            if char == "\\" and index + 1 < length:
                out.append(text[index + 1])
                index += 2
                continue
            if char == '"':
                in_string = False
            index += 1
        elif char == '"':
            in_string = True
            out.append(char)
            index += 1
        elif text.startswith("//", index):
            newline = text.find("\n", index)
            index = length if newline < 0 else newline
        elif text.startswith("/*", index):
            end = text.find("*/", index + 2)
            index = length if end < 0 else end + 2
        else:
            out.append(char)
            index += 1
    return "".join(out)


def load_json(path: Path) -> dict:
    return json.loads(strip_json_comments(path.read_text(encoding="utf-8")))


def base_name(message_name: str) -> str:
    for suffix in ("Request", "Response"):
        if message_name.endswith(suffix) and message_name not in ("RequestHeader", "ResponseHeader"):
            return message_name[: -len(suffix)]
    return message_name


def default_text(value: object) -> str | None:
    """The JSON default normalised to text (a few specs write ``-1`` or ``false`` unquoted)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def build_field(raw: dict, common_structs: dict[str, list[dict]]) -> FieldSpec:
    field_type: str = raw["type"]
    element = field_type[2:] if field_type.startswith("[]") else field_type
    nested_raw = raw.get("fields")
    if element not in PRIMITIVE_TYPES and nested_raw is None:
        if element not in common_structs:
            raise ValueError(
                f"field {raw['name']}: struct type {element} has no fields and is not a common struct"
            )
        nested_raw = common_structs[element]
    nested = tuple(build_field(child, common_structs) for child in (nested_raw or ()))
    flexible: VersionRange | str = INHERIT
    if "flexibleVersions" in raw:
        flexible = parse_versions(raw["flexibleVersions"])
    return FieldSpec(
        name=snake_case(raw["name"]),
        json_name=raw["name"],
        type=field_type,
        versions=parse_versions(raw.get("versions")),
        nullable_versions=parse_versions(raw.get("nullableVersions")),
        tagged_versions=parse_versions(raw.get("taggedVersions")),
        tag=raw.get("tag"),
        flexible_versions=flexible,
        default=default_text(raw.get("default")),
        ignorable=bool(raw.get("ignorable", False)),
        fields=nested,
    )


def build_message(raw: dict) -> MessageSpec:
    common = {struct["name"]: struct["fields"] for struct in raw.get("commonStructs", ())}
    return MessageSpec(
        name=raw["name"],
        api_key=raw.get("apiKey"),
        kind=raw["type"],
        valid_versions=parse_versions(raw["validVersions"]),
        flexible_versions=parse_versions(raw["flexibleVersions"]),
        fields=tuple(build_field(field, common) for field in raw["fields"]),
        listeners=tuple(raw.get("listeners", ())),
        latest_version_unstable=bool(raw.get("latestVersionUnstable", False)),
        deprecated_versions=parse_versions(raw.get("deprecatedVersions")),
    )


def served_by_broker(raw: dict) -> bool:
    return "broker" in raw.get("listeners", ())


def select_messages(spec_dir: Path) -> list[MessageSpec]:
    """Every request a broker serves, its response, both headers and the consumer-protocol data."""
    raws = {path.name[: -len(".json")]: load_json(path) for path in sorted(spec_dir.glob("*.json"))}
    wanted: list[dict] = []
    for name, raw in raws.items():
        if raw["type"] == "request" and served_by_broker(raw):
            wanted.append(raw)
            response_name = name[: -len("Request")] + "Response"
            if response_name not in raws:
                raise ValueError(f"{name} has no {response_name}.json")
            wanted.append(raws[response_name])
        elif raw["type"] == "header" or name in DATA_MESSAGES:
            wanted.append(raw)
    return [build_message(raw) for raw in wanted]


def constant_name(message_name: str) -> str:
    return snake_case(message_name).upper()


def render_versions(versions: VersionRange | str) -> str:
    assert isinstance(versions, VersionRange)
    if versions.is_empty:
        return "NO_VERSIONS"
    return f"V({versions.low}, {versions.high})"


def render_field(field: FieldSpec, indent: int) -> list[str]:
    pad = " " * indent
    args = [repr(field.name), repr(field.json_name), repr(field.type), render_versions(field.versions)]
    if not field.nullable_versions.is_empty:
        args.append(f"nullable_versions={render_versions(field.nullable_versions)}")
    if not field.tagged_versions.is_empty:
        args.append(f"tagged_versions={render_versions(field.tagged_versions)}")
    if field.tag is not None:
        args.append(f"tag={field.tag!r}")
    if field.flexible_versions != INHERIT:
        args.append(f"flexible_versions={render_versions(field.flexible_versions)}")
    if field.default is not None:
        args.append(f"default={field.default!r}")
    if field.ignorable:
        args.append("ignorable=True")
    if not field.fields:
        return [f"{pad}F({', '.join(args)}),"]
    lines = [f"{pad}F({', '.join(args)}, fields=("]
    for child in field.fields:
        lines.extend(render_field(child, indent + 4))
    lines.append(f"{pad})),")
    return lines


def render_message(message: MessageSpec) -> list[str]:
    lines = [f"{constant_name(message.name)} = MessageSpec("]
    lines.append(f"    name={message.name!r},")
    lines.append(f"    api_key={message.api_key!r},")
    lines.append(f"    kind={message.kind!r},")
    lines.append(f"    valid_versions={render_versions(message.valid_versions)},")
    lines.append(f"    flexible_versions={render_versions(message.flexible_versions)},")
    if message.listeners:
        lines.append(f"    listeners={message.listeners!r},")
    if message.latest_version_unstable:
        lines.append("    latest_version_unstable=True,")
    if not message.deprecated_versions.is_empty:
        lines.append(f"    deprecated_versions={render_versions(message.deprecated_versions)},")
    lines.append("    fields=(")
    for field in message.fields:
        lines.extend(render_field(field, 8))
    lines.append("    ),")
    lines.append(")")
    return lines


def render_module(family: str, messages: Iterable[MessageSpec]) -> str:
    messages = sorted(messages, key=lambda m: (m.api_key if m.api_key is not None else -1, m.kind, m.name))
    lines = [
        f'"""Kafka message declarations: the {family} family.',
        "",
        "Generated by tools/gen_protocol.py from Apache Kafka's JSON message definitions.",
        "Do not edit by hand: regenerate instead.",
        '"""',
        "",
        "from pybroker.protocol.schema import NO_VERSIONS, MessageSpec",
        "from pybroker.protocol.schema import FieldSpec as F",
        "from pybroker.protocol.schema import VersionRange as V",
        "",
    ]
    names = []
    for message in messages:
        lines.append("")
        lines.extend(render_message(message))
        names.append(constant_name(message.name))
    lines.append("")
    lines.append(f"MESSAGES = ({', '.join(names)},)")
    return "\n".join(lines) + "\n"


def render_all(spec_dir: Path) -> dict[str, str]:
    """File name → contents of every generated module (including the package ``__init__``)."""
    by_family: dict[str, list[MessageSpec]] = {}
    for message in select_messages(spec_dir):
        family = FAMILY_OF.get(base_name(message.name), "other")
        by_family.setdefault(family, []).append(message)
    files = {f"{family}.py": render_module(family, msgs) for family, msgs in sorted(by_family.items())}
    families = sorted(by_family)
    init_lines = [
        '"""Generated Kafka message declarations, one module per API family (see tools/gen_protocol.py)."""',
        "",
        f"FAMILIES = {tuple(families)!r}",
    ]
    files["__init__.py"] = "\n".join(init_lines) + "\n"
    files["api_keys.py"] = render_api_keys(by_family.values())
    return files


def render_api_keys(families: Iterable[list[MessageSpec]]) -> str:
    """``ApiKey``: an IntEnum of every API a broker serves, named as Kafka's ApiKeys enum names them."""
    requests = sorted(
        (m for msgs in families for m in msgs if m.kind == "request" and m.api_key is not None),
        key=lambda m: m.api_key,  # type: ignore[arg-type, return-value]
    )
    lines = [
        '"""Kafka\'s API keys, one per request a broker serves.',
        "",
        "Generated by tools/gen_protocol.py from Apache Kafka's JSON message definitions.",
        "Do not edit by hand: regenerate instead.",
        '"""',
        "",
        "from enum import IntEnum",
        "",
        "",
        "class ApiKey(IntEnum):",
    ]
    lines.extend(f"    {constant_name(base_name(m.name))} = {m.api_key}" for m in requests)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec_dir", type=Path, help="directory of Kafka's *Request.json/*Response.json files")
    parser.add_argument("--output", type=Path, default=OUTPUT_DIR, help="where to write the modules")
    args = parser.parse_args(argv)
    if not args.spec_dir.is_dir():
        parser.error(f"{args.spec_dir} is not a directory")
    args.output.mkdir(parents=True, exist_ok=True)
    for file_name, text in render_all(args.spec_dir).items():
        (args.output / file_name).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
