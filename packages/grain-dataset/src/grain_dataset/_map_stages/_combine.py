"""MapDatasets built from several: concatenate, mix and select_from_datasets.

All three turn an index into (component, index within the component) with
integer arithmetic, vectorized over a batch of indices, then ask each
component once for its share. An index within a component may pass its
length: the component then reads its own later epoch, so shuffled components
reshuffle.

Epoch e of a concatenation reads epoch e of each component. A mix does not
restart its components at each mixed epoch: its schedule is one endless
sequence cut at the first epoch's length, and index p past that length reads
the schedule on, so each component continues where it stopped (Grain's rule;
docs/index_math.md). Restarting them would never read the records of the
longer components that the first mixed epoch left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from grain_dataset._core._base import INFINITE, MapDataset, dataset_list, register
from grain_dataset._core._stage import MapStage, epochs_of, fits_int64, is_infinite
from grain_dataset._map_stages._cost_mix import costs_digest, map_costs
from grain_dataset._map_stages._gather import interleave
from grain_dataset._runtime._fingerprint import token
from grain_index import CostMixingSchedule, MixingSchedule, checks


def _check_datasets(datasets: Any, what: str, allow_empty: bool = False) -> list[MapDataset[Any]]:
    values = dataset_list(datasets, "datasets", what, allow_empty=allow_empty)
    for i, dataset in enumerate(values):
        if not isinstance(dataset, MapDataset):
            raise TypeError(
                f"`datasets[{i}]` of {what} must be a MapDataset, got {type(dataset).__name__}; "
                "wrap sources with MapDataset.source(...)."
            )
    return values


def mix_weights(weights: Any, count: int) -> list[Any]:
    """The weights of a mix of `count` datasets: uniform if None, else one per dataset.

    A zero weight is refused, as Grain does: its dataset would never be read.
    Other values (negative, not finite, ...) are checked by grain_index's
    MixingSchedule.
    """
    if weights is None:
        return [1.0] * count
    if not isinstance(weights, Sequence | np.ndarray):
        raise TypeError(f"`weights` of mix must be a list of numbers, got {weights!r}.")
    if len(weights) != count:
        raise ValueError(
            f"`weights` of mix must have one weight per dataset: got {len(weights)} "
            f"weights for {count} datasets."
        )
    for i, weight in enumerate(weights):
        if isinstance(weight, int | float | np.number) and weight == 0:
            raise ValueError(
                "Must specify all non-zero proportions for mixing. "
                f"`weights` of mix: weights[{i}] is 0, so dataset {i} would never be read. Give "
                "every dataset a weight > 0, or leave it out of the mix."
            )
    return list(weights)


def _gather(
    datasets: Sequence[MapDataset[Any]], components: np.ndarray, indices: np.ndarray
) -> list[Any]:
    """Reads indices[k] of datasets[components[k]], one call per component."""
    result: list[Any] = [None] * len(indices)
    for component in np.unique(components).tolist():
        where = np.flatnonzero(components == component)
        values = datasets[component]._getitems(indices[where])
        for position, value in zip(where.tolist(), values, strict=True):
            result[position] = value
    return result


def _gather_stacked(
    datasets: Sequence[MapDataset[Any]], components: np.ndarray, within: np.ndarray
) -> Any:
    """`_gather` of indices within[k] of datasets[components[k]], interleaved back in order."""
    parts = []
    for component in np.unique(components).tolist():
        where = np.flatnonzero(components == component)
        part = datasets[component]._gather(within[where])
        if part is NotImplemented:
            return NotImplemented
        parts.append((where, part))
    return interleave(parts, len(components))


@register("concatenate")
class ConcatenateMapDataset(MapStage):
    """The components' elements one after the other."""

    def _fingerprint_token(self) -> str | None:
        return "concatenate"

    def __init__(self, datasets: Sequence[MapDataset[Any]]):
        # No datasets is an empty dataset, as in Grain.
        datasets = _check_datasets(datasets, "concatenate", allow_empty=True)
        super().__init__(datasets)
        self._datasets = datasets
        self._lengths = [len(dataset) for dataset in datasets]
        for i, length in enumerate(self._lengths[:-1]):
            if is_infinite(length):
                raise ValueError(
                    f"Cannot concatenate infinite datasets. {datasets[i]!r} is infinite. "
                    f"`datasets[{i}]` of concatenate is infinite, so the datasets after it "
                    "would never be reached; only the last may be infinite."
                )
        self._length = min(INFINITE, sum(self._lengths))
        self._starts = np.cumsum([0, *self._lengths[:-1]]).astype(np.int64)

    def __len__(self) -> int:
        return self._length

    def _locate(self, index: int) -> tuple[int, int]:
        epoch, offset = divmod(index, self._length)
        component = int(np.searchsorted(self._starts, offset, side="right")) - 1
        within = offset - int(self._starts[component])
        return component, epoch * self._lengths[component] + within

    def _getitem(self, index: int) -> Any:
        component, within = self._locate(index)  # see _getitems for the empty components
        return self._datasets[component]._getitem(within)

    def _getitems(self, indices: np.ndarray) -> list[Any]:
        if not self._length:
            raise IndexError("the dataset is empty: it has no element at any index.")
        if not fits_int64(indices, self._length, max(self._lengths)):
            return super()._getitems(indices)
        epochs, offsets = epochs_of(indices, self._length)
        # The last start <= offset: an empty component shares its start with the
        # next one, so side="right" never lands on it.
        components = np.searchsorted(self._starts, offsets, side="right") - 1
        lengths = np.asarray(self._lengths, dtype=np.int64)
        within = epochs * lengths[components] + offsets - self._starts[components]
        return _gather(self._datasets, components, within)

    def _gatherable(self) -> bool:
        return bool(self._datasets) and all(ds._gatherable() for ds in self._datasets)

    def _gather(self, indices: np.ndarray) -> Any:
        if not self._length or not fits_int64(indices, self._length, max(self._lengths)):
            return NotImplemented
        epochs, offsets = epochs_of(indices, self._length)
        components = np.searchsorted(self._starts, offsets, side="right") - 1
        lengths = np.asarray(self._lengths, dtype=np.int64)
        within = epochs * lengths[components] + offsets - self._starts[components]
        return _gather_stacked(self._datasets, components, within)

    def _describe(self) -> str:
        return f"lengths={self._lengths}"


