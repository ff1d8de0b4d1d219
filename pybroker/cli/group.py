"""`pybroker group list|describe|reset-offsets|seek|delete`: consumer groups, their members, committed
offsets and lag — the numbers `kafka-consumer-groups --describe` prints — and offset resets with a dry
run by default, as `kafka-consumer-groups --reset-offsets` does."""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial

from pybroker.cli.client import (
    CONSUMER_GROUP_DESCRIBE,
    DELETE_GROUPS,
    DESCRIBE_GROUPS,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    LIST_GROUPS,
    RETRIABLE_COORDINATOR_ERRORS,
    STREAMS_GROUP_DESCRIBE,
    BrokerError,
    CliError,
    KafkaClient,
    check,
    error_name,
)
from pybroker.cli.common import connect, emit_json, out, table
from pybroker.protocol import codec
from pybroker.protocol.api import CONSUMER_PROTOCOL_ASSIGNMENT
from pybroker.protocol.errors import ErrorCode

FORMATTER = argparse.RawDescriptionHelpFormatter
EPILOG = """\
examples:
  pybroker group list
  pybroker group describe payments
  pybroker group reset-offsets payments --topic orders --to-earliest            # dry run
  pybroker group reset-offsets payments --topic orders:0,1 --shift-by -10 --execute
  pybroker group reset-offsets payments --all-topics --to-datetime 2026-01-01T00:00:00Z --execute
  pybroker group delete payments
"""
INACTIVE_STATES = ("Empty", "Dead")


@dataclass
class Member:
    member_id: str
    client_id: str
    host: str
    instance_id: str | None
    assignment: list[tuple[str, int]] = field(default_factory=list)


@dataclass
class GroupDescription:
    group_id: str
    coordinator: int
    state: str
    protocol_type: str
    protocol: str
    group_type: str  # "classic", "consumer" (KIP-848) or "streams" (KIP-1071)
    members: list[Member]


def add_parser(commands: argparse._SubParsersAction, parent: argparse.ArgumentParser) -> None:
    family = commands.add_parser(
        "group",
        help="list, describe (with lag), reset offsets of and delete consumer groups",
        epilog=EPILOG,
        formatter_class=FORMATTER,
    )
    sub = family.add_subparsers(dest="group_command", metavar="COMMAND", required=True)

    lst = sub.add_parser("list", aliases=["ls"], parents=[parent], help="list groups")
    lst.set_defaults(run=run_list)

    describe = sub.add_parser(
        "describe",
        parents=[parent],
        help="members, assignments, committed offsets, log end offsets and lag per partition",
    )
    describe.add_argument("groups", nargs="+", metavar="GROUP")
    describe.set_defaults(run=run_describe)

    for name, help_text in (
        ("reset-offsets", "reset committed offsets of an inactive group (dry run unless --execute)"),
        ("seek", "alias of reset-offsets"),
    ):
        reset = sub.add_parser(
            name, parents=[parent], help=help_text, epilog=EPILOG, formatter_class=FORMATTER
        )
        reset.add_argument("group", metavar="GROUP")
        scope = reset.add_mutually_exclusive_group(required=True)
        scope.add_argument(
            "--topic", action="append", metavar="TOPIC[:P,P...]", help="topic, optionally its partitions"
        )
        scope.add_argument("--all-topics", action="store_true", help="every topic the group has committed")
        to = reset.add_mutually_exclusive_group(required=True)
        to.add_argument("--to-earliest", action="store_true", help="the log start offset")
        to.add_argument("--to-latest", action="store_true", help="the log end offset")
        to.add_argument("--to-current", action="store_true", help="the committed offset (no change)")
        to.add_argument("--to-offset", type=int, metavar="OFFSET", help="an absolute offset")
        to.add_argument("--shift-by", type=int, metavar="N", help="move the committed offset by N (+/-)")
        to.add_argument(
            "--to-datetime",
            metavar="DATETIME",
            help="first offset at or after an ISO-8601 time (UTC if no zone)",
        )
        to.add_argument(
            "--to-timestamp", type=int, metavar="MS", help="first offset at or after a time in ms"
        )
        to.add_argument(
            "--by-duration", metavar="PnDTnHnMnS", help="first offset at or after now minus a duration"
        )
        reset.add_argument("--execute", action="store_true", help="commit the new offsets (default: dry run)")
        reset.add_argument("--dry-run", action="store_true", help="only show the new offsets (the default)")
        reset.set_defaults(run=run_reset)

    delete = sub.add_parser("delete", parents=[parent], help="delete inactive groups and their offsets")
    delete.add_argument("groups", nargs="+", metavar="GROUP")
    delete.set_defaults(run=run_delete)


# --- listing and describing --------------------------------------------------------------------------


