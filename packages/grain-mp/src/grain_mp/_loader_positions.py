"""The DataLoader's read of its positions: `to_iter_dataset`, in workers or not, counted.

`LoaderPositionsIterDataset` reads a MapDataset of *units* (one per loader
position, None where a filter dropped it; see `grain_mp._operations`) with
``to_iter_dataset(read_options, allow_nones=True)``, run per worker in
processes when the loader has workers (`grain_mp._mp_parent.process_workers`,
mp_prefetch's per-worker execution, built here directly), and hands on the units
that are not None; with `lists` (units that are lists of items: chunks, a flat
map's outputs), the items of each, in order. Its state is the number of
positions consumed, and with `lists` how many items of the next one were
handed on already,

    {"next_index": u}   or   {"next_index": u, "emitted": j}

whatever the worker count: mp_prefetch's round robin over the worker slices
``w::n`` returns the units in position order, so u positions consumed means
worker w consumed ``len(range(w, u, n))`` of its slice and worker ``u % n``
is next. `set_state` translates u into that state (or into to_iter_dataset's
own ``{"next_index": u}`` without workers), which is what lets a checkpoint
taken with W workers restore with V. (Unpacking the lists here, rather than
in a flat map stage, keeps the per-item cost to a counter.)

mp_prefetch over a positional pipeline reads its units the same way
(`grain_mp._mp_positional`), with the user's `worker_init_fn`.

The fingerprint of a state leaves the prefetching out for the same reason:
it lists the units' MapDataset stages and this stage's ``to_iter``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from grain_dataset import MapDataset, ReadOptions
from grain_dataset.extension import (
    IterStage,
    OutOfRangeError,
    StageIterator,
    check_state,
    iterator_of,
)
from grain_mp._mp_parent import process_workers
from grain_mp._options import MultiprocessingOptions
from grain_mp._round_robin import round_robin_state


class LoaderPositionsIterDataset(IterStage):
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
        lists: bool = False,
        worker_init_fn: Any = None,
    ):
        read = units.to_iter_dataset(read_options, allow_nones=True)
        if options.num_workers:  # grain-mp's own per-worker stage, not the dataset hook
            read = process_workers(read, options, worker_init_fn)
        super().__init__(read)
        self._units = units
        self._workers = options.num_workers
        self._lists = lists

    def _fingerprint_parents(self) -> Sequence[Any]:
        return (self._units,)  # not the prefetching: the state does not depend on it

    def _fingerprint_token(self) -> str | None:
        return "to_iter"

    def _describe(self) -> str:
        return f"worker_count={self._workers}, lists={self._lists}"


@iterator_of(LoaderPositionsIterDataset)
class _PositionsIterator(StageIterator):
    def __init__(self, dataset: LoaderPositionsIterDataset, parent: Any):
        super().__init__(dataset, parent)
        self._lists = dataset._lists
        self._next = 0  # positions consumed
        self._items: Any = ()  # with lists: the unit being handed on, and how far
        self._emitted = 0
        self._skip = 0  # restored inside a unit: its items handed on before, not read yet

    def _resume_inside(self) -> None:
        """After a restore inside a unit: reads it again, its first `_skip` items handed on."""
        skip, self._skip = self._skip, 0
        unit = next(self._parent, None)
        self._next += 1
        if not isinstance(unit, list) or len(unit) <= skip:
            raise ValueError(
                f"the state of {self._dataset!r} says {skip} items of position "
                f"{self._next - 1} were handed on, but it has {len(unit or ())}: the state is "
                "from a different pipeline or data."
            )
        self._items, self._emitted = unit, skip

    def __next__(self) -> Any:
        if self._skip:
            self._resume_inside()
        if self._emitted < len(self._items):
            self._emitted += 1
            return self._items[self._emitted - 1]
        parent = self._parent
        while True:
            unit = next(parent)
            self._next += 1
            if unit is None:
                continue
            if not self._lists:
                return unit
            if unit:
                self._items, self._emitted = unit, 1
                return unit[0]

    def get_state(self) -> dict[str, Any]:
        if not self._lists:
            return {"next_index": self._next}
        if self._skip:
            return {"next_index": self._next, "emitted": self._skip}
        if self._emitted < len(self._items):
            return {"next_index": self._next - 1, "emitted": self._emitted}
        return {"next_index": self._next, "emitted": 0}

    def set_state(self, state: dict[str, Any]) -> None:
        fields = ("next_index", "emitted") if self._lists else ("next_index",)
        check_state(state, repr(self._dataset), fields)
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
        self._items, self._emitted = (), 0
        self._skip = state.get("emitted", 0)
