"""ArrayDataSource: in-memory arrays (one, or a dict/tuple/list of them) as records.

The natural form of an in-memory dataset such as MNIST is columnar: an array
of images and an array of labels. Record i is the same structure holding row
i of every array. What this adds over a list of per-record dicts is `gather`:
many records at once, already stacked, by one fancy-indexing copy per array.
A MapDataset batch over such a source (with only index arithmetic in between:
shuffle, slice, repeat, mix, sharding) reads each batch with one `gather`,
instead of building and stacking records one by one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from grain_sources._checks import record_index, record_indices


def _flatten(data: Any, path: str, leaves: list[tuple[str, np.ndarray]]) -> Any:
    """The structure of `data` with each array replaced by its leaf number."""
    if isinstance(data, Mapping):
        return {key: _flatten(value, f"{path}[{key!r}]", leaves) for key, value in data.items()}
    if isinstance(data, tuple | list) and not _is_namedtuple(data):
        children = [_flatten(value, f"{path}[{i}]", leaves) for i, value in enumerate(data)]
        return type(data)(children)
    if _is_namedtuple(data):
        return type(data)(*(_flatten(v, f"{path}.{k}", leaves) for k, v in data._asdict().items()))
    array = np.asarray(data)
    if array.ndim == 0:
        raise TypeError(
            f"ArrayDataSource: {path or 'data'} is a scalar ({data!r}); every leaf must be an "
            "array whose first axis indexes the records."
        )
    if array.dtype == object:
        raise TypeError(
            f"ArrayDataSource: {path or 'data'} has dtype object; give arrays of numbers, "
            "bools or fixed-size strings (a list of Python objects is a source as it is)."
        )
    leaves.append((path or "data", array))
    return len(leaves) - 1


def _tight(array: np.ndarray) -> np.ndarray:
    """A string array at the width of its longest string, as stacking its items gives."""
    if array.dtype.kind not in "US" or not array.size:
        return array
    width = max(1, int(np.char.str_len(array).max()))
    if width == array.dtype.itemsize // (4 if array.dtype.kind == "U" else 1):
        return array
    return array.astype(f"{array.dtype.byteorder}{array.dtype.kind}{width}")


def _is_namedtuple(value: Any) -> bool:
    return isinstance(value, tuple) and hasattr(type(value), "_fields")


def _build(structure: Any, leaves: Sequence[Any]) -> Any:
    if isinstance(structure, int):
        return leaves[structure]
    if isinstance(structure, dict):
        return {key: _build(value, leaves) for key, value in structure.items()}
    if _is_namedtuple(structure):
        return type(structure)(*(_build(value, leaves) for value in structure))
    return type(structure)(_build(value, leaves) for value in structure)


class ArrayDataSource:
    """In-memory arrays as a random-access source: record i holds row i of each array.

    `data` is a numpy array, or a dict, tuple, list or namedtuple (nested as
    you like) of arrays of equal length. A record has the same structure with
    each array's row i (an array, or a numpy scalar for a 1-D array).
    `gather(indices)` returns many records already stacked, one copy per
    array, which MapDataset.batch uses to batch without per-record work.

    Example::

        source = grain.sources.ArrayDataSource({"image": x_train, "label": y_train})
        ds = grain.MapDataset.source(source).shuffle(seed=0).batch(128)
        ds[0]["image"].shape  # (128, 28, 28)

    ``MapDataset.source({"image": x_train, "label": y_train})`` (a dict of
    numpy arrays) builds this source for you.
    """

    # __getitems__ returns [self[i] for i in indices]: see RandomAccessDataSource.
    batched_reads: ClassVar[bool] = True

    def __init__(self, data: Any):
        leaves: list[tuple[str, np.ndarray]] = []
        self._structure = _flatten(data, "", leaves)
        if not leaves:
            raise ValueError("ArrayDataSource needs at least one array, got an empty structure.")
        lengths = {path: len(array) for path, array in leaves}
        if len(set(lengths.values())) > 1:
            raise ValueError(
                "ArrayDataSource: the arrays must have the same length (their first axis "
                f"indexes the records), got {lengths}."
            )
        self._paths = [path for path, _ in leaves]
        self._arrays = [array for _, array in leaves]
        self._length = len(self._arrays[0])

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index: int) -> Any:
        row = record_index(index, self._length, self)
        return _build(self._structure, [array[row] for array in self._arrays])

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        rows = record_indices(indices, self._length, self).tolist()
        return [_build(self._structure, [array[row] for array in self._arrays]) for row in rows]

    def gather(self, indices: Sequence[int] | np.ndarray) -> Any:
        """The records at `indices`, stacked: each array indexed by all of them at once.

        The same as stacking the records one by one (`grain.experimental.stack`),
        also for string arrays, whose width is that of the longest gathered string.
        """
        rows = record_indices(indices, self._length, self)
        return _build(self._structure, [_tight(array[rows]) for array in self._arrays])

    def __repr__(self) -> str:
        shown = ", ".join(
            f"{path}: {array.dtype}{list(array.shape[1:])}"
            for path, array in zip(self._paths, self._arrays, strict=True)
        )
        return f"ArrayDataSource(len={self._length}, {shown})"
