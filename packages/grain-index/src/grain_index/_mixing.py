"""Weighted mixing: which component, and which of its elements, each position reads.

Weights become integer weights W_j with period S = sum(W_j): ratios of small
integers stay exact (0.7/0.3 -> 7/3, 1/3 and 2/3 -> 1/2); weights that need a
period over `MAX_PERIOD` are rounded to multiples of about 1/MAX_PERIOD, and a
component with a non-zero weight keeps a share of at least one per period.

Each period of S positions holds component j exactly W_j times, in the order of
an earliest-deadline-first schedule: the k-th element of component j (k >= 0)
has the window of positions

    [floor(k * S / W_j),  ceil((k + 1) * S / W_j) - 1]

and EDF (ties to the lower component) puts every element inside its window.
The lower end keeps a component from running ahead; the upper end keeps it from
falling behind. So every prefix of length L holds component j
floor(L * W_j / S) or ceil(L * W_j / S) times: within one of its exact share.
The schedule is built once per weight vector (O(S log S)); afterwards a lookup
is O(1): ``divmod(position, S)`` and two table reads, scalar or vectorized.

Mixed epochs do not restart anything. `epoch_length` is where the first
component runs out, but position p past it is looked up like any other: the
schedule is one endless sequence, and the index it gives for component j is
j's read count so far, which grows past len(j) into j's own later epochs
(index // len(j)) at offset index % len(j). Each component is therefore read in
order from where the previous mixed epoch left it, and over any number of
mixed epochs none of its records is skipped (Grain 0.2.18 reads a mix the same
way).
"""

from __future__ import annotations

import functools
import heapq
import math
import sys
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from grain_index import _validate

MAX_PERIOD = 1 << 16
"""The longest period a mixture's schedule may have, in positions."""

_EXACT_DENOMINATOR = 1 << 20


