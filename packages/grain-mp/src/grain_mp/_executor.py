"""The executor interface: who runs the workers' loops, apart from what they compute.

The plan (`grain_mp._mp_prefetch.plan_execution`) says what each of n workers
computes: worker w runs its slice of a pipeline from a state. An executor runs
those n loops and hands their messages back per worker; the consumer side
(`grain_mp._mp_parent`) decides the order (round robin), keeps the states and
applies the error rules, the same for every executor. Messages are those of
`grain_mp._mp_worker` (ELEMENTS, END, WARNING, ERROR), and DIED: a worker
that ended without a word, with the error to raise (the executor is stopped).

Implementations: `grain_mp._process_executor.ProcessExecutor` (worker
processes, shared memory transport). Threads (`multithread_prefetch`) and the
DataLoader's and ElasticIterator's reads are to follow on the same interface.

Example, the life of one run::

    executor.start(states, ended, options)   # one loop per worker, at its state
    kind, *rest = executor.collect(0)        # worker 0's next message, in its order
    element = executor.take(0, payload)      # an element of an ELEMENTS message
    executor.stop()                          # idempotent; drops what was read ahead
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

# (DIED, error): the worker is gone without a message; the executor stopped itself.
DIED = "died"


class Executor(Protocol):
    """Runs n worker loops and returns each one's messages in the order it sent them."""

    def start(self, states: Sequence[Any], ended: Sequence[bool], options: Any) -> list[Any]:
        """Starts worker w at `states[w]` (idle if `ended[w]`); returns handles, one a worker.

        `options` are the consumer's DatasetOptions (or None).
        """
        ...

    def collect(self, index: int) -> tuple[Any, ...]:
        """Worker `index`'s next message; (DIED, error), stopped, if it died without one."""
        ...

    def take(self, index: int, payload: Any) -> Any:
        """The element of `payload` (from worker `index`), handing that worker a credit."""
        ...

    def stop(self) -> None:
        """Stops every worker and releases what they hold; idempotent."""
        ...

    def interrupt(self) -> None:
        """From another thread: ends the workers so that a waiting `collect` returns."""
        ...
