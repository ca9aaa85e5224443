"""Stacking PyTrees: the default `batch_fn`.

A PyTree here is nested dicts, lists, tuples and namedtuples whose leaves are
numpy arrays, numpy scalars, Python scalars, strings or bytes (JAX's notion,
without registration). `stack(elements)` returns one tree of the common
structure whose every leaf is ``np.stack`` of that leaf over the elements.

Hand-written rather than built on optree or dm-tree: the batch path needs only
these container types, no extra dependency, and errors that name the leaf
(``element['image'][1]``) and the element that differs, which a generic
flatten-and-compare cannot say.

Bytes leaves stack into an object array of the same bytes objects: numpy's
``S`` dtype would silently drop trailing NUL bytes of binary records.

Speed: a batch of 128 records is checked and taken apart one tree level at a
time over the whole list (`_stack_level`): a set of the elements' types, the
dict keys compared by `map`, the children transposed by `zip` or `itemgetter`,
and arrays of one dtype and shape stacked by ``np.array`` (half the cost of
``np.stack``, the same result). These are passes in C, not a Python loop per
element. Where a level's check fails, the element-by-element walk (`_stack`)
takes over that level: it gives the same result, and it is what finds the
element that differs and names it in the error.

Memory: where a batch allocator is installed (`_batch_memory`, a worker
process's shared memory), equal C-ordered arrays are stacked into the memory it
hands out instead of numpy's.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from grain_dataset._common import _batch_memory

# False: always the element-by-element walk (tests compare the two; A/B benchmarks).
_VECTORIZED = True
# Array dtypes that ``np.array`` over equal arrays returns unchanged, as ``np.stack`` does.
_PLAIN_KINDS = frozenset("biufcmMUS")
_dtype_of = operator.attrgetter("dtype")
_strides_of = operator.attrgetter("strides")


def _is_namedtuple(value: Any) -> bool:
    return isinstance(value, tuple) and hasattr(type(value), "_fields")


def _where(path: tuple[Any, ...], index: int) -> str:
    if not path:
        return f"element {index}"
    return "element" + "".join(f"[{key!r}]" for key in path) + f" of element {index}"


class _StructureMismatchError(ValueError):
    """Raised inside `stack`, which adds Grain's wording before it leaves."""


def _grain_description(values: list[Any]) -> str:
    # Grain names the batch by the first element's type, with the count where
    # the elements are dicts; clients match the sentence that carries it.
    first = values[0]
    size = len(values) if isinstance(first, dict) else "unknown shape"
    return f"list<{type(first).__name__}>[{size}]"


def _structure_error(path: tuple[Any, ...], index: int, first: Any, other: Any, why: str) -> None:
    raise _StructureMismatchError(
        f"cannot batch: {_where(path, index)} {why} "
        f"(element 0 has {_describe(first)}, element {index} has {_describe(other)}). "
        "Every element of a batch needs the same structure and leaf shapes; "
        "pad or filter the elements first, or pass `batch_fn=`."
    )


def _describe(value: Any) -> str:
    if isinstance(value, dict):
        return f"a dict with keys {sorted(map(str, value))}"
    if isinstance(value, list | tuple):
        return f"a {type(value).__name__} of length {len(value)}"
    shape = np.shape(value)
    return f"a leaf of shape {shape}" if shape else f"a scalar {type(value).__name__}"


def _rebuild_mapping(kind: type, result: dict) -> Any:
    if kind is dict:
        return result
    try:
        return kind(result)
    except TypeError:  # e.g. defaultdict, whose first argument is a factory
        return result


def _rebuild_sequence(kind: type, first: Any, children: list[Any]) -> Any:
    """A list or tuple of `kind` (that of `first`) holding `children`."""
    return kind(*children) if _is_namedtuple(first) else kind(children)


def _stack_leaves(path: tuple[Any, ...], leaves: list[Any], kinds: set[type]) -> np.ndarray:
    result: np.ndarray | None
    first = leaves[0]
    if kinds == {bytes} or (
        isinstance(first, bytes) and all(isinstance(leaf, bytes) for leaf in leaves)
    ):
        # numpy's fixed-width bytes dtype drops trailing NUL bytes on reading: keep the objects.
        result = np.empty(len(leaves), dtype=object)
        result[:] = leaves
        return result
    try:
        if isinstance(first, np.ndarray):
            return np.stack(leaves)
        result = np.asarray(leaves)
    except ValueError:
        result = None
    shape = np.shape(first)
    if result is not None and result.dtype != object and result.shape[1:] == shape:
        return result
    for index, leaf in enumerate(leaves):
        if np.shape(leaf) != shape:
            _structure_error(path, index, first, leaf, "has a different shape")
    return np.stack([np.asarray(leaf) for leaf in leaves])


