"""`RebatchIterDataset`: batches of any sizes in, batches of exactly `batch_size` out.

The parent yields batches: PyTrees whose leaves are numpy arrays sharing a
leading batch axis, of any (even varying) number of rows, e.g. the output of
a packing stage, of a file reader that yields row groups, or of a `batch`
with another size. The output is the same rows, in order, regrouped into
batches of `batch_size` rows; the last one is smaller unless
`drop_remainder`. Rows are moved with numpy only: a slice of each leaf per
parent batch and one ``np.concatenate`` per leaf and output batch, never a
Python loop over rows. An output batch that lies inside one parent batch is
a view of it (no copy); one that spans several is a new array.

State, Grain's: ``{"parent": <the parent's state before the parent batch last
read>, "batch_idx": <rows of that batch already returned>}``; a batch used up
is left only when the next is read (so `batch_idx` may equal its rows), and at
the end "parent" is the parent's state at its end with the last count kept.
No rows are buffered in it; restoring sets the parent to that state and, on
the next call, reads that one parent batch again and skips `batch_idx` rows of
it. This assumes, as every checkpointable parent guarantees, that the parent
produces the same batch again after a restore. States of earlier versions of
this library (``"offset"`` for `batch_idx`) restore as well.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from grain_dataset._core._base import DatasetIterator, IterDataset, MapDataset
from grain_dataset._core._element_spec import Path, map_with_path, path_name, structure_of
from grain_dataset._core._iter_stage import Anchor, IterStage, StageIterator, iterator_of
from grain_dataset._core._state import check_state, renamed_keys
from grain_index import checks

_INDEX = "batch_idx"


class _ParentBatch:
    """One parent batch, flattened once: its leaves, their paths and its row count."""

    __slots__ = ("leaves", "paths", "rows", "structure", "template")

    def __init__(self, batch: Any):
        leaves: list[np.ndarray] = []
        paths: list[Path] = []

        def visit(path: Path, leaf: Any) -> None:
            if not isinstance(leaf, np.ndarray):
                raise TypeError(
                    f"RebatchIterDataset: {path_name('batch', path)} of a parent batch is a "
                    f"{type(leaf).__name__}, not a numpy array. Every leaf of a parent batch "
                    "must be an array whose first axis is the batch axis (batch the "
                    "elements first, or convert leaves with np.asarray)."
                )
            if leaf.ndim == 0:
                raise ValueError(
                    f"RebatchIterDataset: {path_name('batch', path)} of a parent batch is a "
                    "0-d array, which has no batch axis. Every leaf needs the leading "
                    "batch axis; batch the elements first."
                )
            if leaves and leaf.shape[0] != leaves[0].shape[0]:
                raise ValueError(
                    f"RebatchIterDataset: {path_name('batch', path)} of a parent batch has "
                    f"{leaf.shape[0]} rows but {path_name('batch', paths[0])} has "
                    f"{leaves[0].shape[0]}; all leaves of a batch must share the leading "
                    "batch dimension."
                )
            leaves.append(leaf)
            paths.append(path)

        map_with_path(visit, batch)
        if not leaves:
            raise ValueError(
                f"RebatchIterDataset: a parent batch has no array leaves ({batch!r}), so it "
                "has no rows to rebatch."
            )
        self.template = batch
        self.leaves = leaves
        self.paths = paths
        self.rows = leaves[0].shape[0]
        self.structure = structure_of(batch)


class RebatchIterDataset(IterStage):
    """Regroups the rows of the parent's batches into batches of `batch_size` rows.

    Args:
      parent: an IterDataset of batches: PyTrees of numpy arrays that share
        their first (batch) dimension, whose size may vary from batch to batch.
      batch_size: rows per output batch, >= 1.
      drop_remainder: drop a last batch with fewer than `batch_size` rows.

    The output has the parent's structure, with the same rows in the same
    order. Its state holds the parent's state and a row offset, no data.

    Example::

        ds = grain.MapDataset.range(10).to_iter_dataset().batch(3)   # 3, 3, 3, 1 rows
        ds = grain.experimental.RebatchIterDataset(ds, batch_size=4)
        [b.tolist() for b in ds]   # [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    """

    _positional_chain = True

    def _fingerprint_token(self) -> str | None:
        return None  # its state counts rows: any batch size resumes at the same row

    def __init__(self, parent: IterDataset[Any], batch_size: int, drop_remainder: bool = False):
        if isinstance(parent, MapDataset):
            raise TypeError(
                "RebatchIterDataset: `parent` must be an IterDataset, got a MapDataset; "
                "call .to_iter_dataset() on it first (or batch the MapDataset directly)."
            )
        if not isinstance(parent, IterDataset):
            raise TypeError(
                f"RebatchIterDataset: `parent` must be an IterDataset of batches, "
                f"got {type(parent).__name__}."
            )
        super().__init__(parent)
        self._batch_size = checks.int_in_range(
            batch_size, "batch_size", 1, lead="batch_size must be positive."
        )
        if not isinstance(drop_remainder, bool):
            raise TypeError(f"`drop_remainder` must be a bool, got {drop_remainder!r}.")
        self._drop_remainder = drop_remainder

    def _describe(self) -> str:
        return f"batch_size={self._batch_size}, drop_remainder={self._drop_remainder}"


