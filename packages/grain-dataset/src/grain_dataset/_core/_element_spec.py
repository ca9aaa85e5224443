"""Element specs: the shape and dtype of every leaf of a dataset's elements.

`get_element_spec(ds)` returns the element's PyTree with every leaf replaced
by a `ShapeDtypeStruct`, e.g. ``{"image": ShapeDtypeStruct((28, 28), uint8),
"label": ShapeDtypeStruct((), int64)}``, which is what a model needs to
build itself or a JIT-compiled step before the first batch arrives.

No stage declares its output spec yet, so the spec is *observed*: a MapDataset
reads one element (element 0, or the first that a filter kept) and an
IterDataset starts an iterator, takes one element and closes it. The cost is
one element of the pipeline's work; nothing else is read.

Leaves follow numpy's reading of them: arrays and numpy scalars keep their
shape and dtype; Python ``bool``, ``int``, ``float`` and ``complex`` become
shape ``()`` with ``bool``, ``int64``, ``float64`` and ``complex128``; ``str``
and ``bytes`` become shape ``()`` with the ``object`` dtype (their length
varies from element to element, so no fixed-width dtype describes them).
Anything else with ``shape`` and ``dtype`` attributes (a jax.Array, a
jax.ShapeDtypeStruct) is described by those, so jax is never imported.

`map_with_path` is the PyTree walk this module and the batching helpers next
to it share (`_pad`, `_rebatch`): the containers of `_tree.stack` (dicts,
lists, tuples, namedtuples), rebuilt with their own types, and a path to name
a leaf in errors.
"""

from __future__ import annotations

import dataclasses
import operator
import typing
from collections.abc import Callable
from typing import Any

import numpy as np

from grain_dataset._common._options import ReadOptions
from grain_dataset._core._base import IterDataset, MapDataset

Path = tuple[Any, ...]


def _rebuild(template: Any, children: list[Any]) -> Any:
    """A container of `template`'s type holding `children` (dict values in key order)."""
    kind = type(template)
    if isinstance(template, dict):
        result = dict(zip(template.keys(), children, strict=True))
        if kind is dict:
            return result
        try:
            return kind(result)
        except TypeError:  # e.g. defaultdict, whose first argument is a factory
            return result
    if isinstance(template, tuple) and hasattr(kind, "_fields"):
        return kind(*children)
    return kind(children)


def map_with_path(fn: Callable[[Path, Any], Any], tree: Any, path: Path = ()) -> Any:
    """Returns `tree` with each leaf replaced by ``fn(path, leaf)``; None stays None.

    A path is the keys and positions leading to the leaf: ``("image", 1)`` is
    ``tree["image"][1]``.

    Example::

        map_with_path(lambda path, x: x * 2, {"a": [1, 2]})   # {"a": [2, 4]}
    """
    if isinstance(tree, dict):
        return _rebuild(
            tree, [map_with_path(fn, value, (*path, key)) for key, value in tree.items()]
        )
    if isinstance(tree, list | tuple):
        return _rebuild(
            tree, [map_with_path(fn, value, (*path, i)) for i, value in enumerate(tree)]
        )
    if tree is None:
        return None
    return fn(path, tree)


def structure_of(tree: Any) -> Any:
    """A hashable description of a PyTree's containers (leaves are "*", None stays None)."""
    if isinstance(tree, dict):
        return (type(tree), tuple((key, structure_of(value)) for key, value in tree.items()))
    if isinstance(tree, list | tuple):
        return (type(tree), tuple(structure_of(value) for value in tree))
    return None if tree is None else "*"


def path_name(root: str, path: Path) -> str:
    """``root['image'][1]`` for the path ("image", 1): how errors name a leaf."""
    return root + "".join(f"[{key!r}]" for key in path)


@typing.runtime_checkable
class ShapeDtypeStructProtocol(typing.Protocol):
    """Anything with a `shape` and a `dtype`: numpy and jax arrays, `ShapeDtypeStruct`,
    ``jax.ShapeDtypeStruct``. ``isinstance(x, ShapeDtypeStructProtocol)`` checks it."""

    @property
    def shape(self) -> tuple[int | None, ...]: ...

    @property
    def dtype(self) -> Any: ...


