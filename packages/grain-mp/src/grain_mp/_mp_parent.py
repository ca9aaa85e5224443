"""mp_prefetch's per-worker execution, parent side: the stage and its round robin.

`ProcessWorkersIterDataset` runs its parent pipeline in `num_workers` worker
loops on an executor (`grain_mp._executor`): processes running `grain_mp.
_mp_worker`'s loop (`grain_mp._process_executor`), or threads on a
free-threaded interpreter (`grain_mp._thread_executor`), chosen once, when the
stage is built (`executor_kind`). Worker w of n runs the whole
pipeline with every `to_iter_dataset` reading only positions w, w+n, w+2n, ...
of its MapDataset, or with `sequential_slice` the w-th of n contiguous slices
(sizes differing by at most one, larger first: 10 positions over 3 workers are
[0..3], [4..6], [7..9], as in Grain). The iterator takes one element from each
worker in turn (0, 1, ..., n-1, 0, ...), skipping workers that have ended, so
the output is deterministic and, for pipelines without many-to-one steps, the
single-process order.

State: ``{"next_worker": k, "parents": [state_0, ..., state_{n-1}]}`` (plus
``"sequential_slice": 1`` with sequential slices, so that a state of one
slicing is refused by the other), the state of each worker's pipeline as of
the last element taken (a fresh pipeline's state before its first). `set_state`
stops the workers and starts new ones at those states; a worker whose pipeline
had ended reports its end again at its first turn, so the restored round robin
is the original one. An error in a worker reaches the consumer with the
worker's traceback in a note, and stops the others.

Built by grain-mp only (`process_workers`): mp_prefetch's entry
(`grain_mp._mp_prefetch`) is one, and the positional readers
(`grain_mp._loader_positions`) build one over their units; nothing here goes
back through `IterDataset.mp_prefetch`. `PerWorkerIterator` is the merge of
every executor: multithread_prefetch runs on it with threads.
"""

from __future__ import annotations

import collections
import contextlib
import pickle
import warnings
from typing import Any

from grain_dataset import DatasetIterator, IterDataset
from grain_dataset.extension import closed_error
from grain_mp import _start
from grain_mp._executor import CLOSED, FAILED, Executor, executor_kind
from grain_mp._mp_worker import ELEMENTS, END, WARNING
from grain_mp._options import MultiprocessingOptions
from grain_mp._process_executor import ProcessExecutor
from grain_mp._round_robin import RoundRobinIterator
from grain_mp._thread_executor import ThreadExecutor


def process_workers(
    parent: IterDataset[Any],
    options: MultiprocessingOptions,
    worker_init_fn: Any = None,
    sequential_slice: bool = False,
) -> ProcessWorkersIterDataset:
    """`parent` run per worker in `options.num_workers` processes, ready to start."""
    workers = ProcessWorkersIterDataset(parent, options, worker_init_fn, sequential_slice)
    workers._pickle_parent()
    return workers


class ProcessWorkersIterDataset(IterDataset[Any]):
    """The parent pipeline, run per worker in `options.num_workers` processes (module doc)."""

    # Marks it for `_start.check_not_nested`: a pipeline holding it cannot run in workers.
    _starts_worker_processes = True

    def _fingerprint_token(self) -> str | None:
        # The same as multithread_prefetch's: their states restore into each other.
        return "round_robin"

    def __init__(
        self,
        parent: IterDataset[Any],
        options: MultiprocessingOptions,
        worker_init_fn: Any = None,
        sequential_slice: bool = False,
    ):
        if not isinstance(parent, IterDataset):
            raise TypeError(
                "mp_prefetch needs an IterDataset: call .to_iter_dataset() on the MapDataset "
                f"first, got {type(parent).__name__}."
            )
        _start.check_not_nested(parent)
        super().__init__(parent)
        self._options = options
        self._worker_init_fn = worker_init_fn
        self._sequential_slice = sequential_slice
        # Threads or processes, decided once: a pipeline run on threads is never pickled.
        # Ray actors (options.executor) get the pipeline from the Ray executor's pickle.
        self._threads = options.executor is None and executor_kind() == "threads"
        # The fork-unsafe reader that made the workers start without fork, if one did.
        self._method, self._fork_unsafe = _start.choose_method(parent)
        # Without fork: the pipeline and init fn as every start of the workers sends them.
        self._payload: bytes | None = None

    def _pickle_parent(self) -> None:
        """Pickles the whole parent pipeline, for workers that run it and do not fork."""
        if self._threads or self._method == "fork" or self._payload is not None:
            return
        if self._options.executor is not None:
            return  # the Ray executor pickles the pipeline itself
        try:
            self._payload = _start.pickled(
                self._parents[0], self._worker_init_fn, self._start_cause
            )
        except TypeError as error:
            if self._fork_unsafe is None:
                raise  # the user asked for this method
            _start.warn_forking_anyway(self._fork_unsafe, error)
            self._method, self._fork_unsafe = "fork", None

    @property
    def _start_cause(self) -> str:
        """Why the workers start the way they do, for messages."""
        if self._fork_unsafe:
            return f"because the pipeline reads {self._fork_unsafe}, which does not survive fork"
        return f"as {_start.START_METHOD_ENV}={self._method} asks"

    def _executor(self) -> Executor:
        options = self._options
        if options.executor is not None:
            # Imported here: it needs numpy only, but Ray itself is imported at start.
            from grain_mp._ray_executor import RayExecutor

            return RayExecutor(
                self._parents[0],
                options.num_workers,
                self._sequential_slice,
                self._worker_init_fn,
                options.executor,
            )
        if self._threads:
            return ThreadExecutor(
                self._parents[0],
                options.num_workers,
                options.per_worker_buffer_size,
                self._sequential_slice,
                self._worker_init_fn,
            )
        return ProcessExecutor(self, options.num_workers)

    def __iter__(self) -> DatasetIterator[Any]:
        return PerWorkerIterator(self, self._options.num_workers, self._executor())

    def __repr__(self) -> str:
        # Named as the user wrote it: statistics and messages show mp_prefetch's workers.
        options = self._options
        sequential = ", sequential_slice=True" if self._sequential_slice else ""
        return (
            f"MultiprocessPrefetchIterDataset(num_workers={options.num_workers}, "
            f"per_worker_buffer_size={options.per_worker_buffer_size}{sequential})"
        )


