"""The common shape of the built-in MapDataset stages.

A built-in stage implements `_getitem(index)` for one index >= 0 and, where it
can do better than a loop, `_getitems(indices)` for an int64 array; the public
`__getitem__` (negative indices, slices, argument checks) is written once here.
The batched path is what makes pipelines fast: a batch, a chunk of read-ahead
or a vectorized shuffle asks its parent for many indices in one call.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from grain_dataset._core._base import INFINITE, MapDataset, check_index

INT64_MAX = (1 << 63) - 1


class MapStage(MapDataset[Any]):
    """Base of the built-in MapDataset stages (private)."""

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return self.slice(index)
        return self._getitem(check_index(index, len(self)))

    def _getitem(self, index: int) -> Any:  # pragma: no cover - every stage overrides it
        raise NotImplementedError

    def _getitems(self, indices: np.ndarray) -> list[Any]:
        # A stage that maps indices reads its parent in one batch; others loop.
        parent_indices = self._parent_indices(indices) if self._maps_indices else None
        if parent_indices is None:
            return super()._getitems(indices)
        return self._parents[0]._getitems(parent_indices)

    def _gatherable(self) -> bool:
        return self._maps_indices and self._parents[0]._gatherable()

    def _gather(self, indices: np.ndarray) -> Any:
        parent_indices = self._parent_indices(indices) if self._maps_indices else None
        if parent_indices is None:
            return NotImplemented
        return self._parents[0]._gather(parent_indices)

    def _describe(self) -> str:
        return ""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._describe()})"


def upstream(dataset: Any, within: type = object) -> Iterator[Any]:
    """`dataset` and every stage it reads from, each once (pipelines may share stages).

    Only parents that are instances of `within` are followed.
    """
    pending, seen = [dataset], set()
    while pending:  # iterative: pipelines can be thousands of stages long
        stage = pending.pop()
        if id(stage) in seen:
            continue
        seen.add(id(stage))
        yield stage
        # A user's stage that skipped the base __init__ has no parents to follow.
        pending.extend(p for p in getattr(stage, "_parents", ()) if isinstance(p, within))


def fits_int64(indices: np.ndarray, length: int, parent_length: int) -> bool:
    """Whether parent indices ``epoch * parent_length + (< parent_length)`` fit in int64.

    `length` is the stage's epoch length; the epoch of index i is ``i // length``.
    """
    if indices.dtype != np.int64:
        return False
    if not indices.size:
        return True
    return (int(indices.max()) // length + 1) * parent_length <= INT64_MAX


def is_infinite(length: int) -> bool:
    return length >= INFINITE


def epochs_of(indices: np.ndarray, length: int) -> tuple[np.ndarray, np.ndarray]:
    """(epoch, offset within epoch) of each index; `//` and a subtraction beat np.divmod."""
    epochs = indices // length
    return epochs, indices - epochs * length
