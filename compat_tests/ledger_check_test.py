"""The ledger's own machinery: the table round-trips, and the session check catches disagreement."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from compat_tests import ledger, ledger_plugin
from compat_tests.ledger_format import parse_pybroker_cells, render_scenario_table

KAFKA = {"roundtrip::t[codec=gzip]": {"java": "pass", "sarama": "fail"}, "groups::g": {"any": "pass"}}
PYBROKER = {"roundtrip::t[codec=gzip]": {"java": "pass", "sarama": "fail"}, "groups::g": {"any": "fail"}}


def test_rendered_table_reads_back_as_the_pybroker_results() -> None:
    text = "\n".join(["# x", *render_scenario_table(KAFKA, PYBROKER), "tail"])
    assert parse_pybroker_cells(text) == {
        ("roundtrip::t[codec=gzip]", "java"): "pass",
        ("roundtrip::t[codec=gzip]", "sarama"): "fail",
        ("groups::g", "any"): "fail",
    }


@pytest.mark.parametrize(
    "text", ["no table at all", "<!-- scenario-table-start -->\n<!-- scenario-table-end -->"]
)
def test_unreadable_ledger_is_an_error(text: str) -> None:
    with pytest.raises(ValueError):
        parse_pybroker_cells(text)


def _plugin(tmp_path: Any, monkeypatch: pytest.MonkeyPatch, results: dict[tuple[str, str], str]) -> Any:
    ledger = tmp_path / "COMPATIBILITY.md"
    ledger.write_text("\n".join(render_scenario_table(KAFKA, PYBROKER)))
    monkeypatch.setattr(ledger_plugin, "LEDGER_PATH", ledger)
    plugin = ledger_plugin.LedgerPlugin(SimpleNamespace(option=SimpleNamespace(keyword="x", maxfail=0)))  # type: ignore[arg-type]
    plugin.results = dict(results)
    return plugin


def test_check_passes_only_on_agreement(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    agreeing = {("roundtrip::t[codec=gzip]", "java"): "pass", ("groups::g", "any"): "fail"}
    assert _plugin(tmp_path, monkeypatch, agreeing).compare_with_ledger() == []
    disagreeing = {("roundtrip::t[codec=gzip]", "java"): "fail"}
    assert (
        "ledger says pass, this run fail"
        in _plugin(tmp_path, monkeypatch, disagreeing).compare_with_ledger()[0]
    )
    unknown = {("new::scenario", "java"): "pass"}
    assert "not in the ledger" in _plugin(tmp_path, monkeypatch, unknown).compare_with_ledger()[0]


def test_update_replaces_only_the_cells_that_ran() -> None:
    text = "\n".join(
        [
            "# x",
            *render_scenario_table(KAFKA, PYBROKER),
            "",
            ledger.OBSERVED_HEADING,
            "",
            "| scenario | Apache Kafka | pybroker |",
            "|---|---|---|",
            "| `bad::x` | closed | answered |",
        ]
    )
    run = {
        "results": {
            "groups::g": {"any": "pass"},
            "new::n": {"java": "pass"},
            "roundtrip::t[codec=gzip]": {"sarama": "pass"},
        },
        "api_versions": {"0": [0, 9]},
    }
    merged = ledger.merge_into_ledger(text, {"kafka": run, "pybroker": run})
    assert merged["pybroker"]["results"] == {
        "roundtrip::t[codec=gzip]": {"java": "pass", "sarama": "pass"},
        "groups::g": {"any": "pass"},
        "new::n": {"java": "pass"},
    }
    assert merged["kafka"]["observed"] == {"bad::x": "closed"}
    assert merged["pybroker"]["observed"] == {"bad::x": "answered"}
    assert merged["kafka"]["api_versions"] == {"0": [0, 9]}


def test_update_without_an_api_versions_probe_keeps_the_table() -> None:
    results = {
        broker: {"results": {"old::o": {"any": "pass"}}, "observed": {}, "api_versions": {"0": [0, 13], "1": [4, high]}}
        for broker, high in (("kafka", 18), ("pybroker", 16))
    }
    text = ledger.render(results)
    run = {"results": {"new::n": {"any": "pass"}}, "api_versions": {}}
    merged = ledger.merge_into_ledger(text, {"kafka": run, "pybroker": run})
    assert merged["kafka"]["api_versions"] == {"0": [0, 13], "1": [4, 18]}
    assert merged["pybroker"]["api_versions"] == {"0": [0, 13], "1": [4, 16]}


def _report(nodeid: str, when: str, outcome: str, properties: list[tuple[str, Any]]) -> Any:
    return SimpleNamespace(
        nodeid=nodeid,
        when=when,
        passed=outcome == "passed",
        failed=outcome == "failed",
        skipped=outcome == "skipped",
        longrepr=None,
        user_properties=properties,
    )


def test_cells_and_api_versions_are_read_from_reports_once_in_the_reporting_process() -> None:
    """Under pytest-xdist the controller sees only reports: the cell and the probed ApiVersions ride on
    them, and a worker counts nothing itself (the controller counts its reports once)."""
    controller = ledger_plugin.LedgerPlugin(SimpleNamespace())  # type: ignore[arg-type]
    cell = ("groups::g", "java")
    versions = {"18": [0, 4]}
    tagged = [("ledger_cell", list(cell))]
    controller.pytest_runtest_logreport(_report("a::g[java]", "setup", "passed", tagged))
    assert controller.results == {}  # a passed setup says nothing yet
    controller.pytest_runtest_logreport(
        _report("a::g[java]", "call", "passed", [*tagged, ("ledger_api_versions", versions)])
    )
    controller.pytest_runtest_logreport(_report("a::g[java]", "teardown", "failed", tagged))
    assert controller.results == {cell: "fail"}  # the failed teardown fails the cell
    assert controller.api_versions == {18: (0, 4)}
    worker = ledger_plugin.LedgerPlugin(SimpleNamespace(workerinput={}))  # type: ignore[arg-type]
    worker.pytest_runtest_logreport(_report("a::g[java]", "call", "passed", tagged))
    assert worker.results == {}
