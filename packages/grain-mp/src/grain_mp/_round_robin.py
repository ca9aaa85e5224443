"""A round robin over N readers, shared by mp_prefetch (processes) and multithread_prefetch.

Each reader runs its slice of the parent pipeline; the iterator returns their
elements in turn. `RoundRobinIterator` keeps what both need: whose turn it is,
each reader's pipeline state, which readers ended, and the state format

    {"next_worker": w, "parents": [state of reader i, ...]}

(with ``"sequential_slice": 1`` when the readers read contiguous slices). Both
prefetchers write and check it the same way, so a state of one restores the
other. A subclass starts (`_start`) and stops (`_stop`) its readers, and
stops them from another thread (`_interrupt_readers`) when close() is called
there while `next()` waits on them (see `grain_dataset._runtime._guard`).
"""

from __future__ import annotations

import abc
import json
import sys
from typing import Any

from grain_dataset import DatasetIterator, unstamped
from grain_dataset.extension import check_state, closed_error


def round_robin_state(next_worker: int, states: list[Any], sequential: bool) -> dict[str, Any]:
    """The state of a round robin at reader `next_worker` with its readers at `states`."""
    state: dict[str, Any] = {"next_worker": next_worker, "parents": list(states)}
    if sequential:
        state["sequential_slice"] = 1
    return state


def check_round_robin_state(
    state: Any, stage: str, count: int, state_type: type, sequential: bool, reader: str
) -> tuple[int, list[Any]]:
    """(next_worker, the readers' states) of `state`; raises naming what does not fit.

    `reader` names a reader in messages ("worker" or "thread").
    """
    keys: tuple[str, ...] = ("next_worker", "parents")
    if sequential:
        keys += ("sequential_slice",)
    check_state(state, stage, keys)
    parents = state["parents"]
    if not isinstance(parents, list) or len(parents) != count:
        raise ValueError(
            f"state {state!r} does not fit {stage}: it needs one entry per {reader} "
            f"({count}); a checkpoint taken with another number of {reader}s cannot be "
            "restored here."
        )
    if state["next_worker"] >= count:
        raise ValueError(f"state['next_worker'] of {stage} must be < {count}.")
    for index, entry in enumerate(parents):
        if type(entry) is not state_type:
            raise TypeError(
                f"state['parents'][{index}] of {stage} must be the state of {reader} "
                f"{index}'s pipeline, a {state_type.__name__} from get_state(), "
                f"got {type(entry).__name__}; the state is corrupt or from another pipeline."
            )
    return state["next_worker"], list(parents)


class RoundRobinIterator(DatasetIterator[Any]):
    """The iterator of a prefetcher that runs `count` readers of `dataset`'s parent."""

    # For statistics: its calls wait on the readers, whose stages (copies in worker
    # processes or threads) are not tracked here, so the wait is their work.
    _STATS_ASYNC = True
    _STATS_READERS_UNTRACKED = True
    # How messages name one reader.
    _READER = "worker"

    def __init__(self, dataset: Any, count: int):
        super().__init__()
        self._dataset = dataset
        self._count = count
        # A fresh pipeline's state (the same in every reader: slicing changes positions,
        # not the state's shape), so that states keep one shape from the start.
        fresh = unstamped(iter(dataset._parents[0]))
        initial = json.dumps(fresh.get_state())
        fresh.close()
        self._states: list[Any] = [json.loads(initial) for _ in range(count)]
        # What every reader's state must be (a dict for every grain stage): a reader
        # given None, say, would silently start its share from the beginning.
        self._state_type = type(self._states[0])
        self._ended = [False] * count
        self._next_worker = 0
        self._readers: list[Any] | None = None  # while started
        # Set by close() from another thread: no reader starts again, no wait lasts.
        self._interrupted = False

    @abc.abstractmethod
    def _start(self) -> list[Any]:
        """Starts the readers at `_states` (those not `_ended`); returns them."""

    @abc.abstractmethod
    def _stop(self) -> None:
        """Stops the readers (sets `_readers` to None); what they read ahead is dropped."""

    @abc.abstractmethod
    def _interrupt_readers(self, readers: list[Any]) -> list[Any]:
        """Stops `readers` from another thread, waking a `next()` that waits on them.

        Runs while `next()` may run in another thread: it must not touch what
        that thread uses (pipes, queues), only signal. Returns iterators to
        interrupt too (see `grain_dataset._runtime._guard.interrupt`).
        """

    def _started(self) -> list[Any]:
        """Starts the readers, unless close() from another thread came first."""
        if self._interrupted:
            raise closed_error(self)
        self._readers = self._start()
        if self._interrupted:  # it came while they started: it may not have seen them
            self._stop()
            raise closed_error(self)
        return self._readers

    def _interrupt(self) -> list[Any]:
        self._interrupted = True
        readers = self._readers
        return self._interrupt_readers(readers) if readers else []

    def get_state(self) -> dict[str, Any]:
        return round_robin_state(self._next_worker, self._states, self._dataset._sequential_slice)

    def set_state(self, state: dict[str, Any]) -> None:
        next_worker, states = check_round_robin_state(
            state,
            repr(self._dataset),
            self._count,
            self._state_type,
            self._dataset._sequential_slice,
            self._READER,
        )
        self._stop()
        self._next_worker = next_worker
        self._states = states
        self._ended = [False] * self._count

    def start_prefetch(self) -> None:
        if self._readers is None and not all(self._ended):
            self._started()

    def close(self) -> None:
        """Stops the readers; idempotent.

        Worker processes are asked, terminated, then killed: two seconds at
        most (`grain_mp._ending`); a thread stuck in user code is left, a
        daemon (see docs/troubleshooting.md, "A transformation that never
        returns").
        """
        self._stop()

    def __del__(self) -> None:
        # At interpreter exit module globals may already be gone (free-threaded CPython
        # finalizes these after its modules are cleared): stay silent, with no global
        # outside the try (not contextlib.suppress, which is one).
        try:
            if sys.is_finalizing():
                return
            self._stop()
        except Exception:
            pass
