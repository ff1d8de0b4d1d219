"""pytest plugin behind the conformance ledger: collect each scenario's outcome per client, and
check the checked-in COMPATIBILITY.md against the run that just happened.

- ``COMPAT_LEDGER_JSON=FILE`` in the environment writes ``{"results": {scenario: {client: outcome}},
  "observed": {scenario: text}, "api_versions": {...}}`` (used by ``python -m compat_tests.ledger``
  for both brokers); ``observed`` is what a scenario saw the broker do, given with
  ``record_property("observed", text)`` (the bad-input scenarios: closed or answered).
- Whenever scenarios ran against a pybroker this session started itself, every outcome is compared
  with the pybroker half of the ledger's cells; a mismatch, a cell the ledger lacks, or a ledger that
  cannot be read fails the session.  A run of the full default selection must also have observed
  every pybroker cell of the ledger, so deleting or skipping scenarios cannot make it pass silently.
- Against a 3-broker pybroker cluster this session started (``--broker pybroker-cluster``), outcomes
  are compared with the ledger's pybroker cluster column the same way, except that a cell the column
  has not recorded yet (``not run``) is reported, not failed: cluster runs are optional, so the
  column may lag behind the scenarios.
"""

from __future__ import annotations

import json
import os
import socket
import struct
from pathlib import Path
from typing import Any

import pytest

from compat_tests.ledger_format import LEDGER_PATH, Outcome, parse_cluster_cells, parse_pybroker_cells

LEDGER_JSON_ENV = "COMPAT_LEDGER_JSON"
SCENARIOS_DIR = Path(__file__).resolve().parent / "scenarios"
# The items' own parameters that name the client (the column); the rest name the scenario (the row).
CLIENT_PARAMS = ("client_name", "client_pair")


def scenario_and_client(item: pytest.Item) -> tuple[str, str] | None:
    path = Path(str(item.fspath)).resolve()
    if SCENARIOS_DIR not in path.parents or item.get_closest_marker("full"):
        return None  # --full variants are heavier repeats of ledger rows, not rows of their own
    params: dict[str, Any] = dict(getattr(getattr(item, "callspec", None), "params", {}))
    # A module whose scenarios speak no client library names its own column (raw-socket).
    client = getattr(getattr(item, "module", None), "LEDGER_COLUMN", "any")
    if "client_name" in params:
        client = str(params["client_name"])
    elif "client_pair" in params:
        producer, consumer = params["client_pair"]
        params["producer"] = producer
        client = str(consumer)
    others = ",".join(f"{k}={params[k]}" for k in sorted(params) if k not in CLIENT_PARAMS)
    name = f"{path.stem.removeprefix('test_')}::{getattr(item, 'originalname', item.name)}"
    return (f"{name}[{others}]" if others else name), client


def read_api_versions(bootstrap: str, timeout_s: float = 10.0) -> dict[int, tuple[int, int]]:
    """ApiVersions v0 on a raw socket: every broker answers it, and it is the whole advertisement."""
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    client_id = b"compat-ledger"
    body = struct.pack(">hhih", 18, 0, 1, len(client_id)) + client_id
    with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
        sock.sendall(struct.pack(">i", len(body)) + body)
        size = struct.unpack(">i", _read_exactly(sock, 4))[0]
        payload = _read_exactly(sock, size)
    _correlation, error, count = struct.unpack_from(">ihi", payload, 0)
    if error:
        raise RuntimeError(f"ApiVersions answered error {error}")
    versions = {}
    for index in range(count):
        key, low, high = struct.unpack_from(">hhh", payload, 10 + 6 * index)
        versions[key] = (low, high)
    return versions


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("broker closed the connection during ApiVersions")
        data += chunk
    return data


def outcome_of(report: pytest.TestReport) -> Outcome | None:
    if report.skipped:
        text = str(report.longrepr)
        if "NOT EXPRESSIBLE" in text:
            return "not expressible"
        # A scenario with a single broker of its own, on a cluster run (scenarios/support.one_broker_only).
        return "one broker only" if "ONE BROKER ONLY" in text else "skipped"
    if report.failed:
        return "xfail" if hasattr(report, "wasxfail") else "fail"
    if report.when == "call":
        return "xpass" if hasattr(report, "wasxfail") else "pass"
    return None  # a passed setup or teardown says nothing yet


CELL_PROPERTY = "ledger_cell"
API_VERSIONS_PROPERTY = "ledger_api_versions"


