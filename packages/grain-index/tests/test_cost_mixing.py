"""CostMixingSchedule: cost shares follow the weights, nothing lost or repeated, lookups agree."""

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grain_index import CostMixingSchedule


@st.composite
def mixtures(draw):
    count = draw(st.integers(1, 4))
    weights = [draw(st.floats(0.05, 10.0)) for _ in range(count)]
    costs = [draw(st.lists(st.integers(1, 50), min_size=1, max_size=30)) for _ in range(count)]
    return weights, costs


def _sequence(schedule, length):
    return schedule.lookup_array(np.arange(length))


def _cost_of(costs, components, indices):
    """Each position's cost: record index % n of its component."""
    return np.array(
        [
            costs[c][i % len(costs[c])]
            for c, i in zip(components.tolist(), indices.tolist(), strict=True)
        ],
        dtype=np.float64,
    )


@settings(max_examples=150, deadline=None)
@given(mixtures(), st.integers(1, 600))
def test_each_component_reads_its_indices_in_order_once(mixture, length):
    weights, costs = mixture
    components, indices = _sequence(CostMixingSchedule(weights, costs), length)
    for j in range(len(weights)):
        mine = indices[components == j]
        assert mine.tolist() == list(range(len(mine)))


@settings(max_examples=150, deadline=None)
@given(mixtures(), st.integers(1, 600))
def test_every_prefix_holds_each_cost_share_within_a_record(mixture, length):
    weights, costs = mixture
    components, indices = _sequence(CostMixingSchedule(weights, costs), length)
    cost = _cost_of(costs, components, indices)
    shares = np.asarray(weights) / sum(weights)
    biggest = np.asarray([max(c) for c in costs], dtype=np.float64)
    totals = np.cumsum(cost)
    for j in range(len(weights)):
        mine = np.cumsum(np.where(components == j, cost, 0.0))
        # Half a record of j plus each component's half record, as j's share; doubled
        # for the order within ties and rounding.
        bound = biggest[j] + shares[j] * biggest.sum()
        assert np.abs(mine - shares[j] * totals).max() <= bound + 1e-9


@settings(max_examples=100, deadline=None)
@given(mixtures(), st.lists(st.integers(0, 5000), min_size=1, max_size=40))
def test_scalar_vectorized_and_fresh_lookups_agree_in_any_order(mixture, positions):
    weights, costs = mixture
    reference = CostMixingSchedule(weights, costs)
    components, indices = reference.lookup_array(np.arange(max(positions) + 1))
    scalar = CostMixingSchedule(weights, costs)
    assert [scalar.lookup(p) for p in positions] == [
        (int(components[p]), int(indices[p])) for p in positions
    ]
    vector = pickle.loads(pickle.dumps(CostMixingSchedule(weights, costs)))
    got_components, got_indices = vector.lookup_array(np.asarray(positions))
    assert got_components.tolist() == components[positions].tolist()
    assert got_indices.tolist() == indices[positions].tolist()


@settings(max_examples=100, deadline=None)
@given(mixtures())
def test_the_first_epoch_ends_when_the_first_component_runs_out(mixture):
    weights, costs = mixture
    schedule = CostMixingSchedule(weights, costs)
    length = schedule.epoch_length()
    components, _ = _sequence(schedule, length)
    periods = [sum(c) / w for c, w in zip(costs, weights, strict=True)]
    first = int(np.argmin(periods))
    if periods.count(periods[first]) == 1:
        assert np.count_nonzero(components == first) == len(costs[first])
    for j in range(len(weights)):
        assert np.count_nonzero(components == j) <= len(costs[j])


def test_token_shares_on_skewed_lengths_beat_record_shares():
    rng = np.random.default_rng(7)
    costs = [rng.lognormal(np.log(m), 1.0, 4000).round() + 1 for m in (20, 60, 200)]
    weights = [0.5, 0.3, 0.2]
    schedule = CostMixingSchedule(weights, costs)
    components, indices = _sequence(schedule, 3 * schedule.epoch_length())
    cost = _cost_of(costs, components, indices)
    shares = [cost[components == j].sum() / cost.sum() for j in range(3)]
    assert np.allclose(shares, weights, atol=0.005), shares


def test_far_positions_and_chunk_boundaries_are_consistent():
    costs = [[3, 1, 4, 1, 5], [9, 2, 6], [5, 3, 5, 8, 9, 7]]
    schedule = CostMixingSchedule([0.2, 0.5, 0.3], costs)
    start = 10**9
    components, indices = schedule.lookup_array(np.arange(start, start + 500))
    for j in range(3):
        mine = indices[components == j]
        assert np.all(np.diff(mine) == 1)
    # A position's index of component j is how many of j came before it: check
    # the boundary between two chunks against a fresh scalar lookup.
    boundary = schedule.chunk_start(1234567)
    fresh = CostMixingSchedule([0.2, 0.5, 0.3], costs)
    before = [fresh.lookup(p) for p in range(boundary - 5, boundary + 5)]
    c, i = schedule.lookup_array(np.arange(boundary - 5, boundary + 5))
    assert before == list(zip(c.tolist(), i.tolist(), strict=True))


def test_the_same_inputs_give_the_same_sequence():
    costs = [np.arange(1, 50) % 7 + 1, np.arange(1, 80) % 11 + 1]
    a = CostMixingSchedule([1, 2], costs).lookup_array(np.arange(2000))
    b = CostMixingSchedule([1.0, 2.0], [c.astype(float) for c in costs]).lookup_array(
        np.arange(2000)
    )
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize(
    ("weights", "costs", "error", "match"),
    [
        ([1, 1], [[1, 2], [0, 1]], ValueError, r"`costs\[1\]\[0\]` is 0.0: every cost must be"),
        ([1, 1], [[1, -2], [1]], ValueError, r"`costs\[0\]\[1\]` is -2.0"),
        ([1, 1], [[1, np.nan], [1]], ValueError, r"`costs\[0\]\[1\]` is nan"),
        ([1, 1], [[1, 2]], ValueError, r"one entry per component: got 1 entries for 2"),
        ([1], [[]], ValueError, r"`costs\[0\]` must be a non-empty 1-D array"),
        ([1], [[[1, 2]]], ValueError, r"`costs\[0\]` must be a non-empty 1-D array"),
        ([1], [["a"]], TypeError, r"`costs\[0\]` must be an array of numbers"),
        ([1, 0], [[1], [1]], ValueError, r"`weights\[1\]` is 0"),
        ([1, -1], [[1], [1]], ValueError, r"`weights\[1\]` must be finite and >= 0"),
        ([1], 5, TypeError, r"`costs` must be a list"),
    ],
)
def test_bad_input_names_the_problem(weights, costs, error, match):
    with pytest.raises(error, match=match):
        CostMixingSchedule(weights, costs)


def test_bad_positions_are_refused():
    schedule = CostMixingSchedule([1], [[1, 2]])
    with pytest.raises(ValueError, match="`position` must be >= 0"):
        schedule.lookup(-1)
    with pytest.raises(ValueError, match="`positions` must be >= 0"):
        schedule.lookup_array([3, -2])
