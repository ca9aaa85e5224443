"""`IterDataset.mp_prefetch`'s entry: the plan, then one of two executions in workers.

The model, in one path::

    mp_prefetch(parent, options)          this module; the dataset layer's hook calls it
      -> plan_execution(parent)           positional or per-worker, decided here only
      -> units of work per worker         positions (in order) or slices (per worker)
      -> an executor runs worker loops    grain_mp._executor; processes today
      -> in-order merge                   round robin over the workers' outputs

Positional. Over a *positional pipeline* (one `to_iter_dataset` over a
MapDataset, then single-parent built-in IterDataset stages; not
`sequential_slice`), the output is the single-process one for every worker
count (`grain_mp._mp_positional`): the workers compute, position by position,
what the chain's positional prefix (map, filter, and map_with_index /
random_map before any filter) makes of each position, a dropped one a marker
(or blocks of b positions batched, for a batch(b) after a prefix that drops
nothing); the rest of the chain runs here on the merged stream; the state is
the plain pipeline's. A positional pipeline runs per worker only to continue
a state of that format.

Per worker. Everything else runs per worker, as Grain does
(`grain_mp._mp_parent`): worker w of n runs the whole pipeline on its slice,
and the parent takes one element from each worker in turn.

Where the rest lives: the parent's round robin and per-worker state in
`grain_mp._mp_parent`, the worker loop in `grain_mp._mp_worker`, processes,
flow control, shared memory transport and stopping in
`grain_mp._process_executor`.
"""

from __future__ import annotations

from typing import Any

from grain_dataset import DatasetIterator, IterDataset
from grain_dataset.extension import PositionalSplit, positional_split
from grain_mp._loader_positions import LoaderPositionsIterDataset
from grain_mp._mp_parent import ProcessWorkersIterDataset
from grain_mp._mp_positional import MultiprocessPrefetchIterator
from grain_mp._options import MultiprocessingOptions


def mp_prefetch(
    parent: IterDataset[Any],
    options: MultiprocessingOptions | None = None,
    worker_init_fn: Any = None,
    sequential_slice: bool = False,
) -> IterDataset[Any]:
    """`parent.mp_prefetch(options, worker_init_fn, sequential_slice)`, as a function.

    The builder behind `IterDataset.mp_prefetch`: grain_dataset's hook imports
    it lazily as `grain_mp.mp_prefetch`, since the dataset layer may not import
    this one at import time. Code of grain-mp calls it (or `process_workers`)
    directly, never through that hook.
    """
    if options is None:
        options = MultiprocessingOptions(num_workers=10)
    if not isinstance(options, MultiprocessingOptions):
        raise TypeError(
            f"`options` of mp_prefetch must be a grain.MultiprocessingOptions, got {options!r}."
        )
    if worker_init_fn is not None and not callable(worker_init_fn):
        raise TypeError(f"`worker_init_fn` must be callable or None, got {worker_init_fn!r}.")
    if not isinstance(sequential_slice, bool):
        raise TypeError(f"`sequential_slice` must be a bool, got {sequential_slice!r}.")
    if options.num_workers == 0:
        return parent
    return MultiprocessPrefetchIterDataset(parent, options, worker_init_fn, sequential_slice)


def plan_execution(parent: IterDataset[Any], sequential_slice: bool) -> PositionalSplit | None:
    """How mp_prefetch runs `parent`: its positional cut, or None to run it per worker."""
    if sequential_slice:
        return None  # contiguous slices per worker are what the user asked for
    return positional_split(parent)


class MultiprocessPrefetchIterDataset(ProcessWorkersIterDataset):
    """The parent pipeline, run in `options.num_workers` processes (see the module doc)."""

    def __init__(
        self,
        parent: IterDataset[Any],
        options: MultiprocessingOptions,
        worker_init_fn: Any = None,
        sequential_slice: bool = False,
    ):
        super().__init__(parent, options, worker_init_fn, sequential_slice)
        # A positional pipeline runs in order (`grain_mp._mp_positional`); the workers
        # run all of `parent` only for states of the per-worker format.
        self._in_order: IterDataset[Any] | None = None
        split = plan_execution(parent, sequential_slice)
        if split is None:
            self._pickle_parent()
            return
        try:
            merged = LoaderPositionsIterDataset(
                split.units, split.read_options, options, worker_init_fn=worker_init_fn
            )
        except TypeError:
            self._pickle_parent()  # an unpicklable stage: named as the user wrote it
            raise
        self._in_order = split.assemble(merged)
        # How the workers start, once pickling was tried (it may fall back to fork).
        workers = merged._parents[0]
        self._method, self._fork_unsafe = workers._method, workers._fork_unsafe

    def __iter__(self) -> DatasetIterator[Any]:
        if self._in_order is not None:
            return MultiprocessPrefetchIterator(self._in_order, self._per_worker_iterator)
        return super().__iter__()

    def _per_worker_iterator(self) -> DatasetIterator[Any]:
        self._pickle_parent()
        return super().__iter__()
