"""Cases that exercise the harness itself, not Grain: a crash, a busy loop, a hang
the per-case timer cannot break, and a case after them that must still run.

Not loaded by default. Run them with

    GRAINDIFF_EXTRA_CASES=harness_selfcheck GRAINDIFF_GRACE_S=3 \\
        python3 tools/differential/run.py --only 'selfcheck.*' --out /tmp/selfcheck.jsonl

Expected: crash/crash, timeout/timeout and hang/hang (each "agree"), and
`selfcheck.after` agreeing with "still running" on both sides, with two worker
restarts per side.
"""

from __future__ import annotations

import os
import signal
import time

from _registry import case


@case("selfcheck.crash", timeout=2)
def _():
    os._exit(3)


@case("selfcheck.busy_loop", timeout=1)
def _():
    while True:
        pass


@case("selfcheck.unbreakable_hang", timeout=1)
def _():
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM])
    time.sleep(1000)


@case("selfcheck.after", timeout=2)
def _():
    return "still running"