class PerWorkerIterator(RoundRobinIterator):
    """The round robin over `executor`'s `count` workers, in order, with their states.

    `dataset`'s parent is the pipeline each worker runs (see RoundRobinIterator).
    """

    def __init__(self, dataset: Any, count: int, executor: Executor):
        super().__init__(dataset, count)
        self._executor = executor
        # Elements received in a group but not yet returned, per worker.
        self._inbox: list[collections.deque[tuple[Any, Any]]] = [
            collections.deque() for _ in range(count)
        ]
        self._warned = False

    # -- worker life cycle -------------------------------------------------------------

    def _start(self) -> list[Any]:
        return self._executor.start(self._states, self._ended, self._ctx.dataset_options)

    def _stop(self) -> None:
        for inbox in self._inbox:
            inbox.clear()  # read ahead, never returned: the states stay before them
        self._readers = None
        self._executor.stop()

    def _interrupt_readers(self, readers: list[Any]) -> list[Any]:
        return self._executor.interrupt()

    # -- reading -----------------------------------------------------------------------

    def __next__(self) -> Any:
        if self._readers is None:
            if all(self._ended):
                raise StopIteration
            self._readers = self._started()  # it sets them too; this tells the type checker
        executor = self._executor
        while not all(self._ended):
            index = self._next_worker
            if self._ended[index]:
                self._next_worker = (index + 1) % self._count
                continue
            inbox = self._inbox[index]
            if not inbox:
                message = executor.collect(index)
                kind = message[0]
                if kind == ELEMENTS:
                    inbox.extend(message[1])
            if inbox:
                payload, state = inbox.popleft()
                element = executor.take(index, payload)
                self._states[index] = state
                self._next_worker = (index + 1) % self._count
                return element
            if kind == END:
                self._states[index] = message[1]
                self._ended[index] = True
                self._next_worker = (index + 1) % self._count
                continue
            if kind == WARNING:
                self._warn_once(message[1])
                continue
            if kind == FAILED:
                self._stop()
                raise message[1]
            if kind == CLOSED:
                raise closed_error(self) from None
            self._raise_worker_error(index, message)
        self._stop()
        raise StopIteration

    def _warn_once(self, text: str) -> None:
        """A worker's warning, issued here; each worker says it once, the user hears it once."""
        if not self._warned:
            self._warned = True
            warnings.warn(f"grain workers: {text}", RuntimeWarning, stacklevel=4)

    def _raise_worker_error(self, index: int, message: tuple[Any, ...]) -> None:
        _, blob, summary, text = message
        self._stop()
        error: BaseException | None = None
        if blob is not None:
            with contextlib.suppress(Exception):
                error = pickle.loads(blob)
        if not isinstance(error, BaseException):
            error = RuntimeError(f"grain worker {index} raised {summary}")
        # Its frames in the worker are in the note below; its notes (the stage, the
        # filtering's) came with it, and the consumer's frames are filtered as usual.
        error.add_note(f"grain worker {index} of {self._count} raised it {text.rstrip()}")
        raise error

    # -- the DatasetIterator contract --------------------------------------------------------

    def __repr__(self) -> str:
        return f"MultiprocessPrefetchIterator(workers={self._count}, next={self._next_worker})"
