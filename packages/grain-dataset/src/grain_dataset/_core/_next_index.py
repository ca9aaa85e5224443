"""`get_next_index` / `set_next_index`: where an iterator is, as one integer, and a jump there.

For pipelines whose output position is one integer (a MapDataset read by
`to_iter_dataset`, then any number of 1:1 stages, batches and thread
prefetch), the position of the next element is that integer, and moving to
another position needs no replay: the stages at the top simply start reading
there. Each stage that can answer implements two hooks:

  _get_next_index()       the index of the next element it will return
  _set_next_index(i)      moves so that the next element returned is element i

A 1:1 stage delegates to its parent; a batch multiplies by its size; stages
whose output positions are not one integer (filter, mix, flat map, packing)
keep DatasetIterator's, which raise NotImplementedError naming the stage (as
Grain's do, for a subclass calling them).
"""

from __future__ import annotations

import contextlib
from typing import Any

from grain_dataset._common._errors import OutOfRangeError
from grain_index import checks


def _hook(iterator: Any, name: str) -> Any:
    from grain_dataset._core._base import DatasetIterator

    if not isinstance(iterator, DatasetIterator):
        raise TypeError(
            f"expected a grain DatasetIterator (iter(dataset)), got {type(iterator).__name__}."
        )
    method = getattr(iterator, name, None)
    # The base's own method only raises: say so before any argument is checked.
    if method is None or getattr(method, "__func__", None) is getattr(DatasetIterator, name):
        raise no_next_index(iterator)
    return method


def no_next_index(iterator: Any) -> NotImplementedError:
    """The error of the next-index functions on an iterator without the hooks."""
    return NotImplementedError(
        f"{type(iterator).__name__} has no single index for its position (its stage can "
        "drop, merge or reorder elements): save and restore it with get_state() and "
        "set_state() instead."
    )


def _locked(iterator: Any) -> Any:
    lock = iterator.__dict__.get("_call_lock")
    return lock if lock is not None else contextlib.nullcontext()


def get_next_index(ds_iter: Any) -> int:
    """Returns the index of the element `ds_iter` returns next (elements returned so far,
    counted from the start of its dataset).

    Raises:
      NotImplementedError: a stage of the pipeline (filter, mix, flat map, ...)
        has no single index for its position.
    """
    method = _hook(ds_iter, "_get_next_index")
    with _locked(ds_iter):
        return int(method())


def set_next_index(ds_iter: Any, index: int) -> None:
    """Moves `ds_iter` so that the next element it returns is element `index`, without
    reading the elements before it.

    Raises:
      NotImplementedError: a stage of the pipeline has no single index for its position.
      IndexError: `index` is past the end of the dataset.
    """
    method = _hook(ds_iter, "_set_next_index")
    index = checks.as_int(index, "index")
    if index < 0:
        raise OutOfRangeError(
            f"Checkpoint `next_index` {index} is out of range: `index` must be >= 0."
        )
    with _locked(ds_iter):
        method(index)


def parent_next_index(iterator: Any) -> int:
    """The next index of a 1:1 stage's parent (the hook of stages that delegate)."""
    return get_next_index(iterator._parent)


def set_parent_next_index(iterator: Any, index: int) -> None:
    """Moves a 1:1 stage's parent (the hook of stages that delegate)."""
    _hook(iterator._parent, "_set_next_index")(index)
