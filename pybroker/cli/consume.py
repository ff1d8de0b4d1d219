"""`pybroker consume TOPIC`: a console consumer that fetches from partition leaders directly."""

from __future__ import annotations

import argparse
import base64
import sys

from pybroker.cli.client import (
    EARLIEST_TIMESTAMP,
    FETCH,
    LATEST_TIMESTAMP,
    BrokerError,
    CliError,
    KafkaClient,
    check,
)
from pybroker.cli.common import connect, emit_json, out
from pybroker.protocol.errors import ErrorCode
from pybroker.records.batch import LOG_OVERHEAD, iter_batch_headers, whole_batches
from pybroker.records.reader import decode_batch_records

FORMATTER = argparse.RawDescriptionHelpFormatter
EPILOG = """\
-o/--offset picks where each partition starts: start (the log start), end (the log end: only new
records), an offset, @TIMESTAMP_MS (the first record at or after that time) or -N (N before the end).
With --group the group's committed offsets win where it has them (and -o applies elsewhere), and the
new positions are committed when the command ends, as a manually assigned consumer of that group
would do (the group must have no active members).

--format json prints one object per record: topic, partition, offset, timestamp, key, value,
headers. Keys, values and header values that are not UTF-8 are given as {"base64": "..."}.

examples:
  pybroker consume orders -n 10
  pybroker consume orders -o @1767225600000 -p 0,1 --format json
  pybroker consume orders --group audit -e
"""
FETCH_MAX_WAIT_MS = 500
FETCH_MAX_BYTES = 8 * 1024 * 1024
PARTITION_MAX_BYTES = 1024 * 1024


def add_parser(commands: argparse._SubParsersAction, parent: argparse.ArgumentParser) -> None:
    consume = commands.add_parser(
        "consume",
        parents=[parent],
        help="consume records and print them",
        description="Consume records from a topic and print them.",
        epilog=EPILOG,
        formatter_class=FORMATTER,
    )
    consume.add_argument("topic", metavar="TOPIC")
    consume.add_argument(
        "-o", "--offset", default="start", help="start|end|OFFSET|@TIMESTAMP_MS|-N (default start)"
    )
    consume.add_argument("-n", "--num", type=int, help="stop after this many records")
    consume.add_argument("-p", "--partitions", metavar="P[,P...]", help="only these partitions")
    consume.add_argument("-g", "--group", help="start from and commit to this group's offsets")
    consume.add_argument(
        "-e", "--exit-at-end", action="store_true", help="stop at the end of every partition"
    )
    consume.add_argument("--print-keys", action="store_true", help="text format: KEY<TAB>VALUE")
    consume.add_argument(
        "--read-committed", action="store_true", help="read only committed transactional records"
    )
    consume.set_defaults(run=run_consume)


def _text(data: bytes | None) -> str | dict | None:
    if data is None:
        return None
    try:
        return data.decode()
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode()}


def _start_offsets(client: KafkaClient, topic: str, partitions: list[int], spec: str) -> dict[int, int]:
    spec = spec.strip()
    if spec in ("start", "beginning", "oldest"):
        return {
            p: o
            for (_, p), (o, _) in client.list_offsets(
                {(topic, p): EARLIEST_TIMESTAMP for p in partitions}
            ).items()
        }
    if spec in ("end", "newest", "latest"):
        return {
            p: o
            for (_, p), (o, _) in client.list_offsets(
                {(topic, p): LATEST_TIMESTAMP for p in partitions}
            ).items()
        }
    if spec.startswith("@"):
        try:
            timestamp = int(spec[1:])
        except ValueError:
            raise CliError(f"-o {spec}: expected @TIMESTAMP_MS") from None
        found = client.list_offsets({(topic, p): timestamp for p in partitions})
        ends = client.list_offsets({(topic, p): LATEST_TIMESTAMP for p in partitions})
        return {
            p: (found[(topic, p)][0] if found[(topic, p)][0] >= 0 else ends[(topic, p)][0])
            for p in partitions
        }
    try:
        number = int(spec)
    except ValueError:
        raise CliError(f"-o {spec}: expected start, end, an offset, @TIMESTAMP_MS or -N") from None
    starts = client.list_offsets({(topic, p): EARLIEST_TIMESTAMP for p in partitions})
    ends = client.list_offsets({(topic, p): LATEST_TIMESTAMP for p in partitions})
    result = {}
    for p in partitions:
        low, high = starts[(topic, p)][0], ends[(topic, p)][0]
        wanted = high + number if number < 0 else number
        result[p] = min(max(wanted, low), high)
    return result


