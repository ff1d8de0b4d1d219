"""``python -m compat_tests.ledger``: run the default scenarios against pybroker and Apache Kafka
(both started here, concurrently) and write COMPATIBILITY.md.

``python -m compat_tests.ledger --cluster [-- FILES...]`` runs them instead against a 3-node pybroker
cluster and then (one after the other: each is four to six processes) a 3-node Apache Kafka cluster,
and writes only the two cluster columns; the single-broker cells, and the check that enforces them,
stay as they were.

Each run is a plain pytest run of compat_tests/scenarios with COMPAT_LEDGER_JSON set, so the
ledger_plugin records every outcome and the ApiVersions the broker advertised; nothing parses text.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from compat_tests.ledger_format import (
    CLUSTER_COLUMNS,
    LEDGER_PATH,
    Cells,
    cluster_disagreements,
    parse_cells,
    parse_cluster_cells,
    render_scenario_table,
    row_columns,
)
from compat_tests.ledger_plugin import LEDGER_JSON_ENV

REPO = Path(__file__).resolve().parents[1]
BROKERS = {"kafka": "Apache Kafka 4.3.1", "pybroker": "pybroker"}


def run_scenarios(broker: str, out: Path, extra: list[str]) -> subprocess.Popen[bytes]:
    """pytest on ``broker``; ``extra`` may name scenario files, which then replace the whole directory.
    A cluster runs in one pytest process (``-n 0``): the cluster fixture is per session, so each
    xdist worker would start a cluster of its own."""
    env = dict(os.environ, **{LEDGER_JSON_ENV: str(out)})
    names_files = any(arg.startswith("compat_tests/scenarios/") for arg in extra)
    selection = [] if names_files else ["compat_tests/scenarios"]
    argv = [sys.executable, "-m", "pytest", *selection, "-p", "no:cacheprovider", "-q"]
    argv += ["--broker", broker, *(["-n", "0"] if broker in CLUSTER_COLUMNS else []), *extra]
    log = open(out.with_suffix(".log"), "wb")  # noqa: SIM115 - closed with the process below
    return subprocess.Popen(argv, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)


def api_names() -> dict[int, str]:
    from pybroker.protocol.api import API_NAMES

    return API_NAMES


def declared_max_version(key: int) -> int | None:
    """The newest version of ``key`` in pybroker's message declarations (generated from the
    Kafka message definitions the project is built against), or None when it has none."""
    from pybroker.protocol.api import REQUESTS

    spec = REQUESTS.get(key)
    return None if spec is None else spec.valid_versions.high


def _versions(low: int, high: int) -> str:
    return f"v{low}" if low == high else f"v{low}–{high}"


# The KRaft quorum's own APIs: Kafka's 3.x message definitions (the last with ZooKeeper-mode
# brokers, the "zkBroker" listener) list these for the "broker" and "controller" listeners only, so a
# ZooKeeper-mode Kafka broker never advertised them and closed a connection that sent one.
# pybroker's cluster is coordinated by ZooKeeper (issue 11): there is no quorum to describe or change.
KRAFT_ONLY_API_KEYS = {55: "DescribeQuorum", 64: "UnregisterBroker", 80: "AddRaftVoter", 81: "RemoveRaftVoter"}
KRAFT_ONLY_REASON = (
    "not applicable: KRaft quorum API; pybroker's cluster is coordinated by ZooKeeper, and Kafka's"
    " ZooKeeper-mode brokers never offered it (no zkBroker listener in Kafka's definitions)"
)


def gap_for_api(name: str, key: int, kafka: tuple[int, int] | None, ours: tuple[int, int] | None) -> str:
    """Why pybroker's ApiVersions entry differs from Apache Kafka's, and what would close it."""
    if key in KRAFT_ONLY_API_KEYS and ours is None:
        return KRAFT_ONLY_REASON
    declared = declared_max_version(key)
    if ours is not None and kafka is not None:
        reasons = []
        if ours[0] < kafka[0]:
            reasons.append(f"pybroker also answers {_versions(ours[0], kafka[0] - 1)}, which Kafka 4 removed")
        if kafka[1] > ours[1]:
            if declared is not None and ours[1] >= declared:
                reasons.append(
                    f"{_versions(ours[1] + 1, kafka[1])}: newer than the message definitions pybroker is"
                    " generated from (not filed yet)"
                )
            else:
                reasons.append(f"{_versions(ours[1] + 1, kafka[1])} not implemented (not filed yet)")
        return "; ".join(reasons)
    if name.startswith("Share") or "ShareGroup" in name:
        return "not filed yet (share groups, KIP-932)"
    if declared is None:
        return "not in the message definitions pybroker is generated from (not filed yet)"
    return "not filed yet"


def issue_for_scenario(scenario: str, kafka_outcome: str | None) -> str:
    if kafka_outcome == "fail":
        return "the scenario itself (it fails on Apache Kafka, so it is wrong and must be fixed first)"
    return "not filed yet"


def render(results: dict[str, dict[str, Any]]) -> str:
    kafka, pybroker = results["kafka"], results["pybroker"]
    lines = [
        "# Compatibility ledger",
        "",
        "Generated by `python -m compat_tests.ledger` — do not edit by hand. Every scenario of",
        "`compat_tests/scenarios` runs through every client against Apache Kafka 4.3.1 and against pybroker.",
        "Each cell is **Apache Kafka / pybroker**: `pass`, `fail`, `not expressible` (the client library",
        "cannot express the operation), `skipped`, or `—` (the scenario does not take that client).",
        "The test suite fails when a run against pybroker disagrees with the pybroker half of a cell.",
        "`any` is a scenario that is not run per client; cross-client rows are named by the producer",
        "and the columns are the consumer.",
        "",
        "## Scenarios",
        "",
        *render_scenario_table(kafka["results"], pybroker["results"], cluster_results(results)),
        *render_cluster_differences(kafka["results"], pybroker["results"], cluster_results(results)),
        "",
        "## Differences between the two brokers",
        "",
    ]
    differences = []
    for scenario in sorted(set(kafka["results"]) | set(pybroker["results"])):
        for client in sorted(
            set(kafka["results"].get(scenario, {})) | set(pybroker["results"].get(scenario, {}))
        ):
            k = kafka["results"].get(scenario, {}).get(client)
            p = pybroker["results"].get(scenario, {}).get(client)
            if k != p:
                differences.append(
                    f"| `{scenario}` | {client} | {k} | {p} | {issue_for_scenario(scenario, k)} |"
                )
    if differences:
        lines += [
            "| scenario | client | Apache Kafka | pybroker | closed by |",
            "|---|---|---|---|---|",
            *differences,
        ]
    else:
        lines.append("None: every scenario has the same outcome on both brokers.")
    failing_both = sorted(
        f"`{s}` [{c}]"
        for s, row in kafka["results"].items()
        for c, outcome in row.items()
        if outcome == "fail" and pybroker["results"].get(s, {}).get(c) == "fail"
    )
    if failing_both:
        lines += [
            "",
            "Failing on both brokers (a client limitation or a scenario to fix, not a broker gap):",
            "",
        ]
        lines += [f"- {item}" for item in failing_both]
    lines += render_observed(kafka.get("observed", {}), pybroker.get("observed", {}))
    lines += ["", "## API versions advertised (ApiVersions)", ""]
    names = api_names()
    kafka_api = {int(k): tuple(v) for k, v in kafka["api_versions"].items()}
    py_api = {int(k): tuple(v) for k, v in pybroker["api_versions"].items()}
    lines += [
        "| key | API | Apache Kafka | pybroker | gap | why, and what closes it |",
        "|---|---|---|---|---|---|",
    ]
    for key in sorted(set(kafka_api) | set(py_api)):
        name = names.get(key, f"api {key}")
        k, p = kafka_api.get(key), py_api.get(key)
        text_k = f"{k[0]}–{k[1]}" if k else "—"
        text_p = f"{p[0]}–{p[1]}" if p else "—"
        if k == p:
            gap, issue = "", ""
        elif p is None:
            gap, issue = "**not advertised by pybroker**", gap_for_api(name, key, k, p)
        elif k is None:
            gap, issue = "only pybroker", ""
        else:
            gap, issue = "**versions differ**", gap_for_api(name, key, k, p)
        lines.append(f"| {key} | {name} | {text_k} | {text_p} | {gap} | {issue} |")
    return "\n".join(lines) + "\n"


CLUSTER_NOTE = [
    "The last two columns are the same scenarios against 3-node clusters (`python -m compat_tests.ledger",
    "--cluster`): ZooKeeper and 3 pybroker brokers, and 3 Apache Kafka 4.3.1 KRaft nodes, topics RF 3",
    "(docs/CLUSTER_TESTING.md). Each cell holds the whole row: the commonest outcome, then each client",
    "that differs (`pass; kcat: not expressible`); `not run` where no cluster run reached the scenario.",
    "`one broker only`: the scenario starts a single broker of its own (settings or listeners of its own,",
    "or a broker it kills and restarts), so it is skipped on a cluster rather than run on that one broker.",
    "Bold cells disagree between the two clusters. The suite's check reads only the single-broker cells.",
]


def cluster_results(results: dict[str, dict[str, Any]]) -> dict[str, Cells]:
    return {name: results[name]["results"] for name in CLUSTER_COLUMNS if name in results}


def render_cluster_differences(kafka: Cells, pybroker: Cells, clusters: dict[str, Cells]) -> list[str]:
    """Where the two clusters' outcomes differ, client by client, and how many rows are still unrun."""
    if not any(clusters.values()):
        return []
    kafka_cluster = clusters.get("kafka-cluster", {})
    pybroker_cluster = clusters.get("pybroker-cluster", {})
    lines = ["", *CLUSTER_NOTE, ""]
    differences = []
    for scenario in sorted(set(kafka_cluster) | set(pybroker_cluster)):
        found = cluster_disagreements(kafka_cluster.get(scenario, {}), pybroker_cluster.get(scenario, {}))
        for client, (k, p) in found.items():
            differences.append(f"| `{scenario}` | {client} | {k} | {p} |")
    if differences:
        lines += [
            "Disagreements between the two clusters:",
            "",
            "| scenario | client | Apache Kafka, 3 nodes | pybroker, 3 nodes |",
            "|---|---|---|---|",
            *differences,
        ]
    else:
        lines.append("Disagreements between the two clusters: none where both ran the client.")
    scenarios = set(kafka) | set(pybroker)
    for name, heading in CLUSTER_COLUMNS.items():
        cells = clusters.get(name, {})
        unrun = sum(
            1
            for scenario in scenarios
            for client in row_columns(kafka.get(scenario, {}), pybroker.get(scenario, {}))
            if client not in cells.get(scenario, {})
        )
        if unrun:
            lines += ["", f"{heading}: {unrun} client cells not run."]
    return lines


