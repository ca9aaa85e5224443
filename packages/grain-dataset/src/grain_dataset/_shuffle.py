"""Global shuffle of a MapDataset: a keyed bijection per epoch, nothing materialized.

Index i of epoch e (``e = i // n``) reads parent index ``e * n + P_e(i % n)``,
where P_e is grain_index's Feistel shuffle of [0, n) keyed by the stage seed
and e: every epoch has its own order, and passing the epoch on to the parent
lets random stages before the shuffle draw new numbers each epoch too.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from grain_dataset._base import MapDataset, register
from grain_dataset._fingerprint import seed_param, token
from grain_dataset._seeding import stage_seed
from grain_dataset._stage import MapStage, epochs_of, fits_int64
from grain_index import (
    DEFAULT_ROUNDS,
    derive_seed,
    index_shuffle_array,
    index_shuffle_function,
)


@register("shuffle")
class ShuffleMapDataset(MapStage):
    """The parent's elements in a new global order every epoch."""

    def _fingerprint_token(self) -> str | None:
        return token("shuffle", seed_param(self._seed))

    def __init__(self, parent: MapDataset[Any], seed: int | None = None):
        super().__init__(parent)
        self._parent = parent
        self._seed = stage_seed(self, seed, "shuffle")
        self._length = len(parent)
        self._epoch_seeds: dict[int, int] = {}
        self._epoch_functions: dict[int, Any] = {}

    def __len__(self) -> int:
        return self._length

    def _epoch_seed(self, epoch: int) -> int:
        seed = self._epoch_seeds.get(epoch)
        if seed is None:
            seed = derive_seed(self._seed, "shuffle", epoch)
            if len(self._epoch_seeds) < 64:
                self._epoch_seeds[epoch] = seed
        return seed

    def _getitem(self, index: int) -> Any:
        n = self._length
        epoch, offset = divmod(index, n)
        shuffle = self._epoch_functions.get(epoch)
        if shuffle is None:
            shuffle = index_shuffle_function(n - 1, self._epoch_seed(epoch), DEFAULT_ROUNDS)
            if len(self._epoch_functions) < 8:
                self._epoch_functions[epoch] = shuffle
        return self._parent._getitem(epoch * n + shuffle(offset))

    _maps_indices = True

    def _parent_indices(self, indices: np.ndarray) -> np.ndarray | None:
        n = self._length
        if not n or not fits_int64(indices, n, n):
            return None
        epochs, offsets = epochs_of(indices, n)
        first = int(epochs[0]) if epochs.size else 0
        if not epochs.size or (epochs == first).all():
            positions = index_shuffle_array(offsets, n - 1, self._epoch_seed(first), DEFAULT_ROUNDS)
            return positions + first * n
        parent_indices = np.empty_like(indices)
        for epoch in np.unique(epochs).tolist():
            mask = epochs == epoch
            shuffled = index_shuffle_array(
                offsets[mask], n - 1, self._epoch_seed(epoch), DEFAULT_ROUNDS
            )
            parent_indices[mask] = shuffled + epoch * n
        return parent_indices

    def _getitems(self, indices: np.ndarray) -> list[Any]:
        parent_indices = self._parent_indices(indices)
        if parent_indices is None:
            return super()._getitems(indices)
        return self._parent._getitems(parent_indices)

    def _describe(self) -> str:
        return f"len={self._length}"