def integer_weights(weights: Sequence[float]) -> tuple[int, ...]:
    """Returns the integer weights (lowest terms) that stand for `weights`."""
    values = _validate.finite_weights(weights)
    fractions = [Fraction(w).limit_denominator(_EXACT_DENOMINATOR) for w in values]
    if all(abs(float(f) - w) <= 1e-12 * w for f, w in zip(fractions, values, strict=True)):
        fraction_total = sum(fractions)
        shares = [f / fraction_total for f in fractions]
        denominator = math.lcm(*(share.denominator for share in shares))
        if denominator <= MAX_PERIOD:
            return tuple(int(share * denominator) for share in shares)
    total = sum(values)
    rounded = [max(1, round(w / total * MAX_PERIOD)) if w > 0 else 0 for w in values]
    divisor = math.gcd(*rounded)
    return tuple(w // divisor for w in rounded)


@functools.lru_cache(maxsize=64)
def _tables(weights: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """EDF schedule of one period: (component, rank, offsets by component, starts)."""
    period = sum(weights)
    parts = []
    for component, w in enumerate(weights):
        ranks = np.arange(w, dtype=np.int64)
        releases = ranks * period // w
        deadlines = ((ranks + 1) * period - 1) // w
        parts.append(np.stack([releases, deadlines, np.full(w, component), ranks], axis=1))
    events = np.concatenate(parts)
    events = events[np.argsort(events[:, 0], kind="stable")].tolist()
    component_at = np.empty(period, dtype=np.int64)
    rank_at = np.empty(period, dtype=np.int64)
    pending: list[tuple[int, int, int]] = []
    e = 0
    for t in range(period):
        while e < len(events) and events[e][0] <= t:
            _, deadline, component, k = events[e]
            heapq.heappush(pending, (deadline, component, k))
            e += 1
        deadline, component, k = heapq.heappop(pending)
        if deadline < t:  # cannot happen for quota windows; guards the proof
            raise AssertionError(f"mixing schedule missed a deadline for weights {weights}")
        component_at[t] = component
        rank_at[t] = k
    order = np.lexsort((rank_at, component_at))
    starts = np.concatenate([[0], np.cumsum(weights)]).astype(np.int64)
    for table in (component_at, rank_at, order, starts):
        table.flags.writeable = False
    return component_at, rank_at, order, starts


class MixingSchedule:
    """A deterministic interleaving of components in proportion to weights.

    Args:
      weights: one non-negative, finite weight per component, not all zero.

    Example::

        schedule = MixingSchedule([0.7, 0.3])
        schedule.lookup(5)                    # (component, index within component)
        components, indices = schedule.lookup_array(np.arange(100))
        schedule.epoch_length([5, 3])         # how long one mixed epoch is
        schedule.lookup(7)                    # past it: (0, 5), component 0 reads on
    """

    def __init__(self, weights: Sequence[float]):
        self._weights = integer_weights(weights)
        self._period = sum(self._weights)
        tables = _tables(self._weights)
        self._component_at, self._rank_at, self._order, self._starts = tables
        # Plain lists make scalar lookups several times faster than numpy scalars.
        self._component_list = self._component_at.tolist()
        self._rank_list = self._rank_at.tolist()

    def __repr__(self) -> str:
        return f"MixingSchedule(integer_weights={list(self._weights)})"

    @property
    def integer_weights(self) -> tuple[int, ...]:
        """Each component's number of positions per period."""
        return self._weights

    @property
    def period(self) -> int:
        """Positions per period; every period repeats the same pattern."""
        return self._period

    @property
    def num_components(self) -> int:
        return len(self._weights)

    def lookup(self, position: int) -> tuple[int, int]:
        """Returns (component, index within that component) of `position`."""
        position = _validate.int_in_range(position, "position", 0)
        cycle, offset = divmod(position, self._period)
        component = self._component_list[offset]
        return component, cycle * self._weights[component] + self._rank_list[offset]

    def lookup_array(self, positions: Any) -> tuple[np.ndarray, np.ndarray]:
        """Vectorized `lookup`: int64 arrays (components, indices) of `positions`' shape."""
        array = _validate.index_array(positions, "positions").astype(np.int64)
        if array.size and int(array.min()) < 0:
            raise ValueError(f"`positions` must be >= 0, got {int(array.min())}.")
        cycles, offsets = np.divmod(array, self._period)
        components = self._component_at[offsets]
        weights = np.asarray(self._weights, dtype=np.int64)
        return components, cycles * weights[components] + self._rank_at[offsets]

    def _check_component(self, component: Any) -> int:
        return _validate.int_in_range(component, "component", 0, len(self._weights))

    def position_of(self, component: int, index: int) -> int:
        """The inverse of `lookup`: the position of element `index` of `component`."""
        component = self._check_component(component)
        index = _validate.int_in_range(index, "index", 0)
        w = self._weights[component]
        if w == 0:
            raise ValueError(f"component {component} has weight 0 and is never selected.")
        cycle, rank = divmod(index, w)
        return cycle * self._period + int(self._order[self._starts[component] + rank])

    def count(self, component: int, length: int) -> int:
        """How many of the first `length` positions belong to `component`."""
        component = self._check_component(component)
        length = _validate.int_in_range(length, "length", 0)
        cycle, offset = divmod(length, self._period)
        start, end = self._starts[component], self._starts[component + 1]
        within = np.searchsorted(self._order[start:end], offset)
        return cycle * self._weights[component] + int(within)

    def _check_lengths(self, lengths: Any) -> list[int]:
        values = list(lengths)
        if len(values) != len(self._weights):
            raise ValueError(
                f"`lengths` must have one entry per component ({len(self._weights)}), "
                f"got {len(values)}."
            )
        return [_validate.int_in_range(v, f"lengths[{i}]", 0) for i, v in enumerate(values)]

    def epoch_length(self, lengths: Sequence[int]) -> int:
        """Length of one mixed epoch: the shortest component scaled by its weight.

        The epoch ends when the component that runs out first (its length over
        its share) is used up; the rest of the others is read by the next mixed
        epochs, as `lookup` continues past this length. The result is capped at
        ``sys.maxsize``, the length of an infinite dataset.
        """
        values = self._check_lengths(lengths)
        return min(
            sys.maxsize,
            *(n * self._period // w for n, w in zip(values, self._weights, strict=True) if w),
        )