def list_groups(client: KafkaClient) -> list[dict]:
    """ListGroups on every broker (each lists the groups it coordinates), as Kafka's admin client does."""
    meta = client.metadata([])
    groups: dict[str, dict] = {}
    for node in sorted(meta.brokers):
        response = client.send(LIST_GROUPS, {"states_filter": [], "types_filter": []}, node=node)
        check(response["error_code"], f"ListGroups on broker {node}")
        for g in response["groups"]:
            groups[g["group_id"]] = {
                "group": g["group_id"],
                "coordinator": node,
                "state": g.get("group_state") or None,
                "protocol_type": g["protocol_type"],
                "type": g.get("group_type") or None,
            }
    return [groups[name] for name in sorted(groups)]


def describe_group(client: KafkaClient, group: str) -> GroupDescription:
    return client.with_coordinator(group, lambda coordinator: _describe_group(client, group, coordinator))


def _describe_group(client: KafkaClient, group: str, coordinator: int) -> GroupDescription:
    conn = client.connection(coordinator)
    if CONSUMER_GROUP_DESCRIBE in conn.versions:
        body = {"group_ids": [group], "include_authorized_operations": False}
        described = client.send(CONSUMER_GROUP_DESCRIBE, body, node=coordinator)["groups"][0]
        # GROUP_ID_NOT_FOUND: not a KIP-848 group (a classic one, or none): ask DescribeGroups, as
        # Kafka's admin client does.
        if described["error_code"] != ErrorCode.GROUP_ID_NOT_FOUND:
            check(described["error_code"], f"ConsumerGroupDescribe {group}", described.get("error_message"))
            members = [
                Member(
                    m["member_id"],
                    m["client_id"],
                    m["client_host"],
                    m.get("instance_id"),
                    [
                        (tp["topic_name"], p)
                        for tp in m["assignment"]["topic_partitions"]
                        for p in tp["partitions"]
                    ],
                )
                for m in described["members"]
            ]
            return GroupDescription(
                group,
                coordinator,
                _consumer_state(described["group_state"]),
                "consumer",
                described.get("assignor_name") or "",
                "consumer",
                members,
            )
    if STREAMS_GROUP_DESCRIBE in conn.versions:
        streams = _describe_streams_group(client, group, coordinator)
        if streams is not None:
            return streams
    body = {"groups": [group], "include_authorized_operations": False}
    described = client.send(DESCRIBE_GROUPS, body, node=coordinator)["groups"][0]
    check(described["error_code"], f"DescribeGroups {group}", described.get("error_message"))
    members = []
    for m in described["members"]:
        assignment: list[tuple[str, int]] = []
        data = m.get("member_assignment") or b""
        if described["protocol_type"] == "consumer" and len(data) >= 2:
            version = int.from_bytes(data[:2], "big", signed=True)
            try:
                decoded, _ = codec.decode(CONSUMER_PROTOCOL_ASSIGNMENT, min(version, 3), data, 2)
            except (codec.DecodeError, codec.UnsupportedVersionError):
                decoded = {"assigned_partitions": []}
            assignment = [(tp["topic"], p) for tp in decoded["assigned_partitions"] for p in tp["partitions"]]
        members.append(
            Member(m["member_id"], m["client_id"], m["client_host"], m.get("group_instance_id"), assignment)
        )
    return GroupDescription(
        group,
        coordinator,
        described["group_state"],
        described["protocol_type"],
        described["protocol_data"],
        "classic",
        members,
    )


