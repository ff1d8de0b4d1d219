"""The ledger's own machinery: the table round-trips, and the session check catches disagreement."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from compat_tests import ledger, ledger_plugin
from compat_tests.ledger_format import (
    parse_cells,
    parse_cluster_cells,
    parse_pybroker_cells,
    render_scenario_table,
)

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


def _plugin(
    tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
    results: dict[tuple[str, str], str],
    broker: str = "pybroker",
    clusters: dict[str, dict[str, dict[str, str]]] | None = None,
) -> Any:
    ledger = tmp_path / "COMPATIBILITY.md"
    ledger.write_text("\n".join(render_scenario_table(KAFKA, PYBROKER, clusters)))
    monkeypatch.setattr(ledger_plugin, "LEDGER_PATH", ledger)
    options = {"--broker": broker, "--bootstrap": None}
    config = SimpleNamespace(option=SimpleNamespace(keyword="x", maxfail=0), getoption=options.__getitem__)
    plugin = ledger_plugin.LedgerPlugin(config)  # type: ignore[arg-type]
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
        broker: {
            "results": {"old::o": {"any": "pass"}},
            "observed": {},
            "api_versions": {"0": [0, 13], "1": [4, high]},
        }
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


def _ledger_text(clusters: dict[str, dict[str, dict[str, str]]]) -> str:
    results: dict[str, dict[str, Any]] = {
        broker: {"results": cells, "observed": {}, "api_versions": {"0": [0, 4]}}
        for broker, cells in (("kafka", KAFKA), ("pybroker", PYBROKER))
    }
    results.update({name: {"results": cells} for name, cells in clusters.items()})
    return ledger.render(results)


def test_cluster_columns_round_trip_and_leave_the_single_broker_cells_alone() -> None:
    clusters = {
        "kafka-cluster": {"roundtrip::t[codec=gzip]": {"java": "pass", "sarama": "not expressible"}},
        "pybroker-cluster": {
            "roundtrip::t[codec=gzip]": {"java": "pass", "sarama": "not expressible"},
            "groups::g": {"any": "pass"},
        },
    }
    text = _ledger_text(clusters)
    assert "| `groups::g` | pass / fail | — | — | not run | pass |" in text
    assert (
        "| `roundtrip::t[codec=gzip]` | — | pass / pass | fail / fail | pass; sarama: not expressible |"
        in text
    )
    assert parse_cells(text) == (KAFKA, PYBROKER)
    assert parse_cluster_cells(text) == clusters
    assert "none where both ran the client" in text


def test_cluster_disagreement_is_bold_and_listed() -> None:
    clusters = {
        "kafka-cluster": {"roundtrip::t[codec=gzip]": {"java": "pass", "sarama": "fail"}},
        "pybroker-cluster": {"roundtrip::t[codec=gzip]": {"java": "fail", "sarama": "fail"}},
    }
    text = _ledger_text(clusters)
    assert "| **pass; sarama: fail** | **fail** |" in text
    assert "| `roundtrip::t[codec=gzip]` | java | pass | fail |" in text
    assert parse_cluster_cells(text) == clusters


def test_a_cluster_run_replaces_only_cluster_cells_and_a_broker_run_keeps_them() -> None:
    text = _ledger_text({"pybroker-cluster": {"groups::g": {"any": "fail"}}})
    run = {"results": {"groups::g": {"any": "pass"}}}
    merged = ledger.merge_into_ledger(text, {"kafka-cluster": run, "pybroker-cluster": run})
    assert merged["pybroker"]["results"] == PYBROKER
    assert merged["kafka"]["api_versions"] == {"0": [0, 4]}
    assert merged["pybroker-cluster"]["results"] == {"groups::g": {"any": "pass"}}
    broker_run = {"results": {"groups::g": {"any": "pass"}}, "api_versions": {}}
    merged = ledger.merge_into_ledger(ledger.render(merged), {"kafka": broker_run, "pybroker": broker_run})
    assert merged["kafka-cluster"]["results"] == {"groups::g": {"any": "pass"}}
    assert merged["pybroker"]["results"]["groups::g"] == {"any": "pass"}


def test_a_cluster_run_is_checked_against_the_cluster_column_and_unrecorded_cells_only_reported(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    clusters = {"pybroker-cluster": {"groups::g": {"any": "pass"}}}
    agreeing = {("groups::g", "any"): "pass", ("roundtrip::t[codec=gzip]", "java"): "fail"}
    plugin = _plugin(tmp_path, monkeypatch, agreeing, "pybroker-cluster", clusters)
    assert plugin.compare_with_ledger() == []  # the single-broker cells (groups: fail) are not the check
    assert plugin.not_recorded == ["roundtrip::t[codec=gzip] [java]: not run in the ledger (this run: fail)"]
    disagreeing = {("groups::g", "any"): "fail"}
    plugin = _plugin(tmp_path, monkeypatch, disagreeing, "pybroker-cluster", clusters)
    assert plugin.compare_with_ledger() == ["groups::g [any]: ledger says pass, this run fail"]


def test_a_single_broker_scenario_skipped_on_a_cluster_is_its_own_outcome() -> None:
    skipped = _report("a::t", "setup", "skipped", [])
    skipped.longrepr = (
        "x.py",
        1,
        "Skipped: ONE BROKER ONLY: kills or restarts the one broker it starts itself",
    )
    assert ledger_plugin.outcome_of(skipped) == "one broker only"
    skipped.longrepr = ("x.py", 1, "Skipped: NOT EXPRESSIBLE by kcat: no transactions")
    assert ledger_plugin.outcome_of(skipped) == "not expressible"


def test_a_cluster_row_without_single_broker_cells_round_trips() -> None:
    clusters = {"kafka-cluster": {"new::n": {"any": "pass"}}, "pybroker-cluster": {"new::n": {"any": "fail"}}}
    text = _ledger_text(clusters)
    assert "| `new::n` | — | — | — | not run; any: pass | not run; any: fail |" in text.replace("**", "")
    assert parse_cluster_cells(text) == clusters
