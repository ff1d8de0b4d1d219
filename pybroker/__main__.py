"""The command line: `pybroker serve [server.properties] [--override key=value ...]`, shaped like
`kafka-server-start.sh`, `pybroker configs` to list the accepted configuration keys, and the client
commands of `pybroker.cli` (topic, group, config, cluster, produce, consume)."""

from __future__ import annotations

import argparse
import logging
import os
import platform
import sys
from collections.abc import Sequence

from pybroker import __version__
from pybroker.config import (
    BROKER_CONFIGS,
    EVENT_LOOPS,
    TOPIC_CONFIGS,
    BrokerConfig,
    ConfigError,
    ConfigErrors,
    ConfigKey,
)
from pybroker.topic_config import format_value

log = logging.getLogger(__name__)

# glibc reads these only at process start (the team's perf-limits research, B2 note 3): with its
# default dynamic thresholds every fresh 1 MiB buffer is a new mmap that page-faults, which cut large-frame
# throughput from ~4-6 GB/s to ~0.7 GB/s in measurements on this kind of machine.
MALLOC_TUNING = {
    "MALLOC_MMAP_THRESHOLD_": str(64 * 1024 * 1024),
    "MALLOC_TRIM_THRESHOLD_": str(256 * 1024 * 1024),
}
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

DESCRIPTION = "A Kafka-wire-compatible broker written in Python."
SERVE_EPILOG = """\
Configuration uses Apache Kafka's server.properties keys, types and defaults; --override values win
over the file. With no file and no overrides the broker listens on PLAINTEXT://127.0.0.1:9092, keeps
data in ./pybroker-data, is node 0 and auto-creates topics with 1 partition.

examples:
  pybroker serve
  pybroker serve config/server.properties --override log.dirs=/var/lib/pybroker
  pybroker serve --override listeners=PLAINTEXT://127.0.0.1:19092 --override num.partitions=3

Run `pybroker configs` for every accepted key with its type, default and meaning.
A configuration error is printed on stderr and the exit status is 1.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pybroker", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"pybroker {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True

    serve = commands.add_parser(
        "serve",
        help="run the broker until SIGTERM/SIGINT",
        description="Run the broker until SIGTERM or SIGINT.",
        epilog=SERVE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serve.add_argument(
        "properties", nargs="?", metavar="server.properties", help="a Kafka-style properties file"
    )
    serve.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a configuration key, overriding the file (repeatable)",
    )
    serve.add_argument(
        "--log-level",
        type=str.upper,
        choices=LOG_LEVELS,
        default="INFO",
        help="logging threshold for messages on stderr (default INFO)",
    )
    serve.add_argument(
        "--event-loop",
        choices=EVENT_LOOPS,
        default="uvloop",
        help="asyncio event loop implementation (default uvloop)",
    )

    configs = commands.add_parser(
        "configs",
        help="list the accepted configuration keys",
        description="List the broker keys accepted in server.properties/--override, or the topic configs.",
    )
    configs.add_argument(
        "--topic", action="store_true", help="list topic-level configs instead of broker configs"
    )
    from pybroker import cli  # the client commands: topic, group, config, cluster, produce, consume

    cli.add_commands(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point; returns the exit status."""
    args = build_parser().parse_args(argv)
    if args.command == "configs":
        return _print_configs(topic=args.topic)
    if hasattr(args, "run"):
        from pybroker import cli

        return cli.run(args)
    return _serve(args, reexec_allowed=argv is None)


def _serve(args: argparse.Namespace, *, reexec_allowed: bool) -> int:
    try:
        config = BrokerConfig.load(args.properties, args.override, event_loop=args.event_loop)
    except ConfigError as e:
        print(_config_error_text(e), file=sys.stderr)
        return 1
    # Only when this process is the command itself: re-exec'ing from main([...]) called inside
    # another program (a test, say) would replace that program.
    if reexec_allowed:
        _reexec_with_malloc_tuning()
    logging.basicConfig(level=args.log_level, format=LOG_FORMAT, stream=sys.stderr)
    log.info(
        "starting pybroker: node %d, listeners %s, advertised %s, log dirs %s, %s event loop",
        config.node_id,
        ",".join(map(str, config.listener_endpoints)),
        ",".join(map(str, config.advertised_endpoints)),
        ",".join(config.log_dirs),
        config.event_loop,
    )
    from pybroker.broker import run  # imported late: --help and config errors must not need the server

    try:
        return run(config)
    except ConfigError as e:  # e.g. a meta.properties that belongs to another node
        log.error("configuration error: %s", e)
        return 1


def _config_error_text(e: ConfigError) -> str:
    if isinstance(e, ConfigErrors):
        return f"pybroker: {len(e.errors)} configuration errors:\n" + "\n".join(f"  {x.message}" for x in e.errors)
    return f"pybroker: configuration error: {e}"


def _reexec_with_malloc_tuning() -> None:
    if any(name in os.environ for name in MALLOC_TUNING) or platform.libc_ver()[0] != "glibc":
        return
    env = dict(os.environ, **MALLOC_TUNING)
    # sys.orig_argv is the interpreter's own command line (`python -m pybroker serve ...` or the console
    # script), so the new image runs exactly the same command.
    command = [sys.executable, *sys.orig_argv[1:]]
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(sys.executable, command, env)
    except OSError as e:
        logging.getLogger(__name__).warning(
            "could not re-exec with malloc tuning (%s); continuing without", e
        )


def _print_configs(*, topic: bool) -> int:
    if topic:
        rows = [
            (d.key, ", ".join(s.name for s in d.synonyms))
            for d in TOPIC_CONFIGS.values()
            if not d.key.internal
        ]
    else:
        rows = [(k, "") for k in BROKER_CONFIGS.values()]
    try:
        for key, synonyms in sorted(rows, key=lambda r: r[0].name):
            sys.stdout.write(_describe_key(key, synonyms))
        sys.stdout.flush()
    except BrokenPipeError:  # `pybroker configs | head`: the reader has gone, which is fine
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def _describe_key(key: ConfigKey, synonyms: str) -> str:
    default = "(none)" if key.default is None else format_value(key.default) or '""'
    lines = [f"{key.name}\n", f"    {key.doc}\n", f"    type {key.type.name}, default {default}"]
    if key.validator is not None:
        lines.append(f", valid values {key.validator.describe()}")
    lines.append(f", importance {key.importance.value}\n")
    if synonyms:
        lines.append(f"    broker default from: {synonyms}\n")
    return "".join(lines)


if __name__ == "__main__":
    sys.exit(main())
