"""`multithread_prefetch`: mp_prefetch's slicing and round robin, with threads.

Model. Thread t of n iterates its own copy of the pipeline, whose
`to_iter_dataset` reads only the t-th slice of the positions (strided
``t::n``, or with `sequential_slice` the t-th contiguous slice), exactly as
worker t of ``mp_prefetch`` would: the thread creates its pipeline's iterator
with `grain_dataset.extension.iter_worker_slice`, so the slice applies to that
pipeline only (not to one a transformation builds and iterates).
Each thread holds at most `buffer_size` finished elements (at least one) in
its queue, each with its pipeline's state after producing it; the consumer
takes one element from each thread in turn, skipping threads that have ended.

So the output and the state are those of ``mp_prefetch``'s per-worker
execution with as many workers: ``{"next_worker": k, "parents": [state_0,
...]}`` (and ``"sequential_slice": 1``), the state of each thread's pipeline as
of the last element taken. A state of this format restores into either. Over
a positional pipeline mp_prefetch runs in order instead (`grain_mp.
_mp_positional`) and hands out the plain pipeline's state, which this stage
refuses by its shape; the shared fingerprint token lets a state of this one
continue there, per worker. Threads help where elements wait (I/O, or code
that releases the GIL, or free-threaded Python); pure Python work wants processes.

Threads are daemons that hold no reference to the iterator: closing it,
`set_state`, the end of the data or garbage collection stops them. A thread
stuck in a transformation that never returns cannot be stopped: it stays,
holding its own copy of the pipeline (not this iterator), until the
transformation returns. close() from another thread while `next()` waits for
such a thread makes that `next()` raise the closed-iterator ValueError within
`POLL_S` (`ThreadExecutor.interrupt`, see `grain_dataset._runtime._guard`).

Engine. The threads are an executor (`grain_mp._executor`): `grain_mp.
_thread_executor.ThreadExecutor` runs the loops (mp_prefetch's on free-threaded
Python too), and the consumer is mp_prefetch's per-worker merge
(`grain_mp._mp_parent.PerWorkerIterator`), so the order, states and error
rules are the processes' own.
"""

from __future__ import annotations

from typing import Any

from grain_dataset import DatasetIterator, IterDataset
from grain_mp._mp_parent import PerWorkerIterator
from grain_mp._thread_executor import ThreadExecutor


def multithread_prefetch(
    ds: IterDataset[Any],
    num_threads: int,
    buffer_size: int,
    sequential_slice: bool = False,
) -> IterDataset[Any]:
    """Runs `ds` in `num_threads` threads, each on its slice, merged round robin.

    Args:
      ds: the pipeline, an IterDataset (``MapDataset.to_iter_dataset()`` first).
      num_threads: threads, >= 0; 0 returns `ds` unchanged.
      buffer_size: finished elements each thread may hold ahead, >= 0 (a thread
        always holds at least the one it is handing over).
      sequential_slice: give each thread a contiguous slice of the positions
        instead of every num_threads-th one.

    The output and state are those of ``ds.mp_prefetch(MultiprocessingOptions(
    num_workers=num_threads), sequential_slice=...)``.

    Example::

        ds = grain.MapDataset.source(files).map(read).to_iter_dataset()
        ds = grain.experimental.multithread_prefetch(ds, num_threads=8, buffer_size=4)
    """
    if not isinstance(ds, IterDataset):
        raise TypeError(
            "multithread_prefetch needs an IterDataset as `ds`: call .to_iter_dataset() on "
            f"the MapDataset first, got {type(ds).__name__}."
        )
    for name, value in (("num_threads", num_threads), ("buffer_size", buffer_size)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"`{name}` must be an integer >= 0, got {value!r}.")
        if value < 0:
            raise ValueError(f"`{name}` must be >= 0, got {value}.")
    if not isinstance(sequential_slice, bool):
        raise TypeError(f"`sequential_slice` must be a bool, got {sequential_slice!r}.")
    if num_threads == 0:
        return ds
    return MultithreadPrefetchIterDataset(ds, num_threads, buffer_size, sequential_slice)


class MultithreadPrefetchIterDataset(IterDataset[Any]):
    """The parent pipeline, run in `num_threads` threads (see the module docstring)."""

    def _fingerprint_token(self) -> str | None:
        return "round_robin"  # as mp_prefetch's: its per-worker states restore here

    def __init__(
        self,
        parent: IterDataset[Any],
        num_threads: int,
        buffer_size: int,
        sequential_slice: bool = False,
    ):
        super().__init__(parent)
        self._num_threads = num_threads
        self._buffer_size = buffer_size
        self._sequential_slice = sequential_slice

    def __iter__(self) -> DatasetIterator[Any]:
        return _MultithreadIterator(self)

    def __repr__(self) -> str:
        sequential = ", sequential_slice=True" if self._sequential_slice else ""
        return (
            f"MultithreadPrefetchIterDataset(num_threads={self._num_threads}, "
            f"buffer_size={self._buffer_size}{sequential})"
        )


class _MultithreadIterator(PerWorkerIterator):
    _READER = "thread"

    def __init__(self, dataset: MultithreadPrefetchIterDataset):
        count = dataset._num_threads
        executor = ThreadExecutor(
            dataset._parents[0],
            count,
            dataset._buffer_size,
            dataset._sequential_slice,
            name="grain-multithread-prefetch",
        )
        super().__init__(dataset, count, executor)

    def __repr__(self) -> str:
        return f"MultithreadPrefetchIterator(threads={self._count}, next={self._next_worker})"
