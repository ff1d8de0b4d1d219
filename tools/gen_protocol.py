#!/usr/bin/env python3
"""Generates ``pybroker/protocol/messages/*.py`` from Apache Kafka's JSON message definitions.

Usage: ``python tools/gen_protocol.py ../shared/kafka-protocol-4.3.1``

Also writes ``pybroker/protocol/typed/*.py``: a ``TypedDict`` for every message and nested struct, for
the type checker (see that package's docstring).

(the definitions shipped in ``kafka-clients`` 4.3.1, ``common/message/`` inside the jar)

Only facts are copied (names, types, version ranges, nullable/tagged/flexible versions, defaults, tags);
the specs' prose ("about" texts and comments) is not. Output is deterministic: the same input gives
byte-identical files, which a test checks.
"""

from __future__ import annotations

import argparse
import json
import keyword
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
TYPED_OUTPUT_DIR = REPO_ROOT / "pybroker" / "protocol" / "typed"

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


# --- TypedDicts -------------------------------------------------------------------------------------

# Python type of each primitive, as the codec decodes it and accepts it for encoding. ``records`` is
# ``Any``: it decodes to a memoryview and encodes from bytes, a memoryview or a storage file range
# (which the protocol layer does not know by name).
PYTHON_TYPES = {
    "bool": "bool",
    "int8": "int",
    "int16": "int",
    "int32": "int",
    "int64": "int",
    "uint16": "int",
    "uint32": "int",
    "float64": "float",
    "string": "str",
    "bytes": "bytes",
    "records": "Any",
    "uuid": "UUID",
}

TYPED_PACKAGE_DOC = '''"""``TypedDict`` views of the Kafka messages, one module per API family, for the type checker.

Generated by tools/gen_protocol.py from the same JSON definitions as ``pybroker.protocol.messages``;
do not edit by hand. The codec still works on plain dicts: these classes cost nothing at run time
(import them under ``if TYPE_CHECKING``), they let mypy reject a misspelt key or a wrongly typed value
in a handler's request or response dict.

Every class is ``total=False`` (every key may be absent), deliberately:

- a handler serves a range of versions with one dict, and a field exists only in some of them; the
  codec leaves out what the version lacks and fills every absent field with the spec's default, so
  an absent key is always a valid message. Required keys would force each handler to spell out
  every default (or cast) to build a response for an old version;
- mypy does not reject ``message["key"]`` on a non-required key, so reading a decoded request (which
  holds every field of its version) needs no casts either.

What is checked is what goes wrong silently at run time: an unknown key (the codec, outside strict
mode, would drop it and send the field's default) and a value of the wrong type.

A struct is named as Kafka's JSON names it (``MetadataResponsePartition``). Where two messages of a
family declare different structs of one name, each is prefixed with its message's name (the
``TopicPartitions`` of ConsumerGroupHeartbeatRequest is ``ConsumerGroupHeartbeatRequestTopicPartitions``).
Arrays are ``Sequence``: the codec encodes lists and tuples alike (it decodes lists). A field nullable
in any version admits ``None``; ``records`` is ``Any`` (a memoryview when decoded, bytes or a storage
file range when encoded). The API keys are ``pybroker.protocol.messages.api_keys.ApiKey``.
"""
'''


def _struct_signature(field: FieldSpec) -> tuple:
    return tuple((child.name, child.type, child.nullable_versions.is_empty, _struct_signature(child)) for child in field.fields)


def _collect_structs(
    message: MessageSpec, fields: tuple[FieldSpec, ...], out: dict[str, tuple[tuple, FieldSpec]]
) -> None:
    """Struct type name → (signature, a field declaring it), for one message (common structs once)."""
    for field in fields:
        if not field.is_struct:
            continue
        signature = _struct_signature(field)
        seen = out.get(field.element_type)
        if seen is not None and seen[0] != signature:
            raise ValueError(f"{message.name}: struct {field.element_type} declared twice differently")
        out.setdefault(field.element_type, (signature, field))
        _collect_structs(message, field.fields, out)


def _typed_names(messages: list[MessageSpec]) -> dict[tuple[str, str], str]:
    """(message name, struct type) → class name: the struct's own name unless another message of the
    module declares a different struct of that name (then both are prefixed with their message)."""
    per_message = {}
    for message in messages:
        structs: dict[str, tuple[tuple, FieldSpec]] = {}
        _collect_structs(message, message.fields, structs)
        per_message[message.name] = structs
    signatures: dict[str, set[tuple]] = {}
    for structs in per_message.values():
        for struct_name, (signature, _) in structs.items():
            signatures.setdefault(struct_name, set()).add(signature)
    message_names = {message.name for message in messages}
    names: dict[tuple[str, str], str] = {}
    for message_name, structs in per_message.items():
        for struct_name in structs:
            clash = len(signatures[struct_name]) > 1 or struct_name in message_names
            names[(message_name, struct_name)] = message_name + struct_name if clash else struct_name
    taken: dict[str, tuple] = {}
    for (message_name, struct_name), class_name in names.items():
        signature = per_message[message_name][struct_name][0]
        if taken.setdefault(class_name, signature) != signature or class_name in message_names:
            raise ValueError(f"TypedDict name {class_name} is ambiguous")
    return names


