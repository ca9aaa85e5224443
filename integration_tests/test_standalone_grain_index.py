"""`grain-index` installs and works on its own, with numpy as its only dependency.

A fresh virtual environment gets nothing but `packages/grain-index` (and what
its metadata pulls in); a script run there lists the installed distributions and
exercises the index shuffle and the IndexSampler.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
GRAIN_INDEX = REPO_ROOT / "packages" / "grain-index"

# Runs inside the fresh venv; exits non-zero (with a message) on any failed check.
_CHECK_SCRIPT = """
import importlib.metadata
import sys

import numpy
import grain_index

def normalize(name):
    return name.lower().replace("_", "-")

installed = sorted({normalize(d.metadata["Name"]) for d in importlib.metadata.distributions()})
print("installed:", installed)
extra = set(installed) - {"grain-index", "numpy"}
assert not extra, f"unexpected distributions installed: {sorted(extra)}"
assert {"grain-index", "numpy"} <= set(installed), installed

order = grain_index.index_shuffle_array(numpy.arange(1000), 999, seed=7)
assert sorted(order.tolist()) == list(range(1000)), "index_shuffle_array is not a permutation"
assert order.tolist() != list(range(1000)), "index_shuffle_array returned the identity"
scalar = grain_index.index_shuffle(3, 999, 7, 6)
assert scalar == int(order[3]), (scalar, int(order[3]))

sampler = grain_index.IndexSampler(
    10, grain_index.NoSharding(), shuffle=True, num_epochs=2, seed=1
)
keys = [m.record_key for m in sampler]
assert len(keys) == 20, keys
first, second = keys[:10], keys[10:]
assert sorted(first) == list(range(10)), keys
assert sorted(second) == list(range(10)), keys
assert first != second, f"both epochs have the same order: {keys}"

grain_modules = sorted(
    name for name in sys.modules if name.startswith("grain") and name.split(".")[0] != "grain_index"
)
assert not grain_modules, f"other grain modules were loaded: {grain_modules}"
print("OK")
"""


def _run(cmd, env, timeout):
    proc = subprocess.run(
        [str(c) for c in cmd],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, (
        f"command failed (rc={proc.returncode}): {' '.join(str(c) for c in cmd)}\n"
        f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    )
    return proc


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_grain_index_installs_and_works_alone(tmp_path):
    uv = os.environ.get("UV") or shutil.which("uv")
    if not uv:
        pytest.skip("uv is not available (neither $UV nor `uv` on PATH); it builds the venv")

    # Without VIRTUAL_ENV uv cannot fall back to the workspace venv; without
    # PYTHONPATH/PYTHONHOME nothing of the workspace leaks into the new one.
    dropped = {"VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"}
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env["UV_PYTHON_DOWNLOADS"] = "never"
    venv = tmp_path / "venv"
    python = venv / "bin" / "python"

    _run([uv, "venv", "--python", sys.executable, venv], env, timeout=120)
    _run([uv, "pip", "install", "--python", python, GRAIN_INDEX], env, timeout=300)

    script = tmp_path / "check_grain_index.py"
    script.write_text(_CHECK_SCRIPT)
    # Run from tmp_path so the repository checkout is not on sys.path.
    proc = subprocess.run(
        [str(python), str(script)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    passed = proc.returncode == 0 and proc.stdout.strip().endswith("OK")
    assert passed, (
        f"grain_index checks failed in the standalone venv (rc={proc.returncode}).\n"
        f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    )