class LedgerPlugin:
    """Works alone and under pytest-xdist: the process that runs a test tags its reports with the
    test's cell (and, once, the ApiVersions it probed); the process that reports (xdist's controller,
    or the only process) reads the cells back from the reports, so each worker's share is counted once."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.collected: set[str] = set()  # node ids of every collected test, from any process
        self.cells: dict[str, tuple[str, str]] = {}  # node id -> cell, for the tests that reported
        self.results: dict[tuple[str, str], Outcome] = {}
        self.observed: dict[str, str] = {}
        self.api_versions: dict[int, tuple[int, int]] | None = None
        self._probed = False

    @property
    def is_xdist_worker(self) -> bool:
        return hasattr(self.config, "workerinput")

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.collected.update(item.nodeid for item in session.items)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        self.collected.update(ids)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Any:
        bootstrap = getattr(item, "funcargs", {}).get("bootstrap")
        if not self._probed and isinstance(bootstrap, str) and os.environ.get(LEDGER_JSON_ENV):
            self._probed = True
            versions = read_api_versions(bootstrap)
            item.user_properties.append(
                (API_VERSIONS_PROPERTY, {str(k): list(v) for k, v in versions.items()})
            )
        yield

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        outcome = yield
        cell = scenario_and_client(item)
        if cell is not None:
            outcome.get_result().user_properties.append((CELL_PROPERTY, list(cell)))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if self.is_xdist_worker:
            return  # the controller counts this report
        properties = report.user_properties
        for name, value in properties:
            if name == API_VERSIONS_PROPERTY and self.api_versions is None:
                self.api_versions = {int(k): (int(v[0]), int(v[1])) for k, v in dict(value).items()}
        raw_cell = next((value for name, value in properties if name == CELL_PROPERTY), None)
        outcome = outcome_of(report)
        if raw_cell is None or outcome is None:
            return
        cell = (str(raw_cell[0]), str(raw_cell[1]))
        self.cells[report.nodeid] = cell
        for name, value in properties:
            if name == "observed":
                self.observed[cell[0]] = str(value)
        previous = self.results.get(cell)
        # A failed teardown after a passed call still fails the cell; a first failure sticks.
        if previous in (None, "pass") or outcome == "fail":
            self.results[cell] = outcome

    def nested_results(self) -> dict[str, dict[str, str]]:
        nested: dict[str, dict[str, str]] = {}
        for (scenario, client), outcome in sorted(self.results.items()):
            nested.setdefault(scenario, {})[client] = outcome
        return nested

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.is_xdist_worker:
            return
        target = os.environ.get(LEDGER_JSON_ENV)
        if target:
            api = {str(k): list(v) for k, v in sorted((self.api_versions or {}).items())}
            Path(target).write_text(
                json.dumps(
                    {"results": self.nested_results(), "observed": self.observed, "api_versions": api},
                    indent=1,
                )
            )
            return
        if not self.results or not self._ran_against_own_pybroker():
            return
        problems = self.compare_with_ledger()
        self.problems = problems
        if problems:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def _ran_against_own_pybroker(self) -> bool:
        return self.config.getoption("--bootstrap") is None and self.config.getoption("--broker") in (
            "pybroker",
            "pybroker-cluster",
        )

    @property
    def _cluster(self) -> bool:
        return self.config.getoption("--broker") == "pybroker-cluster"

    def _full_default_selection(self) -> bool:
        """Every scenario module, every client, nothing filtered out: then every cell must be seen."""
        from compat_tests.clients.registry import CLIENT_NAMES
        from compat_tests.conftest import selected_clients

        option = self.config.option
        every_module = {path.name for path in SCENARIOS_DIR.glob("test_*.py")}
        collected = {
            Path(nodeid.split("::", 1)[0]).name
            for nodeid in self.collected
            if nodeid.startswith("compat_tests/scenarios/")
        }
        return (
            collected == every_module
            and not getattr(option, "keyword", "")
            and not getattr(option, "markexpr", "")
            and not getattr(option, "deselect", None)
            and not getattr(option, "lf", False)
            and not getattr(option, "maxfail", 0)
            and selected_clients(self.config) == CLIENT_NAMES
        )

    def compare_with_ledger(self) -> list[str]:
        try:
            if self._cluster:
                column = parse_cluster_cells(LEDGER_PATH.read_text())["pybroker-cluster"]
                ledger = {(s, c): outcome for s, row in column.items() for c, outcome in row.items()}
            else:
                ledger = parse_pybroker_cells(LEDGER_PATH.read_text())
        except (OSError, ValueError) as exc:
            return [f"cannot read the ledger {LEDGER_PATH.name}: {exc}"]
        problems = []
        self.not_recorded = []
        for (scenario, client), outcome in sorted(self.results.items()):
            expected = ledger.get((scenario, client))
            if expected is None and self._cluster:
                self.not_recorded.append(
                    f"{scenario} [{client}]: not run in the ledger (this run: {outcome})"
                )
            elif expected is None:
                problems.append(f"{scenario} [{client}]: not in the ledger (this run: {outcome})")
            elif expected != outcome:
                problems.append(f"{scenario} [{client}]: ledger says {expected}, this run {outcome}")
        if (
            not self._cluster
            and self._full_default_selection()
            and len(self.cells) == len(set(self.cells.values()))
        ):
            missing = sorted(set(ledger) - set(self.results))
            problems += [f"{s} [{c}]: in the ledger but not run" for s, c in missing]
        return problems

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        problems = getattr(self, "problems", None)
        if problems is None:
            return
        column = "pybroker cluster column" if self._cluster else "pybroker column"
        terminalreporter.section(f"conformance ledger (COMPATIBILITY.md, {column})")
        for line in getattr(self, "not_recorded", []):
            terminalreporter.write_line(f"ledger: {line}")
        if not problems:
            recorded = len(self.results) - len(getattr(self, "not_recorded", []))
            terminalreporter.write_line(f"{recorded} scenario cells agree with the ledger")
        for line in problems:
            terminalreporter.write_line(f"LEDGER MISMATCH: {line}", red=True)
        if problems:
            terminalreporter.write_line(
                "regenerate with: python -m compat_tests.ledger" + (" --cluster" if self._cluster else "")
            )


def register(config: pytest.Config) -> None:
    config.pluginmanager.register(LedgerPlugin(config), "compat-ledger")
