"""COMPATIBILITY.md: rendering it from two runs' results, and reading its pybroker cells back.

Each scenario table cell is ``<Apache Kafka outcome> / <pybroker outcome>``; the check in
ledger_plugin.py reads the second half, so the table a reader sees is the thing that is enforced.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from compat_tests.clients.registry import CLIENT_NAMES

Outcome = Literal["pass", "fail", "not expressible", "skipped", "xfail", "xpass"]
LEDGER_PATH = Path(__file__).resolve().parents[1] / "COMPATIBILITY.md"
SCENARIO_TABLE_START = "<!-- scenario-table-start -->"
SCENARIO_TABLE_END = "<!-- scenario-table-end -->"
MISSING = "—"
# "raw-socket": the bad-input scenarios, bytes written by hand (compat_tests/clients/raw_socket.py).
COLUMNS = ["any", *CLIENT_NAMES, "raw-socket"]


def render_scenario_table(kafka: dict[str, dict[str, str]], pybroker: dict[str, dict[str, str]]) -> list[str]:
    scenarios = sorted(set(kafka) | set(pybroker))
    columns = [
        c for c in COLUMNS if any(c in kafka.get(s, {}) or c in pybroker.get(s, {}) for s in scenarios)
    ]
    lines = [
        SCENARIO_TABLE_START,
        "| scenario | " + " | ".join(columns) + " |",
        "|---" * (len(columns) + 1) + "|",
    ]
    for scenario in scenarios:
        cells = []
        for column in columns:
            k = kafka.get(scenario, {}).get(column)
            p = pybroker.get(scenario, {}).get(column)
            cells.append(MISSING if k is None and p is None else f"{k or MISSING} / {p or MISSING}")
        lines.append(f"| `{scenario}` | " + " | ".join(cells) + " |")
    lines.append(SCENARIO_TABLE_END)
    return lines


def parse_cells(text: str) -> tuple[dict[str, dict[str, str]], dict[str, dict[str, str]]]:
    """Both halves of the scenario table: ({scenario: {client: outcome}} for Apache Kafka, the same
    for pybroker); ValueError when the table is missing or malformed."""
    try:
        table = text.split(SCENARIO_TABLE_START, 1)[1].split(SCENARIO_TABLE_END, 1)[0]
    except IndexError:
        raise ValueError("no scenario table markers") from None
    rows = [line for line in table.strip().splitlines() if line.startswith("|")]
    if len(rows) < 3:
        raise ValueError("the scenario table has no rows")
    columns = [c.strip() for c in rows[0].strip("|").split("|")][1:]
    kafka: dict[str, dict[str, str]] = {}
    pybroker: dict[str, dict[str, str]] = {}
    for row in rows[2:]:
        fields = [f.strip() for f in row.strip().strip("|").split("|")]
        if len(fields) != len(columns) + 1:
            raise ValueError(f"malformed row: {row}")
        scenario = fields[0].strip("`")
        for column, cell in zip(columns, fields[1:], strict=True):
            if cell == MISSING:
                continue
            kafka_outcome, sep, pybroker_outcome = cell.partition(" / ")
            if not sep:
                raise ValueError(f"malformed cell {cell!r} in row {scenario}")
            for half, outcome in ((kafka, kafka_outcome), (pybroker, pybroker_outcome)):
                if outcome != MISSING:
                    half.setdefault(scenario, {})[column] = outcome
    return kafka, pybroker


def parse_pybroker_cells(text: str) -> dict[tuple[str, str], str]:
    """(scenario, client) -> pybroker outcome, from the scenario table; ValueError when malformed."""
    _kafka, pybroker = parse_cells(text)
    return {
        (scenario, client): outcome for scenario, row in pybroker.items() for client, outcome in row.items()
    }
