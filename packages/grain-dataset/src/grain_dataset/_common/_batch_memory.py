"""Where the default batch_fn writes its stacked arrays: the process's batch allocator.

`stack` (the default batch_fn, `_tree.py`) asks the installed allocator for the
memory of each stacked array of one plain dtype (numbers, bools, dates, fixed
strings) and writes the elements into it; with none installed (the default) or
when the allocator declines (returns None), numpy allocates as before. Values,
dtype, shape and C order are the same either way: only where the bytes live
changes.

Why a hook: grain-mp's worker processes install one that hands out arrays over
fresh shared memory segments, so a batch that leaves the worker whole reaches
the parent without the transport copying it a second time. The dataset layer
cannot import grain-mp (imports point down), so grain-mp installs it here.

The allocator is process-wide, not per thread: a pipeline's read-ahead threads
stack batches concurrently and must all see it, so it must be thread-safe.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import numpy as np

BatchAllocator = Callable[[tuple[int, ...], np.dtype[Any]], "np.ndarray | None"]
"""``allocator(shape, dtype)``: an empty C-ordered array of that exact shape and dtype, or None."""

_shape_of = operator.attrgetter("shape")

# Read by `_tree` at each stacked array; a module global, so a read costs one lookup.
allocator: BatchAllocator | None = None


def set_batch_allocator(new: BatchAllocator | None) -> BatchAllocator | None:
    """Installs `new` as this process's batch allocator (None: numpy's); returns the previous one.

    `new` is called as ``new(shape, dtype)`` from any thread that stacks a batch
    with the default batch_fn, and returns an empty, writable, C-ordered
    ``np.ndarray`` of exactly that shape and dtype, or None to leave it to numpy.

    Example::

        previous = set_batch_allocator(pool.empty)
        try:
            ...  # batches built here are written into pool's memory
        finally:
            set_batch_allocator(previous)
    """
    global allocator
    if new is not None and not callable(new):
        raise TypeError(
            f"The batch allocator must be a callable (shape, dtype) -> ndarray or None, "
            f"got {new!r}; pass None to restore numpy's allocation."
        )
    previous, allocator = allocator, new
    return previous


def batch_allocator() -> BatchAllocator | None:
    """The batch allocator installed in this process, or None (numpy allocates)."""
    return allocator


def stack_into(values: list[np.ndarray], dtype: np.dtype[Any]) -> np.ndarray | None:
    """`values` (C-ordered arrays of `dtype`) stacked into the allocator's memory, or None.

    None where no allocator is installed, it declines, or the shapes differ.
    """
    allocate = allocator
    if allocate is None:
        return None
    shape = values[0].shape
    if set(map(_shape_of, values)) != {shape}:  # one pass in C
        return None
    out = allocate_with(allocate, (len(values), *shape), dtype)
    if out is None:
        return None
    np.stack(values, out=out)
    return out


def allocate(shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray | None:
    """An empty batch array from the installed allocator, or None (none, or it declined)."""
    installed = allocator
    return None if installed is None else allocate_with(installed, shape, dtype)


def allocate_with(
    allocate: BatchAllocator, full: tuple[int, ...], dtype: np.dtype[Any]
) -> np.ndarray | None:
    """``allocate(full, dtype)``, checked: None, or an empty writable C-ordered array."""
    out = allocate(full, dtype)
    if out is None:
        return None
    if type(out) is not np.ndarray or out.shape != full or out.dtype != dtype:
        raise TypeError(
            f"The batch allocator {allocate!r} returned {type(out).__name__} "
            f"{getattr(out, 'shape', '')} {getattr(out, 'dtype', '')} for a request of "
            f"shape {full} and dtype {dtype}: it must return an empty C-ordered ndarray of "
            f"exactly that shape and dtype, or None."
        )
    if not (out.flags.c_contiguous and out.flags.writeable):
        raise TypeError(
            f"The batch allocator {allocate!r} returned an array that is not writable "
            f"and C-ordered; return np.empty(shape, dtype) memory or None."
        )
    return out
