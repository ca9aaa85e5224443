"""Fixtures shared by grain-mp's tests."""

import gc
import os
import threading
import time

import pytest

from grain_dataset import config
from grain_mp._sweep import parse_segment_name, segment_exists, segment_names, sweep_dead_segments


@pytest.fixture(autouse=True)
def worker_processes(monkeypatch):
    """Workers are processes here, on every interpreter: most of these tests are about them.

    A free-threaded interpreter without the GIL would otherwise run mp_prefetch's
    workers as threads (`grain_mp._executor.executor_kind`). Tests of the thread
    executor choose it with the `executor` fixture.
    """
    monkeypatch.setenv("GRAIN_PY_WORKER_EXECUTOR", "processes")


@pytest.fixture(params=["processes", "threads"])
def executor(request):
    """Runs the test once with worker processes and once with worker threads."""
    config.update("py_worker_executor", request.param)
    yield request.param
    config.reset("py_worker_executor")


@pytest.fixture
def new_threads():
    """`new_threads(wait_s=0.0)`: the threads started since the test began, still alive.

    It waits up to `wait_s` seconds for them to end. Threads of earlier tests
    that end meanwhile do not count (a thread count would).
    """
    before = set(threading.enumerate())

    def alive(wait_s: float = 0.0) -> list[threading.Thread]:
        deadline = time.monotonic() + wait_s
        while True:
            left = [t for t in threading.enumerate() if t not in before and t.is_alive()]
            if not left or time.monotonic() >= deadline:
                return left
            gc.collect()
            time.sleep(0.02)

    return alive


@pytest.fixture
def no_leaked_segments():
    """Fails the test if it leaves a segment that this process owns or created behind.

    Only this process's segments count: other sessions and pytest processes share
    /dev/shm. Test files that make segments use it on every test, with
    ``pytestmark = pytest.mark.usefixtures("no_leaked_segments")``.
    """

    def ours() -> set[str]:
        me = os.getpid()
        return {name for name in segment_names() if me in parse_segment_name(name)}

    before = ours()
    yield
    gc.collect()
    assert ours() - before == set()


@pytest.fixture
def own_sweep():
    """`own_sweep(kill)`: the names `kill()` returns (segments a group it started and
    SIGKILLed left behind) and the count our `sweep_dead_segments()` removed after it.

    Another process's sweep may take them first (a second pytest process starting
    workers sweeps dead runs too, as a second job on one machine would); then `kill`
    runs again, up to five times, so that the sweep checked is this one.
    """

    def sweep(kill):
        for _ in range(5):
            names = kill()
            # SIGKILL ran no cleanup: the segments are still there, unless someone swept.
            if not all(map(segment_exists, names)):
                continue
            removed = sweep_dead_segments()
            if removed < len(names) and not any(map(segment_exists, names)):
                continue  # someone else's sweep took some between our check and ours
            return names, removed
        pytest.fail("another process's sweep took the killed group's segments five times")

    return sweep