@iterator_of(RebatchIterDataset)
class _RebatchIterator(StageIterator):
    """The position is (`_anchor`, `_offset`) into the parent batch `_current`.

    `_current` is None before the first batch, at the end, and after
    `set_state`; in the last case `_offset` is a pending skip into the parent
    batch that the next read replays.
    """

    def __init__(self, dataset: RebatchIterDataset, parent: DatasetIterator[Any]):
        super().__init__(dataset, parent)
        self._current: _ParentBatch | None = None
        self._anchor = Anchor(parent, now=False)  # the parent's state before `_current`
        self._offset = 0

    def _fetch(self) -> bool:
        """Reads the next parent batch with rows into `_current`; False at the parent's end."""
        skip = self._offset if self._current is None else 0
        while True:
            start = self._parent.get_state()
            try:
                batch = next(self._parent)
            except StopIteration:
                # Grain's state at the end: the parent's end, the last count kept (a
                # restored end state skips into nothing and ends the same way).
                self._anchor.set(start)
                self._current = None
                return False
            try:
                current = _ParentBatch(batch)
            except Exception:
                # Stay before the bad batch, so the next call raises again at it.
                self._parent.set_state(start)
                raise
            if skip > current.rows:
                self._parent.set_state(start)
                raise ValueError(
                    f"the state of {self._dataset!r} skips {skip} rows of a parent batch "
                    f"that has only {current.rows}; the state is from another pipeline or "
                    "the parent's data changed."
                )
            if current.rows == 0:
                continue
            if skip and skip == current.rows:
                skip = 0  # restored at a batch used up: on to the next one
                continue
            self._current, self._offset = current, skip
            self._anchor.set(start)
            return True

    def __next__(self) -> Any:
        dataset = self._dataset
        need = dataset._batch_size
        saved = self._position(copy=False)  # only this iterator reads it: no copy per batch
        pieces: list[list[np.ndarray]] = []
        first: _ParentBatch | None = None
        try:
            while need:
                current = self._current
                if current is None or self._offset >= current.rows:
                    if not self._fetch():
                        break
                    current = self._current
                    assert current is not None
                    if first is not None and current.structure != first.structure:
                        raise ValueError(
                            f"{dataset!r}: consecutive parent batches have different "
                            f"structures ({_describe(first.template)} and then "
                            f"{_describe(current.template)}); every parent batch needs the "
                            "same keys and nesting."
                        )
                low = self._offset
                take = min(need, current.rows - low)
                pieces.append([leaf[low : low + take] for leaf in current.leaves])
                self._offset = low + take
                need -= take
                if first is None:
                    first = current
            rows = dataset._batch_size - need
            if not rows or (dataset._drop_remainder and need):
                raise StopIteration
            assert first is not None
            leaves = pieces[0] if len(pieces) == 1 else _concatenate(pieces, first.paths)
        except StopIteration:
            raise
        except Exception:
            if pieces:
                # Rows already taken would be lost: go back to this batch's start,
                # so the next call reads it again and raises at the same place.
                self.set_state(saved)
            raise
        replaced = iter(leaves)
        return map_with_path(lambda path, leaf: next(replaced), first.template)

    def _position(self, copy: bool) -> dict[str, Any]:
        if self._anchor.state is None:  # nothing read yet
            return {"parent": self._parent.get_state(), _INDEX: 0}
        anchor = self._anchor.saved() if copy else self._anchor.state
        return {"parent": anchor, _INDEX: self._offset}

    def get_state(self) -> dict[str, Any]:
        return self._position(copy=True)

    def set_state(self, state: dict[str, Any]) -> None:
        state = renamed_keys(state, {"offset": _INDEX})
        check_state(state, repr(self._dataset), ("parent", _INDEX))
        self._anchor.restore(state["parent"])
        # The replay of the parent batch waits for the next read, so restoring
        # reads no data and cannot fail on it.
        self._current = None
        self._offset = state[_INDEX]


def _describe(tree: Any) -> str:
    if isinstance(tree, dict):
        return f"a dict with keys {list(tree)}"
    if isinstance(tree, list | tuple):
        return f"a {type(tree).__name__} of length {len(tree)}"
    return f"a {type(tree).__name__}"


def _concatenate(pieces: list[list[np.ndarray]], paths: list[Path]) -> list[np.ndarray]:
    """One array per leaf: the leaf's pieces joined along the batch axis."""
    result = []
    for position, parts in enumerate(zip(*pieces, strict=True)):
        try:
            result.append(np.concatenate(parts))
        except ValueError:
            shapes = [part.shape[1:] for part in parts]
            raise ValueError(
                f"RebatchIterDataset: {path_name('batch', paths[position])} has rows of "
                f"different shapes in consecutive parent batches ({shapes}); rows can only "
                "be regrouped when each leaf has the same shape after the batch axis."
            ) from None
    return result
