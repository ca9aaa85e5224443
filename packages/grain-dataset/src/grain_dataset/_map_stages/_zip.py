"""Zip: tuples of corresponding elements of several datasets.

MapDataset: element i is ``(p_0[i], p_1[i], ...)``. The parents must have equal
lengths, and index i >= len passes on to every parent as the same later-epoch
index, so epoch e of the zip is epoch e of every parent. A position that any
parent filtered (None) is filtered in the zip too: a tuple is only formed
from elements that exist. To zip datasets of different lengths, slice them to
a common length first (``ds[:n]``).

IterDataset: the next element of every parent, in parent order, until the first
parent is exhausted. Like Python's `zip`, the parents before the exhausted one
have already given up one element each, which is dropped. The state is
``{"parents": [state_0, state_1, ...]}``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from grain_dataset._core._base import (
    DatasetIterator,
    IterDataset,
    MapDataset,
    as_iter_dataset,
    dataset_list,
)
from grain_dataset._core._iter_stage import IterStage, StageIterator, iterator_of, restore_all
from grain_dataset._core._stage import MapStage
from grain_dataset._core._state import check_parents_state, check_state


class ZipMapDataset(MapStage):
    """Tuples of the elements at the same index of `parents`, which must have equal lengths.

    Example::

        ds = ZipMapDataset([MapDataset.range(3), MapDataset.source("abc")])
        list(ds)  # [(0, 'a'), (1, 'b'), (2, 'c')]
    """

    def _fingerprint_token(self) -> str | None:
        return "zip"

    def __init__(self, parents: Sequence[MapDataset[Any]]):
        parents = dataset_list(parents, "parents", "ZipMapDataset")
        for i, parent in enumerate(parents):
            if not isinstance(parent, MapDataset):
                raise TypeError(
                    f"`parents[{i}]` of ZipMapDataset must be a MapDataset, got "
                    f"{type(parent).__name__}; zip IterDatasets with ZipIterDataset."
                )
        lengths = [len(parent) for parent in parents]
        if len(set(lengths)) > 1:
            raise ValueError(
                "All parents must have the same length. "
                f"The parents of ZipMapDataset must have equal lengths, got {lengths}; "
                f"slice them to a common length first, e.g. ds[:{min(lengths)}]."
            )
        super().__init__(parents)
        self._length = lengths[0]

    def __len__(self) -> int:
        return self._length

    def _getitem(self, index: int) -> Any:
        values = tuple(parent._getitem(index) for parent in self._parents)
        return None if any(value is None for value in values) else values

    def _getitems(self, indices: np.ndarray) -> list[Any]:
        columns = [parent._getitems(indices) for parent in self._parents]
        return [
            None if any(value is None for value in row) else row
            for row in zip(*columns, strict=True)
        ]

    def _describe(self) -> str:
        return f"{len(self._parents)} parents, len={self._length}"


class ZipIterDataset(IterStage):
    """Tuples of the next element of each of `parents`, until they are exhausted.

    A MapDataset parent is read with ``.to_iter_dataset()``. With
    ``strict=True`` (the default, as in Grain) the parents must end together:
    one that ends before or after the others raises a ValueError when the zip
    reaches the end. With ``strict=False`` the zip ends with the shortest.

    Example::

        ds = ZipIterDataset([MapDataset.range(3).to_iter_dataset(),
                             MapDataset.range(10, 20).to_iter_dataset()])
        list(ds)  # [(0, 10), (1, 11), (2, 12)]
    """

    _many_parents = True

    def _fingerprint_token(self) -> str | None:
        return "zip"

    def __init__(self, parents: Sequence[IterDataset[Any]], *, strict: bool = True):
        parents = dataset_list(parents, "parents", "ZipIterDataset")
        if not isinstance(strict, bool):
            raise TypeError(f"`strict` must be a bool, got {strict!r}.")
        super().__init__(
            [as_iter_dataset(parent, f"parents[{i}]") for i, parent in enumerate(parents)]
        )
        self._strict = strict

    def _describe(self) -> str:
        strict = "" if self._strict else ", strict=False"
        return f"{len(self._parents)} parents{strict}"


@iterator_of(ZipIterDataset)
class _ZipIterator(StageIterator):
    def __init__(self, dataset: ZipIterDataset, parents: list[DatasetIterator[Any]]):
        super().__init__(dataset, parents)
        self._iterators = parents

    def __next__(self) -> tuple[Any, ...]:
        if not self._dataset._strict:
            # A list, not a generator expression: inside a generator a parent's
            # StopIteration would turn into RuntimeError instead of ending the zip.
            return tuple([next(iterator) for iterator in self._iterators])
        values = []
        for i, iterator in enumerate(self._iterators):
            try:
                values.append(next(iterator))
            except StopIteration:
                self._check_all_ended(i)
                raise
        return tuple(values)

    def _check_all_ended(self, ended: int) -> None:
        """Raises unless every parent ends where parent `ended` did (strict zip)."""
        if ended:
            raise ValueError(
                f"ZipIterDataset argument {ended + 1} is shorter than argument 1. "
                f"ZipIterDataset(strict=True): parents[{ended}] ended before parents[0]; the "
                "parents must have the same length, or pass strict=False to stop at the "
                "shortest."
            )
        for i, iterator in enumerate(self._iterators[1:], start=1):
            try:
                next(iterator)
            except StopIteration:
                continue
            raise ValueError(
                f"ZipIterDataset argument {i + 1} is longer than argument 1. "
                f"ZipIterDataset(strict=True): parents[{i}] is longer than parents[0]; the "
                "parents must have the same length, or pass strict=False to stop at the "
                "shortest."
            )

    def get_state(self) -> dict[str, Any]:
        return {"parents": [iterator.get_state() for iterator in self._iterators]}

    def set_state(self, state: dict[str, Any]) -> None:
        stage = repr(self._dataset)
        check_state(state, stage, ("parents",))
        restore_all(self._iterators, check_parents_state(state, stage, len(self._iterators)))
