"""The preemption soak (`soak/driver.py`): SIGKILLs of a training loop, nothing lost.

The driver kills `soak/train_loop.py` (mp_prefetch with 2 workers over
ArrayRecord files, which grain starts from the fork server; Orbax checkpoints
every 8 steps) at random moments, during
start-up, inside steps and during checkpoint saves, restarts it from the latest
complete checkpoint each time, and compares the consumed stream with an
uninterrupted run. Its figures are printed (``pytest -s`` or ``-rA`` shows them).
The long version runs by hand: ``uv run python integration_tests/soak/driver.py
--kills 100``.
"""

import json
import os
import pathlib
import signal
import subprocess
import sys

import pytest

DRIVER = pathlib.Path(__file__).parent / "soak" / "driver.py"
# Six kills cover each kind of moment twice (the driver takes each kind in turn first);
# the long soak runs by hand (below).
KILLS = 6


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_kills_lose_and_duplicate_nothing_and_leave_nothing(tmp_path):
    command = [sys.executable, str(DRIVER), "--kills", str(KILLS), "--workdir", str(tmp_path)]
    driver = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        out, err = driver.communicate(timeout=360)
    finally:
        if driver.poll() is None:  # a timeout: the driver kills its runs on SIGTERM
            os.killpg(driver.pid, signal.SIGTERM)
            try:
                driver.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(driver.pid, signal.SIGKILL)
                driver.wait()
    print(out)
    assert out.strip(), err
    figures = json.loads(out.strip().splitlines()[-1])
    assert figures.get("ok"), (figures, err[-3000:])
    assert figures["kills_survived"] == KILLS
    assert figures["elements_compared"] == 200 * 8
    for zero in (
        "elements_lost",
        "elements_duplicated",
        "steps_mismatched",
        "replay_mismatches",
        "restore_gaps",
        "shm_left_after_soak",
        "processes_left_after_soak",
    ):
        assert figures[zero] == 0, (zero, figures)
    assert driver.returncode == 0, err
    assert set(figures["kills_by_moment"]) == {"startup", "step", "save"}
