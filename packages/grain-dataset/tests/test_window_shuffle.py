"""WindowShuffleMapDataset and WindowShuffleIterDataset.

Random orders are checked by their properties: each window is a permutation
of its own elements, the order is the same for the same seed and differs
across seeds, epochs and windows. The IterDataset's state must restore into a
fresh iterator in the middle of any window.
"""

import sys

import numpy as np
import pytest

import grain_dataset  # noqa: F401 - registers the transformations
from grain_dataset import (
    MapDataset,
    ReadOptions,
    assert_equal_output_after_checkpoint,
)
from grain_dataset._map_stages._window_shuffle import (
    WindowShuffleIterDataset,
    WindowShuffleMapDataset,
)

pytestmark = pytest.mark.timeout(60)


def iter_source(n: int):
    return MapDataset.range(n).to_iter_dataset(ReadOptions(num_threads=0))


def windows(values, size):
    return [values[i : i + size] for i in range(0, len(values), size)]


def assert_windowed_permutation(values, expected, size):
    assert len(values) == len(expected)
    for got, want in zip(windows(values, size), windows(expected, size), strict=True):
        assert sorted(got) == sorted(want)


# -- WindowShuffleMapDataset -------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "window_size"), [(100, 10), (103, 10), (50, 1), (20, 64), (300, 128)]
)
def test_map_windows_are_permutations_of_their_indices(n, window_size):
    ds = WindowShuffleMapDataset(MapDataset.range(n), window_size=window_size, seed=3)
    assert len(ds) == n
    epoch0 = [ds[i] for i in range(n)]
    assert_windowed_permutation(epoch0, list(range(n)), window_size)
    assert list(ds) == epoch0
    if window_size > 1:
        assert epoch0 != list(range(n))


def test_map_spec_pipe_example():
    ds = MapDataset.range(1000).pipe(WindowShuffleMapDataset, window_size=128, seed=0).batch(16)
    batches = list(ds)
    assert len(batches) == 63
    flat = np.concatenate(batches).tolist()
    assert_windowed_permutation(flat, list(range(1000)), 128)


def test_map_same_seed_same_order_other_seed_or_epoch_differs():
    def epoch(seed, e=0, n=200):
        ds = WindowShuffleMapDataset(MapDataset.range(n), window_size=50, seed=seed)
        return [ds[e * n + i] for i in range(n)]

    assert epoch(1) == epoch(1)
    assert epoch(1) != epoch(2)
    assert epoch(1, e=1) != epoch(1, e=0)
    # The batched path (iteration, batches) also gives each epoch its own order.
    ds = WindowShuffleMapDataset(MapDataset.range(200), window_size=50, seed=1)
    batched = ds._getitems(np.arange(400))
    assert batched[:200] == epoch(1)
    assert batched[200:] == epoch(1, e=1)
    assert_windowed_permutation(epoch(1, e=1), list(range(200)), 50)
    # The windows of one epoch have different relative orders.
    relative = {tuple(x - min(w) for x in w) for w in windows(epoch(1), 50)}
    assert len(relative) == 4


def test_map_later_epochs_read_the_parents_later_epochs():
    parent = MapDataset.range(60).shuffle(seed=5)
    ds = WindowShuffleMapDataset(parent, window_size=20, seed=1)
    for e in range(3):
        got = [ds[e * 60 + i] for i in range(60)]
        want = [parent[e * 60 + i] for i in range(60)]
        assert_windowed_permutation(got, want, 20)


def test_map_element_path_equals_batched_path():
    ds = WindowShuffleMapDataset(MapDataset.range(500), window_size=70, seed=8)
    indices = np.random.default_rng(0).integers(0, 5 * 500, size=400)
    assert ds._getitems(indices) == [ds[int(i)] for i in indices]


def test_map_seed_from_ds_seed_and_missing_seed():
    a = WindowShuffleMapDataset(MapDataset.range(100).seed(4), window_size=10)
    b = WindowShuffleMapDataset(MapDataset.range(100).seed(4), window_size=10)
    c = WindowShuffleMapDataset(MapDataset.range(100).seed(5), window_size=10)
    assert list(a) == list(b)
    assert list(a) != list(c)
    with pytest.raises(ValueError, match=r"needs a seed: call ds.seed\(seed\)"):
        WindowShuffleMapDataset(MapDataset.range(10), window_size=3)


