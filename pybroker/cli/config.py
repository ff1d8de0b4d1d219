"""`pybroker config describe|alter`: topic and broker configs (DescribeConfigs, IncrementalAlterConfigs)."""

from __future__ import annotations

import argparse

from pybroker.cli.client import (
    DESCRIBE_CONFIGS,
    INCREMENTAL_ALTER_CONFIGS,
    CliError,
    KafkaClient,
    check,
)
from pybroker.cli.common import connect, emit_json, out, parse_pairs, table

TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4
SET, DELETE = 0, 1  # IncrementalAlterConfigs operations
CONFIG_SOURCES = {
    0: "UNKNOWN",
    1: "DYNAMIC_TOPIC_CONFIG",
    2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG",
    5: "DEFAULT_CONFIG",
    6: "DYNAMIC_BROKER_LOGGER_CONFIG",
    7: "CLIENT_METRICS_CONFIG",
    8: "GROUP_CONFIG",
}

EPILOG = """\
examples:
  pybroker config describe --topic orders
  pybroker config describe --broker 0 --format json
  pybroker config alter --topic orders --set retention.ms=86400000 --delete cleanup.policy
  pybroker config alter --broker-default --set log.retention.ms=604800000
"""


def add_parser(commands: argparse._SubParsersAction, parent: argparse.ArgumentParser) -> None:
    family = commands.add_parser("config", help="describe and alter topic and broker configs")
    sub = family.add_subparsers(dest="config_command", metavar="COMMAND", required=True)
    formatter = argparse.RawDescriptionHelpFormatter

    describe = sub.add_parser(
        "describe",
        parents=[parent],
        help="show the configs of a topic or broker with their sources",
        epilog=EPILOG,
        formatter_class=formatter,
    )
    _add_resource(describe)
    describe.add_argument(
        "--only-overrides",
        action="store_true",
        help="only the configs set on this resource itself (what kafka-configs --describe lists)",
    )
    describe.set_defaults(run=run_describe)

    alter = sub.add_parser(
        "alter",
        parents=[parent],
        help="set or delete configs of a topic or broker (incremental)",
        epilog=EPILOG,
        formatter_class=formatter,
    )
    _add_resource(alter)
    alter.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="set a config")
    alter.add_argument(
        "--delete", action="append", default=[], metavar="KEY", help="remove an override (back to default)"
    )
    alter.add_argument("--dry-run", action="store_true", help="validate only, change nothing")
    alter.set_defaults(run=run_alter)


def _add_resource(parser: argparse.ArgumentParser) -> None:
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic", metavar="TOPIC", help="a topic")
    which.add_argument("--broker", metavar="ID", help="a broker, by node id")
    which.add_argument("--broker-default", action="store_true", help="the cluster-wide broker default")


def resource_of(args: argparse.Namespace) -> tuple[int, str]:
    if args.topic is not None:
        return TOPIC_RESOURCE, args.topic
    if args.broker is not None:
        if not args.broker.isdigit():
            raise CliError(f"--broker {args.broker}: expected a node id")
        return BROKER_RESOURCE, args.broker
    return BROKER_RESOURCE, ""


def describe_configs(client: KafkaClient, resource_type: int, name: str) -> list[dict]:
    """Every config of one resource: name, value, source, read_only, sensitive."""
    node = int(name) if resource_type == BROKER_RESOURCE and name else None
    body = {
        "resources": [{"resource_type": resource_type, "resource_name": name, "configuration_keys": None}],
        "include_synonyms": False,
        "include_documentation": False,
    }
    response = client.send(DESCRIBE_CONFIGS, body, node=node)
    result = response["results"][0]
    what = "topic" if resource_type == TOPIC_RESOURCE else "broker"
    check(result["error_code"], f"DescribeConfigs for {what} {name!r}", result.get("error_message"))
    return [
        {
            "name": c["name"],
            "value": None if c.get("is_sensitive") else c["value"],
            "source": CONFIG_SOURCES.get(c.get("config_source", 0), str(c.get("config_source"))),
            "read_only": c["read_only"],
            "sensitive": c.get("is_sensitive", False),
        }
        for c in sorted(result["configs"], key=lambda c: c["name"])
    ]


def alter_configs(
    client: KafkaClient,
    resource_type: int,
    name: str,
    set_: dict[str, str],
    delete: list[str],
    validate_only: bool = False,
) -> None:
    if not set_ and not delete:
        raise CliError("nothing to alter: give --set KEY=VALUE or --delete KEY")
    configs = [{"name": k, "config_operation": SET, "value": v} for k, v in set_.items()]
    configs += [{"name": k, "config_operation": DELETE, "value": None} for k in delete]
    node = int(name) if resource_type == BROKER_RESOURCE and name else None
    body = {
        "resources": [{"resource_type": resource_type, "resource_name": name, "configs": configs}],
        "validate_only": validate_only,
    }
    response = client.send(INCREMENTAL_ALTER_CONFIGS, body, node=node)
    result = response["responses"][0]
    check(result["error_code"], f"IncrementalAlterConfigs for {name!r}", result.get("error_message"))


def print_configs(configs: list[dict], as_json: bool) -> None:
    if as_json:
        emit_json(configs)
        return
    table(["key", "value", "source"], [(c["name"], c["value"], c["source"]) for c in configs])


def run_describe(args: argparse.Namespace) -> int:
    resource_type, name = resource_of(args)
    with connect(args) as client:
        configs = describe_configs(client, resource_type, name)
    if args.only_overrides:
        own = {TOPIC_RESOURCE: "DYNAMIC_TOPIC_CONFIG", BROKER_RESOURCE: "DYNAMIC_BROKER_CONFIG"}[
            resource_type
        ]
        if resource_type == BROKER_RESOURCE and not name:
            own = "DYNAMIC_DEFAULT_BROKER_CONFIG"
        configs = [c for c in configs if c["source"] == own]
    print_configs(configs, args.format == "json")
    return 0


def run_alter(args: argparse.Namespace) -> int:
    resource_type, name = resource_of(args)
    set_ = parse_pairs(args.set, "--set")
    with connect(args) as client:
        alter_configs(client, resource_type, name, set_, args.delete, validate_only=args.dry_run)
    changes: list[dict[str, str | None]] = [{"key": k, "operation": "set", "value": v} for k, v in set_.items()]
    changes += [{"key": k, "operation": "delete", "value": None} for k in args.delete]
    target = name or "<broker default>"
    if args.format == "json":
        emit_json({"resource": target, "validate_only": args.dry_run, "changes": changes})
    else:
        verb = "would alter" if args.dry_run else "altered"
        out(f"{verb} {target}:")
        table(["key", "operation", "value"], [(c["key"], c["operation"], c["value"]) for c in changes])
    return 0
