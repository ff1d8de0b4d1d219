"""`pybroker topic create|list|describe|alter-config|add-partitions|delete`."""

from __future__ import annotations

import argparse
import uuid

from pybroker.cli.client import (
    CREATE_PARTITIONS,
    CREATE_TOPICS,
    DELETE_TOPICS,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    CliError,
    error_name,
)
from pybroker.cli.common import connect, emit_json, out, parse_pairs, section, table
from pybroker.cli.config import TOPIC_RESOURCE, alter_configs, describe_configs

FORMATTER = argparse.RawDescriptionHelpFormatter
EPILOG = """\
examples:
  pybroker topic create orders -p 6 -c retention.ms=86400000
  pybroker topic list
  pybroker topic describe orders
  pybroker topic alter-config orders --set cleanup.policy=compact
  pybroker topic add-partitions orders -n 2
  pybroker topic delete orders
"""


def add_parser(commands: argparse._SubParsersAction, parent: argparse.ArgumentParser) -> None:
    family = commands.add_parser(
        "topic",
        help="create, list, describe, alter and delete topics",
        epilog=EPILOG,
        formatter_class=FORMATTER,
    )
    sub = family.add_subparsers(dest="topic_command", metavar="COMMAND", required=True)

    create = sub.add_parser("create", parents=[parent], help="create topics")
    create.add_argument("topics", nargs="+", metavar="TOPIC")
    create.add_argument(
        "-p", "--partitions", type=int, default=-1, help="number of partitions (default: the broker's)"
    )
    create.add_argument(
        "-r", "--replicas", type=int, default=-1, help="replication factor (default: the broker's)"
    )
    create.add_argument(
        "-c", "--topic-config", action="append", default=[], metavar="KEY=VALUE", help="a topic config"
    )
    create.add_argument("-d", "--dry-run", action="store_true", help="validate only, create nothing")
    create.set_defaults(run=run_create)

    lst = sub.add_parser("list", aliases=["ls"], parents=[parent], help="list topics")
    lst.add_argument("-i", "--internal", action="store_true", help="include internal topics")
    lst.set_defaults(run=run_list)

    describe = sub.add_parser(
        "describe", parents=[parent], help="partitions, leaders, offsets and configs of topics"
    )
    describe.add_argument("topics", nargs="+", metavar="TOPIC")
    describe.set_defaults(run=run_describe)

    alter = sub.add_parser("alter-config", parents=[parent], help="set or delete topic configs")
    alter.add_argument("topic", metavar="TOPIC")
    alter.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="set a config")
    alter.add_argument("--delete", action="append", default=[], metavar="KEY", help="remove an override")
    alter.set_defaults(run=run_alter_config)

    add = sub.add_parser("add-partitions", parents=[parent], help="add partitions to topics")
    add.add_argument("topics", nargs="+", metavar="TOPIC")
    how = add.add_mutually_exclusive_group(required=True)
    how.add_argument("-n", "--num", type=int, help="number of partitions to add")
    how.add_argument("--total", type=int, help="new total number of partitions")
    add.set_defaults(run=run_add_partitions)

    delete = sub.add_parser("delete", parents=[parent], help="delete topics")
    delete.add_argument("topics", nargs="+", metavar="TOPIC")
    delete.set_defaults(run=run_delete)


def _report(args: argparse.Namespace, rows: list[dict]) -> int:
    """One row per topic with its outcome; exit 1 if any failed."""
    if args.format == "json":
        emit_json(rows)
    else:
        table(["topic", "status"], [(r["topic"], r["status"]) for r in rows])
    return 1 if any(r["status"] != "OK" for r in rows) else 0


def _status(result: dict) -> str:
    if not result["error_code"]:
        return "OK"
    message = result.get("error_message")
    return f"{error_name(result['error_code'])}" + (f": {message}" if message else "")


def run_create(args: argparse.Namespace) -> int:
    configs = parse_pairs(args.topic_config, "--topic-config")
    body = {
        "topics": [
            {
                "name": name,
                "num_partitions": args.partitions,
                "replication_factor": args.replicas,
                "assignments": [],
                "configs": [{"name": k, "value": v} for k, v in configs.items()],
            }
            for name in args.topics
        ],
        "timeout_ms": int(args.timeout * 1000),
        "validate_only": args.dry_run,
    }
    with connect(args) as client:
        controller = client.metadata([]).controller_id
        response = client.send(CREATE_TOPICS, body, node=controller if controller >= 0 else None)
    return _report(args, [{"topic": t["name"], "status": _status(t)} for t in response["topics"]])