def test_map_filtered_positions_stay_filtered():
    ds = WindowShuffleMapDataset(
        MapDataset.range(30).filter(lambda x: x % 3 == 0), window_size=7, seed=0
    )
    values = [ds[i] for i in range(30)]
    assert sorted(v for v in values if v is not None) == list(range(0, 30, 3))
    assert sorted(ds) == list(range(0, 30, 3))


def test_map_infinite_empty_and_huge_indices():
    ds = WindowShuffleMapDataset(MapDataset.range(10).repeat(), window_size=4, seed=0)
    assert len(ds) == sys.maxsize
    assert sorted(ds[i] for i in range(8)) == [0, 1, 2, 3, 4, 5, 6, 7]
    empty = WindowShuffleMapDataset(MapDataset.range(0), window_size=4, seed=0)
    assert len(empty) == 0
    assert list(empty) == []
    finite = WindowShuffleMapDataset(MapDataset.range(12), window_size=4, seed=0)
    # An index far past int64: epoch 10**20 // 12, still read within its window.
    index = 10**20 * 12 + 5
    assert finite[index] in {4, 5, 6, 7}
    assert finite[-1] in {8, 9, 10, 11}


def test_map_slicing_and_repr():
    ds = WindowShuffleMapDataset(MapDataset.range(40), window_size=8, seed=0)
    assert list(ds[:8]) == [ds[i] for i in range(8)]
    assert "window_size=8" in repr(ds)


@pytest.mark.parametrize("window_size", [1, 7, 64, 200])
def test_map_checkpoint_conformance(window_size):
    ds = WindowShuffleMapDataset(MapDataset.range(97), window_size=window_size, seed=2)
    assert_equal_output_after_checkpoint(ds.to_iter_dataset(ReadOptions(num_threads=0)))


@pytest.mark.parametrize(
    ("window_size", "error", "match"),
    [
        (0, ValueError, "`window_size` must be >= 1, got 0"),
        (-3, ValueError, "`window_size` must be >= 1"),
        (2.5, TypeError, "`window_size` must be an integer"),
        (True, TypeError, "`window_size` must be an integer"),
        (None, TypeError, "`window_size` must be an integer"),
    ],
)
def test_bad_window_size(window_size, error, match):
    with pytest.raises(error, match=match):
        WindowShuffleMapDataset(MapDataset.range(10), window_size=window_size, seed=0)
    with pytest.raises(error, match=match):
        WindowShuffleIterDataset(iter_source(10), window_size=window_size, seed=0)


def test_map_bad_parent_and_seed():
    with pytest.raises(TypeError, match="use WindowShuffleIterDataset"):
        WindowShuffleMapDataset(iter_source(10), window_size=2, seed=0)
    with pytest.raises(ValueError, match="`seed` must be >= 0"):
        WindowShuffleMapDataset(MapDataset.range(10), window_size=2, seed=-1)
    with pytest.raises(TypeError):
        WindowShuffleMapDataset(MapDataset.range(10), 2, seed=0)  # window_size is keyword-only


# -- WindowShuffleIterDataset ------------------------------------------------------------


@pytest.mark.parametrize(("n", "window_size"), [(100, 10), (25, 10), (10, 1), (7, 20), (130, 65)])
def test_iter_windows_are_permutations_of_consecutive_elements(n, window_size):
    values = list(WindowShuffleIterDataset(iter_source(n), window_size=window_size, seed=42))
    assert_windowed_permutation(values, list(range(n)), window_size)
    if window_size > 1:
        assert values != list(range(n))


def test_iter_same_seed_same_order_other_seed_differs():
    def run(seed):
        return list(WindowShuffleIterDataset(iter_source(200), window_size=50, seed=seed))

    assert run(0) == run(0)
    assert run(0) != run(1)
    relative = {tuple(x - min(w) for x in w) for w in windows(run(0), 50)}
    assert len(relative) == 4


def test_iter_seed_from_ds_seed_map_parent_and_missing_seed():
    seeded = MapDataset.range(50).seed(3).to_iter_dataset()
    a = list(WindowShuffleIterDataset(seeded, window_size=10))
    assert a == list(WindowShuffleIterDataset(seeded, window_size=10))
    # A MapDataset parent is read with to_iter_dataset().
    assert list(WindowShuffleIterDataset(MapDataset.range(50).seed(3), window_size=10)) == a
    with pytest.raises(ValueError, match="needs a seed"):
        WindowShuffleIterDataset(iter_source(10), window_size=3)


