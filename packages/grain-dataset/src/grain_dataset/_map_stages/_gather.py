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

import functools
import itertools
from typing import Any

import numpy as np

from grain_dataset._core._element_spec import Path, map_with_path, structure_of


def _arrays(tree: Any) -> list[np.ndarray] | None:
    """The leaves of `tree` in order (None leaves stay out); None if one is not an array."""
    leaves: list[Any] = []

    def collect(_: Path, leaf: Any) -> Any:
        leaves.append(leaf)
        return leaf

    map_with_path(collect, tree)
    return leaves if all(isinstance(leaf, np.ndarray) for leaf in leaves) else None


def _piece(_: Path, leaf: np.ndarray, *, low: int, high: int) -> np.ndarray:
    piece = leaf[low:high]
    if piece.dtype.kind in "US" and piece.size:
        # Stacking strings gives the width of the longest one in the batch, not the chunk.
        width = max(1, int(np.char.str_len(piece).max()))
        piece = piece.astype(f"{piece.dtype.kind}{width}")
    return piece


def split(tree: Any, bounds: list[int]) -> list[Any]:
    """`tree` (stacked arrays) cut along the first axis at `bounds`: views, no copies."""
    if _arrays(tree) is None:
        raise TypeError(f"cannot split {type(tree).__name__}: its leaves must be arrays.")
    return [
        map_with_path(functools.partial(_piece, low=low, high=high), tree)
        for low, high in itertools.pairwise(bounds)
    ]


def interleave(parts: list[tuple[np.ndarray, Any]], count: int) -> Any:
    """One stacked batch of `count` records from parts ``(positions, stacked records)``.

    NotImplemented when the parts' structures, dtypes or row shapes differ (the
    record-by-record path then decides what such a batch is).
    """
    template: Any = None
    structure: Any = None
    columns: list[np.ndarray] = []
    for positions, part in parts:
        leaves = _arrays(part)
        if leaves is None:
            return NotImplemented
        if template is None:
            template, structure = part, structure_of(part)
            columns = [np.empty((count, *leaf.shape[1:]), leaf.dtype) for leaf in leaves]
        elif structure_of(part) != structure or any(
            leaf.dtype != column.dtype or leaf.shape[1:] != column.shape[1:]
            for leaf, column in zip(leaves, columns, strict=True)
        ):
            return NotImplemented
        for leaf, column in zip(leaves, columns, strict=True):
            column[positions] = leaf
    filled = iter(columns)
    return map_with_path(lambda _, __: next(filled), template)
