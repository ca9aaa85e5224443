"""`IterDataset.mix`: interleave iterators in proportion to weights.

Position p of the output reads the next element of component
``MixingSchedule(weights).lookup(p)[0]``; the schedule is exact (every prefix
within one element of each share) and needs no random numbers, so the state is
the position plus each component's state. Output stops at the first position
whose component is exhausted, as the API reference documents.

Changing the mixture between runs (Grain allows it since 0.2.15) is defined
here as: every component continues at exactly the element after the last one
it delivered, and the choice of component from the restored position p on
follows the new weights, as if they had been used from the start (position p
of the new schedule). The state lists a hash of each component's pipeline
fingerprint (`components`), so components are matched by what they are, not
by their place in the list: a component added since the checkpoint starts at
its beginning, a removed one is dropped, reordered ones find their states.
Both are logged on the "grain" logger.
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
from grain_dataset._fingerprint import component_hash, logger, unstamped
from grain_dataset._iter_stage import IterStage, StageIterator, iterator_of, restore_all
from grain_dataset._state import check_parents_state, check_state
from grain_dataset._worker_slice import iter_with_slice
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
class MixedIterDataset(IterStage):
    """The components interleaved in proportion to their weights."""

    _many_parents = True

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

    def _component_hashes(self) -> list[str]:
        hashes = self.__dict__.get("_hashes")
        if hashes is None:
            hashes = self.__dict__["_hashes"] = [component_hash(p) for p in self._parents]
        return hashes

    def _describe(self) -> str:
        return f"weights={self._weights}"


@iterator_of(MixedIterDataset)
class _MixedIterator(StageIterator):
    def __init__(self, dataset: MixedIterDataset, parents: list[DatasetIterator[Any]]):
        super().__init__(dataset, parents)
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
            "components": list(self._dataset._component_hashes()),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        stage = repr(self._dataset)
        if isinstance(state, dict) and "components" in state:
            # A state of this version: components are matched by their fingerprints.
            saved = state["components"]
            state = {key: value for key, value in state.items() if key != "components"}
            check_state(state, stage, ("position", "parents"))
            old = state["parents"]
            if (
                not isinstance(saved, list)
                or not isinstance(old, list)
                or len(saved) != len(old)
                or not all(isinstance(text, str) for text in saved)
            ):
                raise ValueError(
                    f"state['components'] of {stage} must list one hash string per entry of "
                    f"state['parents'], got {saved!r}; the state is corrupt."
                )
            parents = self._match_components(saved, old)
        else:  # an older state: components by their place in the list
            check_state(state, stage, ("position", "parents"))
            parents = check_parents_state(state, stage, len(self._iterators))
        restore_all(self._iterators, parents)
        self._position = state["position"]

    def _match_components(self, saved: list[str], old: list[Any]) -> list[Any]:
        """A state for each component: its own from `old`, or its beginning's if it is new."""
        mine = self._dataset._component_hashes()
        if saved == mine:
            return old
        unused = set(range(len(saved)))
        states: list[Any] = []
        fresh = []
        for index, digest in enumerate(mine):
            same_place = index < len(saved) and saved[index] == digest and index in unused
            match = (
                index
                if same_place
                else next((j for j in sorted(unused) if saved[j] == digest), None)
            )
            if match is None:
                fresh.append(index)
                parent = self._dataset._parents[index]
                iterator = unstamped(iter_with_slice(parent, self._ctx.worker_slice))
                states.append(iterator.get_state())
                iterator.close()
            else:
                unused.discard(match)
                states.append(old[match])
        logger.warning(
            "%s: the mixture changed since the checkpoint; components %s start at their "
            "beginning (not in the checkpoint), %d checkpointed component(s) are no longer "
            "mixed, the others continue where they stopped.",
            repr(self._dataset),
            fresh,
            len(unused),
        )
        return states
