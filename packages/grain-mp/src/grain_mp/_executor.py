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
processes, shared memory transport: mp_prefetch, and through it the DataLoader
and ElasticIterator) and `grain_mp._multithread.ThreadExecutor` (threads:
multithread_prefetch).

Example, the life of one run::

    executor.start(states, ended, options)   # one loop per worker, at its state
    kind, *rest = executor.collect(0)        # worker 0's next message, in its order
    element = executor.take(0, payload)      # an element of an ELEMENTS message
    executor.stop()                          # idempotent; drops what was read ahead
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

# (FAILED, error): raise `error` as it is, after stopping the executor.
FAILED = "failed"
# (CLOSED,): interrupted by close() from another thread while waiting.
CLOSED = "closed"


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

        Returns iterators to interrupt too (see `grain_dataset._guard.interrupt`).
        """
        ...
