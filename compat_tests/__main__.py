"""``python -m compat_tests --bootstrap HOST:PORT [--full] [pytest args]``: run every scenario against a broker.

``--full`` adds the heavy variants the default run leaves out for time (2000 records per codec per
client, a record near the 1 MiB limit through every client, every cross-client pair with every
codec); they can take an hour on a small machine.  Any other pytest option passes through
(``-k``, ``--clients franz-go,sarama``, ``-x``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    package_dir = Path(__file__).resolve().parent
    # rootdir = the repository, so compat_tests/conftest.py (and its options) is picked up.
    return pytest.main(
        [str(package_dir), "--rootdir", str(package_dir.parent), "-p", "no:cacheprovider", *args]
    )


if __name__ == "__main__":
    sys.exit(main())
