"""docs/examples/token_budget_batches.py, small: few compilations, exact resume, worker processes.

The example asserts its own resume; here it runs in a subprocess (it starts
JAX and worker processes) and its report is checked.
"""

import pathlib
import re
import subprocess
import sys

import pytest

EXAMPLE = pathlib.Path(__file__).parents[1] / "docs" / "examples" / "token_budget_batches.py"


@pytest.mark.timeout(240)
def test_the_example_compiles_once_per_shape_and_resumes():
    command = [sys.executable, str(EXAMPLE), "--documents", "800", "--workers", "2"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=200)
    assert done.returncode == 0, done.stdout + done.stderr
    compilations = int(re.search(r"jit compilations: (\d+)", done.stdout).group(1))
    seen = re.search(r"shapes seen: (\[.*\]);", done.stdout).group(1)
    assert 1 <= compilations <= 4
    assert compilations == seen.count("(")
    padding = float(re.search(r"padding: ([\d.]+)%", done.stdout).group(1))
    fixed = float(re.search(r"padded to 1024: ([\d.]+)%", done.stdout).group(1))
    assert padding < fixed
    assert "batch 11 is the same" in done.stdout
