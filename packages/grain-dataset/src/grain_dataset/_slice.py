"""Slicing (the usual way to shard) and repeating a MapDataset.

A slice keeps the parent's epochs apart: index i of the slice, in epoch
``e = i // len(slice)``, reads parent index ``e * len(parent) + r[i % len(slice)]``
where r is ``range(len(parent))[sl]`` (or, for a sequence of indices, that
sequence). A repeat only changes the length, since indices past one epoch
already mean later epochs; with ``reseed_each_epoch=False`` it maps every epoch
back onto the first, so shuffles and random maps repeat too.
"""

from __future__ import annotations

import builtins
import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from grain_dataset._base import INFINITE, MapDataset, register
from grain_dataset._errors import WrongTypeError
from grain_dataset._fingerprint import token
from grain_dataset._stage import MapStage, epochs_of, fits_int64, is_infinite
from grain_index import checks


@register("slice")
class SliceMapDataset(MapStage):
    """The parent's elements at the indices of a slice of its first epoch."""

    def _fingerprint_token(self) -> str | None:
        r = self._range
        if isinstance(r, np.ndarray):
            return token("slice", "#" + hashlib.sha256(r.tobytes()).hexdigest()[:8])
        return token("slice", (r.start, r.stop, r.step))

    def __init__(self, parent: MapDataset[Any], sl: slice | Sequence[int] | np.ndarray):
        super().__init__(parent)
        self._parent = parent
        self._parent_length = len(parent)
        self._range: range | np.ndarray
        if not isinstance(sl, slice):
            self._range = _index_sequence(sl, self._parent_length)
            return
        if sl.step == 0:
            raise ValueError(
                "the step of a slice must not be 0 (use ds[start:stop:step], step != 0)."
            )
        for name in ("start", "stop", "step"):
            value = getattr(sl, name)
            if value is not None:
                checks.as_int(value, f"slice {name}")
        self._range = builtins.range(self._parent_length)[sl]

    def __len__(self) -> int:
        return len(self._range)

    def _getitem(self, index: int) -> Any:
        length = len(self._range)
        epoch, offset = divmod(index, length)
        return self._parent._getitem(epoch * self._parent_length + int(self._range[offset]))

    _maps_indices = True

    def _parent_indices(self, indices: np.ndarray) -> np.ndarray | None:
        length = len(self._range)
        if not length:
            raise IndexError("the dataset is empty: it has no element at any index.")
        r = self._range
        if not fits_int64(indices, length, self._parent_length):
            return None
        epochs, offsets = epochs_of(indices, length)
        if isinstance(r, np.ndarray):
            return epochs * self._parent_length + r[offsets]
        return epochs * self._parent_length + r.start + offsets * r.step

    def _getitems(self, indices: np.ndarray) -> list[Any]:
        parent_indices = self._parent_indices(indices)
        if parent_indices is None:
            return super()._getitems(indices)
        return self._parent._getitems(parent_indices)

    def _describe(self) -> str:
        r = self._range
        if isinstance(r, np.ndarray):
            shown = ", ".join(map(str, r[:8].tolist())) + (", ..." if len(r) > 8 else "")
            return f"indices=[{shown}]"
        return f"start={r.start}, stop={r.stop}, step={r.step}"


def _index_sequence(indices: Any, length: int) -> np.ndarray:
    """`indices` (ints in [-length, length)) as an int64 array of indices in [0, length)."""
    if isinstance(indices, str | bytes) or not isinstance(indices, Sequence | np.ndarray):
        raise WrongTypeError(
            "`sl` must be a slice (like slice(0, None, 2)) or a sequence of indices, "
            f"got {type(indices).__name__}."
        )
    array = np.asarray(indices)
    if array.ndim != 1 or (array.size and array.dtype.kind not in "iu"):
        raise WrongTypeError(
            "a sequence of indices to slice by must be a flat sequence of integers, "
            f"got {indices!r}."
        )
    array = array.astype(np.int64, copy=True)
    bad = (array < -length) | (array >= length)
    if bad.any():
        raise IndexError(
            f"index {int(array[bad][0])} is out of range for a dataset of length {length}."
        )
    array[array < 0] += length
    array.flags.writeable = False
    return array


@register("repeat")
class RepeatMapDataset(MapStage):
    """`num_epochs` epochs of the parent, or infinitely many (length sys.maxsize)."""

    def _fingerprint_token(self) -> str | None:
        return token("repeat", self._num_epochs, self._reseed)

    def __init__(
        self,
        parent: MapDataset[Any],
        num_epochs: int | None = None,
        reseed_each_epoch: bool = True,
    ):
        super().__init__(parent)
        if not isinstance(reseed_each_epoch, bool):
            raise TypeError(f"`reseed_each_epoch` must be a bool, got {reseed_each_epoch!r}.")
        length = len(parent)
        if is_infinite(length):
            raise ValueError(
                "cannot repeat an infinite dataset (its length is sys.maxsize already): "
                "remove one of the .repeat() calls."
            )
        if num_epochs is not None:
            num_epochs = checks.int_in_range(num_epochs, "num_epochs", 1)
        if length == 0:
            self._length = 0  # any number of epochs of nothing, as in Grain
        elif num_epochs is None:
            self._length = INFINITE
        else:
            self._length = min(INFINITE, length * num_epochs)
        self._num_epochs = num_epochs
        self._parent = parent
        # Every epoch reads the parent's first: the same order and random numbers again.
        self._fold = None if reseed_each_epoch or not length else length
        self._reseed = reseed_each_epoch

    def __len__(self) -> int:
        return self._length

    def _getitem(self, index: int) -> Any:
        if self._fold is not None:
            index %= self._fold
        return self._parent._getitem(index)

    _maps_indices = True

    def _parent_indices(self, indices: np.ndarray) -> np.ndarray | None:
        return indices % self._fold if self._fold is not None else indices

    def _getitems(self, indices: np.ndarray) -> list[Any]:
        if self._fold is not None:
            indices = indices % self._fold
        return self._parent._getitems(indices)

    def _describe(self) -> str:
        extra = "" if self._reseed else ", reseed_each_epoch=False"
        return f"num_epochs={self._num_epochs}{extra}"
