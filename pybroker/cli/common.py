"""What every CLI subcommand shares: broker options, output (tables or JSON), progress and errors."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from pybroker.cli.client import DEFAULT_BROKERS, CliError, KafkaClient

BROKERS_ENV = "PYBROKER_BROKERS"
Runner = Callable[[argparse.Namespace], int]


def connection_options() -> argparse.ArgumentParser:
    """The parent parser of every leaf command: where the brokers are and how to print."""
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group("global flags")
    group.add_argument(
        "--brokers",
        metavar="HOST:PORT[,...]",
        help=f"Kafka-protocol brokers to bootstrap from (default ${BROKERS_ENV} or {DEFAULT_BROKERS})",
    )
    group.add_argument(
        "-X",
        dest="x_options",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="client setting, as in rpk: brokers=HOST:PORT[,...]",
    )
    group.add_argument(
        "--format",
        choices=("text", "json"),
        default="text",
        help="output format: human tables (text, default) or JSON for scripts",
    )
    group.add_argument(
        "--timeout", type=float, default=15.0, metavar="SECONDS", help="per-request timeout (default 15)"
    )
    return parent


def brokers_of(args: argparse.Namespace) -> str:
    brokers = args.brokers
    for option in args.x_options:
        key, sep, value = option.partition("=")
        if not sep:
            raise CliError(f"-X {option}: expected KEY=VALUE")
        if key.strip() != "brokers":
            raise CliError(f"-X {key}: unknown setting (known: brokers)")
        brokers = value
    return brokers or os.environ.get(BROKERS_ENV) or DEFAULT_BROKERS


def connect(args: argparse.Namespace) -> KafkaClient:
    return KafkaClient(brokers_of(args), timeout_s=args.timeout)


def parse_pairs(items: Iterable[str], what: str) -> dict[str, str]:
    result = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CliError(f"{what} {item!r}: expected KEY=VALUE")
        result[key] = value
    return result


# --- output -------------------------------------------------------------------------------------------


def out(text: str = "") -> None:
    sys.stdout.write(text + "\n")


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """Left-aligned columns under upper-case headers, two spaces apart (the look of rpk's tables)."""
    cells = [[str(h).upper() for h in headers]] + [
        ["-" if v is None else str(v) for v in row] for row in rows
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for row in cells:
        out("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


def emit_json(value: Any) -> None:
    out(json.dumps(value, default=str))


def section(title: str) -> None:
    out(title)
    out("=" * len(title))


class Progress:
    """A line on stderr at most every ``interval_s`` during a long operation, and one at the end."""

    def __init__(self, what: str, interval_s: float = 2.0) -> None:
        self.what = what
        self.interval_s = interval_s
        self.started = time.monotonic()
        self.last = self.started
        self.reported = False

    def update(self, done: int, total: int | None = None) -> None:
        now = time.monotonic()
        if now - self.last >= self.interval_s:
            self.last = now
            self.reported = True
            of = f" of {total}" if total is not None else ""
            sys.stderr.write(f"{self.what}: {done}{of} ({now - self.started:.0f}s)\n")
            sys.stderr.flush()

    def finish(self, done: int) -> None:
        if self.reported:
            sys.stderr.write(f"{self.what}: {done} done in {time.monotonic() - self.started:.1f}s\n")
