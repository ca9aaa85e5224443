"""`IterDataset.mix`: interleave iterators in proportion to weights.

Position p of the output reads the next element of component
``MixingSchedule(weights).lookup(p)[0]``; the schedule is exact (every prefix
within one element of each share) and needs no random numbers, so the state is
the position plus each component's state. Output stops at the first position
whose component is exhausted, as the API reference documents.

State, in Grain's shape: ``{"parents": [state_0, ...], "index": i, "stop": b}``,
i the number of next() calls that returned an element or found the mixture's
end, `stop` whether one did (a stopped mix stays stopped, also after a restore).

Changing the mixture between runs (Grain allows it since 0.2.15) is defined
here as: every component continues at exactly the element after the last one
it delivered, and the choice of component from the restored position p on
follows the new weights, as if they had been used from the start (position p
of the new schedule). Components are matched by what they are, not by their
place in the list, where the checkpoint says what they were: its fingerprint
(in the checkpoint file) lists a hash of each component's pipeline
(`grain_dataset._runtime._fingerprint.saved_components`), and states of earlier
versions list them in the state itself (``"components"``). A component added
since the checkpoint starts at its beginning, a removed one is dropped,
reordered ones find their states. Both are logged on the "grain" logger. A
state set by hand carries no hashes: its components are taken by place, as in
Grain, and must be as many as the mixture's.

Mixing by cost (``costs=``): each component's next element is read ahead
and costed (the component's function of it); the next element delivered is
the one whose cost, centred on its component's tally of cost read, comes
first on the clock of cost over share (ties to the lower component):
weighted fair queueing, as the MapDataset mix orders records by their known
costs. The clock is computed as the MapDataset mix computes it, from the
tally in one division, so the two give the same order wherever the costs
are integers (tallies add up exactly; a clock that added up cost over share
element by element drifted by rounding and broke ties the other way). The
mix ends when any component runs out, since the choice needs every
component's next cost. The state saves a component read ahead at its state
before that element, which a restore reads again, and adds ``"cost_read"``
(the cost read from each component: the tallies, saved exactly) and
``"shares"`` (the weights scaled to sum 1); a state of an earlier version
holds ``"cost_per_share"`` instead, the tallies over the shares. Restored
under other weights or components, the tallies start afresh at the restored
position, so the new weights hold from there on without one component
catching up a backlog.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from grain_dataset._core._base import (
    DatasetIterator,
    IterDataset,
    as_iter_dataset,
    dataset_list,
    register,
)
from grain_dataset._core._iter_stage import IterStage, StageIterator, iterator_of, restore_all
from grain_dataset._core._state import check_parents_state, check_state
from grain_dataset._core._worker_slice import iter_with_slice
from grain_dataset._map_stages._combine import mix_weights
from grain_dataset._map_stages._cost_mix import element_cost, iter_costs
from grain_dataset._runtime._fingerprint import (
    component_hash,
    logger,
    mix_token,
    saved_components,
    unstamped,
)
from grain_index import MixingSchedule

_PLAIN_NUMBERS = (int, float)
# The state entries of a mix by cost (and of an earlier version's, by cost over share).
_COST_KEYS = ("cost_read", "cost_per_share", "shares")


def _names(datasets: Any) -> list[str] | None:
    return list(datasets) if isinstance(datasets, Mapping) else None


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

    _order_as_grain = False

    _many_parents = True

    def _fingerprint_token(self) -> str | None:
        return mix_token(self._component_hashes())

    def _fingerprint_parents(self) -> Sequence[Any]:
        # Components may change between runs: the mix's own state says which is which.
        return ()

    def __init__(
        self,
        datasets: Sequence[IterDataset[Any]] | Mapping[str, IterDataset[Any]],
        weights: Sequence[float] | Mapping[str, float] | None,
        costs: Any = None,
    ):
        names = _names(datasets)
        datasets, weights = _by_name(datasets, weights)
        datasets = dataset_list(datasets, "datasets", "mix")
        datasets = [as_iter_dataset(ds, f"datasets[{i}]", "mix") for i, ds in enumerate(datasets)]
        super().__init__(datasets)
        self._weights = mix_weights(weights, len(datasets))
        self._schedule = MixingSchedule(self._weights)
        # By cost: the weights as shares summing to 1, and each component's cost function.
        self._costs = None if costs is None else iter_costs(costs, len(datasets), names)
        self._shares: list[float] = []
        if self._costs is not None:
            values = [float(w) for w in self._weights]
            if any(not (w > 0 and w < float("inf")) for w in values):
                raise ValueError(
                    f"`weights` of mix must be finite and > 0 to mix by cost, got {values}."
                )
            self._shares = [w / sum(values) for w in values]

    def _component_hashes(self) -> list[str]:
        hashes = self.__dict__.get("_hashes")
        if hashes is None:
            hashes = self.__dict__["_hashes"] = [component_hash(p) for p in self._parents]
        return hashes

    def _describe(self) -> str:
        by = "" if self._costs is None else ", by cost"
        return f"weights={self._weights}{by}"


@iterator_of(MixedIterDataset)
class _MixedIterator(StageIterator):
    def __init__(self, dataset: MixedIterDataset, parents: list[DatasetIterator[Any]]):
        super().__init__(dataset, parents)
        self._iterators = parents
        self._schedule = dataset._schedule
        self._index = 0
        self._stop = False
        self._costs = dataset._costs
        self._shares = dataset._shares
        self._read = [0.0] * len(parents)  # cost read, per component
        # By cost, each component's next element is read ahead: (element, its cost, the
        # component's state before it), or None once it is delivered.
        self._ahead: list[tuple[Any, float, Any] | None] = [None] * len(parents)
        # Where each element read ahead is centred on the clock of cost over share, doubled:
        # (2 tally + its cost) / share, the expression of the MapDataset mix.
        self._times = [0.0] * len(parents)

    def _read_ahead(self, component: int) -> None:
        iterator = self._iterators[component]
        before = iterator.get_state()
        value = next(iterator)
        try:
            cost = self._costs[component](value)  # type: ignore[index]
            if type(cost) not in _PLAIN_NUMBERS or not 0 < cost < math.inf:
                cost = element_cost(cost, component)  # the slow check, with the message
        except Exception:
            # As the record mix does on an error: the next call asks for the same
            # element again (and meets the same error), nothing is skipped.
            iterator.set_state(before)
            raise
        self._ahead[component] = (value, cost, before)
        self._times[component] = (2 * self._read[component] + cost) / self._shares[component]

    def _next_by_cost(self) -> Any:
        ahead = self._ahead
        if None in ahead:
            for component, entry in enumerate(ahead):
                if entry is None:
                    try:
                        self._read_ahead(component)
                    except StopIteration:
                        # The choice needs every component's next cost: the mix ends
                        # when any one runs out (counted, as the record mix counts its end).
                        self._index += 1
                        self._stop = True
                        raise
        # Weighted fair queueing: the element whose cost, centred on its component's
        # tally, comes first on the clock of cost over share (ties to the lower
        # component), so every prefix is within half an element of each share.
        times = self._times
        best = times.index(min(times))
        value, cost, _ = ahead[best]  # type: ignore[misc]
        ahead[best] = None
        self._read[best] += cost
        self._index += 1
        return value

    def __next__(self) -> Any:
        if self._stop:
            raise StopIteration
        if self._costs is not None:
            return self._next_by_cost()
        component = self._schedule.lookup(self._index)[0]
        try:
            value = next(self._iterators[component])
        except StopIteration:
            # Counted, as in Grain; an error other than the end leaves the index where
            # it was, so the next call asks the same component again.
            self._index += 1
            self._stop = True
            raise
        self._index += 1
        return value

    def get_state(self) -> dict[str, Any]:
        # A component read ahead is saved before that element, which a restore reads again.
        state = {
            "parents": [
                iterator.get_state() if entry is None else entry[2]
                for iterator, entry in zip(self._iterators, self._ahead, strict=True)
            ],
            "index": self._index,
            "stop": self._stop,
        }
        if self._costs is not None:
            state["cost_read"] = list(self._read)
            state["shares"] = list(self._shares)
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        tallies = self._restore_costs(state)
        if isinstance(state, dict):
            state = {k: v for k, v in state.items() if k not in _COST_KEYS}
        changed = self._set_positions(state)
        self._ahead = [None] * len(self._iterators)
        if self._costs is not None:
            if changed and tallies is not None:
                logger.warning(
                    "%s: the mixture changed since the checkpoint; the cost shares are "
                    "counted afresh from here.",
                    repr(self._dataset),
                )
            self._read = [0.0] * len(self._iterators) if changed or tallies is None else tallies

    def _restore_costs(self, state: Any) -> list[float] | None:
        """The checkpoint's cost read from each component, if it is from a mix by cost of the
        same shares.

        None (count afresh from the restored position) where the state is a
        record mix's or the weights changed: continuing the old tallies under
        new weights would give the component now furthest behind a long run of
        its own to catch up, rather than follow the new weights from here.
        """
        if self._costs is None or not isinstance(state, dict):
            return None
        key = next((k for k in ("cost_read", "cost_per_share") if k in state), None)
        if key is None:
            return None
        tallies, shares = state[key], state.get("shares")
        stage = repr(self._dataset)
        for name, value in ((key, tallies), ("shares", shares)):
            if not isinstance(value, list) or not all(
                isinstance(x, int | float)
                and not isinstance(x, bool)
                and math.isfinite(x)
                and x >= 0
                for x in value
            ):
                raise ValueError(
                    f"state['{name}'] of {stage} must be a list of finite numbers >= 0, got "
                    f"{value!r:.200}; the checkpoint is corrupt."
                )
        if len(tallies) != len(self._iterators) or shares != self._shares:
            if shares != self._shares:
                logger.warning(
                    "%s: the weights changed since the checkpoint (%s, now %s); the cost shares "
                    "are counted afresh from here.",
                    stage,
                    shares,
                    self._shares,
                )
            return None
        if key == "cost_per_share":  # an earlier version's clock: cost over share
            return [float(x) * w for x, w in zip(tallies, self._shares, strict=True)]
        return [float(x) for x in tallies]

    def _set_positions(self, state: dict[str, Any]) -> bool:
        """Restores the parents and the index; True where the components changed."""
        stage = repr(self._dataset)
        checked, hashes = saved_components(self._dataset)
        if isinstance(state, dict) and "position" in state:
            # A state of an earlier version: {"position", "parents"[, "components"]}.
            if "components" in state:
                hashes = state["components"]
                state = {key: value for key, value in state.items() if key != "components"}
            elif checked:
                raise ValueError(
                    f"this state of {stage} carries a pipeline fingerprint but no "
                    "'components' entry, which every state with a fingerprint has: it was "
                    "edited or truncated, and without the components' hashes its parents' "
                    "states cannot be matched to the components. Restore the checkpoint as "
                    "it was saved."
                )
            check_state(state, stage, ("position", "parents"))
            index, stop = state["position"], False
        else:
            check_state(state, stage, ("parents", "index", "stop"), flags=("stop",))
            index, stop = state["index"], state["stop"]
            if checked and hashes is None:
                raise ValueError(
                    f"the checkpoint's fingerprint lists {stage} without its components' "
                    "hashes, which every fingerprint of this version has: the checkpoint was "
                    "edited or mixes versions. Restore the checkpoint as it was saved."
                )
        changed = False
        if hashes is None:  # set by hand, or a fingerprint-less older state: by place
            parents = check_parents_state(state, stage, len(self._iterators))
        else:
            old = state["parents"]
            if (
                not isinstance(hashes, list)
                or not isinstance(old, list)
                or len(hashes) != len(old)
                or not all(isinstance(text, str) for text in hashes)
            ):
                raise ValueError(
                    f"the components' hashes of {stage} must be one string per entry of "
                    f"state['parents'], got {hashes!r} for the parent states {old!r:.200}; "
                    "the checkpoint is corrupt."
                )
            parents = self._match_components(hashes, old)
            changed = hashes != self._dataset._component_hashes()
        restore_all(self._iterators, parents)
        self._index, self._stop = index, stop
        return changed

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
