"""The checked-in declarations are exactly what the generator makes from Kafka's JSON, and agree with
the JSON field by field at every version (read here independently of the generator's conversion)."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

from pybroker.protocol.api import ALL_MESSAGES, REQUESTS, RESPONSES
from pybroker.protocol.schema import INHERIT, FieldSpec, MessageSpec

REPO_ROOT = Path(__file__).resolve().parents[2]
MESSAGES_DIR = REPO_ROOT / "pybroker" / "protocol" / "messages"
TYPED_DIR = REPO_ROOT / "pybroker" / "protocol" / "typed"


def _load_generator():
    spec = importlib.util.spec_from_file_location("gen_protocol", REPO_ROOT / "tools" / "gen_protocol.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_protocol"] = module
    spec.loader.exec_module(module)
    return module


gen_protocol = _load_generator()


@pytest.mark.parametrize(
    ("render", "directory"),
    [(gen_protocol.render_all, MESSAGES_DIR), (gen_protocol.render_typed, TYPED_DIR)],
    ids=["messages", "typed"],
)
def test_regenerating_changes_nothing(spec_dir: Path, render, directory: Path) -> None:
    rendered = render(spec_dir)
    on_disk = {path.name: path.read_text(encoding="utf-8") for path in directory.glob("*.py")}
    assert sorted(rendered) == sorted(on_disk)
    for name, text in rendered.items():
        assert text == on_disk[name], (
            f"{directory.name}/{name} is stale: run python tools/gen_protocol.py ../shared/kafka-protocol-4.3.1"
        )


def test_generated_files_carry_no_prose() -> None:
    for path in [*MESSAGES_DIR.glob("*.py"), *TYPED_DIR.glob("*.py")]:
        text = path.read_text(encoding="utf-8")
        assert "about" not in text.lower().replace("about_", "")
        assert "/work" not in text and "/shared/" not in text.replace("../shared/", "")


def test_comment_stripping_leaves_strings_alone() -> None:
    text = '{"a": "http://x//y", // comment "b"\n "c": "/* not */", /* block\n */ "d": 1}'
    assert gen_protocol.strip_json_comments(text) == '{"a": "http://x//y", \n "c": "/* not */",  "d": 1}'


# --- an independent reading of the JSON ------------------------------------------------------------


def _in(text: str | None, version: int) -> bool:
    if text is None or text == "none":
        return False
    if text.endswith("+"):
        return version >= int(text[:-1])
    if "-" in text:
        low, high = text.split("-")
        return int(low) <= version <= int(high)
    return version == int(text)


def _snake(name: str) -> str:
    name = name.replace("KRaft", "Kraft")
    name = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name)
    return name.lower()


def _json_view(
    fields: list[dict], common: dict[str, list[dict]], version: int, flexible: bool, path: str
) -> list:
    rows = []
    for field in fields:
        if not _in(field.get("versions"), version):
            continue
        field_type = field["type"]
        element = field_type[2:] if field_type.startswith("[]") else field_type
        tagged = flexible and _in(field.get("taggedVersions"), version)
        field_flexible = (
            flexible if "flexibleVersions" not in field else _in(field["flexibleVersions"], version)
        )
        default = field.get("default")
        if isinstance(default, bool):
            default = "true" if default else "false"
        elif default is not None:
            default = str(default)
        rows.append(
            (
                f"{path}.{field['name']}",
                _snake(field["name"]),
                field_type,
                _in(field.get("nullableVersions"), version),
                tagged,
                field.get("tag") if tagged else None,
                field_flexible,
                default,
                bool(field.get("ignorable", False)),
            )
        )
        nested = field.get("fields")
        if nested is None and element in common:
            nested = common[element]
        if nested:
            rows.extend(_json_view(nested, common, version, flexible, f"{path}.{field['name']}"))
    return rows


def _spec_view(fields: tuple[FieldSpec, ...], version: int, flexible: bool, path: str) -> list:
    rows = []
    for field in fields:
        if version not in field.versions:
            continue
        tagged = flexible and version in field.tagged_versions
        field_flexible = (
            flexible if field.flexible_versions == INHERIT else version in field.flexible_versions
        )
        rows.append(
            (
                f"{path}.{field.json_name}",
                field.name,
                field.type,
                version in field.nullable_versions,
                tagged,
                field.tag if tagged else None,
                field_flexible,
                field.default,
                field.ignorable,
            )
        )
        rows.extend(_spec_view(field.fields, version, flexible, f"{path}.{field.json_name}"))
    return rows


def _json_messages(spec_dir: Path) -> dict[str, dict]:
    return {path.stem: gen_protocol.load_json(path) for path in sorted(spec_dir.glob("*.json"))}


def test_every_broker_request_is_declared(spec_dir: Path) -> None:
    raws = _json_messages(spec_dir)
    for name, raw in raws.items():
        if raw["type"] == "request" and "broker" in raw.get("listeners", ()):
            assert raw["apiKey"] in REQUESTS, name
            assert REQUESTS[raw["apiKey"]].name == name
            assert RESPONSES[raw["apiKey"]].name == name[: -len("Request")] + "Response"


def test_declarations_match_the_json_at_every_version(spec_dir: Path) -> None:
    raws = _json_messages(spec_dir)
    checked = 0
    for message in ALL_MESSAGES:
        raw = raws[message.name]
        assert message.api_key == raw.get("apiKey")
        assert message.kind == raw["type"]
        assert str(message.valid_versions) == raw["validVersions"].replace(" ", "")
        low, high = (
            (int(v) for v in raw["validVersions"].split("-"))
            if "-" in raw["validVersions"]
            else (int(raw["validVersions"]),) * 2
        )
        common = {struct["name"]: struct["fields"] for struct in raw.get("commonStructs", ())}
        for version in range(low, high + 1):
            flexible = _in(raw["flexibleVersions"], version)
            assert message.is_flexible(version) == flexible
            expected = _json_view(raw["fields"], common, version, flexible, message.name)
            actual = _spec_view(message.fields, version, flexible, message.name)
            assert actual == expected, f"{message.name} v{version}"
            checked += 1
    assert checked > 500


@pytest.mark.parametrize("message", ALL_MESSAGES, ids=lambda m: m.name)
def test_declaration_is_internally_consistent(message: MessageSpec) -> None:
    def walk(fields: tuple[FieldSpec, ...]) -> None:
        tags = [f.tag for f in fields if f.tag is not None]
        assert len(tags) == len(set(tags)), f"duplicate tags in {message.name}"
        names = [f.name for f in fields]
        assert len(names) == len(set(names)), f"duplicate names in {message.name}"
        for field in fields:
            assert bool(field.fields) == field.is_struct, field.json_name
            walk(field.fields)

    walk(message.fields)
