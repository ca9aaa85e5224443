"""Properties of the window shuffle math: bijection per window, keys, agreement, statistics."""

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from grain_index import derive_seed
from grain_index._shuffle import MAX_RECORDS
from grain_index._window import SMALL_WINDOW, window_keys, window_shuffle, window_shuffle_array

# Window sizes on both sides of the exact (ranking) / Feistel boundary, with and
# without cycle walking (a * b > size), and lengths that leave partial windows.
CASES = [
    (1, 1),
    (10, 1),
    (10, 3),
    (10, 10),
    (10, 64),
    (130, SMALL_WINDOW),
    (130, SMALL_WINDOW + 1),
    (1000, 128),
    (1000, 999),
    (5003, 700),
]


def shuffled(length, window_size, seed, epoch=0, offsets=None):
    offsets = np.arange(length) if offsets is None else offsets
    return window_shuffle_array(offsets, epoch, length=length, window_size=window_size, seed=seed)


def assert_window_bijection(out, length, window_size):
    assert out.dtype == np.int64
    assert np.array_equal(np.sort(out), np.arange(length)), "not a bijection of the epoch"
    # No position leaves its window.
    size = min(window_size, length)
    assert np.array_equal(out // size, np.arange(length) // size)


@pytest.mark.parametrize(("length", "window_size"), CASES)
def test_each_window_is_shuffled_within_itself(length, window_size):
    for seed, epoch in [(0, 0), (7, 1), (2**64 - 1, 2**64 - 1)]:
        assert_window_bijection(shuffled(length, window_size, seed, epoch), length, window_size)


@settings(max_examples=60, deadline=None)
@given(
    length=st.integers(1, 600),
    window_size=st.integers(1, 700),
    seed=st.integers(0, 2**64 - 1),
    epoch=st.integers(0, 2**64 - 1),
)
def test_bijection_property(length, window_size, seed, epoch):
    assert_window_bijection(shuffled(length, window_size, seed, epoch), length, window_size)


def test_window_keys_are_derive_seed_per_element():
    epochs = np.array([0, 0, 3, 2**64 - 1], dtype=np.uint64)
    windows = np.array([0, 5, 5, 9], dtype=np.uint64)
    keys = window_keys(11, epochs, windows)
    expected = [
        derive_seed(11, "window_shuffle", int(e), int(w))
        for e, w in zip(epochs, windows, strict=True)
    ]
    assert keys.tolist() == expected


@pytest.mark.parametrize(("length", "window_size"), [(300, 16), (3000, 500), (257, 64)])
def test_any_order_and_grouping_of_positions_gives_the_same_values(length, window_size):
    rng = np.random.default_rng(0)
    full = shuffled(length, window_size, seed=3, epoch=2)
    order = rng.permutation(length)
    assert np.array_equal(shuffled(length, window_size, 3, 2, offsets=order), full[order])
    one_by_one = [
        int(shuffled(length, window_size, 3, 2, offsets=np.array([i]))[0]) for i in order[:20]
    ]
    assert one_by_one == full[order[:20]].tolist()
    # Mixed epochs in one call: each element uses its own epoch's order.
    epochs = np.arange(length) % 3
    mixed = window_shuffle_array(
        np.arange(length), epochs, length=length, window_size=window_size, seed=3
    )
    for epoch in range(3):
        mask = epochs == epoch
        assert np.array_equal(mixed[mask], shuffled(length, window_size, 3, epoch)[mask])


@pytest.mark.parametrize(
    ("length", "window_size"), [*CASES, (MAX_RECORDS - 1, 2**40), (MAX_RECORDS - 1, 2**62)]
)
def test_scalar_form_equals_array_form(length, window_size):
    rng = np.random.default_rng(length % 1000 + window_size % 1000)
    offsets = rng.integers(0, length, 200, dtype=np.int64)
    epochs = rng.integers(0, 2**64, 200, dtype=np.uint64)
    array = window_shuffle_array(offsets, epochs, length=length, window_size=window_size, seed=77)
    scalar = [
        window_shuffle(int(o), int(e), length=length, window_size=window_size, seed=77)
        for o, e in zip(offsets, epochs, strict=True)
    ]
    assert array.tolist() == scalar


def test_shapes_and_scalar_epoch_broadcast():
    offsets = np.arange(12).reshape(3, 4)
    out = window_shuffle_array(offsets, 1, length=12, window_size=4, seed=0)
    assert out.shape == (3, 4)
    assert np.array_equal(out.ravel(), shuffled(12, 4, 0, 1))
    assert (
        window_shuffle_array(np.array([], dtype=np.int64), 0, length=5, window_size=2, seed=0).size
        == 0
    )


@pytest.mark.parametrize("window_size", [8, 100])
def test_orders_differ_across_seeds_epochs_and_windows(window_size):
    length = window_size * 4
    base = shuffled(length, window_size, seed=1, epoch=0)
    assert not np.array_equal(base, np.arange(length))
    assert not np.array_equal(base, shuffled(length, window_size, seed=2, epoch=0))
    assert not np.array_equal(base, shuffled(length, window_size, seed=1, epoch=1))
    # Windows of one epoch do not share one relative order.
    relative = {tuple(w - w.min()) for w in base.reshape(4, window_size)}
    assert len(relative) == 4


def test_same_arguments_give_the_same_order():
    assert np.array_equal(shuffled(1000, 77, 5, 3), shuffled(1000, 77, 5, 3))


def test_small_windows_reach_every_order_uniformly():
    # 24 orders of a window of 4, over 4800 windows (epochs): each about 200 times.
    epochs = np.repeat(np.arange(4800), 4)
    out = window_shuffle_array(np.tile(np.arange(4), 4800), epochs, length=4, window_size=4, seed=9)
    counts = {}
    for row in out.reshape(-1, 4).tolist():
        counts[tuple(row)] = counts.get(tuple(row), 0) + 1
    assert set(counts) == set(itertools.permutations(range(4)))
    assert stats.chisquare(list(counts.values())).pvalue > 1e-4


@pytest.mark.parametrize("size", [40, 300])
def test_positions_are_uniform_within_a_window(size):
    # Where position 0 of a window reads, over many windows: uniform on [0, size).
    windows = 20 * size
    out = window_shuffle_array(
        np.zeros(windows, dtype=np.int64), np.arange(windows), length=size, window_size=size, seed=4
    )
    counts = np.bincount(out, minlength=size)
    assert stats.chisquare(counts).pvalue > 1e-4
    # And neighbouring positions are in order about half the time.
    pairs = window_shuffle_array(
        np.tile([0, 1], windows),
        np.repeat(np.arange(windows), 2),
        length=size,
        window_size=size,
        seed=4,
    ).reshape(-1, 2)
    ordered = float(np.mean(pairs[:, 0] < pairs[:, 1]))
    assert abs(ordered - 0.5) < 4 * math.sqrt(0.25 / windows)


def test_largest_lengths_and_epochs():
    length = MAX_RECORDS - 1
    offsets = np.array([0, 1, length - 2, length - 1], dtype=np.int64)
    out = window_shuffle_array(offsets, 2**64 - 1, length=length, window_size=2**40, seed=1)
    last_start = (length // 2**40) * 2**40
    assert (out[:2] < 2**40).all()
    assert (out[2:] >= last_start).all()
    assert (out[2:] < length).all()
    assert len(set(out.tolist())) == 4


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"length": 0}, ValueError, "`length` must be >= 1"),
        ({"length": 1.5}, TypeError, "`length` must be an integer"),
        ({"window_size": 0}, ValueError, "`window_size` must be >= 1"),
        ({"window_size": "4"}, TypeError, "`window_size` must be an integer"),
        ({"seed": -1}, ValueError, "`seed` must be >= 0"),
        ({"rounds": 0}, ValueError, "`rounds` must be >= 1"),
        ({"rounds": 65}, ValueError, "`rounds` must be >= 1 and < 65"),
        ({"offsets": np.array([0, 10])}, ValueError, r"`offsets` must be >= 0 and < length \(10\)"),
        ({"offsets": np.array([-1])}, ValueError, "got -1"),
        ({"offsets": np.array([0.5])}, TypeError, "`offsets` must hold integers"),
        ({"epochs": -1}, ValueError, "`epochs` must be >= 0"),
        ({"epochs": 1.0}, TypeError, "`epochs` must hold integers"),
    ],
)
def test_bad_arguments_name_the_argument(kwargs, error, match):
    arguments = {
        "offsets": np.arange(10),
        "epochs": 0,
        "length": 10,
        "window_size": 4,
        "seed": 0,
        **kwargs,
    }
    offsets, epochs = arguments.pop("offsets"), arguments.pop("epochs")
    with pytest.raises(error, match=match):
        window_shuffle_array(offsets, epochs, **arguments)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"offset": 10}, ValueError, "`offset` must be >= 0 and < 10"),
        ({"offset": 1.0}, TypeError, "`offset` must be an integer"),
        ({"epoch": -1}, ValueError, "`epoch` must be >= 0"),
        ({"window_size": 0}, ValueError, "`window_size` must be >= 1"),
        ({"length": 0}, ValueError, "`length` must be >= 1"),
    ],
)
def test_scalar_bad_arguments(kwargs, error, match):
    arguments = {"offset": 0, "epoch": 0, "length": 10, "window_size": 4, "seed": 0, **kwargs}
    offset, epoch = arguments.pop("offset"), arguments.pop("epoch")
    with pytest.raises(error, match=match):
        window_shuffle(offset, epoch, **arguments)
