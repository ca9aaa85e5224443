"""The repository passes ruff's lint and format checks, configured in the root pyproject.toml.

Part of the README's test command, so that `.ci/run` keeps the house clean: a
change that ruff would flag or reformat fails here, with ruff's own report.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[3]


def _ruff(*arguments: str) -> subprocess.CompletedProcess[str]:
    pytest.importorskip("ruff", reason="ruff is a dev dependency of the workspace")
    assert (REPOSITORY / "pyproject.toml").is_file()
    return subprocess.run(
        [sys.executable, "-m", "ruff", *arguments],
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        timeout=110,
    )


@pytest.mark.timeout(120)
def test_ruff_check_passes() -> None:
    done = _ruff("check", "--no-cache", "--output-format", "concise", ".")
    assert done.returncode == 0, (
        f"ruff check found problems (fix: `uv run ruff check --fix .`):\n{done.stdout}{done.stderr}"
    )


@pytest.mark.timeout(120)
def test_ruff_format_check_passes() -> None:
    done = _ruff("format", "--no-cache", "--check", ".")
    assert done.returncode == 0, (
        f"files ruff would reformat (fix: `uv run ruff format .`):\n{done.stdout}{done.stderr}"
    )
