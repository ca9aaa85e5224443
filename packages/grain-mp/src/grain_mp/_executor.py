"""The executor interface: who runs the workers' loops, apart from what they compute.

The plan (`grain_mp._mp_prefetch.plan_execution`) says what each of n workers
computes: worker w runs its slice of a pipeline from a state. An executor runs
those n loops and hands their messages back per worker; the consumer side
(`grain_mp._mp_parent`) decides the order (round robin), keeps the states and
applies the error rules, the same for every executor. Messages are those of
`grain_mp._mp_worker` (ELEMENTS, END, WARNING, ERROR), and two of the
executor's own: FAILED, an error to raise as it is (a worker process that died
without a word; a worker thread's exception), and CLOSED, close() came from
another thread while the consumer waited.

Implementations: `grain_mp._process_executor.ProcessExecutor` (worker
processes, shared memory transport) and `grain_mp._thread_executor.
ThreadExecutor` (threads of this process, elements handed over as they are);
`grain_mp._ray_executor.RayExecutor` (Ray actors, elements through Ray's object
store), chosen by ``MultiprocessingOptions(executor=RayWorkers(...))``.
multithread_prefetch runs on threads; mp_prefetch, and through it the
DataLoader and ElasticIterator, on the kind `executor_kind` says: processes,
or threads on a free-threaded interpreter running without the GIL, where
threads run Python in parallel without pickling the pipeline or copying
elements. ``grain.config.update("py_worker_executor", "processes")`` (or
``GRAIN_PY_WORKER_EXECUTOR=processes``) chooses processes there;
``"threads"`` chooses threads on any interpreter.

Example, the life of one run::

    executor.start(states, ended, options)   # one loop per worker, at its state
    kind, *rest = executor.collect(0)        # worker 0's next message, in its order
    element = executor.take(0, payload)      # an element of an ELEMENTS message
    executor.stop()                          # idempotent; drops what was read ahead
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, Literal, Protocol

from grain_dataset import config

# (FAILED, error): raise `error` as it is, after stopping the executor.
FAILED = "failed"
# (CLOSED,): interrupted by close() from another thread while waiting.
CLOSED = "closed"


def gil_enabled() -> bool:
    """Whether this interpreter runs with the GIL (always, before free-threaded builds)."""
    probe = getattr(sys, "_is_gil_enabled", None)
    return True if probe is None else bool(probe())


def executor_kind() -> Literal["processes", "threads"]:
    """What runs mp_prefetch's workers now: ``grain.config``'s py_worker_executor, resolved.

    "auto" (the default) is threads where the GIL is off (free-threaded
    CPython, ``PYTHON_GIL=0`` or no extension turned it back on), processes
    otherwise.
    """
    chosen = config.get_or_default("py_worker_executor")
    if chosen == "auto":
        return "processes" if gil_enabled() else "threads"
    return chosen


class Executor(Protocol):
    """Runs n worker loops and returns each one's messages in the order it sent them."""

    def start(self, states: Sequence[Any], ended: Sequence[bool], options: Any) -> list[Any]:
        """Starts worker w at `states[w]` (idle if `ended[w]`); returns handles, one a worker.

        `options` are the consumer's DatasetOptions (or None).
        """
        ...

    def collect(self, index: int) -> tuple[Any, ...]:
        """Worker `index`'s next message, waiting for it (FAILED or CLOSED included)."""
        ...

    def take(self, index: int, payload: Any) -> Any:
        """The element of `payload` (from worker `index`), handing that worker a credit."""
        ...

    def stop(self) -> None:
        """Stops every worker and releases what they hold; idempotent."""
        ...

    def interrupt(self) -> list[Any]:
        """From another thread: ends the workers so that a waiting `collect` returns.

        Returns iterators to interrupt too (see `grain_dataset._runtime._guard.interrupt`).
        """
        ...
