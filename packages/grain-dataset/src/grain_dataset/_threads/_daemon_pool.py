"""A small pool of daemon threads running submitted calls into Futures.

Shared by `to_iter_dataset`'s read-ahead and the interleave's dataset opening.
Threads start as work arrives, hold no reference to the iterator that owns
the pool (so dropping the iterator stops nothing it needs), and being daemons
never delay interpreter exit.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any


def _work(tasks: queue.SimpleQueue) -> None:
    while True:
        task = tasks.get()
        if task is None:
            return
        future, fn, args = task
        del task
        if future.set_running_or_notify_cancel():
            try:
                future.set_result(fn(*args))
            except BaseException as error:  # even KeyboardInterrupt must reach the consumer
                future.set_exception(error)
        del future, fn, args


class DaemonPool:
    """Runs ``fn(*args)`` in up to `max_threads` daemon threads named `name`."""

    def __init__(self, max_threads: int, name: str):
        self._max_threads = max_threads
        self._name = name
        self._tasks: queue.SimpleQueue = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []

    def submit(self, fn: Callable[..., Any], *args: Any, busy: int | None = None) -> Future:
        """Queues the call; starts a thread while fewer than min(max_threads, busy) run."""
        wanted = self._max_threads if busy is None else min(self._max_threads, busy)
        if len(self._threads) < wanted:
            self._start()
        future: Future = Future()
        self._tasks.put((future, fn, args))
        return future

    def _start(self) -> None:
        thread = threading.Thread(target=_work, args=(self._tasks,), name=self._name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def resize(self, threads: int) -> None:
        """Runs calls in exactly `threads` threads (at most `max_threads`), from now on.

        Threads beyond `threads` finish the calls queued before this and exit;
        missing ones start at once. So a caller may queue more calls than run,
        and a thread that ends one call starts the next without waiting for the
        caller, while at most `threads` of them run once the queue has drained.
        """
        wanted = max(0, min(threads, self._max_threads))
        while len(self._threads) > wanted:
            self._threads.pop()
            self._tasks.put(None)
        while len(self._threads) < wanted:
            self._start()

    def cpu_clock(self) -> Callable[[], float] | None:
        """A clock of the CPU seconds the pool's threads have used, or None.

        Each thread's own clock, not the process's: other threads of the process
        (other pipelines, a test runner's) do not count. None where the platform
        has no per-thread clocks, or a thread has ended since.
        """
        try:
            clocks = [time.pthread_getcpuclockid(thread.ident) for thread in self._threads]  # type: ignore[arg-type]
        except (AttributeError, OSError):  # no such clocks (macOS, Windows); a thread ended
            return None

        def clock() -> float:
            return sum(time.clock_gettime(c) for c in clocks)

        return clock

    @property
    def size(self) -> int:
        """The threads running or waiting for calls (those told to exit not counted)."""
        return len(self._threads)

    def shutdown(self) -> None:
        """Lets each thread finish its current call and exit."""
        self.resize(0)
