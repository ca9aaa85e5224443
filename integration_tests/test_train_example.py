"""docs/examples/train_mlp.py, small: interrupted and resumed, it ends where a straight run ends.

Each run is a subprocess (the example SIGKILLs itself to simulate a preemption,
and starts its own JAX devices and worker processes). The final parameters'
digest of the interrupted-then-resumed run must equal the uninterrupted run's.
"""

import os
import pathlib
import re
import subprocess
import sys

import pytest

EXAMPLE = pathlib.Path(__file__).parents[1] / "docs" / "examples" / "train_mlp.py"
STEPS = 60


def _run(workdir, data, *extra, expect_kill=False):
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
    command = [sys.executable, str(EXAMPLE), "--workdir", str(workdir), "--data", str(data)]
    command += ["--steps", str(STEPS), "--checkpoint-every", "20", *extra]
    done = subprocess.run(command, capture_output=True, text=True, timeout=240, env=env)
    if expect_kill:
        assert done.returncode == -9, done.stdout + done.stderr
    else:
        assert done.returncode == 0, done.stdout + done.stderr
    assert "Exception ignored" not in done.stderr, done.stderr
    return done.stdout


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_an_interrupted_run_resumes_to_the_same_parameters(tmp_path):
    data = tmp_path / "data"
    straight = _run(tmp_path / "straight", data)
    crashed = _run(tmp_path / "resumed", data, "--crash-at", "50", expect_kill=True)
    assert "crashing at step 50" in crashed
    resumed = _run(tmp_path / "resumed", data)
    assert "resumed at step 40" in resumed
    digest = re.compile(rf"step {STEPS} loss \S+ params ([0-9a-f]+)")
    want, got = digest.search(straight), digest.search(resumed)
    assert want, straight
    assert got, resumed
    assert got.group(1) == want.group(1)