def run_consume(args: argparse.Namespace) -> int:
    if args.num is not None and args.num <= 0:
        raise CliError("-n must be positive")
    with connect(args) as client:
        leaders = client.leaders(args.topic)
        if args.partitions:
            try:
                wanted = sorted({int(p) for p in args.partitions.split(",") if p.strip()})
            except ValueError:
                raise CliError(f"-p {args.partitions}: expected partition numbers, e.g. 0,2") from None
            for p in wanted:
                if p not in leaders:
                    raise BrokerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"partition {args.topic}-{p}")
            leaders = {p: leaders[p] for p in wanted}
        positions = _start_offsets(client, args.topic, sorted(leaders), args.offset)
        if args.group:
            committed = client.committed_offsets(args.group)
            for p in leaders:
                if (args.topic, p) in committed:
                    positions[p] = committed[(args.topic, p)]
        consumed = 0
        try:
            consumed = _fetch_loop(client, args, leaders, positions)
        finally:
            if args.group:
                client.commit_offsets(args.group, {(args.topic, p): o for p, o in positions.items()})
    if consumed == 0 and args.format == "text":
        sys.stderr.write(f"no records consumed from {args.topic}\n")
    return 0


def _fetch_loop(
    client: KafkaClient, args: argparse.Namespace, leaders: dict[int, int], positions: dict[int, int]
) -> int:
    consumed = 0
    isolation = 1 if args.read_committed else 0
    while True:
        by_leader: dict[int, list[int]] = {}
        for p, leader in leaders.items():
            by_leader.setdefault(leader, []).append(p)
        at_end = True
        for leader, partitions in by_leader.items():
            body = {
                "replica_id": -1,
                "max_wait_ms": FETCH_MAX_WAIT_MS,
                "min_bytes": 1,
                "max_bytes": FETCH_MAX_BYTES,
                "isolation_level": isolation,
                "session_id": 0,
                "session_epoch": -1,
                "topics": [
                    {
                        "topic": args.topic,
                        "partitions": [
                            {
                                "partition": p,
                                "current_leader_epoch": -1,
                                "fetch_offset": positions[p],
                                "last_fetched_epoch": -1,
                                "log_start_offset": -1,
                                "partition_max_bytes": PARTITION_MAX_BYTES,
                            }
                            for p in partitions
                        ],
                    }
                ],
                "forgotten_topics_data": [],
                "rack_id": "",
            }
            response = client.send(FETCH, body, node=leader)
            check(response.get("error_code", 0), f"Fetch from broker {leader}")
            for topic in response["responses"]:
                for part in topic["partitions"]:
                    p = part["partition_index"]
                    code = part["error_code"]
                    if code == ErrorCode.OFFSET_OUT_OF_RANGE:
                        positions[p] = _start_offsets(client, args.topic, [p], "start")[p]
                        at_end = False
                        continue
                    check(code, f"Fetch {args.topic}-{p}")
                    records = part["records"]
                    end = (
                        part["last_stable_offset"]
                        if args.read_committed and part["last_stable_offset"] >= 0
                        else part["high_watermark"]
                    )
                    if records:
                        view = whole_batches(records)
                        for header in iter_batch_headers(view):
                            if header.next_offset <= positions[p]:
                                continue
                            if header.is_control:
                                positions[p] = header.next_offset
                                continue
                            batch = view[
                                header.position : header.position + LOG_OVERHEAD + header.batch_length
                            ]
                            for record in decode_batch_records(batch, header):
                                if record.offset < positions[p]:
                                    continue
                                _print_record(args, p, record)
                                consumed += 1
                                positions[p] = record.offset + 1
                                if args.num is not None and consumed >= args.num:
                                    return consumed
                            positions[p] = max(positions[p], header.next_offset)
                    if positions[p] < end:
                        at_end = False
        if args.exit_at_end and at_end:
            return consumed


def _print_record(args: argparse.Namespace, partition: int, record) -> None:
    if args.format == "json":
        emit_json(
            {
                "topic": args.topic,
                "partition": partition,
                "offset": record.offset,
                "timestamp": record.timestamp,
                "key": _text(record.key),
                "value": _text(record.value),
                "headers": [{"key": k, "value": _text(v)} for k, v in record.headers],
            }
        )
        return
    value = "" if record.value is None else record.value.decode(errors="replace")
    if args.print_keys:
        key = "" if record.key is None else record.key.decode(errors="replace")
        out(f"{key}\t{value}")
    else:
        out(value)
