"""Ending worker processes within a bound, even ones stuck in user code.

A worker is asked first (its parent closes its pipes: a worker waiting for
credits or sending sees the end and exits), then terminated (SIGTERM, which a
worker turns into an exception inside whatever it runs, so its ``finally``
clauses and its segment pool clean up), then killed (SIGKILL). Each step waits
at most `ASK_S`, `TERMINATE_S` and `KILL_S` for every process at once, so
ending any number of workers takes at most their sum, two seconds; a worker
that exits as asked costs nothing more. Closing the pipes is the caller's part
(only the thread that reads them may close them); `end_processes` waits and
signals.

It never reaps (``waitpid``): it watches each process's sentinel, so that it
may run while another thread joins the same processes (close() from another
thread, `grain_dataset._runtime._guard`). The caller joins them afterwards.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable
from multiprocessing import connection
from typing import Any

ASK_S = 0.5
"""How long a worker may take to exit on its own once its pipes are closed."""
TERMINATE_S = 0.5
"""How long a worker may take to exit after SIGTERM before it is killed."""
KILL_S = 1.0
"""How long to wait for a killed worker to be gone (it cannot refuse)."""


def end_processes(processes: Iterable[Any], ask_s: float = ASK_S) -> None:
    """Waits `ask_s` for `processes` to exit, then terminates, then kills the rest.

    Returns once every process has exited, or after at most
    ``ask_s + TERMINATE_S + KILL_S`` seconds.
    """
    running = _running_after(list(processes), ask_s)
    for signal_them, wait_s in (("terminate", TERMINATE_S), ("kill", KILL_S)):
        if not running:
            return
        for process in running:
            # Closed or reaped meanwhile by the thread that owns it: nothing to signal.
            with contextlib.suppress(ValueError, OSError):
                getattr(process, signal_them)()
        running = _running_after(running, wait_s)


def _running_after(processes: list[Any], timeout: float) -> list[Any]:
    """The processes still running after waiting up to `timeout` seconds for them to exit."""
    by_sentinel = {}
    for process in processes:
        with contextlib.suppress(ValueError):  # closed by its owner: it was joined
            by_sentinel[process.sentinel] = process
    deadline = time.monotonic() + timeout
    while by_sentinel:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        try:
            ready = connection.wait(list(by_sentinel), left)
        except (OSError, ValueError):  # a sentinel closed under us: its owner joined it
            break
        for sentinel in ready:
            by_sentinel.pop(sentinel, None)
    return list(by_sentinel.values())
