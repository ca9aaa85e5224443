"""Global shuffle of a MapDataset: a keyed bijection per epoch, nothing materialized.

Index i of epoch e (``e = i // n``) reads parent index ``e * n + P_e(i % n)``,
where P_e is grain_index's Feistel shuffle of [0, n) keyed by the stage seed
and e: every epoch has its own order, and passing the epoch on to the parent
lets random stages before the shuffle draw new numbers each epoch too.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from grain_dataset._core._base import MapDataset, register
from grain_dataset._core._seeding import stage_seed
from grain_dataset._core._stage import MapStage, epochs_of, fits_int64
from grain_dataset._runtime._fingerprint import seed_param, token
from grain_index import (
    DEFAULT_ROUNDS,
    derive_seed,
    index_shuffle_array,
    index_shuffle_function,
)

# The largest epoch whose whole order is cached (8 bytes per element), and how many
# vectorized calls per element make computing it worth it (see `_permutation`).
_MAX_PERMUTATION = 1 << 22
_CALLS_PER_PERMUTATION = 1500


@register("shuffle")
class ShuffleMapDataset(MapStage):
    """The parent's elements in a new global order every epoch."""

    _order_as_grain = False  # another permutation than Grain's for a seed

    def _fingerprint_token(self) -> str | None:
        return token("shuffle", seed_param(self._seed))

    def __init__(self, parent: MapDataset[Any], seed: int | None = None):
        super().__init__(parent)
        self._parent = parent
        self._seed = stage_seed(self, seed, "shuffle")
        self._length = len(parent)
        # Caches shared by every thread that reads this dataset (read threads, several
        # iterators of it, `ds[i]` from threads). A lost update in them only costs a
        # recomputation, and dict get/set are atomic, also without the GIL; but no
        # thread may iterate a dict that another mutates, so `_permutations` is
        # copied on write: a published dict is never changed.
        self._epoch_seeds: dict[int, int] = {}
        self._epoch_functions: dict[int, Any] = {}
        self._epoch_calls: dict[int, int] = {}
        self._permutations: dict[int, np.ndarray] = {}

    def __getstate__(self) -> dict[str, Any]:
        # Caches are rebuilt where needed: a worker process does not need ours.
        state = self.__dict__.copy()
        state.update(_epoch_seeds={}, _epoch_functions={}, _epoch_calls={}, _permutations={})
        return state

    def _permutation(self, epoch: int, calls: int) -> np.ndarray | None:
        """Epoch `epoch`'s whole order, once reading it piece by piece cost as much.

        A vectorized shuffle call costs ~70 us plus ~50 ns per index, so small
        chunks (a batch of 128) pay mostly the call. After about n / 1500 calls
        in one epoch, computing the whole order once (~50 ns per index) and
        looking indices up is cheaper; the first reads of an epoch, which decide
        the time to the first batch, never wait for it. Two epochs are kept.
        """
        kept = self._permutations
        permutation = kept.get(epoch)
        if permutation is not None:
            return permutation
        n = self._length
        if n > _MAX_PERMUTATION or calls * _CALLS_PER_PERMUTATION < n:
            return None
        permutation = index_shuffle_array(
            np.arange(n, dtype=np.int64), n - 1, self._epoch_seed(epoch), DEFAULT_ROUNDS
        )
        permutation.flags.writeable = False  # handed to every thread that reads this epoch
        # Copy on write (see __init__): evicting in place raced with other threads'
        # iteration ("dictionary changed size during iteration", or a StopIteration
        # out of next(iter(...)) when another thread had just emptied it).
        newest = dict(list(kept.items())[-1:])
        newest[epoch] = permutation
        self._permutations = newest
        return permutation

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
        if not indices.size:
            return indices.copy()
        first = int(indices.min()) // n
        if int(indices.max()) // n == first:  # one epoch: no per-index division
            offsets = indices - first * n if first else indices
            calls = self._epoch_calls.get(first, 0) + 1
            if len(self._epoch_calls) > 64:
                self._epoch_calls.clear()
            self._epoch_calls[first] = calls
            permutation = self._permutation(first, calls)
            if permutation is not None:
                return permutation[offsets] + first * n
            positions = index_shuffle_array(offsets, n - 1, self._epoch_seed(first), DEFAULT_ROUNDS)
            return positions + first * n
        epochs, offsets = epochs_of(indices, n)
        parent_indices = np.empty_like(indices)
        for epoch in np.unique(epochs).tolist():
            mask = epochs == epoch
            shuffled = index_shuffle_array(
                offsets[mask], n - 1, self._epoch_seed(epoch), DEFAULT_ROUNDS
            )
            parent_indices[mask] = shuffled + epoch * n
        return parent_indices

    def _describe(self) -> str:
        return f"len={self._length}"
