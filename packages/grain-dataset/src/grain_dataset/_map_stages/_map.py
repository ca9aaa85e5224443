"""Element-wise MapDataset stages: map, map_with_index, random_map and filter.

Each reads its parent's elements (in one call for many indices) and applies the
user function to each non-None element; None (a filtered position) passes
through untouched, so user functions never see it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from grain_dataset._common import _transforms
from grain_dataset._common._errors import note_stage
from grain_dataset._common._rng import element_rng
from grain_dataset._core._base import MapDataset, register
from grain_dataset._core._seeding import stage_seed
from grain_dataset._core._stage import MapStage


class _ElementwiseMapDataset(MapStage):
    """Reads the parent, applies `_apply` (one) or `_apply_all` (many), names the stage on error."""

    def _fingerprint_token(self) -> str | None:
        return None  # elements change, positions do not

    _kind = ""

    def __init__(self, parent: MapDataset[Any], transform: Any):
        super().__init__(parent)
        self._parent = parent
        self._transform = transform
        self._fn = _transforms.as_function(transform, self._kind)

    def __len__(self) -> int:
        return len(self._parent)

    def _describe(self) -> str:
        return _transforms.describe(self._transform)

    def _apply(self, index: int, value: Any) -> Any:
        """The stage's function on one element that is not None."""
        raise NotImplementedError

    def _apply_all(self, indices: np.ndarray, values: list[Any]) -> list[Any]:
        """`_apply` over many (None passes through), as one comprehension: the hot path."""
        raise NotImplementedError

    def _getitem(self, index: int) -> Any:
        value = self._parent._getitem(index)
        if value is None:
            return None
        try:
            return self._apply(index, value)
        except Exception as error:
            note_stage(error, self)
            raise

    def _getitems(self, indices: np.ndarray) -> list[Any]:
        values = self._parent._getitems(indices)
        try:
            return self._apply_all(indices, values)
        except Exception as error:
            note_stage(error, self)
            raise


@register("map")
class MapMapDataset(_ElementwiseMapDataset):
    """``transform(element)`` for each element."""

    _kind = "map"

    def _apply(self, index: int, value: Any) -> Any:
        return self._fn(value)

    def _apply_all(self, indices: np.ndarray, values: list[Any]) -> list[Any]:
        fn = self._fn
        return [None if value is None else fn(value) for value in values]


@register("map_with_index")
class MapWithIndexMapDataset(_ElementwiseMapDataset):
    """``transform(index, element)`` for each element."""

    _kind = "map_with_index"

    def _apply(self, index: int, value: Any) -> Any:
        return self._fn(index, value)

    def _apply_all(self, indices: np.ndarray, values: list[Any]) -> list[Any]:
        fn = self._fn
        return [
            None if value is None else fn(index, value)
            for index, value in zip(indices.tolist(), values, strict=True)
        ]


@register("random_map")
class RandomMapMapDataset(_ElementwiseMapDataset):
    """``transform(element, rng)`` with `rng` keyed by (stage seed, index)."""

    _order_as_grain = False  # its random numbers are not Grain's

    _kind = "random_map"

    def __init__(self, parent: MapDataset[Any], transform: Any, seed: int | None = None):
        super().__init__(parent, transform)
        self._seed = stage_seed(self, seed, "random_map")

    def _apply(self, index: int, value: Any) -> Any:
        return self._fn(value, element_rng(self._seed, index))

    def _apply_all(self, indices: np.ndarray, values: list[Any]) -> list[Any]:
        fn, seed = self._fn, self._seed
        return [
            None if value is None else fn(value, element_rng(seed, index))
            for index, value in zip(indices.tolist(), values, strict=True)
        ]


@register("filter")
class FilterMapDataset(_ElementwiseMapDataset):
    """The element where ``transform(element)`` is true, else None."""

    _kind = "filter"
    # Positions may read None: a MapDataset.batch after it refuses (see _batch).
    discards_elements = "`MapDataset.filter`"

    def _apply(self, index: int, value: Any) -> Any:
        return value if self._fn(value) else None

    def _apply_all(self, indices: np.ndarray, values: list[Any]) -> list[Any]:
        fn = self._fn
        return [None if value is None or not fn(value) else value for value in values]
