"""Positional pipelines: the cut that lets mp_prefetch's output ignore its worker count.

A *positional pipeline* is one `to_iter_dataset` over a MapDataset M followed
by a chain of single-parent built-in IterDataset stages (`IterStage`s).
`positional_split(ds)` cuts it where the output stops being a function of the
position:

  units   a MapDataset with one *unit* per position p of M: what the chain's
          longest positional prefix makes of M[p], or None where a filter
          (of M, or of the prefix) dropped it; an element that is None itself
          travels as `NONE_ELEMENT`. Positional stages (`IterStage.
          _position_kind`): map, filter, `ds.seed`, options (which also run in
          the parent, where the iterators that read them are), and map_with_index and
          random_map while nothing before them drops a position (their count
          is then the position). When the prefix is followed by `batch(b)`
          and drops nothing, a unit is a *block* instead: positions
          [k*b, (k+1)*b) batched, so that the batch too runs in the workers.
  in order  `InOrderIterDataset` over the merged units, then the rest of the
          chain (the *tail*: batch after a filter, packing, window shuffle,
          random_map after a filter, ...), as shallow copies of its stages
          re-parented onto it.

grain-mp's workers read units w, w+n, w+2n, ... (`to_iter_dataset` of the
units in worker w of n); a round robin over them gives the units in order
whatever n, and the in-order stage skips the dropped ones. So the output is
the single-process one for every worker count.

State: the in-order stage hands out the state that the plain pipeline's
prefix (or batch, for blocks) would have after the same units, e.g.
``{"next_index": p}`` or ``{"parent": {"next_index": p}, "counter": p}``, and
takes it back; the tail's states wrap it as they always do. So a state is the
plain pipeline's state: it restores with any worker count, 0 included.

A None that M hands out without a filter (a map that returns None) breaks
the count of a map_with_index or random_map in the prefix, and the blocks of a
batch; the units then raise a ValueError naming the fix.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import numpy as np

from grain_dataset._common._errors import note_stage
from grain_dataset._common._options import ReadOptions
from grain_dataset._core._base import IterDataset, MapDataset
from grain_dataset._core._iter_stage import IterStage, StageIterator, iterator_of
from grain_dataset._core._stage import MapStage, upstream
from grain_dataset._core._state import check_state, renamed_keys
from grain_dataset._iter_stages._with_options import WithOptionsIterDataset
from grain_dataset._map_stages._batch import BatchIterDataset, spans
from grain_dataset._runtime._filter_check import FilterRatioCheck, options_of
from grain_dataset._threads._read_ahead import PrefetchIterDataset

_CHECK_EVERY = 256


class _NoneElement:
    """Stands for an element that is None (a None unit is a dropped position)."""

    def __reduce__(self) -> str:
        return "NONE_ELEMENT"  # pickled by name: the one instance in every process

    def __repr__(self) -> str:
        return "NONE_ELEMENT"


NONE_ELEMENT = _NoneElement()
_DROP = object()  # a dropped position, inside `_PositionUnits` only


def drops_positions(ds: MapDataset[Any]) -> bool:
    """Whether a stage of `ds` can leave a position empty (a filter, a flat map's padding)."""
    return any(stage.discards_elements for stage in upstream(ds, MapDataset))


def _none_error(stage: Any, position: int, why: str) -> ValueError:
    return ValueError(
        f"position {position} of the MapDataset under to_iter_dataset is None without a "
        f"filter (a map or a source returned None), but {why} runs in the workers of "
        f"mp_prefetch by position. Drop elements with .filter(...) instead of returning "
        f"None; {stage!r}."
    )


class _PositionUnits(MapStage):
    """The units of a positional prefix: its output at each position, None where dropped."""

    def __init__(self, source: MapDataset[Any], stages: Sequence[IterStage]):
        super().__init__(source)
        self._source = source
        self._stages = tuple(stages)
        # A counting stage's index is the position only if no None comes from the source.
        self._counting = next((s for s in stages if s._position_kind == "indexed"), None)

    def __len__(self) -> int:
        return len(self._source)

    def _getitem(self, index: int) -> Any:
        return self._getitems(np.asarray([index], dtype=np.int64))[0]

    def _getitems(self, indices: np.ndarray) -> list[Any]:
        positions = indices.tolist()
        values = [_DROP if v is None else v for v in self._source._getitems(indices)]
        if self._counting is not None:
            # By identity: `in` would compare elements (arrays) with ==.
            dropped = next((k for k, v in enumerate(values) if v is _DROP), None)
            if dropped is not None:
                raise _none_error(self._counting, positions[dropped], "this counting stage")
        for stage in self._stages:
            kind, at = stage._position_kind, stage._at_position
            try:
                if kind == "filter":
                    values = [
                        v if v is _DROP or at(p, v) else _DROP
                        for p, v in zip(positions, values, strict=True)
                    ]
                elif kind != "same":
                    values = [
                        v if v is _DROP else at(p, v)
                        for p, v in zip(positions, values, strict=True)
                    ]
            except Exception as error:
                note_stage(error, stage)
                raise
        return [None if v is _DROP else NONE_ELEMENT if v is None else v for v in values]

    def _describe(self) -> str:
        return ", ".join(repr(stage) for stage in self._stages)


class _BlockUnits(MapStage):
    """Blocks of `batch`'s size of the units of a prefix that drops nothing, batched."""

    def __init__(self, units: MapDataset[Any], batch: BatchIterDataset):
        super().__init__(units)
        self._units = units
        self._batch = batch
        self._size = batch._batch_size
        self._positions = len(units)
        if batch._drop_remainder:
            self._length = self._positions // self._size
        else:
            self._length = -(-self._positions // self._size)

    def __len__(self) -> int:
        return self._length

    def _getitem(self, index: int) -> Any:
        return self._getitems(np.asarray([index], dtype=np.int64))[0]

    def _getitems(self, indices: np.ndarray) -> list[Any]:
        starts = indices * self._size
        positions, bounds = spans(starts, np.minimum(self._size, self._positions - starts))
        values = self._units._getitems(positions)
        dropped = next((k for k, v in enumerate(values) if v is None), None)
        if dropped is not None:
            raise _none_error(self._batch, int(positions[dropped]), "the batch after it")
        batch_fn = self._batch._batch_fn
        blocks = []
        for k in range(len(indices)):
            part = values[bounds[k] : bounds[k + 1]]
            part = [None if v is NONE_ELEMENT else v for v in part]
            try:
                blocks.append(batch_fn(part))
            except Exception as error:
                note_stage(error, self._batch)
                raise
        return blocks

    def _describe(self) -> str:
        return repr(self._batch)


class PositionalSplit:
    """A positional pipeline cut in two (see the module doc); made by `positional_split`."""

    def __init__(
        self,
        read: PrefetchIterDataset,
        stages: Sequence[IterStage],
        block: BatchIterDataset | None,
        tail: Sequence[IterStage],
    ):
        source = read._parents[0]
        self.read_options: ReadOptions = read._read_options
        self._stages = tuple(stages)
        self._block = block
        self._tail = tuple(tail)
        self._positions = len(source)
        units: MapDataset[Any] = _PositionUnits(source, stages) if stages else source
        # The units of the workers: `to_iter_dataset(read_options, allow_nones=True)` of it.
        self.units: MapDataset[Any] = units if block is None else _BlockUnits(units, block)
        self.drops = block is None and (
            drops_positions(source) or any(s._position_kind == "filter" for s in stages)
        )

    def state_at(self, units: int) -> Any:
        """The state of the plain pipeline's prefix (or block batch) after `units` units."""
        position = units
        if self._block is not None:
            position = min(units * self._block._batch_size, self._positions)
        state: Any = {"next_index": position}
        for stage in self._stages:
            if stage._position_kind == "indexed":
                state = {"parent": state, stage._count_key: position}
        return state

    def units_in(self, state: Any) -> int:
        """The units consumed at `state`, a state of `state_at`'s shape (checked)."""
        where = "the stages before mp_prefetch (in its workers)"
        for stage in reversed(self._stages):
            if stage._position_kind == "indexed":
                state = renamed_keys(state, {"index": stage._count_key})  # earlier versions
                check_state(state, where, ("parent", stage._count_key))
                state = state["parent"]
        check_state(state, where, ("next_index",))
        position = state["next_index"]
        if self._block is None:
            return position
        size = self._block._batch_size
        if position == self._positions:
            return len(self.units)
        if position % size:
            raise ValueError(
                f"state {state!r} of {where} is inside a batch of {size}: it was saved with "
                "another IterDataset.batch size. Under mp_prefetch the batch runs in the "
                f"workers, by blocks of {size} positions, so a restore must start on a multiple "
                "of it: restore with the batch size that saved it, or without workers "
                "(num_workers=0), then save again."
            )
        return position // size

    def assemble(self, merged: IterDataset[Any]) -> IterDataset[Any]:
        """The in-order stage over `merged` (the units in order, Nones skipped), then the tail.

        `merged` has the state ``{"next_index": units consumed}``.
        """
        if not self._stages and self._block is None and not self._tail and not self.drops:
            # Nothing to undo or check: `merged` already hands out the elements and the
            # plain pipeline's state ({"next_index": positions}); one stage less per element.
            return merged
        top: IterDataset[Any] = InOrderIterDataset(merged, self)
        for stage in self._tail:
            top = _reparented(stage, top)
        return top


def _reparented(stage: IterStage, parent: IterDataset[Any]) -> IterStage:
    """A shallow copy of `stage` reading from `parent` instead of its own parent."""
    old = stage._parents[0]
    twin = copy.copy(stage)
    for name, value in vars(stage).items():
        if value is old:  # a stage that also keeps its parent under a name of its own
            setattr(twin, name, parent)
    twin._parents = (parent,)
    return twin


def _is_chain_stage(node: Any) -> bool:
    return (
        isinstance(node, IterStage)
        and not node._many_parents
        and type(node)._positional_chain
        and isinstance(node._parents[0], IterDataset)
    )


def positional_split(dataset: IterDataset[Any]) -> PositionalSplit | None:
    """`dataset` cut for position-wise workers, or None if it is not a positional pipeline."""
    chain: list[IterStage] = []
    node: Any = dataset
    while type(node) is not PrefetchIterDataset:
        if not _is_chain_stage(node):
            return None
        chain.append(node)
        node = node._parents[0]
    if node._allow_nones:  # its Nones are elements, not dropped positions
        return None
    chain.reverse()
    drops = drops_positions(node._parents[0])
    stages: list[IterStage] = []
    for stage in chain:
        kind = stage._position_kind
        if kind is None or (kind == "indexed" and drops):
            break
        drops = drops or kind == "filter"
        stages.append(stage)
    tail = chain[len(stages) :]
    block = None
    if tail and type(tail[0]) is BatchIterDataset and not drops:
        block, tail = tail[0], tail[1:]
    # Options apply through the iterators of the pipeline, which run in the parent.
    options = [stage for stage in stages if isinstance(stage, WithOptionsIterDataset)]
    return PositionalSplit(node, stages, block, options + tail)


class InOrderIterDataset(IterStage):
    """The merged units' elements (see the module doc); its state is the plain pipeline's."""

    _positional_chain = True

    def __init__(self, parent: IterDataset[Any], split: PositionalSplit):
        super().__init__(parent)
        self._split = split


@iterator_of(InOrderIterDataset)
class _InOrderIterator(StageIterator):
    # Statistics list the merged units' reader (the workers), not these pass-throughs.
    _STATS_HIDDEN = True

    def __init__(self, dataset: InOrderIterDataset, parent: Any):
        super().__init__(dataset, parent)
        parent._STATS_HIDDEN = True
        self._split = dataset._split
        # The filter-ratio check of DatasetOptions, over the dropped positions.
        check = FilterRatioCheck("the filters before mp_prefetch (in its workers)")
        self._check = check if dataset._split.drops else None
        self._counted = 0  # units handed to the check
        self._uncounted = 0  # elements returned since

    def _units(self) -> int:
        return self._parent.get_state()["next_index"]

    def _report(self, end: bool = False) -> None:
        assert self._check is not None
        units = self._units()
        seen, self._counted = units - self._counted, units
        dropped, self._uncounted = seen - self._uncounted, 0
        options = options_of(self)
        self._check.add(seen, dropped, options)
        if end:
            self._check.end(options)

    def __next__(self) -> Any:
        try:
            unit = next(self._parent)
        except StopIteration:
            if self._check is not None:
                self._report(end=True)
            raise
        if self._check is not None:
            self._uncounted += 1
            if self._uncounted >= _CHECK_EVERY:
                self._report()
        return None if unit is NONE_ELEMENT else unit

    def get_state(self) -> Any:
        return self._split.state_at(self._units())

    def set_state(self, state: Any) -> None:
        units = self._split.units_in(state)
        self._parent.set_state({"next_index": units})
        if self._check is not None:
            self._counted, self._uncounted = units, 0
            if units:
                self._check.restored()
