"""``python -m compat_tests --bootstrap HOST:PORT [pytest args]``: run every scenario against a broker."""

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