def render_observed(kafka: dict[str, str], pybroker: dict[str, str]) -> list[str]:
    """What each broker did with the bad input of the raw-socket scenarios, side by side."""
    if not kafka and not pybroker:
        return []
    lines = [
        "",
        "## Bad input: what each broker did",
        "",
        "The `raw-socket` rows (compat_tests/scenarios/test_bad_input.py) send bytes no library would;",
        "each expects what Apache Kafka 4.3.1 was measured to do, and a bystander connection and a new",
        "one must still be answered afterwards.",
        "",
        "| scenario | Apache Kafka | pybroker |",
        "|---|---|---|",
    ]
    for scenario in sorted(set(kafka) | set(pybroker)):
        lines.append(f"| `{scenario}` | {kafka.get(scenario, '—')} | {pybroker.get(scenario, '—')} |")
    return lines


OBSERVED_HEADING = "## Bad input: what each broker did"


def parse_observed(text: str) -> dict[str, dict[str, str]]:
    """The 'what each broker did' table of an existing ledger, as the runs' ``observed`` maps."""
    observed: dict[str, dict[str, str]] = {"kafka": {}, "pybroker": {}}
    if OBSERVED_HEADING not in text:
        return observed
    section = text.split(OBSERVED_HEADING, 1)[1].split("\n## ", 1)[0]
    for line in section.splitlines():
        fields = [f.strip() for f in line.strip().strip("|").split("|")]
        if not line.startswith("| `") or len(fields) != 3:
            continue
        scenario = fields[0].strip("`")
        for broker, value in zip(("kafka", "pybroker"), fields[1:], strict=True):
            if value != "—":
                observed[broker][scenario] = value
    return observed