def _describe_streams_group(client: KafkaClient, group: str, coordinator: int) -> GroupDescription | None:
    """StreamsGroupDescribe (KIP-1071); None when the group is not a streams group.  A member's
    partitions are those its active tasks read: task (subtopology, p) reads partition p of the
    subtopology's source and repartition topics."""
    body = {"group_ids": [group], "include_authorized_operations": False}
    described = client.send(STREAMS_GROUP_DESCRIBE, body, node=coordinator)["groups"][0]
    if described["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND:
        return None
    check(described["error_code"], f"StreamsGroupDescribe {group}", described.get("error_message"))
    reads = {
        s["subtopology_id"]: [*s["source_topics"], *(t["name"] for t in s["repartition_source_topics"])]
        for s in ((described.get("topology") or {}).get("subtopologies") or [])
    }
    members = [
        Member(
            m["member_id"],
            m["client_id"],
            m["client_host"],
            m.get("instance_id"),
            sorted(
                {
                    (topic, p)
                    for task in m["assignment"]["active_tasks"]
                    for p in task["partitions"]
                    for topic in reads.get(task["subtopology_id"], ())
                }
            ),
        )
        for m in described["members"]
    ]
    return GroupDescription(group, coordinator, described["group_state"], "streams", "", "streams", members)


def _consumer_state(state: str) -> str:
    """ConsumerGroupDescribe names states in lower case ("stable"); show them as Kafka's tools do."""
    names = {
        "empty": "Empty",
        "assigning": "Assigning",
        "reconciling": "Reconciling",
        "stable": "Stable",
        "dead": "Dead",
    }
    return names.get(state, state)


def group_lag(client: KafkaClient, description: GroupDescription) -> list[dict]:
    """One row per partition that is committed or assigned: the columns of `kafka-consumer-groups --describe`."""
    committed = client.committed_offsets(description.group_id)
    owner: dict[tuple[str, int], Member] = {}
    for member in description.members:
        for tp in member.assignment:
            owner[tp] = member
    partitions = sorted(set(committed) | set(owner))
    # Log end offsets only for partitions that still exist (a deleted topic keeps its commits).
    existing = client.metadata(sorted({t for t, _ in partitions})).topics if partitions else {}
    live = [tp for tp in partitions if tp[0] in existing and tp[1] in existing[tp[0]].partitions]
    ends = client.list_offsets({tp: LATEST_TIMESTAMP for tp in live}) if live else {}
    rows = []
    for tp in partitions:
        current = committed.get(tp)
        end = ends[tp][0] if tp in ends else None
        lag = end - current if current is not None and end is not None else None
        holder = owner.get(tp)
        rows.append(
            {
                "group": description.group_id,
                "topic": tp[0],
                "partition": tp[1],
                "current_offset": current,
                "log_end_offset": end,
                "lag": lag,
                "member_id": holder.member_id if holder else None,
                "host": holder.host if holder else None,
                "client_id": holder.client_id if holder else None,
            }
        )
    return rows


def run_list(args: argparse.Namespace) -> int:
    with connect(args) as client:
        groups = list_groups(client)
    if args.format == "json":
        emit_json(groups)
    else:
        table(
            ["group", "coordinator", "state", "type", "protocol-type"],
            [
                (g["group"], g["coordinator"], g["state"], g["type"], g["protocol_type"] or None)
                for g in groups
            ],
        )
    return 0


def run_describe(args: argparse.Namespace) -> int:
    results = []
    with connect(args) as client:
        for group in args.groups:
            description = describe_group(client, group)
            if description.state == "Dead":
                raise BrokerError(ErrorCode.GROUP_ID_NOT_FOUND, f"group {group}", "the group does not exist")
            rows = group_lag(client, description)
            results.append((description, rows))
    if args.format == "json":
        docs = [
            {
                "group": d.group_id,
                "coordinator": d.coordinator,
                "state": d.state,
                "type": d.group_type,
                "protocol_type": d.protocol_type,
                "protocol": d.protocol,
                "members": [
                    {
                        "member_id": m.member_id,
                        "client_id": m.client_id,
                        "host": m.host,
                        "instance_id": m.instance_id,
                        "assignment": [{"topic": t, "partition": p} for t, p in sorted(m.assignment)],
                    }
                    for m in d.members
                ],
                "total_lag": sum(r["lag"] or 0 for r in rows),
                "partitions": rows,
            }
            for d, rows in results
        ]
        emit_json(docs if len(docs) > 1 else docs[0])
        return 0
    for index, (d, rows) in enumerate(results):
        if index:
            out()
        table(
            ["group", "coordinator", "state", "type", "protocol", "members", "total-lag"],
            [
                (
                    d.group_id,
                    d.coordinator,
                    d.state,
                    d.group_type,
                    d.protocol or None,
                    len(d.members),
                    sum(r["lag"] or 0 for r in rows),
                )
            ],
        )
        out()
        if not d.members:
            out(f"Consumer group '{d.group_id}' has no active members.")
            out()
        table(
            [
                "topic",
                "partition",
                "current-offset",
                "log-end-offset",
                "lag",
                "member-id",
                "host",
                "client-id",
            ],
            [
                (
                    r["topic"],
                    r["partition"],
                    r["current_offset"],
                    r["log_end_offset"],
                    r["lag"],
                    r["member_id"],
                    r["host"],
                    r["client_id"],
                )
                for r in rows
            ],
        )
    return 0


# --- resetting offsets ---------------------------------------------------------------------------------


def _parse_duration(text: str) -> int:
    """ISO-8601 duration PnDTnHnMnS (what kafka-consumer-groups --by-duration takes) in ms."""
    import re

    match = re.fullmatch(
        r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?", text.strip().upper()
    )
    if not match or text.strip().upper() in ("P", "PT"):
        raise CliError(f"--by-duration {text}: expected an ISO-8601 duration such as PT1H30M or P1D")
    days, hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
    return int((((days * 24 + hours) * 60 + minutes) * 60 + seconds) * 1000)


def _parse_datetime(text: str) -> int:
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise CliError(f"--to-datetime {text}: expected ISO-8601, e.g. 2026-01-31T12:00:00Z") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def _target_partitions(
    client: KafkaClient, args: argparse.Namespace, committed: dict[tuple[str, int], int]
) -> list[tuple[str, int]]:
    if args.all_topics:
        return sorted(committed)
    chosen: list[tuple[str, int]] = []
    for spec in args.topic:
        name, _, parts = spec.partition(":")
        info = client.topic(name)
        if parts:
            try:
                numbers = [int(p) for p in parts.split(",") if p.strip()]
            except ValueError:
                raise CliError(f"--topic {spec}: partitions must be numbers, e.g. {name}:0,1") from None
            for p in numbers:
                if p not in info.partitions:
                    raise BrokerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"partition {name}-{p}")
        else:
            numbers = sorted(info.partitions)
        chosen.extend((name, p) for p in numbers)
    return sorted(set(chosen))