def run_list(args: argparse.Namespace) -> int:
    with connect(args) as client:
        meta = client.metadata(None)
    rows = []
    for name in sorted(meta.topics):
        info = meta.topics[name]
        if info.internal and not args.internal:
            continue
        replicas = max((len(p.replicas) for p in info.partitions.values()), default=0)
        rows.append({"name": name, "partitions": len(info.partitions), "replicas": replicas})
    if args.format == "json":
        emit_json(rows)
    else:
        table(["name", "partitions", "replicas"], [(r["name"], r["partitions"], r["replicas"]) for r in rows])
    return 0


def run_describe(args: argparse.Namespace) -> int:
    results = []
    with connect(args) as client:
        for name in args.topics:
            info = client.topic(name)
            parts = sorted(info.partitions)
            earliest = client.list_offsets({(name, p): EARLIEST_TIMESTAMP for p in parts}) if parts else {}
            latest = client.list_offsets({(name, p): LATEST_TIMESTAMP for p in parts}) if parts else {}
            configs = describe_configs(client, TOPIC_RESOURCE, name)
            results.append(
                {
                    "name": name,
                    "topic_id": str(info.topic_id) if info.topic_id else None,
                    "internal": info.internal,
                    "partitions": [
                        {
                            "partition": p,
                            "leader": info.partitions[p].leader,
                            "epoch": info.partitions[p].leader_epoch,
                            "replicas": info.partitions[p].replicas,
                            "isr": info.partitions[p].isr,
                            "log_start_offset": earliest[(name, p)][0],
                            "high_watermark": latest[(name, p)][0],
                        }
                        for p in parts
                    ],
                    "configs": configs,
                }
            )
    if args.format == "json":
        emit_json(results if len(results) > 1 else results[0])
        return 0
    for index, topic in enumerate(results):
        if index:
            out()
        section("SUMMARY")
        replicas = max((len(p["replicas"]) for p in topic["partitions"]), default=0)
        table(
            ["name", "id", "partitions", "replicas", "internal"],
            [(topic["name"], topic["topic_id"], len(topic["partitions"]), replicas, topic["internal"])],
        )
        out()
        section("CONFIGS")
        table(["key", "value", "source"], [(c["name"], c["value"], c["source"]) for c in topic["configs"]])
        out()
        section("PARTITIONS")
        table(
            ["partition", "leader", "epoch", "replicas", "isr", "log-start-offset", "high-watermark"],
            [
                (
                    p["partition"],
                    p["leader"],
                    p["epoch"],
                    ",".join(map(str, p["replicas"])),
                    ",".join(map(str, p["isr"])),
                    p["log_start_offset"],
                    p["high_watermark"],
                )
                for p in topic["partitions"]
            ],
        )
    return 0


def run_alter_config(args: argparse.Namespace) -> int:
    set_ = parse_pairs(args.set, "--set")
    with connect(args) as client:
        client.topic(args.topic)
        alter_configs(client, TOPIC_RESOURCE, args.topic, set_, args.delete)
    return _report(args, [{"topic": args.topic, "status": "OK"}])


def run_add_partitions(args: argparse.Namespace) -> int:
    with connect(args) as client:
        meta = client.metadata(args.topics)
        requests = []
        for name in args.topics:
            info = meta.topics.get(name)
            current = len(info.partitions) if info and not info.error_code else 0
            if not current:
                raise CliError(f"topic {name}: UNKNOWN_TOPIC_OR_PARTITION")
            total = args.total if args.total is not None else current + args.num
            requests.append({"name": name, "count": total, "assignments": None})
        body = {"topics": requests, "timeout_ms": int(args.timeout * 1000), "validate_only": False}
        controller = meta.controller_id
        response = client.send(CREATE_PARTITIONS, body, node=controller if controller >= 0 else None)
    return _report(args, [{"topic": r["name"], "status": _status(r)} for r in response["results"]])


def run_delete(args: argparse.Namespace) -> int:
    with connect(args) as client:
        controller = client.metadata([]).controller_id
        node = controller if controller >= 0 else None
        version = client.version(DELETE_TOPICS, node)
        timeout_ms = int(args.timeout * 1000)
        if version >= 6:
            body = {
                "topics": [{"name": t, "topic_id": uuid.UUID(int=0)} for t in args.topics],
                "timeout_ms": timeout_ms,
            }
        else:
            body = {"topic_names": list(args.topics), "timeout_ms": timeout_ms}
        response = client.send(DELETE_TOPICS, body, node=node, version=version)
    return _report(args, [{"topic": r["name"], "status": _status(r)} for r in response["responses"]])
