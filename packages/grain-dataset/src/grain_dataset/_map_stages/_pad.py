"""`batch_and_pad`: a `batch_fn` whose batches always hold `batch_size` rows.

A JIT-compiled training or evaluation step recompiles for every new input
shape, so the small last batch of an epoch costs a compilation, and
``drop_remainder=True`` loses its elements (a problem for evaluation).
`batch_and_pad` stacks the elements like the default `batch_fn` and then pads
every leaf along the batch axis with `pad_value` up to `batch_size` rows, so
every batch has one shape::

    ds.batch(batch_size, batch_fn=functools.partial(batch_and_pad, batch_size=batch_size))

The padding rows are indistinguishable from data unless the step can tell
them apart. Grain's function adds no mask; here ``mask_key="mask"`` (opt-in,
for dict elements only) adds a boolean leaf of shape ``(batch_size,)``, True
on the real rows, so a loss or metric can weight the padding out.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

import numpy as np

from grain_dataset._common._errors import WrongTypeError
from grain_dataset._common._tree import stack
from grain_dataset._core._element_spec import Path, map_with_path, path_name
from grain_index import checks

T = TypeVar("T")


def _pad_leaf(path: Path, leaf: Any, batch_size: int, pad_value: Any) -> np.ndarray:
    rows = leaf.shape[0]
    if rows == batch_size:
        return leaf
    result = np.empty((batch_size, *leaf.shape[1:]), dtype=leaf.dtype)
    result[:rows] = leaf
    try:
        # One vectorized fill; numpy casts pad_value to the leaf's dtype and
        # refuses a value that does not fit (e.g. -1 for uint8).
        result[rows:] = pad_value
    except (TypeError, ValueError, OverflowError) as error:
        kind = TypeError if isinstance(error, TypeError) else ValueError
        raise kind(
            f"batch_and_pad: cannot pad {path_name('batch', path)} (dtype {leaf.dtype}) "
            f"with pad_value={pad_value!r}: {error}. Pass a `pad_value` that fits every "
            "leaf's dtype, or map the elements to other dtypes first."
        ) from None
    return result


def batch_and_pad(
    values: Sequence[T],
    *,
    batch_size: int,
    pad_value: Any = 0,
    mask_key: str | None = None,
) -> T:
    """Stacks `values` like the default `batch_fn`, then pads to `batch_size` rows.

    Every leaf of the stacked PyTree gets ``batch_size - len(values)`` more
    rows along its first axis, filled with `pad_value` (cast to the leaf's
    dtype). Use it as a `batch_fn`, binding `batch_size` with
    ``functools.partial``.

    Args:
      values: the elements of one batch: at least 1 and at most `batch_size`.
      batch_size: the number of rows of every returned batch, >= 1.
      pad_value: the value of the padding rows of every leaf.
      mask_key: if given, the elements must be dicts, and the batch gets one
        more key, `mask_key`, a bool array of shape ``(batch_size,)`` that is
        True for the rows of real elements and False for the padding. Off by
        default, as in Grain.

    Example::

        ds = grain.MapDataset.range(5).map(lambda i: {"x": np.full(2, i)})
        pad = functools.partial(batch_and_pad, batch_size=4, mask_key="mask")
        last = ds.batch(4, batch_fn=pad)[1]
        # {"x": [[4, 4], [0, 0], [0, 0], [0, 0]], "mask": [True, False, False, False]}

    Raises:
      ValueError: `values` is empty or longer than `batch_size`, `batch_size`
        is < 1, or `mask_key` is already a key of the elements.
      TypeError: `mask_key` is set but the elements are not dicts.
    """
    if not isinstance(values, Iterable):
        raise WrongTypeError(
            f"batch_and_pad: `values` must be a list of elements, got {type(values).__name__}."
        )
    values = list(values)
    batch_size = checks.int_in_range(
        batch_size, "batch_size", 1, lead=f"Cannot batch {len(values)} values to {{value}}."
    )
    if not values:
        raise ValueError(
            "Cannot batch 0 values. "
            "batch_and_pad: `values` is empty; a batch needs at least one element."
        )
    if len(values) > batch_size:
        raise ValueError(
            f"Cannot batch {len(values)} values to {batch_size}. "
            f"batch_and_pad: got {len(values)} values for batch_size={batch_size}; it can "
            "only pad a batch up to `batch_size`. Pass the same batch_size as to `.batch`."
        )
    if mask_key is not None:
        if not isinstance(mask_key, str):
            raise TypeError(f"`mask_key` must be a str or None, got {mask_key!r}.")
        if not isinstance(values[0], dict):
            raise TypeError(
                f"batch_and_pad: `mask_key` needs dict elements to add the mask to, got a "
                f"{type(values[0]).__name__}. Map the elements to dicts, or leave "
                "mask_key=None."
            )
        if mask_key in values[0]:
            raise ValueError(
                f"batch_and_pad: the elements already have the key {mask_key!r}; "
                "choose another `mask_key`."
            )
    batch = stack(values)
    padded = map_with_path(lambda path, leaf: _pad_leaf(path, leaf, batch_size, pad_value), batch)
    if mask_key is not None:
        # The mask goes in last, so the element's own keys keep their order.
        mask = np.zeros(batch_size, dtype=np.bool_)
        mask[: len(values)] = True
        padded[mask_key] = mask
    return padded