def run_reset(args: argparse.Namespace) -> int:
    if args.execute and args.dry_run:
        raise CliError("--execute and --dry-run exclude each other")
    with connect(args) as client:
        description = describe_group(client, args.group)
        if description.state not in INACTIVE_STATES:
            raise CliError(
                f"Assignments can only be reset if the group '{args.group}' is inactive, but the current "
                f"state is {description.state}."
            )
        committed = client.committed_offsets(args.group)
        targets = _target_partitions(client, args, committed)
        if not targets:
            raise CliError(f"group {args.group} has no committed offsets to reset (name a --topic)")
        earliest = {
            tp: o for tp, (o, _) in client.list_offsets({tp: EARLIEST_TIMESTAMP for tp in targets}).items()
        }
        latest = {
            tp: o for tp, (o, _) in client.list_offsets({tp: LATEST_TIMESTAMP for tp in targets}).items()
        }
        new: dict[tuple[str, int], int] = {}
        if args.to_earliest:
            new = dict(earliest)
        elif args.to_latest:
            new = dict(latest)
        elif args.to_current:
            new = {tp: committed.get(tp, latest[tp]) for tp in targets}
        elif args.to_offset is not None:
            new = {tp: args.to_offset for tp in targets}
        elif args.shift_by is not None:
            # A partition without a commit shifts from its latest offset, as Kafka's tool does.
            new = {tp: committed.get(tp, latest[tp]) + args.shift_by for tp in targets}
        else:
            if args.to_datetime is not None:
                timestamp = _parse_datetime(args.to_datetime)
            elif args.to_timestamp is not None:
                timestamp = args.to_timestamp
            else:
                timestamp = int(time.time() * 1000) - _parse_duration(args.by_duration)
            found = client.list_offsets({tp: timestamp for tp in targets})
            # No record at or after the time: the log end offset, as Kafka's tool does.
            new = {tp: (found[tp][0] if found[tp][0] >= 0 else latest[tp]) for tp in targets}
        # Out-of-range offsets are clamped to the log's range (kafka-consumer-groups does the same).
        new = {tp: min(max(offset, earliest[tp]), latest[tp]) for tp, offset in new.items()}
        if args.execute:
            client.commit_offsets(args.group, new)
    rows = [
        {"group": args.group, "topic": t, "partition": p, "new_offset": o}
        for (t, p), o in sorted(new.items())
    ]
    if args.format == "json":
        emit_json({"group": args.group, "executed": bool(args.execute), "offsets": rows})
    else:
        table(
            ["group", "topic", "partition", "new-offset"],
            [(r["group"], r["topic"], r["partition"], r["new_offset"]) for r in rows],
        )
        if not args.execute:
            out()
            out("Dry run: nothing was committed; add --execute to apply these offsets.")
    return 0


def _delete_group(client: KafkaClient, group: str, coordinator: int) -> dict:
    result = client.send(DELETE_GROUPS, {"groups_names": [group]}, node=coordinator)["results"][0]
    if result["error_code"] in RETRIABLE_COORDINATOR_ERRORS:
        check(result["error_code"], f"DeleteGroups {group}")  # raises, and with_coordinator retries
    return result


def run_delete(args: argparse.Namespace) -> int:
    rows = []
    with connect(args) as client:
        for group in args.groups:
            result = client.with_coordinator(group, partial(_delete_group, client, group))
            rows.append(
                {"group": group, "status": error_name(result["error_code"]) if result["error_code"] else "OK"}
            )
    if args.format == "json":
        emit_json(rows)
    else:
        table(["group", "status"], [(r["group"], r["status"]) for r in rows])
    return 1 if any(r["status"] != "OK" for r in rows) else 0
