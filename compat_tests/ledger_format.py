"""COMPATIBILITY.md: rendering it from the runs' results, and reading its cells back.

Each client cell of the scenario table is ``<Apache Kafka outcome> / <pybroker outcome>`` (single
brokers); the check in ledger_plugin.py reads the second half, so the table a reader sees is the thing
that is enforced. Two more columns, one per 3-node cluster (``kafka-cluster``, ``pybroker-cluster``),
hold a whole row's outcomes in one cell each (see ``cluster_cell``): the row's common outcome, then
the clients that differ from it, e.g. ``pass; kcat: not expressible``; ``not run`` where no cluster
run has reached the scenario. A client whose outcome differs between the two clusters is a
disagreement: both cells are bold, and the ledger lists it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from compat_tests.clients.registry import CLIENT_NAMES

Outcome = Literal["pass", "fail", "not expressible", "one broker only", "skipped", "xfail", "xpass"]
LEDGER_PATH = Path(__file__).resolve().parents[1] / "COMPATIBILITY.md"
SCENARIO_TABLE_START = "<!-- scenario-table-start -->"
SCENARIO_TABLE_END = "<!-- scenario-table-end -->"
MISSING = "—"
# "raw-socket": the bad-input scenarios, bytes written by hand (compat_tests/clients/raw_socket.py).
COLUMNS = ["any", *CLIENT_NAMES, "raw-socket"]
# The cluster columns, after the client columns: the broker (as --broker names it) and its heading.
CLUSTER_COLUMNS = {"kafka-cluster": "Apache Kafka, 3 nodes", "pybroker-cluster": "pybroker, 3 nodes"}
NOT_RUN = "not run"
Cells = dict[str, dict[str, str]]  # scenario -> client -> outcome


def render_scenario_table(
    kafka: Cells, pybroker: Cells, clusters: dict[str, Cells] | None = None
) -> list[str]:
    """The table; the cluster columns only once some cluster run has been recorded."""
    clusters = {name: cells for name, cells in (clusters or {}).items() if cells}
    scenarios = sorted(set(kafka) | set(pybroker) | {s for cells in clusters.values() for s in cells})
    columns = [
        c for c in COLUMNS if any(c in kafka.get(s, {}) or c in pybroker.get(s, {}) for s in scenarios)
    ]
    cluster_names = list(CLUSTER_COLUMNS) if clusters else []
    lines = [
        SCENARIO_TABLE_START,
        "| scenario | " + " | ".join([*columns, *(CLUSTER_COLUMNS[n] for n in cluster_names)]) + " |",
        "|---" * (len(columns) + len(cluster_names) + 1) + "|",
    ]
    for scenario in scenarios:
        cells = []
        for column in columns:
            k = kafka.get(scenario, {}).get(column)
            p = pybroker.get(scenario, {}).get(column)
            cells.append(MISSING if k is None and p is None else f"{k or MISSING} / {p or MISSING}")
        row_clients = row_columns(kafka.get(scenario, {}), pybroker.get(scenario, {}))
        rows = {name: clusters.get(name, {}).get(scenario, {}) for name in cluster_names}
        disagree = bool(rows) and bool(cluster_disagreements(*rows.values()))
        for name in cluster_names:
            cell = cluster_cell(row_clients, rows[name])
            cells.append(f"**{cell}**" if disagree else cell)
        lines.append(f"| `{scenario}` | " + " | ".join(cells) + " |")
    lines.append(SCENARIO_TABLE_END)
    return lines


def row_columns(*rows: dict[str, str]) -> list[str]:
    """The client columns a row has cells in, in the table's order."""
    present = {client for row in rows for client in row}
    return [c for c in COLUMNS if c in present] + sorted(present - set(COLUMNS))


def cluster_cell(row_clients: list[str], outcomes: dict[str, str]) -> str:
    """One cluster's outcomes of a row in one cell: the commonest outcome over the row's clients (the
    client columns its single-broker cells fill; a client the cluster run did not reach counts as
    ``not run``), then ``client: outcome`` for each client that differs from it, and for each client
    outside the row's (a row that no single-broker run has filled yet)."""
    values = {client: outcomes.get(client, NOT_RUN) for client in row_clients}
    counts: dict[str, int] = {}
    for value in values.values():
        counts[value] = counts.get(value, 0) + 1
    common = max(counts, key=lambda value: counts[value]) if counts else NOT_RUN  # first seen wins a tie
    extra = {client: outcomes[client] for client in row_columns(outcomes) if client not in values}
    exceptions = [f"{client}: {value}" for client, value in values.items() if value != common]
    exceptions += [f"{client}: {value}" for client, value in extra.items()]
    return "; ".join([common, *exceptions])


