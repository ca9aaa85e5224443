"""The packages' sources pass the type check configured in the root pyproject.toml.

`[tool.mypy]` there checks packages/*/src: every function annotated
(`disallow_untyped_defs`), bodies checked. mypy keeps its cache in .mypy_cache
at the repository root, so a run after the first takes about a second.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[3]


@pytest.mark.timeout(180)
def test_mypy_passes_on_the_packages() -> None:
    pytest.importorskip("mypy", reason="mypy is a dev dependency of the workspace")
    assert (REPOSITORY / "pyproject.toml").is_file()
    env = {key: value for key, value in os.environ.items() if key != "MYPYPATH"}
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary", "--hide-error-context"],
        cwd=REPOSITORY,
        env=env,
        capture_output=True,
        text=True,
        timeout=170,
    )
    report = (done.stdout + done.stderr).strip()
    assert done.returncode == 0, f"mypy found type errors:\n{report}"