API_VERSIONS_HEADING = "## API versions advertised (ApiVersions)"


def parse_api_versions(text: str) -> dict[str, dict[str, list[int]]]:
    """The ApiVersions table of an existing ledger, as the runs' ``api_versions`` maps."""
    found: dict[str, dict[str, list[int]]] = {"kafka": {}, "pybroker": {}}
    if API_VERSIONS_HEADING not in text:
        return found
    section = text.split(API_VERSIONS_HEADING, 1)[1].split("\n## ", 1)[0]
    for line in section.splitlines():
        fields = [f.strip() for f in line.strip().strip("|").split("|")]
        if len(fields) < 4 or not fields[0].isdigit():
            continue
        for broker, value in zip(("kafka", "pybroker"), fields[2:4], strict=True):
            if value != "—":
                low, high = value.split("–")
                found[broker][fields[0]] = [int(low), int(high)]
    return found


def merge_into_ledger(text: str, results: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """``results`` of a partial run laid over the existing ledger, cell by cell: what the run saw
    replaces the cell; every cell and observation it did not see stays as it was. A run of the single
    brokers keeps the cluster columns, a run of the clusters keeps everything else."""
    previous = dict(zip(("kafka", "pybroker"), parse_cells(text), strict=True))
    observed = parse_observed(text)
    api_versions = parse_api_versions(text)
    merged: dict[str, dict[str, Any]] = {}
    for name, cells in parse_cluster_cells(text).items():
        rows = {scenario: dict(row) for scenario, row in cells.items()}
        for scenario, row in results.get(name, {}).get("results", {}).items():
            rows.setdefault(scenario, {}).update(row)
        merged[name] = {"results": rows}
    for broker in BROKERS:
        if broker not in results:
            merged[broker] = {
                "results": previous[broker],
                "observed": observed[broker],
                "api_versions": api_versions[broker],
            }
    for broker, run in results.items():
        if broker in CLUSTER_COLUMNS:
            continue
        rows = {scenario: dict(row) for scenario, row in previous[broker].items()}
        for scenario, row in run["results"].items():
            rows.setdefault(scenario, {}).update(row)
        merged[broker] = {
            "results": rows,
            "observed": {**observed[broker], **run.get("observed", {})},
            # A partial run whose scenarios never used the plain ``bootstrap`` fixture probed no
            # ApiVersions: the table stays as it was rather than being emptied.
            "api_versions": run["api_versions"] or api_versions[broker],
        }
    return merged


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--output", type=Path, default=LEDGER_PATH)
    parser.add_argument(
        "--from-json",
        nargs=2,
        metavar=("KAFKA_JSON", "PYBROKER_JSON"),
        type=Path,
        help="render from two earlier runs' result files (COMPAT_LEDGER_JSON) instead of running; with "
        "--cluster, the 3-node Apache Kafka run's and the 3-node pybroker run's",
    )
    parser.add_argument(
        "--cluster",
        action="store_true",
        help="run on the 3-node clusters (pybroker-cluster, then kafka-cluster) and replace just the cluster "
        "cells the run produced (implies --update)",
    )
    parser.add_argument(
        "--update",
        action="store_true",
        help="run only the scenarios selected by the pytest arguments (after --: files, -k, --clients) on "
        "both brokers and replace just the cells they produced; the full default run still checks every "
        "cell against pybroker",
    )
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments for both runs")
    args = parser.parse_args(argv)
    names = {**CLUSTER_COLUMNS} if args.cluster else BROKERS
    if args.from_json:
        files = dict(
            zip(
                ["kafka-cluster", "pybroker-cluster"] if args.cluster else ["kafka", "pybroker"],
                args.from_json,
                strict=True,
            )
        )
    else:
        workdir = Path(tempfile.mkdtemp(prefix="compat-ledger-"))
        files = {broker: workdir / f"{broker}.json" for broker in names}
        if args.cluster:  # one cluster at a time, pybroker's first
            for broker in reversed(list(files)):
                started = time.monotonic()
                process = run_scenarios(broker, files[broker], args.pytest_args)
                process.wait()
                print(
                    f"{names[broker]}: pytest exit {process.returncode} after {time.monotonic() - started:.0f} s,"
                    f" log {files[broker].with_suffix('.log')}"
                )
        else:
            processes = {
                broker: run_scenarios(broker, path, args.pytest_args) for broker, path in files.items()
            }
            for broker, process in processes.items():
                process.wait()
                print(
                    f"{names[broker]}: pytest exit {process.returncode}, log {files[broker].with_suffix('.log')}"
                )
    results = {}
    for broker, path in files.items():
        if not path.exists():
            print(f"{broker}: no results written ({path})", file=sys.stderr)
            return 1
        results[broker] = json.loads(path.read_text())
    if args.update or args.cluster:
        results = merge_into_ledger(args.output.read_text(), results)
    elif args.output.exists():
        # A full single-broker run rewrites its own cells and keeps the cluster columns.
        for name, cells in parse_cluster_cells(args.output.read_text()).items():
            results[name] = {"results": cells}
    args.output.write_text(render(results))
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
