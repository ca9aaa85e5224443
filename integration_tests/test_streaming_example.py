"""docs/examples/streaming_resume.py runs: record-range shards and resumed runs equal straight ones.

The example checks itself (every row once over the hosts, shares within one
row, an interrupted run under mp_prefetch workers resumed from its JSON state
equal to an uninterrupted one, the same for HFIterDataset after an HF filter)
and exits with status 1 if any check fails.
"""

import os
import pathlib
import subprocess
import sys

import pytest

EXAMPLE = pathlib.Path(__file__).parents[1] / "docs" / "examples" / "streaming_resume.py"


@pytest.mark.timeout(300)
def test_the_streaming_example_checks_out(tmp_path):
    pytest.importorskip("pyarrow")
    command = [sys.executable, str(EXAMPLE), "--workdir", str(tmp_path), "--hosts", "8"]
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=280, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "every row exactly once: True; sizes differ by 1" in done.stdout
    assert "resumed after 7 equals the uninterrupted run: True" in done.stdout
    assert "Exception ignored" not in done.stderr, done.stderr