def _python_type(field: FieldSpec, message: MessageSpec, names: dict[tuple[str, str], str]) -> str:
    element = field.element_type
    text = names[(message.name, element)] if field.is_struct else PYTHON_TYPES[element]
    if field.is_array:
        text = f"Sequence[{text}]"
    if not field.nullable_versions.is_empty and text != "Any":  # Any admits None already
        text += " | None"
    return text


def _render_typed_dict(
    class_name: str, fields: tuple[FieldSpec, ...], message: MessageSpec, names: dict[tuple[str, str], str]
) -> list[str]:
    lines = [f"class {class_name}(TypedDict, total=False):"]
    for field in fields:
        if keyword.iskeyword(field.name):
            raise ValueError(f"{message.name}.{field.json_name} is a Python keyword")
        lines.append(f"    {field.name}: {_python_type(field, message, names)}")
    if not fields:
        lines.append("    pass")
    return lines


def render_typed_module(family: str, messages: Iterable[MessageSpec]) -> str:
    messages = sorted(messages, key=lambda m: (m.api_key if m.api_key is not None else -1, m.kind, m.name))
    names = _typed_names(messages)
    lines = [
        f'"""TypedDicts of the {family} family\'s messages (see ``pybroker.protocol.typed``).',
        "",
        "Generated by tools/gen_protocol.py from Apache Kafka's JSON message definitions.",
        "Do not edit by hand: regenerate instead.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "#IMPORTS#",
        "__all__ = [",
    ]
    body: list[str] = []
    exported: list[str] = []
    written: set[str] = set()

    def emit(class_name: str, fields: tuple[FieldSpec, ...], message: MessageSpec) -> None:
        # Nested structs first, so that every name is defined before it is used.
        for field in fields:
            if field.is_struct:
                nested = names[(message.name, field.element_type)]
                if nested not in written:
                    written.add(nested)
                    emit(nested, field.fields, message)
        body.append("")
        body.append("")
        body.extend(_render_typed_dict(class_name, fields, message, names))
        exported.append(class_name)

    for message in messages:
        written.add(message.name)
        emit(message.name, message.fields, message)
    lines.extend(f"    {name!r}," for name in sorted(exported))
    lines.append("]")
    lines.extend(body)
    text = "\n".join(lines) + "\n"
    # Import only what the module uses (it is checked by ruff like any other).
    imports = []
    if "Sequence[" in text:
        imports.append("from collections.abc import Sequence")
    imports.append("from typing import Any, TypedDict" if ": Any" in text or "[Any]" in text else "from typing import TypedDict")
    if "UUID" in text:
        imports.append("from uuid import UUID")
    return text.replace("#IMPORTS#\n", "\n".join(imports) + "\n\n")


def render_typed(spec_dir: Path) -> dict[str, str]:
    """File name → contents of every generated TypedDict module (including the package ``__init__``)."""
    by_family: dict[str, list[MessageSpec]] = {}
    for message in select_messages(spec_dir):
        family = FAMILY_OF.get(base_name(message.name), "other")
        by_family.setdefault(family, []).append(message)
    files = {f"{family}.py": render_typed_module(family, msgs) for family, msgs in sorted(by_family.items())}
    files["__init__.py"] = TYPED_PACKAGE_DOC
    return files

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec_dir", type=Path, help="directory of Kafka's *Request.json/*Response.json files")
    parser.add_argument("--output", type=Path, default=OUTPUT_DIR, help="where to write the modules")
    parser.add_argument(
        "--typed-output", type=Path, default=TYPED_OUTPUT_DIR, help="where to write the TypedDict modules"
    )
    args = parser.parse_args(argv)
    if not args.spec_dir.is_dir():
        parser.error(f"{args.spec_dir} is not a directory")
    args.output.mkdir(parents=True, exist_ok=True)
    for file_name, text in render_all(args.spec_dir).items():
        (args.output / file_name).write_text(text, encoding="utf-8")
    args.typed_output.mkdir(parents=True, exist_ok=True)
    for file_name, text in render_typed(args.spec_dir).items():
        (args.typed_output / file_name).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
