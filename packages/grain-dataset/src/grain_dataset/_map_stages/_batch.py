"""Batching: consecutive elements stacked into one, for MapDataset and IterDataset.

MapDataset: batch b of epoch e holds parent indices
``e * len(parent) + [b * size, min((b + 1) * size, len(parent)))``, so a batch
never spans two epochs. Filtered (None) positions are left out of their batch,
and a batch with nothing left is None. IterDataset: the next `batch_size`
elements of the parent; the state is the parent's, since a batch is always
complete when `get_state` can be called.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from grain_dataset._common._errors import note_stage
from grain_dataset._common._row_stack import RowStack, has_rows, read_stacked
from grain_dataset._common._tree import stack
from grain_dataset._core._base import INFINITE, IterDataset, MapDataset, register
from grain_dataset._core._iter_stage import IterStage, StageIterator, iterator_of
from grain_dataset._core._next_index import get_next_index, set_parent_next_index
from grain_dataset._core._stage import MapStage, epochs_of, fits_int64, is_infinite, upstream
from grain_dataset._map_stages._gather import split
from grain_dataset._runtime._fingerprint import token
from grain_index import checks


def _batch_options(stage: Any, batch_size: Any, drop_remainder: Any, batch_fn: Any) -> None:
    """Checks the batch arguments and sets them on `stage` (both batch classes share them)."""
    batch_size = checks.int_in_range(
        batch_size, "batch_size", 1, lead="batch_size must be positive."
    )
    if not isinstance(drop_remainder, bool):
        raise TypeError(f"`drop_remainder` must be a bool, got {drop_remainder!r}.")
    if batch_fn is not None and not callable(batch_fn):
        raise TypeError(
            f"`batch_fn` must be a callable taking a list of elements, got {batch_fn!r}."
        )
    stage._batch_size = batch_size
    stage._drop_remainder = drop_remainder
    stage._batch_fn = stack if batch_fn is None else batch_fn


def _refuse_after_discarding(parent: MapDataset[Any]) -> None:
    """Raises if a stage before `parent` can leave positions empty (a filter, a flat map).

    Their batches would hold fewer elements than `batch_size` wherever a
    position is empty, so they are refused, as Grain does.
    """
    for ds in upstream(parent, within=MapDataset):
        stage = ds.discards_elements
        if stage is not None:
            raise ValueError(
                f"`MapDataset.batch` can not follow {stage} because `filter` can discard "
                "elements. Convert `MapDataset` to `IterDataset` with `to_iter_dataset()` "
                "before calling `batch`. "
                f"`MapDataset.batch` cannot follow {stage}: it can leave positions empty, "
                "so batches would hold fewer than `batch_size` elements. Batch before it, "
                "or convert to an IterDataset first: ds.to_iter_dataset().batch(...)."
            )


def spans(starts: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, list[int]]:
    """The indices of the runs ``[start, start + size)``, in one array, and their bounds in it.

    Run k is ``indices[bounds[k]:bounds[k + 1]]``.
    """
    total = int(sizes.sum())
    # Each run's start repeated over its size, plus the position within the run.
    ends = np.cumsum(sizes)
    within = np.arange(total, dtype=np.int64) - np.repeat(ends - sizes, sizes)
    return np.repeat(starts, sizes) + within, [0, *ends.tolist()]


@register("map_batch")
class BatchMapDataset(MapStage):
    """Batches of `batch_size` consecutive elements of the parent."""

    def _fingerprint_token(self) -> str | None:
        return token("batch", self._batch_size, self._drop_remainder)

    def __init__(
        self,
        parent: MapDataset[Any],
        batch_size: int,
        drop_remainder: bool = False,
        batch_fn: Callable[[Sequence[Any]], Any] | None = None,
    ):
        super().__init__(parent)
        _batch_options(self, batch_size, drop_remainder, batch_fn)
        _refuse_after_discarding(parent)
        self._parent = parent
        self._parent_length = len(parent)
        if is_infinite(self._parent_length):
            self._length = INFINITE
        elif drop_remainder:
            self._length = self._parent_length // self._batch_size
        else:
            self._length = -(-self._parent_length // self._batch_size)
        # Index arithmetic down to an array source: read each batch stacked (_gather.py).
        self._gathers = batch_fn is None and parent._gatherable()
        # Whether the elements have large arrays, from the first batch read: later ones
        # are then read a megabyte at a time and stacked as they come (`RowStack`).
        self._rows: bool | None = None if self._batch_fn is stack and not self._gathers else False

    def __len__(self) -> int:
        return self._length

    def _gathered(self, parent_indices: np.ndarray) -> Any:
        """The parent's elements at `parent_indices` read stacked, or NotImplemented."""
        try:
            return self._parent._gather(parent_indices)
        except Exception as error:
            note_stage(error, self)
            raise

    def _combine(self, values: list[Any]) -> Any:
        values = [value for value in values if value is not None]
        if not values:
            return None
        try:
            return self._batch_fn(values)
        except Exception as error:
            note_stage(error, self)
            raise

    def _bounds(self, index: int) -> tuple[int, int]:
        if is_infinite(self._parent_length):
            return index * self._batch_size, (index + 1) * self._batch_size
        epoch, batch = divmod(index, self._length)
        start = batch * self._batch_size
        stop = min(start + self._batch_size, self._parent_length)
        return epoch * self._parent_length + start, epoch * self._parent_length + stop

    def _getitem(self, index: int) -> Any:
        start, stop = self._bounds(index)
        if stop > INFINITE:  # past int64: far-away epochs, read one by one
            return self._combine([self._parent._getitem(i) for i in range(start, stop)])
        if self._gathers:
            batch = self._gathered(np.arange(start, stop, dtype=np.int64))
            if batch is not NotImplemented:
                return batch
        if self._rows:
            return self._stacked_as_read(start, stop)
        return self._combine(self._read(start, stop))

    def _read(self, start: int, stop: int) -> list[Any]:
        values = self._parent._getitems(np.arange(start, stop, dtype=np.int64))
        self._decide_rows(values)
        return values

    def _decide_rows(self, values: list[Any]) -> None:
        """Decides `_rows` from the first element read, unless it is decided."""
        if self._rows is None:
            first = next((value for value in values if value is not None), None)
            self._rows = first is not None and has_rows(first)

    def _stacked_as_read(self, start: int, stop: int) -> Any:
        """`_combine` of the parent's [start, stop), its elements' rows copied in as read."""

        def read(a: int, b: int) -> tuple[list[Any], None]:
            values = self._parent._getitems(np.arange(a, b, dtype=np.int64))
            # Filtered positions are left out of their batch.
            return [value for value in values if value is not None], None

        rows = RowStack(stop - start)
        read_stacked(rows, start, stop, read)
        if not len(rows):
            return None
        try:
            return rows.result()
        except Exception as error:
            note_stage(error, self)
            raise

    def _getitems(self, indices: np.ndarray) -> list[Any]:
        size = self._batch_size
        if not self._length:
            raise IndexError("the dataset is empty: it has no element at any index.")
        if (self._gathers or self._rows) and len(indices) == 1:  # a chunk of one batch
            return [self._getitem(int(indices[0]))]
        if self._rows and not is_infinite(self._parent_length):  # large elements
            return [self._getitem(int(index)) for index in indices]
        if is_infinite(self._parent_length):
            if not fits_int64(indices, INFINITE // size, INFINITE):
                return super()._getitems(indices)
            starts = indices * size
            sizes = np.full(indices.shape, size, dtype=np.int64)
        else:
            if not fits_int64(indices, self._length, self._parent_length):
                return super()._getitems(indices)
            epochs, batches = epochs_of(indices, self._length)
            offsets = batches * size
            sizes = np.minimum(size, self._parent_length - offsets)
            starts = epochs * self._parent_length + offsets
        parent_indices, bounds = spans(starts, sizes)
        if self._gathers:
            # One read for all the batches, one index mapping per stage: then views.
            stacked = self._gathered(parent_indices)
            if stacked is not NotImplemented:
                return split(stacked, bounds)
        values = self._parent._getitems(parent_indices)
        self._decide_rows(values)
        return [self._combine(values[bounds[k] : bounds[k + 1]]) for k in range(len(indices))]

    def _describe(self) -> str:
        text = f"batch_size={self._batch_size}, drop_remainder={self._drop_remainder}"
        return text + (", gather=True" if self._gathers else "")


@register("iter_batch")
class BatchIterDataset(IterStage):
    """Batches of `batch_size` consecutive elements of the parent."""

    _positional_chain = True

    def _fingerprint_token(self) -> str | None:
        return None  # its state is the parent's between batches: any size resumes there

    def __init__(
        self,
        parent: IterDataset[Any],
        batch_size: int,
        drop_remainder: bool = False,
        batch_fn: Callable[[Sequence[Any]], Any] | None = None,
    ):
        super().__init__(parent)
        _batch_options(self, batch_size, drop_remainder, batch_fn)

    def _describe(self) -> str:
        return f"batch_size={self._batch_size}, drop_remainder={self._drop_remainder}"


@iterator_of(BatchIterDataset)
class _BatchIterator(StageIterator):
    def __next__(self) -> Any:
        dataset = self._dataset
        # A read-ahead parent (`to_iter_dataset`) may hand the batch over whole, stacked
        # by the thread that read it; None where it cannot, and the elements come one by
        # one. Only with the default batch_fn: ours is pure, a user's runs where it did.
        take = getattr(self._parent, "_take_batch", None)
        if take is not None and dataset._batch_fn is stack:
            batch = take(dataset._batch_size, dataset._batch_fn)
            if batch is not None:
                return batch
        size = dataset._batch_size
        values: list[Any] = []
        # With the default batch_fn, elements with large arrays are copied into the
        # batch as they come (`RowStack`), while still in cache.
        rows: RowStack | None = None
        start = self._parent.get_state()
        try:
            for value in self._parent:
                if not values and rows is None and dataset._batch_fn is stack and has_rows(value):
                    rows = RowStack(size)
                    rows.add(value)
                    if rows.stacking:
                        break
                    rows = None
                values.append(value)
                if len(values) == size:
                    break
            if rows is not None and len(rows) < size:
                for value in self._parent:
                    rows.add(value)
                    if len(rows) == size:
                        break
        except Exception:
            # Rewind to the batch's start so the elements already collected are
            # not lost: the next call reads the whole batch again.
            if values or rows is not None:
                self._parent.set_state(start)
            raise
        count = len(values) if rows is None else len(rows)
        if not count or (dataset._drop_remainder and count < size):
            raise StopIteration
        try:
            return dataset._batch_fn(values) if rows is None else rows.result()
        except Exception as error:
            note_stage(error, dataset)
            raise

    def _get_next_index(self) -> int:
        # Batches returned so far; a last, partial batch counts as one.
        return -(-get_next_index(self._parent) // self._dataset._batch_size)

    def _set_next_index(self, index: int) -> None:
        set_parent_next_index(self, index * self._dataset._batch_size)
