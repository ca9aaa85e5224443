"""Argument checks shared by the sources, so every bad call names its argument."""

from __future__ import annotations

import operator
from typing import Any

import numpy as np


def as_index(value: Any, name: str = "index") -> int:
    """Returns `value` as an int; bools, floats and other non-integers raise TypeError."""
    if isinstance(value, bool | np.bool_) or not hasattr(value, "__index__"):
        raise TypeError(f"`{name}` must be an integer, got {type(value).__name__} {value!r}.")
    return operator.index(value)


# Grain's wording for an index past the end, per source: clients match it with
# assertRaisesRegex, so ours opens with it.
_GRAIN_WORDING = {
    "RangeDataSource": "Index {index} out of range for {length}. ",
    "ArrayRecordDataSource": "Record key should be in [0, num_records). ",
}


def record_index(value: Any, length: int, source: object) -> int:
    """Resolves a Sequence-style index (negatives count from the end) into [0, length)."""
    index = as_index(value)
    resolved = index + length if index < 0 else index
    if not 0 <= resolved < length:
        grain = _GRAIN_WORDING.get(type(source).__name__, "").format(index=index, length=length)
        raise RecordOutOfRangeError(
            f"{grain}index {index} is out of range for {type(source).__name__} of length {length}: "
            f"use 0 <= index < {length} (or a negative index down to -{length})."
        )
    return resolved


def record_indices(values: Any, length: int, source: object) -> np.ndarray:
    """The vectorized `record_index`: an int64 array of indices in [0, length)."""
    indices = np.asarray(values)
    if indices.ndim != 1:
        raise ValueError(
            f"indices for {type(source).__name__} must be one-dimensional, got shape "
            f"{indices.shape}: flatten them first."
        )
    if indices.dtype.kind not in "iu":
        if indices.size == 0:
            return np.zeros(0, np.int64)
        if indices.dtype == object or not isinstance(values, np.ndarray):
            # Python ints beyond int64 turn a list into floats or objects: check each.
            return np.array([record_index(value, length, source) for value in values], np.int64)
        raise TypeError(
            f"indices for {type(source).__name__} must be integers, got an array of "
            f"{indices.dtype}."
        )
    if indices.dtype.kind == "u" and indices.size and int(indices.max()) >= length:
        too_large = int(indices[indices >= length][0])
        record_index(too_large, length, source)
    indices = indices.astype(np.int64, copy=False)
    if not indices.size or (int(indices.min()) >= 0 and int(indices.max()) < length):
        return indices  # the common case, two reductions and no temporary arrays
    negative = indices < 0
    if negative.any():
        indices = indices + negative * np.int64(length)
    bad = (indices < 0) | (indices >= length)
    if bad.any():
        original = np.asarray(values).reshape(-1)[np.flatnonzero(bad)[0]]
        record_index(int(original), length, source)
    return indices


# Errors that are both the exception this library raises and the one Grain raises for
# the same call, so that code written for either catches them.


class WrongTypeError(TypeError, ValueError):
    """An argument of the wrong type (Grain raises ValueError for some)."""


class NoSuchFileError(FileNotFoundError, RuntimeError):
    """A path that names no file (Grain's ArrayRecord reader raises RuntimeError)."""


class DirectoryNotFileError(IsADirectoryError, RuntimeError):
    """A path that names a directory where a file is needed (Grain: RuntimeError)."""


class UnreadableFileError(ValueError, RuntimeError):
    """A file that is not of the expected format (Grain: RuntimeError)."""


class RecordOutOfRangeError(IndexError, ValueError):
    """A record index outside the source (Grain's ArrayRecord source: ValueError)."""