def parse_cluster_cell(row_clients: list[str], cell: str) -> dict[str, str]:
    """``cluster_cell`` read back: client -> outcome, without the clients that were not run."""
    parts = cell.strip().strip("*").split("; ")
    common, exceptions = parts[0], parts[1:]
    outcomes = dict.fromkeys(row_clients, common)
    for part in exceptions:
        client, sep, outcome = part.partition(": ")
        if not sep or not client:
            raise ValueError(f"malformed cluster cell {cell!r}")
        outcomes[client] = outcome
    return {client: outcome for client, outcome in outcomes.items() if outcome != NOT_RUN}


def cluster_disagreements(kafka: dict[str, str], pybroker: dict[str, str]) -> dict[str, tuple[str, str]]:
    """client -> (Apache Kafka's outcome, pybroker's), for the clients both clusters ran with different
    outcomes."""
    return {
        client: (kafka[client], pybroker[client])
        for client in row_columns(kafka, pybroker)
        if client in kafka and client in pybroker and kafka[client] != pybroker[client]
    }


def parse_cells(text: str) -> tuple[Cells, Cells]:
    """Both halves of the scenario table's client cells: ({scenario: {client: outcome}} for Apache
    Kafka, the same for pybroker); ValueError when the table is missing or malformed."""
    kafka, pybroker, _clusters = parse_table(text)
    return kafka, pybroker


def parse_cluster_cells(text: str) -> dict[str, Cells]:
    """The cluster columns: {"kafka-cluster": {scenario: {client: outcome}}, "pybroker-cluster": ...}
    (empty when the table has none yet)."""
    return parse_table(text)[2]


def parse_table(text: str) -> tuple[Cells, Cells, dict[str, Cells]]:
    try:
        table = text.split(SCENARIO_TABLE_START, 1)[1].split(SCENARIO_TABLE_END, 1)[0]
    except IndexError:
        raise ValueError("no scenario table markers") from None
    rows = [line for line in table.strip().splitlines() if line.startswith("|")]
    if len(rows) < 3:
        raise ValueError("the scenario table has no rows")
    columns = [c.strip() for c in rows[0].strip("|").split("|")][1:]
    heading_to_cluster = {heading: name for name, heading in CLUSTER_COLUMNS.items()}
    kafka: Cells = {}
    pybroker: Cells = {}
    clusters: dict[str, Cells] = {name: {} for name in CLUSTER_COLUMNS}
    for row in rows[2:]:
        fields = [f.strip() for f in row.strip().strip("|").split("|")]
        if len(fields) != len(columns) + 1:
            raise ValueError(f"malformed row: {row}")
        scenario = fields[0].strip("`")
        cluster_fields = {}
        for column, cell in zip(columns, fields[1:], strict=True):
            if column in heading_to_cluster:
                cluster_fields[heading_to_cluster[column]] = cell
                continue
            if cell == MISSING:
                continue
            kafka_outcome, sep, pybroker_outcome = cell.partition(" / ")
            if not sep:
                raise ValueError(f"malformed cell {cell!r} in row {scenario}")
            for half, outcome in ((kafka, kafka_outcome), (pybroker, pybroker_outcome)):
                if outcome != MISSING:
                    half.setdefault(scenario, {})[column] = outcome
        row_clients = row_columns(kafka.get(scenario, {}), pybroker.get(scenario, {}))
        for name, cell in cluster_fields.items():
            outcomes = parse_cluster_cell(row_clients, cell)
            if outcomes:
                clusters[name][scenario] = outcomes
    return kafka, pybroker, clusters


def parse_pybroker_cells(text: str) -> dict[tuple[str, str], str]:
    """(scenario, client) -> pybroker outcome, from the scenario table; ValueError when malformed."""
    _kafka, pybroker = parse_cells(text)
    return {
        (scenario, client): outcome for scenario, row in pybroker.items() for client, outcome in row.items()
    }
