"""`pybroker topic|group|config|cluster|produce|consume ...`: an rpk-like command line for any
Kafka-protocol broker, speaking the wire protocol through pybroker's own codec.

Each family lives in its own module with ``add_parser(subparsers, parent)``; the leaf parsers set
``run`` to the function that carries the command out and returns the exit status.
"""

from __future__ import annotations

import argparse
import os
import sys

from pybroker.cli import cluster, config, consume, group, produce, topic
from pybroker.cli.client import CliError
from pybroker.cli.common import connection_options
from pybroker.protocol import codec

FAMILIES = (topic, group, config, cluster, produce, consume)


def add_commands(commands: argparse._SubParsersAction) -> None:
    parent = connection_options()
    for family in FAMILIES:
        family.add_parser(commands, parent)


def run(args: argparse.Namespace) -> int:
    """Run a parsed CLI command: one-line errors on stderr, never a traceback."""
    try:
        return args.run(args)
    except CliError as e:
        sys.stderr.write(f"pybroker: error: {e}\n")
        return 1
    except codec.EncodeError as e:  # a request this client built wrongly: still one line, no traceback
        sys.stderr.write(f"pybroker: error: could not encode the request: {e}\n")
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `pybroker consume t | head`: the reader has gone, which is fine
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    finally:
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
