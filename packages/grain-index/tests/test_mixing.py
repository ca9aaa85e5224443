"""Mixing math: the spec's example, the prefix property, lookups and mixed epochs."""

import sys
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grain_index import MAX_PERIOD, MixingSchedule, integer_weights


def mix(sources, weights=None):
    schedule = MixingSchedule([1] * len(sources) if weights is None else weights)
    length = schedule.epoch_length([len(s) for s in sources])
    picks = [schedule.lookup(p) for p in range(length)]
    return [sources[c][i % len(sources[c])] for c, i in picks]


def test_spec_example():
    assert mix([range(5), range(7, 10)]) == [0, 7, 1, 8, 2, 9]


def test_weights_become_exact_small_integers():
    assert integer_weights([0.7, 0.3]) == (7, 3)
    assert integer_weights([1, 2]) == (1, 2)
    assert integer_weights([1 / 3, 2 / 3]) == (1, 2)
    assert integer_weights([0.5, 0.25, 0.25]) == (2, 1, 1)
    assert integer_weights([3, 0, 6]) == (1, 0, 2)


def max_prefix_deviation(schedule, length):
    components, _ = schedule.lookup_array(np.arange(length))
    weights = np.asarray(schedule.integer_weights)
    counts = np.zeros(len(weights))
    worst = Fraction(0)
    for prefix, component in enumerate(components.tolist(), start=1):
        counts[component] += 1
        for j, w in enumerate(weights.tolist()):
            worst = max(
                worst, abs(Fraction(int(counts[j])) - Fraction(prefix * w, schedule.period))
            )
    return worst


@given(st.lists(st.integers(0, 40), min_size=1, max_size=7).filter(any))
@settings(max_examples=120, deadline=None)
def test_every_prefix_holds_each_component_within_one_of_its_share(weights):
    schedule = MixingSchedule(weights)
    # Every period ends with exact counts, so two periods cover every prefix.
    assert max_prefix_deviation(schedule, 2 * schedule.period) < 1


def test_prefix_property_for_many_unequal_components():
    # Simultaneous deadlines of many light components break simpler rules
    # (sorting by midpoint deviates by 1.6 here).
    schedule = MixingSchedule([3, 6, 2, 2, 2, 1, 46])
    assert max_prefix_deviation(schedule, schedule.period) < 1


@given(st.lists(st.floats(0.001, 1000), min_size=2, max_size=5), st.integers(0, 10**15))
@settings(max_examples=40, deadline=None)
def test_arbitrary_float_weights_keep_their_share(weights, start):
    schedule = MixingSchedule(weights)
    assert schedule.period <= MAX_PERIOD + len(weights)
    assert all(w > 0 for w in schedule.integer_weights), "a weighted component was dropped"
    components, _ = schedule.lookup_array(np.arange(start, start + schedule.period))
    shares = np.bincount(components, minlength=len(weights)) / schedule.period
    exact = np.asarray(weights) / sum(weights)
    assert np.allclose(shares, exact, atol=len(weights) / MAX_PERIOD + 1e-12)


@given(
    st.lists(st.integers(0, 30), min_size=1, max_size=5).filter(any),
    st.lists(st.integers(0, 10**12), min_size=1, max_size=40),
)
@settings(max_examples=80, deadline=None)
def test_lookup_scalar_vector_inverse_and_count_agree(weights, positions):
    schedule = MixingSchedule(weights)
    components, indices = schedule.lookup_array(np.array(positions))
    for p, c, i in zip(positions, components.tolist(), indices.tolist(), strict=True):
        assert schedule.lookup(p) == (c, i)
        assert schedule.position_of(c, i) == p
        assert schedule.count(c, p + 1) == i + 1
        assert schedule.count(c, p) == i


def test_epoch_length_is_shortest_component_scaled_by_weight():
    schedule = MixingSchedule([0.7, 0.3])
    assert schedule.epoch_length([4708, 60000]) == 4708 * 10 // 7
    assert schedule.epoch_length([sys.maxsize, sys.maxsize]) == sys.maxsize
    assert schedule.epoch_length([100, sys.maxsize]) == 142
    assert MixingSchedule([1, 0]).epoch_length([10, 0]) == 10


def test_later_mixed_epochs_continue_each_component_where_it_stopped():
    # Grain's example: weights 2:1 over two components of 3. The first mixed
    # epoch reads 3 of the first and 1 of the second; the next ones go on with
    # the second's records 1 and 2 rather than reading its record 0 again.
    schedule = MixingSchedule([2, 1])
    lengths = [3, 3]
    assert schedule.epoch_length(lengths) == 4
    picks = [schedule.lookup(p) for p in range(12)]
    assert [(c, i % lengths[c]) for c, i in picks[:9]] == [
        (0, 0), (0, 1), (1, 0), (0, 2), (0, 0), (1, 1), (0, 1), (0, 2), (1, 2)
    ]  # fmt: skip
    assert [i for c, i in picks if c == 1] == [0, 1, 2, 3]


@given(
    st.lists(st.integers(1, 9), min_size=1, max_size=4),
    st.lists(st.integers(1, 20), min_size=4, max_size=4),
    st.integers(1, 5),
)
@settings(max_examples=80, deadline=None)
def test_each_component_is_read_in_order_without_gaps_over_k_mixed_epochs(weights, lengths, k):
    lengths = lengths[: len(weights)]
    schedule = MixingSchedule(weights)
    end = k * schedule.epoch_length(lengths)
    components, indices = schedule.lookup_array(np.arange(end))
    for c in range(len(weights)):
        reads = indices[components == c]
        assert reads.tolist() == list(range(len(reads))), "a component skipped or re-read one"
        assert abs(len(reads) - end * schedule.integer_weights[c] / schedule.period) < 1


def test_infinite_component_continues_across_mixed_epochs():
    schedule = MixingSchedule([1, 1])
    picks = [schedule.lookup(p) for p in range(2 * schedule.epoch_length([2, sys.maxsize]))]
    assert [i for c, i in picks if c == 1] == [0, 1, 2, 3]
    assert [i for c, i in picks if c == 0] == [0, 1, 2, 3]


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: MixingSchedule([]), ValueError, "`weights` must not be empty"),
        (lambda: MixingSchedule([1, -1]), ValueError, r"`weights\[1\]`"),
        (lambda: MixingSchedule([0, 0]), ValueError, "all zero"),
        (lambda: MixingSchedule([1, float("nan")]), ValueError, r"`weights\[1\]`"),
        (lambda: MixingSchedule([1, float("inf")]), ValueError, r"`weights\[1\]`"),
        (lambda: MixingSchedule(["a"]), TypeError, r"`weights\[0\]`"),
        (lambda: MixingSchedule(3), TypeError, "`weights`"),
        (lambda: MixingSchedule([1, 1]).epoch_length([3]), ValueError, "`lengths`"),
        (lambda: MixingSchedule([1, 1]).epoch_length([3, -1]), ValueError, r"`lengths\[1\]`"),
        (lambda: MixingSchedule([1, 1]).lookup(-1), ValueError, "`position`"),
        (lambda: MixingSchedule([1, 1]).lookup_array([-1]), ValueError, "`positions`"),
        (lambda: MixingSchedule([1, 0]).position_of(1, 0), ValueError, "weight 0"),
        (lambda: MixingSchedule([1, 0]).count(2, 0), ValueError, "`component`"),
    ],
)
def test_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()
