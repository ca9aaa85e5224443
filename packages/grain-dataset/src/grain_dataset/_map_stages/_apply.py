"""`apply_transformations`: a list of Grain transform objects, applied as dataset stages.

The DataLoader describes its pipeline as a list of transform objects
(`operations`); this turns such a list into the equivalent chain of dataset
methods, for MapDataset and IterDataset alike, so code written for one API
moves to the other unchanged:

    grain.transforms.Map / MapTransform    ->  ds.map(t)
    grain.transforms.RandomMap             ->  ds.random_map(t)
    grain.transforms.TfRandomMap           ->  ds.random_map(t)   (its np_random_map)
    grain.transforms.Filter                ->  ds.filter(t)
    grain.transforms.MapWithIndex          ->  ds.map_with_index(t)
    grain.transforms.Batch                 ->  ds.batch(t.batch_size, drop_remainder=...,
                                                        batch_fn=...)
    grain.experimental.FlatMapTransform    ->  FlatMapMapDataset / FlatMapIterDataset

Plain callables are refused (an `UnsupportedTransformationError`, both a
TypeError and the NotImplementedError Grain raises): a function says nothing
about whether it maps, filters or takes an rng, so it must be wrapped in one of
the classes (or passed to the dataset method directly).
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

from grain_dataset._common._transforms import (
    Batch,
    FilterTransform,
    FlatMapTransform,
    MapTransform,
    MapWithIndex,
    RandomMapTransform,
    TfRandomMap,
    UnsupportedTransformationError,
)
from grain_dataset._core._base import IterDataset, MapDataset, register

_ACCEPTED = (
    "grain.transforms.Map (MapTransform), RandomMap (RandomMapTransform), Filter "
    "(FilterTransform), MapWithIndex, Batch, and grain.experimental.FlatMapTransform"
)

# The protocols a transform object may implement; an object implementing two
# is ambiguous and refused rather than silently applied one way.
_PROTOCOLS = (
    MapTransform,
    RandomMapTransform,
    TfRandomMap,
    FilterTransform,
    MapWithIndex,
    FlatMapTransform,
)


def _flat_map(ds: Any, transform: FlatMapTransform) -> Any:
    # The flat-map stages live in their own module, which may not be present;
    # without it, say what to use instead of failing with an ImportError.
    try:
        module = importlib.import_module("grain_dataset._map_stages._flat_map")
    except ModuleNotFoundError as error:
        if error.name != "grain_dataset._map_stages._flat_map":
            raise
        module = None
    name = "FlatMapMapDataset" if isinstance(ds, MapDataset) else "FlatMapIterDataset"
    stage = getattr(module, name, None)
    if stage is None:
        raise NotImplementedError(
            f"apply_transformations: a FlatMapTransform ({type(transform).__name__}) needs "
            f"grain.experimental.{name}, which this installation does not provide; apply the "
            "transformations before and after it separately around your own flat-map stage."
        )
    return stage(ds, transform)


def _apply_one(ds: Any, transform: Any, where: str) -> Any:
    if isinstance(transform, Batch):
        return ds.batch(
            transform.batch_size,
            drop_remainder=transform.drop_remainder,
            batch_fn=transform.batch_fn,
        )
    matched = [protocol for protocol in _PROTOCOLS if isinstance(transform, protocol)]
    if len(matched) > 1:
        names = ", ".join(protocol.__name__ for protocol in matched)
        raise TypeError(
            f"apply_transformations: {where} ({type(transform).__name__}) implements "
            f"several transform protocols ({names}), so how to apply it is ambiguous; "
            "split it into one class per protocol."
        )
    if not matched:
        kind = "a plain callable" if callable(transform) else type(transform).__name__
        raise UnsupportedTransformationError(
            f"Transformation type: {transform} is not supported. "
            f"apply_transformations: {where} is {kind} ({transform!r}), not a transform "
            f"object. Accepted: {_ACCEPTED}. Wrap a function in one of these classes, or "
            "call ds.map(fn) / ds.filter(fn) directly."
        )
    protocol = matched[0]
    if protocol is MapTransform:
        return ds.map(transform)
    if protocol is RandomMapTransform or protocol is TfRandomMap:
        return ds.random_map(transform)
    if protocol is FilterTransform:
        return ds.filter(transform)
    if protocol is MapWithIndex:
        return ds.map_with_index(transform)
    return _flat_map(ds, transform)


@register("apply")
def apply_transformations(
    ds: MapDataset[Any] | IterDataset[Any], transformations: Any | Sequence[Any]
) -> Any:
    """Returns `ds` with `transformations` (one transform object or a sequence) applied in order.

    Works on a MapDataset and on an IterDataset; the result is of the same
    kind. A RandomMap takes its seed from ``ds.seed(...)`` upstream, as
    ``ds.random_map(t)`` does.

    Example::

        class Double(grain.transforms.Map):
            def map(self, x):
                return 2 * x

        ds = apply_transformations(
            grain.MapDataset.range(5), [Double(), grain.transforms.Batch(batch_size=2)]
        )
        [b.tolist() for b in ds]   # [[0, 2], [4, 6], [8]]

    Raises:
      TypeError: `ds` is not a dataset.
      UnsupportedTransformationError: (a TypeError and a NotImplementedError) an
        element of `transformations` is not one of the transform classes (the
        message lists them).
      NotImplementedError: a FlatMapTransform, where no flat-map stage exists.
    """
    if not isinstance(ds, MapDataset | IterDataset):
        raise TypeError(
            f"apply_transformations: `ds` must be a MapDataset or an IterDataset, "
            f"got {type(ds).__name__}."
        )
    if isinstance(transformations, Sequence) and not isinstance(transformations, str | bytes):
        for position, transform in enumerate(transformations):
            ds = _apply_one(ds, transform, f"transformations[{position}]")
        return ds
    return _apply_one(ds, transformations, "`transformations`")
