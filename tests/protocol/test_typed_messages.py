"""The generated TypedDicts (pybroker/protocol/typed) agree with the declarations key for key, and
mypy rejects a handler-style dict with a misspelt key while passing the correctly spelt one."""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap
import typing
from pathlib import Path

import pytest

from pybroker.protocol.api import ALL_MESSAGES
from pybroker.protocol.schema import FieldSpec

REPO_ROOT = Path(__file__).resolve().parents[2]
FAMILIES = ("admin", "api_versions", "fetch", "groups", "headers", "metadata", "offsets", "other", "produce", "producer")


def _typed_class(name: str) -> type:
    for family in FAMILIES:
        module = importlib.import_module(f"pybroker.protocol.typed.{family}")
        if hasattr(module, name):
            return getattr(module, name)
    raise AssertionError(f"no TypedDict {name}")


def _check(cls: type, fields: tuple[FieldSpec, ...], where: str) -> int:
    hints = typing.get_type_hints(cls)
    assert set(hints) == {f.name for f in fields}, where
    assert not cls.__required_keys__, f"{where}: every key may be absent (total=False)"
    checked = 1
    for field in fields:
        if field.is_struct:
            hint = hints[field.name]
            # Sequence[X] | None, Sequence[X], X | None or X: find the struct class inside.
            nested = [a for a in _flatten(hint) if isinstance(a, type) and hasattr(a, "__required_keys__")]
            assert len(nested) == 1, f"{where}.{field.name}: {hint}"
            checked += _check(nested[0], field.fields, f"{where}.{field.json_name}")
        elif field.type == "records":
            assert hints[field.name] is typing.Any, f"{where}.{field.name}"
        elif not field.nullable_versions.is_empty:
            assert type(None) in typing.get_args(hints[field.name]), f"{where}.{field.name} is nullable"
        else:
            assert type(None) not in typing.get_args(hints[field.name]), f"{where}.{field.name} is not nullable"
    return checked


def _flatten(hint: object) -> list:
    args = typing.get_args(hint)
    return [hint] if not args else [x for a in args for x in _flatten(a)]


def test_every_message_has_a_typed_dict_with_its_fields() -> None:
    checked = sum(_check(_typed_class(m.name), m.fields, m.name) for m in ALL_MESSAGES)
    assert checked > 400


SNIPPET = """
from pybroker.protocol.typed.metadata import MetadataResponse, MetadataResponsePartition

partition: MetadataResponsePartition = {{
    "error_code": 0,
    "partition_index": 0,
    "leader_id": 1,
    "{epoch_key}": 5,
    "replica_nodes": (1, 2),
    "isr_nodes": [1],
}}
response: MetadataResponse = {{"topics": [{{"name": "t", "partitions": [partition]}}]}}
response["throttle_time_ms"] = 0
"""


def _mypy(tmp_path: Path, source: str) -> subprocess.CompletedProcess[str]:
    snippet = tmp_path / "snippet.py"
    snippet.write_text(textwrap.dedent(source), encoding="utf-8")
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--follow-imports=silent", str(snippet)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.fixture(scope="module")
def _mypy_available() -> None:
    pytest.importorskip("mypy", reason="mypy is a development dependency (CI installs it)")


def test_mypy_passes_the_correctly_spelt_dict(tmp_path: Path, _mypy_available: None) -> None:
    result = _mypy(tmp_path, SNIPPET.format(epoch_key="leader_epoch"))
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_reports_a_misspelt_key(tmp_path: Path, _mypy_available: None) -> None:
    result = _mypy(tmp_path, SNIPPET.format(epoch_key="leader_epoh"))
    assert result.returncode == 1, result.stdout + result.stderr
    assert 'Extra key "leader_epoh" for TypedDict "MetadataResponsePartition"' in result.stdout, result.stdout
    assert "Found 1 error" in result.stdout, result.stdout


def test_mypy_reports_a_misspelt_key_set_later(tmp_path: Path, _mypy_available: None) -> None:
    source = SNIPPET.format(epoch_key="leader_epoch") + 'response["throtle_time_ms"] = 0\n'
    result = _mypy(tmp_path, source)
    assert result.returncode == 1, result.stdout + result.stderr
    assert 'TypedDict "MetadataResponse" has no key "throtle_time_ms"' in result.stdout, result.stdout


def test_mypy_reports_a_wrongly_typed_value(tmp_path: Path, _mypy_available: None) -> None:
    source = SNIPPET.format(epoch_key="leader_epoch") + 'response["cluster_id"] = 7\n'
    result = _mypy(tmp_path, source)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "cluster_id" in result.stdout and "int" in result.stdout, result.stdout


def test_handlers_do_not_import_the_typed_dicts_at_run_time() -> None:
    """The TypedDicts are for the type checker: loading every handler (and the broker) imports none."""
    code = (
        "import sys, pybroker.apis, pybroker.broker; pybroker.apis.load_all(); "
        "print(sorted(m for m in sys.modules if m.startswith('pybroker.protocol.typed')))"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]", result.stdout
