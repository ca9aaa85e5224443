"""Properties of the index shuffle: bijection, agreement, inverse, statistics, errors."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from grain_index import (
    DEFAULT_ROUNDS,
    MAX_RECORDS,
    index_shuffle,
    index_shuffle_array,
    index_shuffle_function,
    index_unshuffle,
    index_unshuffle_array,
)

PRIMES = [2, 3, 5, 7, 11, 13, 31, 61, 67, 127, 257, 1009, 4099]
POWERS = sorted({p + d for p in (2**k for k in range(1, 13)) for d in (-1, 0, 1)} - {0})
SIZES = sorted({1, 2, 3, 63, 64, 65, 100, 1000, 4096, *PRIMES, *POWERS})

seeds = st.integers(0, 2**64 - 1)


def assert_full_permutation(n: int, seed: int, rounds: int) -> None:
    order = index_shuffle_array(np.arange(n), n - 1, seed, rounds)
    assert np.array_equal(np.sort(order), np.arange(n)), f"not a bijection: n={n} seed={seed}"
    assert np.array_equal(index_unshuffle_array(order, n - 1, seed, rounds), np.arange(n))
    for i in {0, n // 2, n - 1}:
        assert index_shuffle(i, n - 1, seed, rounds) == order[i]
        assert index_unshuffle(int(order[i]), n - 1, seed, rounds) == i


@pytest.mark.parametrize("n", SIZES)
def test_bijection_and_inverse_for_named_sizes(n):
    for seed in (0, 1, 2**64 - 1):
        assert_full_permutation(n, seed, DEFAULT_ROUNDS)


@given(n=st.integers(1, 3000), seed=seeds, rounds=st.integers(1, 12))
@settings(max_examples=150, deadline=None)
def test_bijection_for_any_size_seed_and_rounds(n, seed, rounds):
    assert_full_permutation(n, seed, rounds)


@given(n=st.integers(1, 400), seed=seeds, rounds=st.integers(1, 9))
@settings(max_examples=60, deadline=None)
def test_scalar_equals_vectorized_everywhere(n, seed, rounds):
    scalar = [index_shuffle(i, n - 1, seed, rounds) for i in range(n)]
    assert index_shuffle_array(np.arange(n), n - 1, seed, rounds).tolist() == scalar
    inverse = [index_unshuffle(i, n - 1, seed, rounds) for i in range(n)]
    assert index_unshuffle_array(np.arange(n), n - 1, seed, rounds).tolist() == inverse


@given(n=st.integers(2**20, MAX_RECORDS), seed=seeds, data=st.data())
@settings(max_examples=40, deadline=None)
def test_large_domains_by_sampling(n, seed, data):
    sample = np.array(
        data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=300, unique=True)),
        dtype=np.uint64,
    )
    shuffled = index_shuffle_array(sample, n - 1, seed)
    assert shuffled.dtype == np.uint64
    assert int(shuffled.max()) < n
    assert len(np.unique(shuffled)) == len(sample), "two indices collided"
    assert np.array_equal(index_unshuffle_array(shuffled, n - 1, seed), sample)
    for x, y in list(zip(sample.tolist(), shuffled.tolist(), strict=True))[:5]:
        assert index_shuffle(x, n - 1, seed, DEFAULT_ROUNDS) == y


def test_largest_domain_edges():
    top = MAX_RECORDS - 1
    edges = np.array([0, 1, top - 1, top], dtype=np.uint64)
    out = index_shuffle_array(edges, top, 12345)
    assert [index_shuffle(int(x), top, 12345, DEFAULT_ROUNDS) for x in edges] == out.tolist()
    assert np.array_equal(index_unshuffle_array(out, top, 12345), edges)


def permutation_chi_square(n: int, num_seeds: int, rounds: int, base: int) -> float:
    """p-value that position i -> record j is uniform over seeds.

    The count matrix is a sum of permutation matrices: each cell has covariance
    Pi (x) Pi / (n - 1), not the multinomial Pi (x) Pi / n, so the textbook
    statistic is scaled by (n - 1) / n before comparing to chi2((n - 1)^2).
    """
    counts = np.zeros((n, n))
    positions = np.arange(n)
    for k in range(num_seeds):
        counts[positions, index_shuffle_array(positions, n - 1, base + 7919 * k, rounds)] += 1
    expected = num_seeds / n
    statistic = ((counts - expected) ** 2 / expected).sum() * (n - 1) / n
    return float(stats.chi2.sf(statistic, (n - 1) ** 2))


@pytest.mark.parametrize("n", [2, 3, 5, 7, 10, 33, 64, 65, 66, 100, 131, 257])
def test_position_uniformity_chi_square(n):
    p_value = permutation_chi_square(n, num_seeds=2000, rounds=DEFAULT_ROUNDS, base=1)
    assert p_value > 1e-4, f"positions are not uniform for n={n}: p={p_value:.2e}"


def test_chi_square_detects_a_biased_shuffle():
    # The test above must be able to fail: one round leaves the low half in place.
    assert permutation_chi_square(100, num_seeds=2000, rounds=1, base=1) < 1e-9


@pytest.mark.parametrize("n", [10**6, 2**40 + 3, MAX_RECORDS])
def test_neighbours_are_unrelated(n):
    count = 200_000
    order = index_shuffle_array(np.arange(count, dtype=np.uint64), n - 1, 42).astype(float)
    ascending = float(np.mean(order[1:] > order[:-1]))
    sigma = 0.5 / np.sqrt(count)
    assert abs(ascending - 0.5) < 5 * sigma, f"neighbours ascend {ascending:.4f} of the time"
    steps = np.mod(np.diff(order) / n, 1.0)
    p_value = stats.kstest(steps, "uniform").pvalue
    assert p_value > 1e-4, f"successive differences are not uniform mod n: p={p_value:.2e}"


def test_seeds_and_epochs_give_different_orders():
    n = 1000
    base = index_shuffle_array(np.arange(n), n - 1, 0)
    assert np.array_equal(base, index_shuffle_array(np.arange(n), n - 1, 0))
    orders = {tuple(index_shuffle_array(np.arange(n), n - 1, seed)) for seed in range(50)}
    assert len(orders) == 50
    assert not np.array_equal(base, np.arange(n))


def test_small_domains_reach_every_order():
    orders = {tuple(index_shuffle_array(np.arange(4), 3, seed)) for seed in range(2000)}
    assert len(orders) == 24


def test_array_shapes_and_dtypes():
    grid = np.arange(12, dtype=np.int32).reshape(3, 4)
    out = index_shuffle_array(grid, 11, 5)
    assert out.shape == (3, 4)
    assert out.dtype == np.int64
    assert index_shuffle_array(np.arange(12, dtype=np.uint16), 11, 5).dtype == np.uint64
    assert index_shuffle_array([], 11, 5).size == 0
    assert index_shuffle_array([3, 4], 11, 5).tolist() == out.ravel()[3:5].tolist()


@pytest.mark.parametrize(
    ("call", "error", "names"),
    [
        (lambda: index_shuffle(-1, 10, 0, 4), ValueError, "index"),
        (lambda: index_shuffle(11, 10, 0, 4), ValueError, "index"),
        (lambda: index_shuffle(0, -1, 0, 4), ValueError, "max_index"),
        (lambda: index_shuffle(0, 2**63, 0, 4), ValueError, "max_index"),
        (lambda: index_shuffle(0, 10, -1, 4), ValueError, "seed"),
        (lambda: index_shuffle(0, 10, 2**64, 4), ValueError, "seed"),
        (lambda: index_shuffle(0, 10, 0, 0), ValueError, "rounds"),
        (lambda: index_shuffle(1.5, 10, 0, 4), TypeError, "index"),
        (lambda: index_shuffle(True, 10, 0, 4), TypeError, "index"),
        (lambda: index_shuffle(0, "10", 0, 4), TypeError, "max_index"),
        (lambda: index_unshuffle(11, 10, 0, 4), ValueError, "position"),
        (lambda: index_shuffle_array([0.5], 10, 0), TypeError, "indices"),
        (lambda: index_shuffle_array([11], 10, 0), ValueError, "indices"),
        (lambda: index_shuffle_array([-1], 10, 0), ValueError, "indices"),
        (lambda: index_unshuffle_array([11], 10, 0), ValueError, "positions"),
        (lambda: index_shuffle_array([1], 10, 0, rounds=0), ValueError, "rounds"),
    ],
)
def test_bad_input_names_the_argument(call, error, names):
    with pytest.raises(error, match=f"`{names}`"):
        call()


def test_numpy_integers_are_accepted():
    assert index_shuffle(np.int64(3), np.uint32(10), np.uint64(7), np.int8(4)) == index_shuffle(
        3, 10, 7, 4
    )


@pytest.mark.parametrize("n", [1, 7, 64, 65, 1000, 10**12])
def test_index_shuffle_function_matches_index_shuffle(n):
    shuffle = index_shuffle_function(n - 1, seed=11, rounds=6)
    indices = range(min(n, 300))
    assert [shuffle(i) for i in indices] == [index_shuffle(i, n - 1, 11, 6) for i in indices]


def test_index_shuffle_function_checks_its_arguments_once():
    with pytest.raises(ValueError, match="max_index"):
        index_shuffle_function(-1, seed=0)
    with pytest.raises(TypeError, match="seed"):
        index_shuffle_function(10, seed=1.5)
