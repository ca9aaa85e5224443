"""`IterDataset.mix`: interleave iterators in proportion to weights.

Position p of the output reads the next element of component
``MixingSchedule(weights).lookup(p)[0]``; the schedule is exact (every prefix
within one element of each share) and needs no random numbers, so the state is
the position plus each component's state. Output stops at the first position
whose component is exhausted, as the API reference documents.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from grain_dataset._base import (
    DatasetIterator,
    IterDataset,
    as_iter_dataset,
    dataset_list,
    register,
)
from grain_dataset._combine import mix_weights
from grain_dataset._state import check_parents_state, check_state
from grain_index import MixingSchedule


def _by_name(datasets: Any, weights: Any) -> tuple[Any, Any]:
    """Grain's dict form, ``mix({"a": ds1, "b": ds2}, {"a": 0.7, "b": 0.3})``, as lists."""
    if not isinstance(datasets, Mapping):
        if isinstance(weights, Mapping):
            raise TypeError(
                "`weights` of mix is a dict, so `datasets` must be a dict with the same keys; "
                f"got {type(datasets).__name__}."
            )
        return datasets, weights
    names = list(datasets)
    if weights is None or not isinstance(weights, Mapping):
        # A list of weights goes with the datasets in the dict's order, as in Grain.
        return [datasets[name] for name in names], weights
    if set(weights) != set(names):
        raise ValueError(
            f"`weights` of mix must have the keys of `datasets`, {sorted(names)}; got "
            f"{sorted(weights)}."
        )
    return [datasets[name] for name in names], [weights[name] for name in names]


@register("iter_mix")
class MixedIterDataset(IterDataset[Any]):
    """The components interleaved in proportion to their weights."""

    def _fingerprint_token(self) -> str | None:
        return "mix"

    def _fingerprint_parents(self) -> Sequence[Any]:
        # Components may change between runs: the mix's own state says which is which.
        return ()

    def __init__(
        self,
        datasets: Sequence[IterDataset[Any]] | Mapping[str, IterDataset[Any]],
        weights: Sequence[float] | Mapping[str, float] | None,
    ):
        datasets, weights = _by_name(datasets, weights)
        datasets = dataset_list(datasets, "datasets", "mix")
        datasets = [as_iter_dataset(ds, f"datasets[{i}]", "mix") for i, ds in enumerate(datasets)]
        super().__init__(datasets)
        self._weights = mix_weights(weights, len(datasets))
        self._schedule = MixingSchedule(self._weights)

    def __iter__(self) -> DatasetIterator[Any]:
        return _MixedIterator(self, [iter(parent) for parent in self._parents])

    def __repr__(self) -> str:
        return f"MixedIterDataset(weights={self._weights})"


class _MixedIterator(DatasetIterator[Any]):
    def __init__(self, dataset: MixedIterDataset, parents: list[DatasetIterator[Any]]):
        super().__init__(parents)
        self._dataset = dataset
        self._iterators = parents
        self._schedule = dataset._schedule
        self._position = 0

    def __next__(self) -> Any:
        component, _ = self._schedule.lookup(self._position)
        value = next(self._iterators[component])
        self._position += 1
        return value

    def get_state(self) -> dict[str, Any]:
        return {
            "position": self._position,
            "parents": [iterator.get_state() for iterator in self._iterators],
        }

    def set_state(self, state: dict[str, Any]) -> None:
        stage = repr(self._dataset)
        check_state(state, stage, ("position", "parents"))
        parents = check_parents_state(state, stage, len(self._iterators))
        previous = [iterator.get_state() for iterator in self._iterators]
        try:
            for iterator, parent_state in zip(self._iterators, parents, strict=True):
                iterator.set_state(parent_state)
        except Exception:
            # All components move or none: a rejected state leaves no half-restored mix.
            for iterator, parent_state in zip(self._iterators, previous, strict=True):
                iterator.set_state(parent_state)
            raise
        self._position = state["position"]
