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
`POLL_S` (`_interrupt_readers`, see `grain_dataset._guard`).
"""

from __future__ import annotations

import contextlib
import queue
import threading
from typing import Any

from grain_dataset import DatasetIterator, IterDataset, unstamped
from grain_dataset.extension import POLL_S, closed_error, iter_worker_slice
from grain_mp._round_robin import RoundRobinIterator

_ELEMENT, _END, _ERROR = "element", "end", "error"


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


class _Slice:
    """One thread's queue and stop flag: all the thread shares with the consumer."""

    def __init__(self, size: int):
        self.queue: queue.Queue[tuple[str, Any, Any]] = queue.Queue(max(1, size))
        self.stop = threading.Event()
        # The thread's pipeline, for close() from another thread to interrupt its waits.
        self.iterator: Any = None

    def put(self, message: tuple[str, Any, Any]) -> bool:
        """Queues `message`, waiting for room; False once the consumer stopped us."""
        while not self.stop.is_set():
            try:
                self.queue.put(message, timeout=POLL_S)
                return True
            except queue.Full:
                continue
        return False


def _thread_main(
    dataset: IterDataset[Any],
    index: int,
    count: int,
    sequential: bool,
    state: Any,
    box: _Slice,
) -> None:
    iterator = None
    try:
        # The outer iterator's fingerprint covers its states.
        iterator = iter_worker_slice(dataset, index, count, sequential)
        iterator = box.iterator = unstamped(iterator)
        if state is not None:
            iterator.set_state(state)
        while not box.stop.is_set():
            try:
                element = next(iterator)
            except StopIteration:
                box.put((_END, None, iterator.get_state()))
                return
            if not box.put((_ELEMENT, element, iterator.get_state())):
                return
            del element
    except BaseException as error:
        box.put((_ERROR, error, None))
    finally:
        box.iterator = None
        if iterator is not None:
            with contextlib.suppress(Exception):
                iterator.close()


class _MultithreadIterator(RoundRobinIterator):
    _READER = "thread"

    def __init__(self, dataset: MultithreadPrefetchIterDataset):
        super().__init__(dataset, dataset._num_threads)

    def _start(self) -> list[_Slice]:
        dataset = self._dataset
        boxes = []
        for index in range(self._count):
            box = _Slice(dataset._buffer_size)
            boxes.append(box)
            if self._ended[index]:
                continue
            thread = threading.Thread(
                target=_thread_main,
                args=(
                    dataset._parents[0],
                    index,
                    self._count,
                    dataset._sequential_slice,
                    self._states[index],
                    box,
                ),
                name=f"grain-multithread-prefetch-{index}",
                daemon=True,
            )
            thread.start()
        return boxes

    def _stop(self) -> None:
        boxes, self._readers = self._readers, None
        for box in boxes or ():
            box.stop.set()
            # Read ahead, never returned: the states stay before them.
            with contextlib.suppress(queue.Empty):
                while True:
                    box.queue.get_nowait()

    def _interrupt_readers(self, readers: list[_Slice]) -> list[Any]:
        for box in readers:
            box.stop.set()
        # Their pipelines' own waits (read threads of to_iter_dataset, say) end too.
        return [box.iterator for box in readers if box.iterator is not None]

    def _take(self, box: _Slice) -> tuple[str, Any, Any]:
        """The next message of `box`'s thread; raises once close() from another thread came."""
        while True:
            try:
                return box.queue.get(True, POLL_S)
            except queue.Empty:
                if self._interrupted:
                    raise closed_error(self) from None

    def __next__(self) -> Any:
        if self._readers is None:
            if all(self._ended):
                raise StopIteration
            self._readers = self._started()  # it sets them too; this tells the type checker
        while not all(self._ended):
            index = self._next_worker
            if self._ended[index]:
                self._next_worker = (index + 1) % self._count
                continue
            kind, payload, state = self._take(self._readers[index])
            if kind == _ERROR:
                self._stop()
                raise payload
            self._states[index] = state
            self._next_worker = (index + 1) % self._count
            if kind == _END:
                self._ended[index] = True
                continue
            return payload
        self._stop()
        raise StopIteration

    def __repr__(self) -> str:
        return f"MultithreadPrefetchIterator(threads={self._count}, next={self._next_worker})"
