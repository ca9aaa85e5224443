"""Argument checks shared by grain_index's public functions.

Every public entry point validates its input here, so that a bad call fails
with the argument's name and the allowed range instead of deep in numpy.
"""

from __future__ import annotations

import math
import operator
from typing import Any

import numpy as np

UINT64_LIMIT = 1 << 64


def as_int(value: Any, name: str) -> int:
    """Returns `value` as a Python int; bools and non-integers raise TypeError."""
    if isinstance(value, bool | np.bool_) or not hasattr(value, "__index__"):
        raise TypeError(f"`{name}` must be an integer, got {type(value).__name__} {value!r}.")
    return operator.index(value)


def int_in_range(
    value: Any, name: str, low: int, high: int | None = None, *, lead: str = ""
) -> int:
    """Returns `value` as an int after checking `low <= value < high`.

    `lead`, when given, opens the ValueError's message: Grain's wording for the
    same check (a format string with `{value}`), which clients match with
    `assertRaisesRegex`; ours follows it.
    """
    result = as_int(value, name)
    if result < low or (high is not None and result >= high):
        upper = "" if high is None else f" and < {high}"
        opening = lead.format(value=result) + " " if lead else ""
        raise ValueError(f"{opening}`{name}` must be >= {low}{upper}, got {result}.")
    return result


def seed(value: Any, name: str = "seed") -> int:
    """Returns a seed after checking it is an integer in [0, 2**64)."""
    return int_in_range(value, name, 0, UINT64_LIMIT)


def finite_weights(weights: Any, name: str = "weights") -> list[float]:
    """Returns weights as floats; empty, negative, non-finite or all-zero raise."""
    try:
        values = list(weights)
    except TypeError:
        raise TypeError(f"`{name}` must be a sequence of numbers, got {weights!r}.") from None
    if not values:
        raise ValueError(f"`{name}` must not be empty.")
    result = []
    for i, w in enumerate(values):
        if isinstance(w, bool | np.bool_) or not isinstance(w, int | float | np.number):
            raise TypeError(f"`{name}[{i}]` must be a number, got {type(w).__name__} {w!r}.")
        w = float(w)
        if not math.isfinite(w) or w < 0:
            raise ValueError(f"`{name}[{i}]` must be finite and >= 0, got {w}.")
        result.append(w)
    if not any(result):
        raise ValueError(f"`{name}` must not be all zero, got {values}.")
    return result


def index_array(values: Any, name: str) -> np.ndarray:
    """Returns `values` as a numpy integer array; other dtypes raise TypeError."""
    array = np.asarray(values)
    if array.dtype == object or array.dtype.kind not in "iu":
        if array.size == 0 and array.dtype.kind == "f":
            return array.astype(np.int64)
        raise TypeError(f"`{name}` must hold integers, got dtype {array.dtype}.")
    return array