def test_iter_state_restores_into_a_fresh_iterator_mid_window():
    ds = WindowShuffleIterDataset(iter_source(40), window_size=10, seed=7)
    it = iter(ds)
    head = [next(it) for _ in range(15)]
    state = it.get_state()
    assert state == {
        "parent_window_start_state": {"next_index": 10},
        "window_index": 1,
        "pos_in_window": 5,
    }
    rest = list(it)
    fresh = iter(ds)
    fresh.set_state(state)
    assert list(fresh) == rest
    assert sorted(head + rest) == list(range(40))


def state(start, window, pos):
    return {
        "parent_window_start_state": {"next_index": start},
        "window_index": window,
        "pos_in_window": pos,
    }


def test_iter_state_names_the_next_window_after_a_window_ends():
    """Grain's values (probed from Grain 0.2.18): a used-up window is left on the next read."""
    ds = WindowShuffleIterDataset(iter_source(25), window_size=10, seed=7)
    it = iter(ds)
    assert it.get_state() == state(0, 0, 0)
    head = [next(it) for _ in range(10)]
    used_up = it.get_state()
    assert used_up == state(0, 1, 10)
    next(it)
    assert it.get_state() == state(10, 1, 1)
    rest = list(it)
    assert len(rest) == 14
    # The last window (5 elements) met the parent's end: the state stays on it.
    assert it.get_state() == state(20, 3, 5)
    with pytest.raises(StopIteration):
        next(it)
    fresh = iter(ds)
    fresh.set_state(used_up)
    reference = list(iter(ds))
    assert reference[:10] == head
    assert list(fresh) == reference[10:]
    # A state of an earlier version: the used-up window already left.
    older = iter(ds)
    older.set_state({"parent": {"next_index": 10}, "window": 1, "emitted": 0})
    assert list(older) == reference[10:]


def test_iter_state_after_a_full_last_window_moves_to_the_parents_end():
    it = iter(WindowShuffleIterDataset(iter_source(20), window_size=10, seed=7))
    assert len(list(it)) == 20
    assert it.get_state() == state(20, 2, 0)  # as Grain: the end was found reading window 2


@pytest.mark.parametrize(("n", "window_size"), [(23, 5), (20, 5), (9, 1), (6, 10), (0, 4)])
def test_iter_checkpoint_conformance(n, window_size):
    ds = WindowShuffleIterDataset(iter_source(n), window_size=window_size, seed=1)
    assert_equal_output_after_checkpoint(ds)


def test_iter_checkpoint_conformance_in_a_pipeline():
    ds = WindowShuffleIterDataset(
        MapDataset.range(60).shuffle(seed=0).to_iter_dataset(ReadOptions(num_threads=2)),
        window_size=8,
        seed=1,
    ).map(lambda x: x * 2)
    assert_equal_output_after_checkpoint(ds, steps=[0, 3, 8, 13, 59, 60])


def test_iter_parent_error_mid_window_keeps_the_elements_already_read():
    def fail_on_13(x):
        if x == 13:
            raise RuntimeError("bad element")
        return x

    it = iter(WindowShuffleIterDataset(iter_source(20).map(fail_on_13), window_size=10, seed=0))
    values = [next(it) for _ in range(10)]
    with pytest.raises(RuntimeError, match="bad element"):
        next(it)
    values += list(it)
    assert sorted(values) == [x for x in range(20) if x != 13]


def test_iter_bad_states():
    ds = WindowShuffleIterDataset(iter_source(25), window_size=10, seed=0)
    it = iter(ds)
    with pytest.raises(ValueError, match=r"must be <= window_size \(10\), got 11"):
        it.set_state(state(0, 1, 11))
    with pytest.raises(ValueError, match="window 0 is used up"):
        it.set_state(state(0, 0, 10))
    with pytest.raises(ValueError, match="expected the keys"):
        it.set_state({"parent_window_start_state": {"next_index": 0}, "window_index": 0})
    with pytest.raises(ValueError, match="must be an integer >= 0"):
        it.set_state(state(0, -1, 0))
    # The last window holds 5 elements: 7 of them cannot have been returned.
    it.set_state(state(20, 2, 7))
    with pytest.raises(ValueError, match="says 7 elements of window 2 were returned"):
        next(it)


def test_iter_repr_and_bad_parent():
    ds = WindowShuffleIterDataset(iter_source(5), window_size=3, seed=0)
    assert repr(ds) == "WindowShuffleIterDataset(window_size=3)"
    with pytest.raises(TypeError, match="`parent` must be an IterDataset"):
        WindowShuffleIterDataset([1, 2, 3], window_size=3, seed=0)
