"""PackAndBatchOperation: Grain's DataLoader packing, first fit within one batch.

Model. A batch has `batch_size` rows; in every row each feature (a leaf of the
element's PyTree) has room for the length `length_struct` gives it. Each
incoming element goes to the first row where *every* feature still fits (and
that holds fewer than `max_sequences_per_bin` elements, if set). An element
that fits in no row closes the batch: the batch is yielded and the element
starts the next one. The last, partial batch is yielded at the end.

A yielded Record holds ``(data, segment_ids, positions)``, three PyTrees of the
input's structure: `data` leaves of shape ``(batch_size, length, ...)`` in the
input's dtype, zero-padded; `segment_ids` (int32, ``(batch_size, length)``) say
which element of the row each entry comes from (1, 2, ... in the order they were
placed; 0 is padding); `positions` (int32) count from 0 within each element.
Its metadata is that of the last element placed in the batch (without
`record_key`), so a loader resumes after it and re-reads the element that did
not fit: packing restores exactly.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import numpy as np

from grain_index import Record


def _flatten(tree: Any) -> tuple[list[Any], Any]:
    """The leaves of `tree` in order, and a description of its structure."""
    if isinstance(tree, dict):
        leaves: list[Any] = []
        children = []
        for key in tree:
            child_leaves, child = _flatten(tree[key])
            leaves += child_leaves
            children.append((key, child, len(child_leaves)))
        return leaves, ("dict", type(tree), children)
    if isinstance(tree, list | tuple):
        leaves, children = [], []
        for item in tree:
            child_leaves, child = _flatten(item)
            leaves += child_leaves
            children.append((None, child, len(child_leaves)))
        return leaves, ("seq", type(tree), children)
    return [tree], None


def _unflatten(structure: Any, leaves: list[Any]) -> Any:
    if structure is None:
        return leaves[0]
    kind, cls, children = structure
    values, start = [], 0
    for _, child, count in children:
        values.append(_unflatten(child, leaves[start : start + count]))
        start += count
    if kind == "dict":
        result = {key: value for (key, _, _), value in zip(children, values, strict=True)}
        return result if cls is dict else cls(result)
    if hasattr(cls, "_fields"):  # a namedtuple
        return cls(*values)
    return cls(values)


def _keys(structure: Any) -> Any:
    """The structure without leaf counts or container subclasses, for comparisons."""
    if structure is None:
        return None
    kind, _, children = structure
    return kind, tuple((key, _keys(child)) for key, child, _ in children)


class _PackedBatch:
    """One batch being filled: per feature, the data, segment ids and positions arrays."""

    def __init__(self, lengths: list[int], batch_size: int, first: list[np.ndarray]):
        self.lengths = lengths
        self.data = [
            np.zeros((batch_size, length, *leaf.shape[1:]), dtype=leaf.dtype)
            for length, leaf in zip(lengths, first, strict=True)
        ]
        self.segments = [np.zeros((batch_size, length), np.int32) for length in lengths]
        self.positions = [np.zeros((batch_size, length), np.int32) for length in lengths]
        self.filled = np.zeros((batch_size, len(lengths)), np.int64)
        self.counts = np.zeros(batch_size, np.int64)
        self.metadata: Any = None

    def add(self, leaves: list[np.ndarray], sizes: np.ndarray, limit: int | None) -> bool:
        """Places the element in the first row with room; False if no row has room."""
        room = np.all(self.filled + sizes <= np.asarray(self.lengths), axis=1)
        if limit is not None:
            room &= self.counts < limit
        rows = np.flatnonzero(room)
        if not rows.size:
            return False
        row = int(rows[0])
        self.counts[row] += 1
        segment = self.counts[row]
        for feature, leaf in enumerate(leaves):
            start = int(self.filled[row, feature])
            stop = start + leaf.shape[0]
            self.data[feature][row, start:stop] = leaf
            self.segments[feature][row, start:stop] = segment
            self.positions[feature][row, start:stop] = np.arange(leaf.shape[0])
            self.filled[row, feature] = stop
        return True


@dataclasses.dataclass
class PackAndBatchOperation:
    """Packs variable-length elements into fixed-length rows, `batch_size` rows per batch.

    Args:
      length_struct: a PyTree of the elements' structure whose leaves are the
        packed length of each feature, e.g. ``{"inputs": 128, "targets": 64}``.
      batch_size: rows per batch, >= 1.
      max_sequences_per_bin: the most elements in one row, or None for no limit.

    Elements are PyTrees of numpy arrays whose first dimension is the sequence
    length (at most the feature's packed length: truncate longer ones first).
    See the module docstring for the placement rule and the output.

    Example::

        op = PackAndBatchOperation(length_struct={"tokens": 8}, batch_size=2)
        loader = grain.DataLoader(data_source=source, sampler=sampler, operations=[op])
        data, segment_ids, positions = next(iter(loader))
        data["tokens"].shape  # (2, 8)
    """

    length_struct: Any
    batch_size: int
    max_sequences_per_bin: int | None = None
    _structure: Any = dataclasses.field(init=False, repr=False, compare=False)
    _lengths: list[int] = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        lengths, self._structure = _flatten(self.length_struct)
        for length in lengths:
            if isinstance(length, bool) or not isinstance(length, int | np.integer) or length < 1:
                raise ValueError(
                    "`length_struct` must be a PyTree whose leaves are the packed lengths "
                    f"(integers >= 1), e.g. {{'tokens': 128}}; got {self.length_struct!r}."
                )
        self._lengths = [int(length) for length in lengths]
        for name in ("batch_size", "max_sequences_per_bin"):
            value = getattr(self, name)
            if value is None and name == "max_sequences_per_bin":
                continue
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
                raise ValueError(f"`{name}` must be an integer >= 1, got {value!r}.")

    def _leaves(self, record: Any) -> list[np.ndarray]:
        data = getattr(record, "data", record)
        leaves, structure = _flatten(data)
        if _keys(structure) != _keys(self._structure):
            raise ValueError(
                "PackAndBatchOperation: an element's structure differs from `length_struct` "
                f"({self.length_struct!r}): got {data!r}."
            )
        arrays = []
        for leaf, length in zip(leaves, self._lengths, strict=True):
            array = np.asarray(leaf)
            if array.ndim == 0:
                raise ValueError(
                    "PackAndBatchOperation packs sequences: every leaf needs a first "
                    f"(length) dimension, got the scalar {leaf!r}."
                )
            if array.shape[0] > length:
                raise ValueError(
                    "Inputs to PackAndBatchOperation must be truncated to max length. "
                    f"PackAndBatchOperation: a sequence of length {array.shape[0]} does not "
                    f"fit the packed length {length}; truncate the elements to "
                    "`length_struct` first."
                )
            arrays.append(array)
        return arrays

    def _emit(self, batch: _PackedBatch) -> Record[Any]:
        parts = tuple(
            _unflatten(self._structure, arrays)
            for arrays in (batch.data, batch.segments, batch.positions)
        )
        return Record(batch.metadata.remove_record_key(), parts)

    def __call__(self, input_iterator: Iterator[Record[Any]]) -> Iterator[Record[Any]]:
        limit = self.max_sequences_per_bin
        batch: _PackedBatch | None = None
        for record in input_iterator:
            if not hasattr(record, "metadata"):
                raise TypeError(
                    "PackAndBatchOperation takes an iterator of grain.python.Record objects, "
                    f"got a {type(record).__name__}."
                )
            leaves = self._leaves(record)
            sizes = np.array([leaf.shape[0] for leaf in leaves], np.int64)
            if batch is not None and not batch.add(leaves, sizes, limit):
                yield self._emit(batch)
                batch = None
            if batch is None:
                batch = _PackedBatch(self._lengths, self.batch_size, leaves)
                batch.add(leaves, sizes, limit)
            batch.metadata = record.metadata
        if batch is not None:
            yield self._emit(batch)
