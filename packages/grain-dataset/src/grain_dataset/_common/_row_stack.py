"""Stacking a batch as its elements come: large arrays copied in while still in cache.

`stack` (the default batch_fn, `_tree.py`) takes a batch's elements once all of
them exist: with decoded images that is a batch of arrays (19 MB for 128 images
of 224x224x3) written once by the decoder and read back from memory, not cache,
by the copy into the batch; and none of their memory is reused by the next
decode. `RowStack` copies each element's large arrays into the batch's rows as
the element arrives, right after it was computed, and lets the element go, so
the next one reuses the same memory. On a JPEG pipeline that is a third faster
in one thread and a tenth faster in two (benchmarks/jpeg.py).

The result is exactly ``stack(values)``: the same values, dtypes, shapes, C
order and memory (the batch allocator's, where one is installed). Only what
can be stacked without a doubt is copied ahead: an element that is a plain
ndarray, or a plain dict, tuple or list whose direct children include arrays
of at least `MIN_ROW_BYTES` of a numeric native dtype, C-ordered, each row of
the first element's shape and dtype. Anything else, from the first element on
or at any later one (a differing shape, key or type, a None), and a batch that
ends short, is handed to `stack` over all the elements, the rows already
copied given back as views of them: the same result, or the same error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from grain_dataset._common import _batch_memory
from grain_dataset._common._tree import stack

# Arrays smaller than this are left to `stack`: the copy of each row by itself costs
# more than the cache it saves.
MIN_ROW_BYTES = 1 << 16
# The bytes of rows read at once by `read_stacked`: a few images, still in cache.
READ_BYTES = 1 << 20
_ROW_KINDS = frozenset("biufc")


def _row_leaf(value: Any) -> bool:
    """Whether `value` is an array that is copied into the batch as it comes."""
    return (
        type(value) is np.ndarray
        and value.dtype.kind in _ROW_KINDS
        and value.dtype.isnative
        and value.nbytes >= MIN_ROW_BYTES
        and value.flags.c_contiguous
    )


def _keys_of(value: Any) -> list[Any] | None:
    """The children that may be rows: dict keys, sequence positions, [None] for an array."""
    kind = type(value)
    if kind is np.ndarray:
        return [None]
    if kind is dict:
        return list(value)
    if kind is tuple or kind is list:
        return list(range(len(value)))
    return None


def _row_keys(value: Any) -> tuple[list[Any], list[Any]]:
    """`value`'s children that may be rows (see `_keys_of`, [] if none) and those that are."""
    keys = _keys_of(value)
    if keys is None:
        return [], []
    return keys, [key for key in keys if _row_leaf(value if key is None else value[key])]


def has_rows(value: Any) -> bool:
    """Whether `RowStack` would copy some of `value`'s arrays into the batch as it comes."""
    return bool(_row_keys(value)[1])


