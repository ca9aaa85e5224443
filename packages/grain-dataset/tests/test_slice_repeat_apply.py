"""`slice` by a sequence of indices, `repeat(reseed_each_epoch=...)` and `apply`."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grain_dataset import (
    Batch,
    FilterTransform,
    FlatMapTransform,
    IterDataset,
    MapDataset,
    MapTransform,
    ReadOptions,
    TfRandomMap,
)
from grain_dataset._common._transforms import UnsupportedTransformationError

# -- slice by indices -------------------------------------------------------------------------


@given(
    n=st.integers(1, 40),
    data=st.data(),
)
@settings(max_examples=60, deadline=None)
def test_slice_by_indices_reads_those_indices_in_every_epoch(n, data):
    indices = data.draw(st.lists(st.integers(-n, n - 1), max_size=15))
    ds = MapDataset.range(n).map(lambda x: 10 * x).slice(indices)
    wanted = [10 * (i % n) for i in indices]
    assert len(ds) == len(indices)
    assert [ds[i] for i in range(len(ds))] == wanted
    assert list(ds.to_iter_dataset(ReadOptions(num_threads=0))) == wanted
    if indices:
        # Epoch e of the slice reads epoch e of the parent (a shuffle reshuffles it).
        shuffled = MapDataset.range(n).shuffle(seed=3)
        sliced = shuffled.slice(indices)
        for epoch in (0, 1, 5):
            expected = [shuffled[epoch * n + i % n] for i in indices]
            assert [sliced[epoch * len(indices) + k] for k in range(len(indices))] == expected


def test_slice_accepts_numpy_and_tuples():
    ds = MapDataset.range(6)
    assert list(ds.slice(np.array([5, 0]))) == [5, 0]
    assert list(ds.slice((1, 1, 2))) == [1, 1, 2]
    assert list(ds.slice(np.array([], dtype=np.int64))) == []


@pytest.mark.parametrize(
    ("indices", "error", "match"),
    [
        ([0, 6], IndexError, "out of range"),
        ([-7], IndexError, "out of range"),
        ([1.5], TypeError, "integers"),
        ([[0, 1]], TypeError, "flat"),
        ("01", TypeError, "slice"),
        (3, TypeError, "slice"),
        ({0, 1}, TypeError, "slice"),
    ],
)
def test_slice_by_bad_indices_names_the_problem(indices, error, match):
    with pytest.raises(error, match=match):
        MapDataset.range(6).slice(indices)


# -- repeat -----------------------------------------------------------------------------------


def _epochs(ds, n, count):
    values = list(ds)
    return [values[e * n : (e + 1) * n] for e in range(count)]


def test_repeat_reseeds_each_epoch_by_default_and_not_when_asked():
    base = MapDataset.range(20).seed(5).shuffle().random_map(lambda x, rng: (x, rng.random()))
    reseeded = _epochs(base.repeat(3), 20, 3)
    assert reseeded[0] != reseeded[1] != reseeded[2]
    fixed = _epochs(base.repeat(3, reseed_each_epoch=False), 20, 3)
    assert fixed[0] == fixed[1] == fixed[2] == reseeded[0]
    forever = base.repeat(reseed_each_epoch=False)
    assert [forever[100 * 20 + i] for i in range(20)] == reseeded[0]


def test_repeat_reseed_each_epoch_is_keyword_only_and_a_bool():
    with pytest.raises(TypeError):
        MapDataset.range(3).repeat(2, False)
    with pytest.raises(TypeError, match="reseed_each_epoch"):
        MapDataset.range(3).repeat(2, reseed_each_epoch=0)


def test_repeat_without_reseed_restores_exactly_from_any_state():
    ds = MapDataset.range(7).seed(2).shuffle().repeat(3, reseed_each_epoch=False)
    expected = list(ds.to_iter_dataset())
    for k in range(len(expected)):
        it = iter(ds.to_iter_dataset())
        for _ in range(k):
            next(it)
        fresh = iter(ds.to_iter_dataset())
        fresh.set_state(it.get_state())
        assert list(fresh) == expected[k:]


# -- apply ------------------------------------------------------------------------------------


class Double(MapTransform):
    def map(self, x):
        return 2 * x


class Odd(FilterTransform):
    def filter(self, x):
        return x % 2 == 1


class Pair(FlatMapTransform):
    max_fan_out = 2

    def flat_map(self, x):
        return [x, -x]


class Jitter(TfRandomMap):
    def np_random_map(self, x, rng):
        return x + int(rng.integers(0, 1000)) * 1000


@pytest.mark.parametrize("kind", ["map", "iter"])
def test_apply_takes_one_transform_or_a_sequence(kind):
    ds = MapDataset.range(6)
    if kind == "iter":
        ds = ds.to_iter_dataset()
    assert list(ds.apply(Double())) == [0, 2, 4, 6, 8, 10]
    assert list(ds.apply([])) == list(range(6))
    assert list(ds.apply((Pair(),))) == [0, 0, 1, -1, 2, -2, 3, -3, 4, -4, 5, -5]
    applied = ds.apply([Double(), Batch(batch_size=4)])
    assert isinstance(applied, MapDataset if kind == "map" else IterDataset)
    assert [b.tolist() for b in applied] == [[0, 2, 4, 6], [8, 10]]


def test_apply_filter_then_batch_works_on_an_iter_dataset_only():
    it_ds = MapDataset.range(8).to_iter_dataset().apply([Odd(), Batch(batch_size=2)])
    assert [b.tolist() for b in it_ds] == [[1, 3], [5, 7]]
    with pytest.raises(ValueError, match="cannot follow"):
        MapDataset.range(8).apply([Odd(), Batch(batch_size=2)])


def test_a_tf_random_map_runs_as_a_random_map():
    ds = MapDataset.range(50).seed(1)
    values = list(ds.apply(Jitter()))
    assert values == list(ds.random_map(Jitter()))
    assert [v % 1000 for v in values] == list(range(50))
    assert len({v // 1000 for v in values}) > 10
    assert values != list(MapDataset.range(50).seed(2).apply(Jitter()))


@pytest.mark.parametrize("bad", [lambda x: x, None, "map", 3])
def test_apply_of_a_non_transform_is_a_type_error_and_not_implemented_error(bad):
    for ds in (MapDataset.range(3), MapDataset.range(3).to_iter_dataset()):
        with pytest.raises(TypeError, match="not a transform object"):
            ds.apply(bad)
        with pytest.raises(NotImplementedError):
            ds.apply([Double(), bad])
        with pytest.raises(UnsupportedTransformationError):
            ds.apply(bad)