def _stack(path: tuple[Any, ...], values: list[Any]) -> Any:
    first = values[0]
    kind = type(first)
    if isinstance(first, dict):
        keys = first.keys()
        for index, value in enumerate(values):
            if not isinstance(value, dict) or value.keys() != keys:
                _structure_error(path, index, first, value, "has different keys")
        result = {key: _stack((*path, key), [value[key] for value in values]) for key in keys}
        return _rebuild_mapping(kind, result)
    if isinstance(first, list | tuple):
        size = len(first)
        for index, value in enumerate(values):
            if type(value) is not kind or len(value) != size:
                _structure_error(path, index, first, value, "has a different container")
        children = [_stack((*path, i), [value[i] for value in values]) for i in range(size)]
        return _rebuild_sequence(kind, first, children)
    if first is None:
        for index, value in enumerate(values):
            if value is not None:
                _structure_error(path, index, first, value, "is not None")
        return None
    kinds = set(map(type, values))  # one pass in C: usually a single leaf type
    if len(kinds) > 1:
        for index, value in enumerate(values):
            if isinstance(value, dict | list | tuple):
                _structure_error(path, index, first, value, "is a container, not a leaf")
    return _stack_leaves(path, values, kinds)


def _c_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    strides = []
    step = itemsize
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def _stack_arrays(values: list[Any]) -> np.ndarray | None:
    """`values` (plain ndarrays) stacked, or None where `np.stack` must decide.

    Only C-ordered arrays of one dtype: `np.stack` lays its result out like its
    inputs (Fortran-ordered in, Fortran-ordered rows out), `np.array` always in C
    order, so other layouts keep `np.stack`.
    """
    dtypes = set(map(_dtype_of, values))
    if len(dtypes) != 1:
        return None
    dtype = dtypes.pop()
    if dtype.kind not in _PLAIN_KINDS or not dtype.isnative:
        return None
    if set(map(_strides_of, values)) != {_c_strides(values[0].shape, dtype.itemsize)}:
        return None
    if _batch_memory.allocator is not None:  # a worker's shared memory (`_batch_memory`)
        result = _batch_memory.stack_into(values, dtype)
        if result is not None:
            return result
    try:
        result = np.array(values)
    except ValueError:  # leaves of different shapes
        return None
    if result.dtype != dtype or result.shape[1:] != values[0].shape:
        return None
    return result


def _columns(kind: Any, values: list[Any]) -> tuple[list[Any], list[list[Any]]] | None:
    """The first dict's keys and each key's values over `values` (dicts of type `kind`).

    None where the dicts' keys differ.
    """
    names = list(values[0].keys())
    if kind is dict:
        # Plain dicts: equal sizes and every key found means equal key sets (a
        # subclass may answer a missing key, as defaultdict does, so it compares keys).
        if set(map(len, values)) != {len(names)}:
            return None
    else:
        keys = values[0].keys()
        if not all(map(keys.__eq__, map(kind.keys, values))):
            return None
    try:
        if len(names) > 4:  # one pass and a transpose: cheaper than a pass per key
            getter = operator.itemgetter(*names)
            return names, [list(column) for column in zip(*map(getter, values), strict=True)]
        return names, [list(map(operator.itemgetter(key), values)) for key in names]
    except KeyError:
        return None


def _plain_sequence(kind: Any) -> bool:
    """Whether `zip` reads a `kind` container as ``value[i]`` does (no override of either)."""
    base = list if issubclass(kind, list) else tuple
    return kind.__iter__ is base.__iter__ and kind.__getitem__ is base.__getitem__


def _stack_level(path: tuple[Any, ...], values: list[Any]) -> Any:
    """`_stack`'s result, with each level checked and split over all values at once."""
    kinds = set(map(type, values))
    if len(kinds) != 1:  # mixed containers or leaves: the walk decides, or names the odd one
        return _stack(path, values)
    kind = kinds.pop()
    first = values[0]
    if issubclass(kind, dict):
        split = _columns(kind, values)
        if split is None:
            return _stack(path, values)
        names, columns = split
        result = {
            key: _stack_level((*path, key), column)
            for key, column in zip(names, columns, strict=True)
        }
        return _rebuild_mapping(kind, result)
    if issubclass(kind, list | tuple):
        size = len(first)
        if set(map(len, values)) != {size} or not _plain_sequence(kind):
            return _stack(path, values)
        children = [
            _stack_level((*path, i), list(column))
            for i, column in enumerate(zip(*values, strict=True))
        ]
        return _rebuild_sequence(kind, first, children)
    if first is None:
        return None
    if kind is np.ndarray:
        stacked = _stack_arrays(values)
        if stacked is not None:
            return stacked
    return _stack_leaves(path, values, {kind})


def stack(elements: Sequence[Any]) -> Any:
    """Stacks the leaves of equally structured PyTrees along a new first axis.

    Example::

        stack([{"x": np.zeros(3), "y": 1}, {"x": np.ones(3), "y": 2}])
        # {"x": array of shape (2, 3), "y": array([1, 2])}
    """
    values = list(elements)
    if not values:
        raise ValueError("cannot batch an empty list of elements.")
    try:
        return _stack_level((), values) if _VECTORIZED else _stack((), values)
    except _StructureMismatchError as error:
        raise ValueError(
            "Expected all input elements to have the same structure but got:\n"
            f"'{_grain_description(values)}'\n{error}"
        ) from None