def read_stacked(
    rows: RowStack, start: int, stop: int, read: Callable[[int, int], tuple[list[Any], Any]]
) -> Any:
    """Adds the elements of positions [start, stop) to `rows`, read by ``read(a, b)``.

    ``read`` returns the elements of [a, b) it has and the error that stopped it
    (or None). A first element alone, then about `READ_BYTES` of rows at a time:
    the elements of one read are still in cache when they are copied, and their
    memory is free for the next; elements without rows, the rest in one read.
    Returns the first error, with the elements before it added.
    """
    position, step = start, 1
    while position < stop:
        end = min(stop, position + step)
        values, error = read(position, end)
        for value in values:
            rows.add(value)
        if error is not None:
            return error
        position = end
        if len(rows):  # nothing yet (all filtered): one more element
            step = max(1, READ_BYTES // rows.row_bytes) if rows.stacking else stop - position
    return None


class RowStack:
    """A batch of up to `size` elements, built with ``add`` and finished by ``result``."""

    def __init__(self, size: int):
        self._size = size
        self._count = 0
        self._rows: dict[Any, np.ndarray] = {}  # child key (None: the element) -> the batch
        # The first element's structure (not the element: its arrays are not kept).
        self._kind: Any = None  # np.ndarray, dict, tuple or list
        self._keys: list[Any] = []
        self._skeletons: list[Any] = []  # the elements with their rows taken out
        self._values: list[Any] | None = None  # set once rows are given up: plain elements

    def add(self, value: Any) -> None:
        """Adds the next element: its rows are copied into the batch now, if it has them."""
        if self._values is not None:
            self._values.append(value)
            return
        if self._count == 0 and not self._start(value):
            self._values = [value]
            return
        if self._count >= self._size or not self._fits(value):
            self._give_up().append(value)
            return
        index = self._count
        rows = self._rows
        if self._kind is np.ndarray:
            rows[None][index] = value
            self._skeletons.append(None)
        else:
            skeleton = dict(value) if self._kind is dict else list(value)
            for key, batch in rows.items():
                batch[index] = value[key]
                skeleton[key] = None
            self._skeletons.append(skeleton)
        self._count = index + 1

    def _start(self, first: Any) -> bool:
        """Allocates the batch's rows after the first element; False if it has none."""
        keys, row_keys = _row_keys(first)
        if not row_keys:
            return False
        self._kind, self._keys = type(first), keys
        for key in row_keys:
            leaf = first if key is None else first[key]
            shape = (self._size, *leaf.shape)
            batch = _batch_memory.allocate(shape, leaf.dtype)  # a worker's shared memory
            self._rows[key] = np.empty(shape, leaf.dtype) if batch is None else batch
        return True

    def _fits(self, value: Any) -> bool:
        """Whether `value` has the first element's structure and rows of its shapes."""
        keys = self._keys
        if type(value) is not self._kind:
            return False
        if self._kind is dict:
            if len(value) != len(keys) or not all(key in value for key in keys):
                return False
        elif self._kind is not np.ndarray and len(value) != len(keys):
            return False
        for key, batch in self._rows.items():
            leaf = value if key is None else value[key]
            if (
                type(leaf) is not np.ndarray
                or leaf.shape != batch.shape[1:]
                or leaf.dtype != batch.dtype
                or not leaf.flags.c_contiguous
            ):
                return False
        return True

    def elements(self) -> list[Any]:
        """The elements added, in order (rows copied ahead are views of the batch)."""
        if self._values is not None:
            return self._values
        out = []
        for index, skeleton in enumerate(self._skeletons):
            if self._kind is np.ndarray:
                out.append(self._rows[None][index])
                continue
            element = dict(skeleton) if self._kind is dict else list(skeleton)
            for key, batch in self._rows.items():
                element[key] = batch[index]
            out.append(tuple(element) if self._kind is tuple else element)
        return out

    def _give_up(self) -> list[Any]:
        """Stops stacking ahead: the elements so far, kept from now on for `stack`."""
        values = self._values = self.elements()
        self._rows, self._skeletons = {}, []
        return values

    @property
    def stacking(self) -> bool:
        """Whether rows are copied as they come (False: the elements are kept for `stack`)."""
        return self._values is None

    @property
    def row_bytes(self) -> int:
        """The bytes an element's rows take in the batch (0 when not stacking)."""
        if self._values is not None:
            return 0
        return sum(batch[0].nbytes for batch in self._rows.values())

    def __len__(self) -> int:
        return self._count if self._values is None else len(self._values)

    def result(self) -> Any:
        """The batch: ``stack`` of the elements added, exactly (or its error)."""
        if self._values is None and self._count < self._size:
            self._give_up()  # short: `stack` sizes the batch to what came
        if self._values is not None:
            return stack(self._values)
        if self._kind is np.ndarray:
            return self._rows[None]
        try:  # the children that are not rows (None where they are)
            rest = stack(self._skeletons)
        except ValueError:
            return stack(self.elements())  # the error that names the elements as they are
        if self._kind is dict:
            for key, batch in self._rows.items():
                rest[key] = batch
            return rest
        children = list(rest)
        for key, batch in self._rows.items():
            children[key] = batch
        return tuple(children) if self._kind is tuple else children
