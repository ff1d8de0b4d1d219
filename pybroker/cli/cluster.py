"""`pybroker cluster info`: cluster id, controller and brokers; `pybroker cluster --brokers N`: a local
cluster (ZooKeeper and N brokers on loopback, cli/local_cluster.py)."""

from __future__ import annotations

import argparse

from pybroker.cli.common import connect, emit_json, out, section, table
from pybroker.cli.local_cluster import add_arguments, run_local_cluster


def add_parser(commands: argparse._SubParsersAction, parent: argparse.ArgumentParser) -> None:
    family = commands.add_parser("cluster", help="cluster id, controller and brokers; --brokers N: a local cluster")
    add_arguments(family)
    family.set_defaults(run=_run_family, family_parser=family)
    sub = family.add_subparsers(dest="cluster_command", metavar="COMMAND")
    info = sub.add_parser(
        "info", aliases=["metadata"], parents=[parent], help="cluster id, controller and brokers"
    )
    info.set_defaults(run=run_info)


def _run_family(args: argparse.Namespace) -> int:
    if args.local_brokers is None:
        args.family_parser.error("a command (info) or --brokers N is required")
    return run_local_cluster(args)


def run_info(args: argparse.Namespace) -> int:
    with connect(args) as client:
        meta = client.metadata([])
    brokers = [
        {
            "id": b.node_id,
            "host": b.host,
            "port": b.port,
            "rack": b.rack,
            "controller": b.node_id == meta.controller_id,
        }
        for b in sorted(meta.brokers.values(), key=lambda b: b.node_id)
    ]
    if args.format == "json":
        emit_json({"cluster_id": meta.cluster_id, "controller": meta.controller_id, "brokers": brokers})
        return 0
    section("CLUSTER")
    out(f"{meta.cluster_id}")
    out()
    section("BROKERS")
    table(
        ["id", "host", "port", "rack"],
        [(f"{b['id']}*" if b["controller"] else b["id"], b["host"], b["port"], b["rack"]) for b in brokers],
    )
    return 0
