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

Several threads may fill one batch, each a part of it (`SharedRows`: the
read-ahead spreads a batch over its readers); `batch_of` makes the batch from
the parts, with the same guarantee.
"""

from __future__ import annotations

import threading
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


class SharedRows:
    """The rows of one batch of `size` elements, filled by one `RowStack` or by several.

    Several readers may each fill a part of the same batch (``RowStack(n,
    shared, offset)``), so that a batch is spread over as many threads as read:
    the first element any of them adds decides the rows and allocates them, and
    every other element must fit them. Anything that does not marks the batch
    failed (`failed`): its parts are then stacked from their elements (`batch_of`).
    """

    def __init__(self, size: int, locked: bool = True):
        self.size = size
        self.failed = False
        # One RowStack alone needs no lock: a batch per call of `IterDataset.batch` costs
        # a microsecond less (cheap elements batch at tens of thousands a second).
        self._lock = threading.Lock() if locked else None
        self._decided = False
        # Set once, under the lock, by the first element; read-only after.
        self.kind: Any = None  # np.ndarray, dict, tuple or list
        self.keys: list[Any] = []
        self.rows: dict[Any, np.ndarray] = {}  # child key (None: the element) -> the batch

    def start(self, first: Any) -> bool:
        """Whether a part's first element has rows: the batch's, allocated by the first."""
        if self._lock is None:
            decided = self._decide(first)
        else:
            with self._lock:
                decided = self._decide(first)
        if decided is not None:
            return decided
        if self.fits(first):
            return True
        self.failed = True
        return False

    def _decide(self, first: Any) -> bool | None:
        """The rows from the first element of all (False if it has none); None if decided."""
        if self.failed:
            return False
        if self._decided:
            return None
        keys, row_keys = _row_keys(first)
        if not row_keys:
            self.failed = True
            return False
        self.kind, self.keys = type(first), keys
        for key in row_keys:
            leaf = first if key is None else first[key]
            shape = (self.size, *leaf.shape)
            batch = _batch_memory.allocate(shape, leaf.dtype)  # a worker's shared memory
            self.rows[key] = np.empty(shape, leaf.dtype) if batch is None else batch
        self._decided = True
        return True

    def fits(self, value: Any) -> bool:
        """Whether `value` has the first element's structure and rows of its shapes."""
        keys = self.keys
        if type(value) is not self.kind:
            return False
        if self.kind is dict:
            if len(value) != len(keys) or not all(key in value for key in keys):
                return False
        elif self.kind is not np.ndarray and len(value) != len(keys):
            return False
        for key, batch in self.rows.items():
            leaf = value if key is None else value[key]
            if (
                type(leaf) is not np.ndarray
                or leaf.shape != batch.shape[1:]
                or leaf.dtype != batch.dtype
                or not leaf.flags.c_contiguous
            ):
                return False
        return True


class RowStack:
    """Up to `size` elements of a batch, built with ``add`` and finished by ``result``.

    Alone, the whole batch. With `shared`, the part of a batch that starts at row
    `offset` of it; `batch_of` then makes the batch from all of its parts.
    """

    def __init__(self, size: int, shared: SharedRows | None = None, offset: int = 0):
        self._size = size
        self._shared = SharedRows(size, locked=False) if shared is None else shared
        self._offset = offset
        self._count = 0
        self._kind: Any = None  # the batch's, once the first element is added
        self._rows: dict[Any, np.ndarray] = {}
        self._skeletons: list[Any] = []  # the elements with their rows taken out
        self._values: list[Any] | None = None  # set once rows are given up: plain elements

    @property
    def shared(self) -> SharedRows:
        """The batch this fills (a part of)."""
        return self._shared

    @property
    def offset(self) -> int:
        """The batch's row of this part's first element."""
        return self._offset

    def add(self, value: Any) -> None:
        """Adds the next element: its rows are copied into the batch now, if it has them."""
        if self._values is not None:
            self._values.append(value)
            return
        count = self._count
        if count == 0:
            shared = self._shared
            if not shared.start(value):
                self._values = [value]
                return
            # The batch's layout, fixed from now on: read here for each element.
            self._kind, self._rows = shared.kind, shared.rows
        elif count >= self._size or not self._shared.fits(value):
            self._give_up().append(value)
            return
        index = self._offset + count
        if self._kind is np.ndarray:
            self._rows[None][index] = value
            self._skeletons.append(None)
        else:
            skeleton = dict(value) if self._kind is dict else list(value)
            for key, batch in self._rows.items():
                batch[index] = value[key]
                skeleton[key] = None
            self._skeletons.append(skeleton)
        self._count = count + 1

    def elements(self) -> list[Any]:
        """The elements added, in order (rows copied ahead are views of the batch)."""
        if self._values is not None:
            return self._values
        shared, offset = self._shared, self._offset
        kind = shared.kind
        out = []
        for index, skeleton in enumerate(self._skeletons, offset):
            if kind is np.ndarray:
                out.append(shared.rows[None][index])
                continue
            element = dict(skeleton) if kind is dict else list(skeleton)
            for key, batch in shared.rows.items():
                element[key] = batch[index]
            out.append(tuple(element) if kind is tuple else element)
        return out

    def _give_up(self) -> list[Any]:
        """Stops stacking ahead: the elements so far, kept from now on for `stack`."""
        values = self._values = self.elements()
        self._skeletons = []
        self._shared.failed = True
        return values

    @property
    def stacking(self) -> bool:
        """Whether rows are copied as they come (False: the elements are kept for `stack`)."""
        return self._values is None

    @property
    def whole(self) -> bool:
        """Whether all `size` elements were added, their rows copied in."""
        return self._values is None and self._count == self._size and not self._shared.failed

    @property
    def row_bytes(self) -> int:
        """The bytes an element's rows take in the batch (0 when not stacking)."""
        if self._values is not None:
            return 0
        return sum(batch[0].nbytes for batch in self._shared.rows.values())

    def __len__(self) -> int:
        return self._count if self._values is None else len(self._values)

    def result(self) -> Any:
        """The batch: ``stack`` of the elements added, exactly (or its error)."""
        return batch_of([self])


def batch_of(parts: list[RowStack]) -> Any:
    """``stack`` of the elements of `parts` in order, exactly (or its error).

    Taken from the rows where the parts fill their batch whole, in order;
    otherwise (a part short or given up, the batch failed) from the elements.
    """
    shared = parts[0].shared
    offset = 0
    for part in parts:
        if part.shared is not shared or part.offset != offset or not part.whole:
            return stack([value for part in parts for value in part.elements()])
        offset += len(part)
    if offset != shared.size:
        return stack([value for part in parts for value in part.elements()])
    if shared.kind is np.ndarray:
        return shared.rows[None]
    skeletons = [skeleton for part in parts for skeleton in part._skeletons]
    try:  # the children that are not rows (None where they are)
        rest = stack(skeletons)
    except ValueError:
        # The error that names the elements as they are.
        return stack([value for part in parts for value in part.elements()])
    if shared.kind is dict:
        for key, batch in shared.rows.items():
            rest[key] = batch
        return rest
    children = list(rest)
    for key, batch in shared.rows.items():
        children[key] = batch
    return tuple(children) if shared.kind is tuple else children
