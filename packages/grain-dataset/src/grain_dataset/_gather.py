"""Batches read whole: `MapDataset.batch` over index arithmetic and an array source.

When every stage between a source and a `batch` (with the default batch_fn)
only maps indices (shuffle, slice, sharding, repeat, seed, mix, concatenate)
and the source holds arrays (a numpy array, an `ArrayDataSource` or anything
with `gather(indices)` returning stacked records), the batch asks the chain
for all its indices at once: each index stage maps the array of indices
(`_parent_indices`) and the source gathers the rows with one fancy-indexing
copy per array. Nothing is built or stacked record by record, and the result
is identical to stacking the records (same values, dtypes and structure), so
states and checkpoints do not change.

A stage opts in with `_gatherable()` (static: decided when the batch is
built, and shown in its repr as ``gather=True``) and `_gather(indices)`; it
may still return `NotImplemented` at run time (a mixture whose components'
records differ in structure or dtype), and the batch then stacks record by
record.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np


def _leaves(tree: Any, out: list[np.ndarray]) -> Any:
    """The structure of `tree` with leaves numbered; None if a leaf is not an array."""
    if isinstance(tree, dict):
        keys = {key: _leaves(value, out) for key, value in tree.items()}
        return None if any(value is None for value in keys.values()) else (dict, keys)
    if isinstance(tree, tuple | list):
        children = [_leaves(value, out) for value in tree]
        return None if any(child is None for child in children) else (type(tree), children)
    if not isinstance(tree, np.ndarray):
        return None
    out.append(tree)
    return len(out) - 1


def _rebuild(structure: Any, leaves: list[np.ndarray]) -> Any:
    if isinstance(structure, int):
        return leaves[structure]
    kind, children = structure
    if kind is dict:
        return {key: _rebuild(value, leaves) for key, value in children.items()}
    values = [_rebuild(value, leaves) for value in children]
    if hasattr(kind, "_fields"):
        return kind(*values)
    return kind(values)


def _piece(leaf: np.ndarray, low: int, high: int) -> np.ndarray:
    piece = leaf[low:high]
    if piece.dtype.kind in "US" and piece.size:
        # Stacking strings gives the width of the longest one in the batch, not the chunk.
        width = max(1, int(np.char.str_len(piece).max()))
        piece = piece.astype(f"{piece.dtype.kind}{width}")
    return piece


def split(tree: Any, bounds: list[int]) -> list[Any]:
    """`tree` (stacked arrays) cut along the first axis at `bounds`: views, no copies."""
    leaves: list[np.ndarray] = []
    structure = _leaves(tree, leaves)
    if structure is None:
        raise TypeError(f"cannot split {type(tree).__name__}: its leaves must be arrays.")
    return [
        _rebuild(structure, [_piece(leaf, low, high) for leaf in leaves])
        for low, high in itertools.pairwise(bounds)
    ]


def interleave(parts: list[tuple[np.ndarray, Any]], count: int) -> Any:
    """One stacked batch of `count` records from parts ``(positions, stacked records)``.

    NotImplemented when the parts' structures, dtypes or row shapes differ (the
    record-by-record path then decides what such a batch is).
    """
    structure = None
    columns: list[np.ndarray] | None = None
    for positions, part in parts:
        leaves: list[np.ndarray] = []
        shape = _leaves(part, leaves)
        if shape is None:
            return NotImplemented
        if columns is None:
            structure = shape
            columns = [np.empty((count, *leaf.shape[1:]), leaf.dtype) for leaf in leaves]
        elif shape != structure or any(
            leaf.dtype != column.dtype or leaf.shape[1:] != column.shape[1:]
            for leaf, column in zip(leaves, columns, strict=True)
        ):
            return NotImplemented
        for leaf, column in zip(leaves, columns, strict=True):
            column[positions] = leaf
    assert columns is not None
    return _rebuild(structure, columns)
