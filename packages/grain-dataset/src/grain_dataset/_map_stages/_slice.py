"""Slicing a MapDataset, the usual way to shard.

A slice keeps the parent's epochs apart: index i of the slice, in epoch
``e = i // len(slice)``, reads parent index ``e * len(parent) + r[i % len(slice)]``
where r is ``range(len(parent))[sl]`` (or, for a sequence of indices, that
sequence).
"""

from __future__ import annotations

import builtins
import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from grain_dataset._common._errors import WrongTypeError
from grain_dataset._core._base import MapDataset, register
from grain_dataset._core._stage import MapStage, epochs_of, fits_int64
from grain_dataset._runtime._fingerprint import token
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
                "slice step cannot be zero: the step of a slice must not be 0 "
                "(use ds[start:stop:step], step != 0)."
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
            f"sl is not a slice: {type(indices)}. "
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