@register("map_mix")
class MixedMapDataset(MapStage):
    """The components interleaved in proportion to their weights."""

    _order_as_grain = False  # its selection math is not Grain's

    def _fingerprint_token(self) -> str | None:
        if self._costs_digest is not None:
            return token("mix", self._weights, f"costs={self._costs_digest}")
        return token("mix", self._weights)

    def __init__(
        self,
        datasets: Sequence[MapDataset[Any]],
        weights: Sequence[float] | None,
        costs: Sequence[Any] | None = None,
    ):
        datasets = _check_datasets(datasets, "mix")
        super().__init__(datasets)
        weights = mix_weights(weights, len(datasets))
        self._datasets = datasets
        self._lengths = [len(dataset) for dataset in datasets]
        self._costs_digest: str | None = None
        self._schedule: MixingSchedule | CostMixingSchedule
        if costs is None:
            self._schedule = MixingSchedule(weights)
        else:
            self._schedule = self._cost_schedule(weights, costs)
        empty = [i for i, length in enumerate(self._lengths) if length == 0]
        if empty:
            listed = ", ".join(f"index {i} ({datasets[i]!r})" for i in empty)
            raise ValueError(
                "All datasets must have positive length for mixing, but dataset(s) at "
                f"{listed} have length 0. "
                f"`datasets[{empty[0]}]` of mix is empty ({datasets[empty[0]]!r}): a mix's epoch "
                "ends when any dataset runs out, so it would have no element. Leave empty "
                "datasets out of the mix."
            )
        if isinstance(self._schedule, MixingSchedule):
            self._length = self._schedule.epoch_length(self._lengths)
        else:
            self._length = self._schedule.epoch_length()
        self._weights = weights

    def _cost_schedule(self, weights: list[Any], costs: Any) -> CostMixingSchedule:
        infinite = [i for i, length in enumerate(self._lengths) if is_infinite(length)]
        if infinite:
            raise ValueError(
                f"`datasets[{infinite[0]}]` of mix is infinite, and a mix by `costs` needs "
                "one cost per record of each dataset. Mix the finite datasets and repeat "
                "the mix (MapDataset.mix(...).repeat()); each dataset continues into its "
                "next epoch past the mix's first anyway."
            )
        arrays = map_costs(costs, self._lengths)
        schedule = CostMixingSchedule(weights, arrays)
        self._costs_digest = costs_digest(arrays)
        return schedule

    def __len__(self) -> int:
        return self._length

    # The k-th read of a component is its index k for every position, in the
    # first mixed epoch or past it: k never exceeds the position, so int64 holds it.
    def _getitem(self, index: int) -> Any:
        component, within = self._schedule.lookup(index)
        return self._datasets[component]._getitem(within)

    def _getitems(self, indices: np.ndarray) -> list[Any]:
        components, within = self._schedule.lookup_array(indices)
        return _gather(self._datasets, components, within)

    def _gatherable(self) -> bool:
        return all(ds._gatherable() for ds in self._datasets)

    def _gather(self, indices: np.ndarray) -> Any:
        components, within = self._schedule.lookup_array(indices)
        return _gather_stacked(self._datasets, components, within)

    def _describe(self) -> str:
        by = "" if self._costs_digest is None else ", by cost"
        return f"weights={self._weights}, lengths={self._lengths}{by}"


@register("select_from_datasets")
class SelectionMapDataset(MapStage):
    """The elements a DatasetSelectionMap picks; every epoch repeats its choices."""

    _order_as_grain = False  # a user's selection map

    def _fingerprint_token(self) -> str | None:
        return token("select", type(self._selection_map).__name__, f"len={self._length}")

    def __init__(self, datasets: Sequence[MapDataset[Any]], selection_map: Any):
        datasets = _check_datasets(datasets, "select_from_datasets")
        super().__init__(datasets)
        if not (hasattr(selection_map, "__len__") and hasattr(selection_map, "__getitem__")):
            raise TypeError(
                "`selection_map` must be a grain.transforms.DatasetSelectionMap (`__len__`, "
                "and `__getitem__` returning (dataset index, index within it)), "
                f"got {selection_map!r}."
            )
        self._datasets = datasets
        self._selection_map = selection_map
        self._length = checks.int_in_range(len(selection_map), "len(selection_map)", 0)

    def __len__(self) -> int:
        return self._length

    def _getitem(self, index: int) -> Any:
        selected = self._selection_map[index % self._length]
        try:
            component, within = selected
        except (TypeError, ValueError):
            raise TypeError(
                f"selection_map[{index % self._length}] must be a pair (dataset index, "
                f"index within it), got {selected!r}."
            ) from None
        component = checks.int_in_range(
            component,
            f"dataset index of selection_map[{index % self._length}]",
            0,
            len(self._datasets),
        )
        within = checks.int_in_range(within, "index within the selected dataset", 0)
        return self._datasets[component]._getitem(within)

    def _describe(self) -> str:
        return f"selection_map={type(self._selection_map).__name__}, len={self._length}"
