"""The worker slice: which share of its positions a worker's pipeline reads.

mp_prefetch worker w of n (and multithread_prefetch thread w of n) runs the
whole pipeline, with every `to_iter_dataset` of it reading only positions w,
w+n, w+2n, ... of its MapDataset (or, `sequential`, the w-th of n contiguous
slices): the slicing happens right before `to_iter_dataset`, after all
MapDataset transformations.

The slice belongs to one pipeline, never to a process or a thread: a pipeline
that a transformation builds and iterates inside the worker (a `map` function
reading a small lookup dataset, say) reads all of its data. So the slice is
carried explicitly:

  * `iter_worker_slice(dataset, w, n, sequential)` creates the pipeline's
    iterator. While that one `iter()` call runs (in the calling thread only),
    every DatasetIterator created records the slice in its iterator context
    (`_IteratorContext.worker_slice`, shared by all iterators of the pipeline),
    and `to_iter_dataset`'s iterator reads its slice from there.
  * Iterators that a stage creates later, outside that call, get the slice of
    the stage's own context through `iter_with_slice`: InterleaveIterDataset
    opening its datasets (in its opening threads too), IterDataset.mix
    matching a changed mixture's components. Stages that restart their
    parents (repeat: `set_state` to the initial state) or restore them
    (`set_state`) keep the iterators, and with them the slice, they have.

User code that runs after `iter()` returned (every transformation of
elements, in whatever thread) sees no slice: an `iter()` it makes reads
everything. Code that runs inside that `iter()` call itself (an IterDataset's
own `__iter__`) does see it, as the stages it builds there are part of the
worker's pipeline.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any

from grain_index import checks

if TYPE_CHECKING:
    from grain_dataset._core._base import DatasetIterator, IterDataset, MapDataset


# (index, count, sequential): worker index of count reads every count-th position, from
# its index on, or with sequential the index-th of count contiguous slices.
WorkerSlice = tuple[int, int, bool]


# The slice of the pipeline whose iterators this thread is creating right now.
_creating = threading.local()


def creating_slice() -> WorkerSlice | None:
    """The slice for an iterator created now in this thread (see the module docstring)."""
    return getattr(_creating, "value", None)


def _forget_in_child() -> None:
    # A forked child runs no `iter()` of its parent's: a slice being set when the
    # fork happened must not outlive it there.
    _creating.value = None


os.register_at_fork(after_in_child=_forget_in_child)


def iter_with_slice(dataset: Any, worker_slice: WorkerSlice | None) -> DatasetIterator[Any]:
    """``iter(dataset)``, its iterators reading `worker_slice` (None: everything)."""
    previous = creating_slice()
    _creating.value = worker_slice
    try:
        return iter(dataset)
    finally:
        _creating.value = previous


def iter_worker_slice(
    dataset: MapDataset[Any] | IterDataset[Any], index: int, count: int, sequential: bool = False
) -> DatasetIterator[Any]:
    """Returns ``iter(dataset)`` with every `to_iter_dataset` of it reading worker index's share.

    Each `to_iter_dataset` of `dataset`'s pipeline reads positions index,
    index+count, ... of its MapDataset, or with `sequential` the index-th of
    `count` contiguous slices (sizes differing by at most one, the larger
    first). This holds for the iterators the pipeline creates later too
    (InterleaveIterDataset opening datasets, repeat's epochs, `set_state`),
    and for no other pipeline: one iterated inside a transformation of this
    one reads all of its data. grain-mp calls it in each worker process
    (mp_prefetch, the DataLoader) and thread (multithread_prefetch).
    """
    count = checks.int_in_range(count, "count", 1)
    index = checks.int_in_range(index, "index", 0, count)
    if not isinstance(sequential, bool):
        raise TypeError(f"`sequential` must be a bool, got {sequential!r}.")
    return iter_with_slice(dataset, (index, count, sequential))


def slice_positions(source: MapDataset[Any], worker_slice: WorkerSlice | None) -> MapDataset[Any]:
    """The positions of `source` that `worker_slice` reads (all of them for None)."""
    if worker_slice is None:
        return source
    index, count, sequential = worker_slice
    if not sequential:
        return source[index::count]
    size, extra = divmod(len(source), count)
    start = index * size + min(index, extra)
    return source[start : start + size + (index < extra)]
