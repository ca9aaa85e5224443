"""Transform protocols: the objects `map`, `random_map`, `filter` ... accept.

A transform is either a plain callable or an instance of one of the classes
below; each class names the one method a pipeline stage calls::

    MapTransform          map(element) -> new element
    RandomMapTransform    random_map(element, rng) -> new element
    FilterTransform       filter(element) -> bool
    MapWithIndex          map_with_index(index, element) -> new element
    FlatMapTransform      flat_map(element) -> sequence of at most max_fan_out elements

Transforms must be picklable (define them at module level, no lambdas closing
over open files) so that worker processes (`mp_prefetch`, the DataLoader) can
run them.

Example::

    class Normalize(grain.transforms.Map):
        def map(self, element):
            return element / 255.0

    ds = grain.MapDataset.range(10).map(Normalize())
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from grain_index import checks


class MapTransform(abc.ABC):
    """Transforms one element into one new element."""

    @abc.abstractmethod
    def map(self, element: Any) -> Any:
        """Returns the transformed element."""


class RandomMapTransform(abc.ABC):
    """Transforms one element with the help of a per-element random generator."""

    @abc.abstractmethod
    def random_map(self, element: Any, rng: np.random.Generator) -> Any:
        """Returns the transformed element; draw all randomness from `rng`."""


class FilterTransform(abc.ABC):
    """Keeps the elements for which `filter` returns True."""

    @abc.abstractmethod
    def filter(self, element: Any) -> bool:
        """Returns whether to keep `element`."""


class TfRandomMap(abc.ABC):
    """Grain's random map for its TensorFlow backend; here a RandomMap by another name.

    Pipelines call ``np_random_map(element, rng)`` with the same per-element
    `rng` a `RandomMapTransform` gets, so a transform written for Grain's
    numpy path runs unchanged.
    """

    @abc.abstractmethod
    def np_random_map(self, element: Any, rng: np.random.Generator) -> Any:
        """Returns the transformed element; draw all randomness from `rng`."""


class MapWithIndex(abc.ABC):
    """Transforms an element knowing its index in the dataset."""

    @abc.abstractmethod
    def map_with_index(self, index: int, element: Any) -> Any:
        """Returns the transformed element."""


class FlatMapTransform(abc.ABC):
    """Splits one element into at most `max_fan_out` elements."""

    max_fan_out: int

    @abc.abstractmethod
    def flat_map(self, element: Any) -> Sequence[Any]:
        """Returns the elements that `element` splits into."""


@dataclasses.dataclass(frozen=True)
class Batch:
    """The batching operation of the DataLoader: stack `batch_size` elements.

    Args:
      batch_size: elements per batch, >= 1.
      drop_remainder: drop a last batch smaller than `batch_size`.
      batch_fn: turns a list of elements into a batch; defaults to stacking
        the leaves of the elements' PyTrees along a new first axis.
    """

    batch_size: int
    drop_remainder: bool = False
    batch_fn: Callable[[Sequence[Any]], Any] | None = None

    def __post_init__(self) -> None:
        checks.int_in_range(self.batch_size, "batch_size", 1, lead="batch_size must be positive.")
        if self.batch_fn is not None and not callable(self.batch_fn):
            raise TypeError(f"`batch_fn` must be callable or None, got {self.batch_fn!r}.")


class DatasetSelectionMap(abc.ABC):
    """Says, for each position of a selection, which dataset and which element to read.

    Used by `MapDataset.select_from_datasets` for mixtures more general than
    weights. Every epoch of the selection repeats the same choices.

    Example::

        class Alternate(grain.transforms.DatasetSelectionMap):
            def __len__(self):
                return 10

            def __getitem__(self, index):
                return index % 2, index // 2   # (dataset index, index within it)
    """

    @abc.abstractmethod
    def __len__(self) -> int:
        """The number of positions in one epoch of the selection."""

    @abc.abstractmethod
    def __getitem__(self, index: int) -> tuple[int, int]:
        """Returns (dataset index, index within that dataset) for `index`."""


Transformation = (
    Batch
    | MapTransform
    | RandomMapTransform
    | TfRandomMap
    | FilterTransform
    | FlatMapTransform
    | MapWithIndex
)
"""Any one of the transform objects (a DataLoader's `operations`, `ds.apply(...)`)."""

Transformations = Sequence[Transformation]
"""A sequence of transform objects, applied in order."""


class UnsupportedTransformationError(TypeError, NotImplementedError):
    """An object given as a transformation is none of the transform classes.

    A TypeError, and a NotImplementedError as Grain raises in this case, so
    code catching either keeps working.
    """


_KINDS: dict[str, tuple[type, str]] = {
    "map": (MapTransform, "map"),
    "random_map": (RandomMapTransform, "random_map"),
    "filter": (FilterTransform, "filter"),
    "map_with_index": (MapWithIndex, "map_with_index"),
    "flat_map": (FlatMapTransform, "flat_map"),
}


def as_function(transform: Any, kind: str) -> Callable[..., Any]:
    """Returns the callable a `kind` stage calls for `transform`, or raises TypeError."""
    expected, method = _KINDS[kind]
    if isinstance(transform, expected):
        return getattr(transform, method)
    if kind == "random_map" and isinstance(transform, TfRandomMap):
        return transform.np_random_map
    for other, (cls, _) in _KINDS.items():
        if other != kind and isinstance(transform, cls):
            raise TypeError(
                f"`{kind}` got a {cls.__name__} ({type(transform).__name__}); "
                f"use `.{other}(...)` for it, or pass a {expected.__name__} or a callable."
            )
    if not callable(transform):
        raise TypeError(
            f"`transform` of `{kind}` must be a {expected.__name__} or a callable, "
            f"got {type(transform).__name__} {transform!r}."
        )
    return transform


def describe(transform: Any) -> str:
    """A short name for a transform in stage names and error notes."""
    name = getattr(transform, "__qualname__", None) or type(transform).__qualname__
    return name


def flat_map_function(transform: Any) -> tuple[Callable[[Any], Sequence[Any]], int]:
    """Returns (flat_map callable, max_fan_out) of a FlatMapTransform."""
    if not isinstance(transform, FlatMapTransform):
        raise TypeError(
            f"`transform` must be a FlatMapTransform with `max_fan_out`, got {transform!r}."
        )
    fan_out = checks.int_in_range(
        getattr(transform, "max_fan_out", None), "transform.max_fan_out", 1
    )
    return transform.flat_map, fan_out
