"""The package type-checks: `mypy pybroker` (settings in pyproject.toml) finds no error.

Issue 16: a handler's misspelt field must fail the type check or a test. This runs the same mypy as
CI's own step (.ci/run), so a change that adds a type error fails here with mypy's report.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.timeout(300)
def test_mypy_finds_no_errors_in_the_package() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "pybroker"], cwd=ROOT, capture_output=True, text=True, timeout=280
    )
    report = result.stdout + result.stderr
    assert result.returncode == 0 and "Success: no issues found" in result.stdout, report
