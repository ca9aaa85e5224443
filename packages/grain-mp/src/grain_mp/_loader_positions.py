"""The DataLoader's read of its positions: `to_iter_dataset`, in workers or not, counted.

`LoaderPositionsIterDataset` reads a MapDataset of *units* (one per loader
position, None where a filter dropped it; see `grain_mp._operations`) with
``to_iter_dataset(read_options, allow_nones=True)``, followed by
``mp_prefetch(options)`` when the loader has workers, and hands on the units
that are not None. Its state is the number of positions consumed,

    {"next_index": u}

whatever the worker count: mp_prefetch's round robin over the worker slices
``w::n`` returns the units in position order, so u positions consumed means
worker w consumed ``len(range(w, u, n))`` of its slice and worker ``u % n``
is next. `set_state` translates u into that state (or into to_iter_dataset's
own ``{"next_index": u}`` without workers), which is what lets a checkpoint
taken with W workers restore with V.

The fingerprint of a state leaves the prefetching out for the same reason:
it lists the units' MapDataset stages and this stage's ``to_iter``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from grain_dataset import DatasetIterator, IterDataset, MapDataset, ReadOptions
from grain_dataset.extension import OutOfRangeError, check_state
from grain_mp._options import MultiprocessingOptions
from grain_mp._round_robin import round_robin_state


class LoaderPositionsIterDataset(IterDataset[Any]):
    """The units of `units` that are not None, read in `options.num_workers` processes.

    Example::

        ds = LoaderPositionsIterDataset(units, ReadOptions(), MultiprocessingOptions(2))
        it = iter(ds)
        next(it)
        it.get_state()  # {"next_index": k}: k positions consumed, None ones included
    """

    def __init__(
        self,
        units: MapDataset[Any],
        read_options: ReadOptions,
        options: MultiprocessingOptions,
    ):
        read = units.to_iter_dataset(read_options, allow_nones=True)
        if options.num_workers:
            read = read.mp_prefetch(options)
        super().__init__(read)
        self._units = units
        self._workers = options.num_workers

    def _fingerprint_parents(self) -> Sequence[Any]:
        return (self._units,)  # not the prefetching: the state does not depend on it

    def _fingerprint_token(self) -> str | None:
        return "to_iter"

    def __iter__(self) -> DatasetIterator[Any]:
        return _PositionsIterator(self, iter(self._parents[0]))

    def __repr__(self) -> str:
        return f"LoaderPositionsIterDataset(worker_count={self._workers})"


class _PositionsIterator(DatasetIterator[Any]):
    def __init__(self, dataset: LoaderPositionsIterDataset, parent: DatasetIterator[Any]):
        super().__init__(parent)
        self._dataset = dataset
        self._parent = parent
        self._next = 0

    def __next__(self) -> Any:
        parent = self._parent
        while True:
            unit = next(parent)
            self._next += 1
            if unit is not None:
                return unit

    def get_state(self) -> dict[str, Any]:
        return {"next_index": self._next}

    def set_state(self, state: dict[str, Any]) -> None:
        check_state(state, repr(self._dataset), ("next_index",))
        position = state["next_index"]
        length = len(self._dataset._units)
        if position > length:
            raise OutOfRangeError(
                f"state['next_index']={position} is past the end of the loader's positions "
                f"({length}): the state is from a different pipeline."
            )
        count = self._dataset._workers
        if count:
            slices = [{"next_index": len(range(w, position, count))} for w in range(count)]
            self._parent.set_state(round_robin_state(position % count, slices, False))
        else:
            self._parent.set_state({"next_index": position})
        self._next = position
