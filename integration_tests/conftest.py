"""Helpers the integration tests share, handed out as fixtures (the tests import in
pytest's importlib mode, where sibling modules are not importable by name)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

RunInThreads = Callable[[Callable[[int], None], int, float], list[BaseException]]


def _run_in_threads(work: Callable[[int], None], count: int, join_s: float) -> list[BaseException]:
    """Runs ``work(i)`` for i in range(count), in threads released together; their errors.

    Fails the test, naming the threads, if any is still running `join_s` seconds
    after the start: a deadlock shows as a failure, not as a stalled run.
    """
    errors: list[BaseException] = []
    start = threading.Barrier(count)

    def run(index: int) -> None:
        start.wait()
        try:
            work(index)
        except BaseException as error:
            errors.append(error)

    threads = [
        threading.Thread(target=run, args=(i,), name=f"together-{i}", daemon=True)
        for i in range(count)
    ]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + join_s
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    stuck = [thread.name for thread in threads if thread.is_alive()]
    assert not stuck, f"deadlock: {stuck} still running after {join_s} s"
    return errors


@pytest.fixture
def run_in_threads() -> RunInThreads:
    """`_run_in_threads`: work in several threads started together, with a deadline."""
    return _run_in_threads
