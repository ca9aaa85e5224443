"""Element-wise IterDataset stages: map, map_with_index, random_map and filter.

map and filter keep no state of their own: their state is their parent's.
map_with_index and random_map count the elements they have produced (the
index they pass on, and the key of each element's generator); the count is
their state, beside the parent's.
"""

from __future__ import annotations

from typing import Any

from grain_dataset._common import _transforms
from grain_dataset._common._errors import note_stage
from grain_dataset._common._rng import element_rng
from grain_dataset._core._base import IterDataset, register
from grain_dataset._core._iter_stage import IterStage, StageIterator, iterator_of
from grain_dataset._core._next_index import parent_next_index, set_parent_next_index
from grain_dataset._core._seeding import stage_seed
from grain_dataset._core._state import check_state, renamed_keys
from grain_dataset._runtime._filter_check import FilterRatioCheck, options_of

_CHECK_EVERY = 256


class _ElementwiseIterDataset(IterStage):
    _positional_chain = True

    def _fingerprint_token(self) -> str | None:
        return None  # elements change, positions do not

    _kind = ""
    # The key of the element count in the state of a counting stage (Grain's name).
    _count_key = "counter"

    def __init__(self, parent: IterDataset[Any], transform: Any):
        super().__init__(parent)
        self._transform = transform
        self._fn = _transforms.as_function(transform, self._kind)

    def _describe(self) -> str:
        return _transforms.describe(self._transform)


class _ElementwiseIterator(StageIterator):
    def __init__(self, dataset: _ElementwiseIterDataset, parent: Any):
        super().__init__(dataset, parent)
        self._fn = dataset._fn


class _CountingIterator(_ElementwiseIterator):
    """An iterator whose state is its parent's plus the number of elements it produced.

    The count's key is Grain's name for it (the stage's `_count_key`): ``{"parent":
    ..., "counter": n}`` for map_with_index, ``"index_for_rng"`` for random_map.
    Earlier versions of this library wrote ``"index"``; such states restore as well.
    """

    def __init__(self, dataset: _ElementwiseIterDataset, parent: Any):
        super().__init__(dataset, parent)
        self._index = 0

    def _apply(self, index: int, value: Any) -> Any:  # pragma: no cover - overridden
        raise NotImplementedError

    def __next__(self) -> Any:
        value = next(self._parent)
        try:
            result = self._apply(self._index, value)
        except Exception as error:
            note_stage(error, self._dataset)
            raise
        self._index += 1
        return result

    def get_state(self) -> dict[str, Any]:
        return {"parent": self._parent.get_state(), self._dataset._count_key: self._index}

    def set_state(self, state: dict[str, Any]) -> None:
        key = self._dataset._count_key
        state = renamed_keys(state, {"index": key})
        check_state(state, repr(self._dataset), ("parent", key))
        self._parent.set_state(state["parent"])
        self._index = state[key]

    def _get_next_index(self) -> int:
        return self._index

    def _set_next_index(self, index: int) -> None:
        set_parent_next_index(self, index)
        self._index = index


@register("iter_map")
class MapIterDataset(_ElementwiseIterDataset):
    """``transform(element)`` for each element."""

    _positional_chain = True

    _kind = "map"
    _position_kind = "map"

    def _at_position(self, position: int, value: Any) -> Any:
        return self._fn(value)


@iterator_of(MapIterDataset)
class _MapIterator(_ElementwiseIterator):
    def __next__(self) -> Any:
        value = next(self._parent)
        try:
            return self._fn(value)
        except Exception as error:
            note_stage(error, self._dataset)
            raise

    _get_next_index = parent_next_index
    _set_next_index = set_parent_next_index


@register("iter_filter")
class FilterIterDataset(_ElementwiseIterDataset):
    """The elements for which ``transform(element)`` is true."""

    _positional_chain = True

    _kind = "filter"
    _position_kind = "filter"

    def _at_position(self, position: int, value: Any) -> Any:
        return self._fn(value)


@iterator_of(FilterIterDataset)
class _FilterIterator(_ElementwiseIterator):
    def __init__(self, dataset: _ElementwiseIterDataset, parent: Any):
        super().__init__(dataset, parent)
        self._check = FilterRatioCheck(repr(dataset))
        self._seen = 0
        self._dropped = 0

    def _report(self, end: bool = False) -> None:
        seen, dropped = self._seen, self._dropped
        self._seen = self._dropped = 0
        options = options_of(self)
        self._check.add(seen, dropped, options)
        if end:
            self._check.end(options)

    def __next__(self) -> Any:
        fn = self._fn
        while True:
            try:
                value = next(self._parent)
            except StopIteration:
                self._report(end=True)
                raise
            try:
                keep = fn(value)
            except Exception as error:
                note_stage(error, self._dataset)
                raise
            self._seen += 1
            if self._seen >= _CHECK_EVERY:
                self._report()
            if keep:
                return value
            self._dropped += 1

    def set_state(self, state: dict[str, Any]) -> None:
        self._parent.set_state(state)
        self._check.restored()


@register("iter_map_with_index")
class MapWithIndexIterDataset(_ElementwiseIterDataset):
    """``transform(index, element)``, the index counting this dataset's elements from 0."""

    _positional_chain = True

    _kind = "map_with_index"
    # Its index counts elements: the position, while nothing before it drops one.
    _position_kind = "indexed"

    def _at_position(self, position: int, value: Any) -> Any:
        return self._fn(position, value)


@iterator_of(MapWithIndexIterDataset)
class _MapWithIndexIterator(_CountingIterator):
    def _apply(self, index: int, value: Any) -> Any:
        return self._fn(index, value)


@register("iter_random_map")
class RandomMapIterDataset(_ElementwiseIterDataset):
    """``transform(element, rng)`` with `rng` keyed by (stage seed, element count)."""

    _positional_chain = True
    _order_as_grain = False  # its random numbers are not Grain's

    _count_key = "index_for_rng"

    _kind = "random_map"

    def __init__(self, parent: IterDataset[Any], transform: Any, seed: int | None = None):
        super().__init__(parent, transform)
        self._seed = stage_seed(self, seed, "random_map")

    _position_kind = "indexed"

    def _at_position(self, position: int, value: Any) -> Any:
        return self._fn(value, element_rng(self._seed, position))


@iterator_of(RandomMapIterDataset)
class _RandomMapIterator(_CountingIterator):
    def _apply(self, index: int, value: Any) -> Any:
        return self._fn(value, element_rng(self._dataset._seed, index))