@dataclasses.dataclass(frozen=True)
class ShapeDtypeStruct:
    """The shape and dtype of an array, without its data (like jax.ShapeDtypeStruct).

    `shape` is a tuple of ints and `dtype` a ``np.dtype``; both are normalized
    on construction, so ``ShapeDtypeStruct([2, 3], "float32")`` equals
    ``ShapeDtypeStruct((2, 3), np.float32)``.

    Example::

        spec = ShapeDtypeStruct((28, 28), np.uint8)
        np.zeros(spec.shape, spec.dtype)   # an array matching the spec
    """

    shape: tuple[int, ...]
    dtype: np.dtype

    def __post_init__(self) -> None:
        try:
            shape = tuple(operator.index(size) for size in self.shape)
        except TypeError:
            raise TypeError(
                f"`shape` must be a sequence of ints, like (2, 3); got {self.shape!r}."
            ) from None
        if any(size < 0 for size in shape):
            raise ValueError(f"`shape` must not hold negative sizes, got {shape}.")
        try:
            dtype = np.dtype(self.dtype)
        except TypeError:
            raise TypeError(
                f"`dtype` must be a numpy dtype or something np.dtype() accepts, "
                f"like np.float32 or 'int64'; got {self.dtype!r}."
            ) from None
        # Frozen: normalizing needs object.__setattr__.
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "dtype", dtype)

    @property
    def ndim(self) -> int:
        """The number of dimensions, ``len(shape)``."""
        return len(self.shape)

    def __repr__(self) -> str:
        return f"ShapeDtypeStruct(shape={self.shape}, dtype={self.dtype})"


# Python scalars map to the dtype numpy gives them on a 64-bit platform, fixed
# here so a spec never depends on the platform's C long.
_PYTHON_SCALARS: tuple[tuple[type, np.dtype], ...] = (
    (bool, np.dtype(np.bool_)),
    (int, np.dtype(np.int64)),
    (float, np.dtype(np.float64)),
    (complex, np.dtype(np.complex128)),
    (str, np.dtype(object)),
    (bytes, np.dtype(object)),
)


def leaf_spec(path: Path, leaf: Any) -> ShapeDtypeStruct:
    if isinstance(leaf, np.ndarray | np.generic):
        return ShapeDtypeStruct(leaf.shape, leaf.dtype)
    # bool before int: bool is a subclass of int.
    for kind, scalar_dtype in _PYTHON_SCALARS:
        if isinstance(leaf, kind):
            return ShapeDtypeStruct((), scalar_dtype)
    shape, dtype = getattr(leaf, "shape", None), getattr(leaf, "dtype", None)
    if shape is not None and dtype is not None:
        return ShapeDtypeStruct(shape, dtype)
    raise TypeError(
        f"cannot describe {path_name('element', path)}: its type {type(leaf).__name__} is "
        "not an array or a scalar. Leaves must be numpy arrays, numpy or Python scalars, str or "
        "bytes (or have `shape` and `dtype`); map the element to such leaves first."
    )


def spec_of(element: Any) -> Any:
    """The PyTree of `ShapeDtypeStruct` describing one element.

    Example::

        spec_of({"x": np.zeros((2, 3), np.float32), "y": 1})
        # {"x": ShapeDtypeStruct(shape=(2, 3), dtype=float32),
        #  "y": ShapeDtypeStruct(shape=(), dtype=int64)}
    """
    return map_with_path(leaf_spec, element)


def _first_element(ds: MapDataset[Any] | IterDataset[Any]) -> Any:
    if isinstance(ds, MapDataset):
        if len(ds) == 0:
            raise ValueError(f"get_element_spec: the dataset {ds!r} is empty; it has no element.")
        element = ds[0]
        if element is not None:
            return element
        # Element 0 was filtered out: look for the first kept one, in this thread.
        ds = ds.to_iter_dataset(ReadOptions(num_threads=0))
    elif not isinstance(ds, IterDataset):
        raise TypeError(
            f"get_element_spec: `ds` must be a MapDataset or an IterDataset, "
            f"got {type(ds).__name__}."
        )
    iterator = iter(ds)
    try:
        return next(iterator)
    except StopIteration:
        raise ValueError(
            f"get_element_spec: the dataset {ds!r} produced no element (it is empty or "
            "filters out everything), so there is no element to describe."
        ) from None
    finally:
        iterator.close()


def get_element_spec(ds: MapDataset[Any] | IterDataset[Any]) -> Any:
    """Returns the PyTree of `ShapeDtypeStruct` of `ds`'s elements.

    It reads one element: a MapDataset's element 0 (or, if a filter removed
    it, the first element kept), an IterDataset's first element from a new
    iterator, which is closed afterwards. Batch first to get the spec of a
    batch (its leading axis is the batch size).

    Example::

        ds = grain.MapDataset.range(10).map(lambda i: {"x": np.zeros(3), "i": i})
        get_element_spec(ds.batch(4))
        # {"x": ShapeDtypeStruct(shape=(4, 3), dtype=float64),
        #  "i": ShapeDtypeStruct(shape=(4,), dtype=int64)}

    A dataset whose class declares its spec (a subclass overriding the
    `_element_spec` property, as Grain's subclasses may) is not read: the
    declared spec is returned.

    Raises:
      ValueError: the dataset has no element.
      TypeError: `ds` is not a dataset, or a leaf is not an array or scalar.
    """
    if isinstance(ds, MapDataset | IterDataset):
        try:
            return ds._element_spec
        except NotImplementedError:
            pass
    return spec_of(_first_element(ds))
