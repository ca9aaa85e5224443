"""MapDataset: its factories, indexing, iteration and every transformation method.

Properties, not hard-coded orders, wherever randomness is involved: a shuffle
is checked as a permutation per epoch that changes with the epoch and the seed,
a random map as a function of (seed, index) alone. One property compares, for
random pipelines, the element-at-a-time path (``ds[i]``) with the batched path
that iteration and batching use.
"""

import pickle
import sys
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grain_dataset import (
    DatasetIterator,
    DatasetSelectionMap,
    FilterTransform,
    FlatMapMapDataset,
    FlatMapTransform,
    IterDataset,
    MapDataset,
    MapTransform,
    MapWithIndex,
    RandomMapTransform,
    ReadOptions,
)

seeds = st.integers(0, 2**32 - 1)


class Twice(FlatMapTransform):
    max_fan_out = 2

    def flat_map(self, element):
        return [element, element]


# -- helpers ------------------------------------------------------------------------------


def assert_same(actual, expected):
    """Equality of nested containers whose leaves may be numpy arrays (dtype kind too)."""
    if isinstance(expected, np.ndarray):
        assert isinstance(actual, np.ndarray), f"{actual!r} is not an array"
        assert actual.dtype.kind == expected.dtype.kind, (actual.dtype, expected.dtype)
        np.testing.assert_array_equal(actual, expected)
    elif isinstance(expected, dict):
        assert type(actual) is type(expected)
        assert actual.keys() == expected.keys()
        for key in expected:
            assert_same(actual[key], expected[key])
    elif isinstance(expected, list | tuple):
        assert type(actual) is type(expected), (type(actual), type(expected))
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected, strict=True):
            assert_same(a, e)
    else:
        assert actual == expected


def epoch(ds, e):
    """Epoch `e` of `ds`, read one index at a time (None included)."""
    n = len(ds)
    return [ds[i] for i in range(e * n, (e + 1) * n)]


# Module-level transforms and functions: pickling needs them importable by name.


def add_one(x):
    return x + 1


def twice_plus_one(x):
    return 2 * x + 1


def not_multiple_of_3(x):
    return x % 3 != 0


def add_noise(x, rng):
    return x + 1000 * int(rng.integers(1000))


def seven_x_plus_index(i, x):
    return 7 * x + i


def draw(x, rng):
    return int(rng.integers(2**62))


class AddOne(MapTransform):
    def map(self, element):
        return element + 1


class KeepOdd(FilterTransform):
    def filter(self, element):
        return element % 2 == 1


class AddNoise(RandomMapTransform):
    def random_map(self, element, rng):
        return element + 1000 * int(rng.integers(1000))


class PairWithIndex(MapWithIndex):
    def map_with_index(self, index, element):
        return (index, element)


class Alternate(DatasetSelectionMap):
    """Even positions read dataset 0, odd ones dataset 1, each in order."""

    def __init__(self, length):
        self._length = length

    def __len__(self):
        return self._length

    def __getitem__(self, index):
        return index % 2, index // 2


class CountingSource:
    """A source that declares batched reads and records how it was read."""

    batched_reads = True

    def __init__(self, n):
        self._n = n
        self.single = []
        self.batched = []

    def __len__(self):
        return self._n

    def __getitem__(self, index):
        self.single.append(index)
        return 10 * index

    def __getitems__(self, indices):
        self.batched.append(list(indices))
        return [10 * i for i in indices]


class Squares(MapDataset):
    """A user-written MapDataset, as the MapDataset docstring shows one."""

    def __init__(self, n):
        super().__init__()
        self._n = n

    def __len__(self):
        return self._n

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self.slice(index)
        return (index % self._n) ** 2


# -- source and range ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "seq",
    [list("abcde"), ("x", "y", "z"), range(3, 40, 7), np.arange(6) * 2, "hello"],
    ids=["list", "tuple", "range", "ndarray", "str"],
)
def test_source_reads_record_i_mod_len(seq):
    ds = MapDataset.source(seq)
    n = len(seq)
    assert len(ds) == n
    assert [ds[i] for i in range(4 * n + 1)] == [seq[i % n] for i in range(4 * n + 1)]
    assert list(ds) == list(seq)


def test_source_spec_example():
    assert list(MapDataset.source([1, 2, 3, 4, 5])) == [1, 2, 3, 4, 5]


def test_batch_over_a_source_with_getitems_reads_through_it():
    source = CountingSource(20)
    ds = MapDataset.source(source).batch(8)
    assert_same(ds[1], np.arange(8, 16) * 10)
    assert_same(list(ds)[2], np.arange(16, 20) * 10)
    assert source.single == [], "records were read one __getitem__ at a time"
    assert [8, 9, 10, 11, 12, 13, 14, 15] in source.batched
    # One read of 8 indices for a batch, never 8 reads of 1.
    assert all(len(call) > 1 for call in source.batched)


def test_getitems_survives_a_pipeline_in_front_of_the_batch():
    source = CountingSource(30)
    ds = (
        MapDataset.source(source)
        .seed(4)
        .shuffle()
        .map(add_one)
        .slice(slice(0, 24))
        .batch(8, batch_fn=list)
        .filter(lambda batch: len(batch) == 8)
    )
    first = ds[0]
    assert source.single == []
    assert len(source.batched) == 1, "one batch was not one read"
    records = source.batched[0]
    assert len(set(records)) == 8
    assert first == [10 * i + 1 for i in records]


@given(
    start=st.integers(-30, 30),
    stop=st.integers(-30, 30),
    step=st.integers(-7, 7).filter(bool),
)
@settings(max_examples=80, deadline=None)
def test_range_equals_builtin_range(start, stop, step):
    ds = MapDataset.range(start, stop, step)
    expected = list(range(start, stop, step))
    assert len(ds) == len(expected)
    assert list(ds) == expected
    assert [ds[i] for i in range(len(ds))] == expected


@given(
    start=st.integers(-(2**70), 2**70),
    step=st.integers(-(2**66), 2**66).filter(bool),
    count=st.integers(0, 30),
    extra=st.integers(0, 2**10),
)
@settings(max_examples=40, deadline=None)
def test_range_of_huge_integers_equals_builtin_range(start, step, count, extra):
    stop = start + count * step + (extra if step > 0 else -extra) % abs(step)
    expected = list(range(start, stop, step))
    ds = MapDataset.range(start, stop, step)
    assert list(ds) == expected
    assert [ds[i] for i in range(len(ds))] == expected


def test_range_with_one_and_two_arguments():
    assert list(MapDataset.range(5)) == [0, 1, 2, 3, 4]
    assert list(MapDataset.range(2, 6)) == [2, 3, 4, 5]
    assert list(MapDataset.range(6, 2)) == []
    assert list(MapDataset.range(0)) == []
    assert list(MapDataset.range(start=1, stop=9, step=3)) == [1, 4, 7]


def test_range_later_epochs_repeat_the_range():
    ds = MapDataset.range(3, 20, 4)
    r = range(3, 20, 4)
    assert [ds[len(r) * e + i] for e in (1, 5, 10**12) for i in range(len(r))] == list(r) * 3


# -- indexing -----------------------------------------------------------------------------

DETERMINISTIC = {
    "range": lambda: MapDataset.range(7),
    "source": lambda: MapDataset.source(list("abcdefg")),
    "map": lambda: MapDataset.range(7).map(twice_plus_one),
    "map_with_index": lambda: MapDataset.range(7).map_with_index(lambda i, x: x),
    "filter": lambda: MapDataset.range(7).filter(not_multiple_of_3),
    "slice": lambda: MapDataset.range(20)[3:17:2],
    "reverse": lambda: MapDataset.range(7)[::-1],
    "repeat": lambda: MapDataset.range(7).repeat(3),
    "concatenate": lambda: MapDataset.concatenate([MapDataset.range(3), MapDataset.range(4)]),
    "mix": lambda: MapDataset.mix([MapDataset.range(4), MapDataset.range(10, 14)]),
    "batch": lambda: MapDataset.range(7).batch(3, batch_fn=tuple),
    "seed": lambda: MapDataset.range(7).seed(3),
    "user subclass": lambda: Squares(7),
}


@pytest.mark.parametrize("make", DETERMINISTIC.values(), ids=DETERMINISTIC.keys())
def test_deterministic_dataset_reads_the_same_in_every_epoch(make):
    ds = make()
    n = len(ds)
    first = epoch(ds, 0)
    for e in (1, 2, 1000):
        assert epoch(ds, e) == first
    assert ds[10**15 * n + 2] == first[2]


@pytest.mark.parametrize("make", DETERMINISTIC.values(), ids=DETERMINISTIC.keys())
def test_negative_index_counts_back_from_the_end_of_epoch_0(make):
    ds = make()
    n = len(ds)
    assert [ds[-k] for k in range(1, n + 1)] == [ds[n - k] for k in range(1, n + 1)]


def test_negative_index_of_a_shuffle_reads_epoch_0_not_the_last_epoch():
    ds = MapDataset.range(30).seed(1).shuffle()
    assert [ds[i - 30] for i in range(30)] == epoch(ds, 0)
    assert epoch(ds, 0) != epoch(ds, 1)


@pytest.mark.parametrize("index", [-8, -9, -1000, -(2**70)])
def test_index_below_minus_len_wraps_around_the_first_epoch_as_in_grain(index):
    assert MapDataset.range(7)[index] == index % 7
    shuffled = MapDataset.range(7).seed(0).shuffle()
    assert shuffled[index] == shuffled[index % 7]
    with pytest.raises(IndexError):
        MapDataset.range(0)[index]


@pytest.mark.parametrize("index", [1.0, 0.0, "0", None, [0], np.float64(1.0), 1j])
def test_non_integer_index_raises_type_error(index):
    with pytest.raises(TypeError, match="index"):
        MapDataset.range(7).map(add_one)[index]


def test_numpy_integer_index_is_accepted():
    ds = MapDataset.range(7).map(add_one)
    assert ds[np.int64(3)] == 4
    assert ds[np.uint8(9)] == 3
    assert ds[np.int32(-1)] == 7


FAR_INDEX_STAGES = {
    "shuffle": lambda ds: ds.shuffle(seed=0),
    "map": lambda ds: ds.map(add_one),
    "random_map": lambda ds: ds.random_map(add_noise, seed=1),
    "slice": lambda ds: ds[1::2],
    "concatenate": lambda ds: MapDataset.concatenate([ds, ds]),
    "mix": lambda ds: MapDataset.mix([ds, ds], [1, 2]),
    "batch": lambda ds: ds.batch(2, batch_fn=list),
    "repeat": lambda ds: ds.repeat(3),
}


@pytest.mark.parametrize("stage", FAR_INDEX_STAGES.values(), ids=FAR_INDEX_STAGES.keys())
def test_index_far_past_the_end_never_raises(stage):
    # Indices are Python ints: past int64 they still name a (very late) epoch.
    ds = stage(MapDataset.range(7))
    for index in (len(ds), 10**6, 2**62, 2**63 + 5, 2**64 - 1):
        assert ds[index] is not None


EMPTY = {
    "range": lambda: MapDataset.range(0),
    "reversed range": lambda: MapDataset.range(3, 3, -1),
    "source": lambda: MapDataset.source([]),
    "slice": lambda: MapDataset.range(5)[5:],
    "concatenate": lambda: MapDataset.concatenate([MapDataset.range(0), MapDataset.range(0)]),
    "batch drop_remainder": lambda: MapDataset.range(3).batch(4, drop_remainder=True),
    "shuffle": lambda: MapDataset.range(0).shuffle(seed=1),
    "map": lambda: MapDataset.source([]).map(add_one),
}


@pytest.mark.parametrize("make", EMPTY.values(), ids=EMPTY.keys())
def test_empty_dataset(make):
    ds = make()
    assert len(ds) == 0
    assert list(ds) == []
    for index in (0, 1, -1, 100):
        with pytest.raises(IndexError):
            ds[index]


@given(
    n=st.integers(0, 25),
    start=st.none() | st.integers(-30, 30),
    stop=st.none() | st.integers(-30, 30),
    step=st.none() | st.integers(-6, 6).filter(bool),
)
@settings(max_examples=80, deadline=None)
def test_subscript_slice_is_the_slice_method_and_python_slicing(n, start, stop, step):
    ds = MapDataset.source([f"r{i}" for i in range(n)])
    sl = slice(start, stop, step)
    sliced = ds[sl]
    assert isinstance(sliced, MapDataset)
    expected = [f"r{i}" for i in range(n)][sl]
    assert len(sliced) == len(expected) == len(ds.slice(sl))
    assert list(sliced) == list(ds.slice(sl)) == expected
    assert [sliced[i] for i in range(len(sliced))] == expected


def test_slice_of_a_slice():
    ds = MapDataset.range(50)[5:45:3][::-2][1:]
    assert list(ds) == list(range(50))[5:45:3][::-2][1:]


def test_slice_spec_examples():
    ds = MapDataset.range(5)
    assert list(ds.slice(slice(1, 3))) == [1, 2]
    assert list(ds.slice(slice(1, None, 2))) == [1, 3]
    assert list(MapDataset.range(20).slice(slice(1, 10, 2))) == list(MapDataset.range(20)[1:10:2])


# -- iteration ----------------------------------------------------------------------------


def test_iter_returns_a_dataset_iterator():
    ds = MapDataset.range(4).map(add_one)
    iterator = iter(ds)
    assert isinstance(iterator, DatasetIterator)
    assert [next(iterator) for _ in range(4)] == [1, 2, 3, 4]
    with pytest.raises(StopIteration):
        next(iterator)


@given(n=st.integers(0, 3000), seed=seeds)
@settings(max_examples=15, deadline=None)
def test_iteration_is_the_non_none_elements_of_epoch_0_in_order(n, seed):
    ds = MapDataset.range(n).seed(seed).shuffle().filter(not_multiple_of_3).map(add_one)
    expected = [x for x in epoch(ds, 0) if x is not None]

    def iterate(ds):
        if n and not expected:  # [0] alone: an epoch that drops everything warns
            with pytest.warns(UserWarning, match="dropped 1 of 1"):
                return list(ds)
        return list(ds)

    assert iterate(ds) == expected
    assert iterate(ds) == expected, "a second iteration differs"
    assert iterate(ds.to_iter_dataset(ReadOptions(num_threads=0))) == expected
    assert list(ds.to_iter_dataset(allow_nones=True)) == epoch(ds, 0)


def test_user_written_map_dataset():
    assert list(Squares(4).map(lambda x: x + 1)) == [1, 2, 5, 10]
    assert list(Squares(6)[::2]) == [0, 4, 16]
    assert list(Squares(5).batch(2, batch_fn=list)) == [[0, 1], [4, 9], [16]]
    assert Squares(3).seed(1).shuffle()[0] in {0, 1, 4}


def test_pipe_calls_the_function_with_the_dataset_first():
    ds = MapDataset.range(10)

    def take(dataset, count, *, step=1):
        return dataset[:count:step]

    assert list(ds.pipe(take, 6, step=2)) == [0, 2, 4]


# -- vectorized path equals element-at-a-time path ----------------------------------------


@st.composite
def pipelines(draw_from):
    """A random finite, non-empty pipeline over int elements, built from every stage."""
    ds = MapDataset.range(draw_from(st.integers(1, 30)))
    filtered = False  # a MapDataset cannot batch after a filter
    for op in draw_from(st.lists(st.sampled_from(PIPELINE_OPS), max_size=6)):
        n = len(ds)
        if op == "map":
            ds = ds.map(twice_plus_one)
        elif op == "filter":
            ds = ds.filter(not_multiple_of_3)
            filtered = True
        elif op == "shuffle":
            ds = ds.shuffle(seed=draw_from(seeds))
        elif op == "random_map":
            ds = ds.random_map(add_noise, seed=draw_from(seeds))
        elif op == "map_with_index":
            ds = ds.map_with_index(seven_x_plus_index)
        elif op == "slice":
            sl = slice(
                draw_from(st.none() | st.integers(-n - 2, n + 2)),
                draw_from(st.none() | st.integers(-n - 2, n + 2)),
                draw_from(st.none() | st.integers(-4, 4).filter(bool)),
            )
            if len(range(n)[sl]):
                ds = ds[sl]
        elif op == "slice_indices" and n <= 60:
            indices = draw_from(st.lists(st.integers(-n, n - 1), min_size=1, max_size=12))
            ds = ds.slice(indices)
        elif op == "repeat" and n <= 60:
            ds = ds.repeat(draw_from(st.integers(1, 3)), reseed_each_epoch=draw_from(st.booleans()))
        elif op == "batch" and not filtered:
            size = draw_from(st.integers(1, 5))
            drop = draw_from(st.booleans()) and n >= size
            ds = ds.batch(size, drop_remainder=drop, batch_fn=sum)
        elif op == "concatenate":
            other = MapDataset.range(500, 500 + draw_from(st.integers(0, 9))).map(add_one)
            parts = [ds, other] if draw_from(st.booleans()) else [other, ds]
            ds = MapDataset.concatenate(parts)
        elif op == "mix":
            other = MapDataset.range(900, 900 + draw_from(st.integers(1, 9)))
            weights = draw_from(st.lists(st.integers(1, 4), min_size=2, max_size=2))
            ds = MapDataset.mix([ds, other], weights)
            if not len(ds):  # the mix needs more elements than `ds` has for its weight
                ds = other
    return ds


PIPELINE_OPS = [
    "map",
    "filter",
    "shuffle",
    "random_map",
    "map_with_index",
    "slice",
    "slice_indices",
    "repeat",
    "batch",
    "concatenate",
    "mix",
]


@given(
    ds=pipelines(),
    read_options=st.sampled_from(
        [ReadOptions(num_threads=0), ReadOptions(num_threads=3, prefetch_buffer_size=7)]
    ),
)
@settings(max_examples=120, deadline=None)
def test_batched_reads_equal_single_reads_for_any_pipeline(ds, read_options):
    n = len(ds)
    assert n > 0
    single = epoch(ds, 0)
    assert [ds[i] for i in reversed(range(n))][::-1] == single, "read order changed elements"
    assert list(ds.to_iter_dataset(read_options, allow_nones=True)) == single
    later = [ds[n + i] for i in range(min(n, 40))]
    batched_later = ds.repeat(2)[n : n + 40].to_iter_dataset(read_options, allow_nones=True)
    assert list(batched_later) == later


# -- shuffle ------------------------------------------------------------------------------


@given(n=st.integers(1, 300), seed=seeds, e=st.integers(0, 10**9))
@settings(max_examples=60, deadline=None)
def test_every_shuffled_epoch_is_a_permutation(n, seed, e):
    ds = MapDataset.range(n).shuffle(seed=seed)
    assert sorted(epoch(ds, 0)) == list(range(n))
    assert sorted(epoch(ds, e)) == list(range(n))


@given(n=st.integers(1, 200), seed=seeds)
@settings(max_examples=30, deadline=None)
def test_shuffle_is_the_same_for_the_same_seed(n, seed):
    assert list(MapDataset.range(n).shuffle(seed=seed)) == list(
        MapDataset.range(n).shuffle(seed=seed)
    )
    rebuilt = [MapDataset.range(n).seed(seed).shuffle() for _ in range(2)]
    assert epoch(rebuilt[0], 3) == epoch(rebuilt[1], 3)


@given(n=st.integers(20, 300), seed=seeds)
@settings(max_examples=40, deadline=None)
def test_shuffle_changes_with_the_epoch(n, seed):
    ds = MapDataset.range(n).shuffle(seed=seed)
    orders = [epoch(ds, e) for e in (0, 1, 2, 10**6)]
    assert orders[0] != list(range(n))
    for i, a in enumerate(orders):
        for b in orders[i + 1 :]:
            assert a != b


@given(n=st.integers(20, 300), seeds=st.lists(seeds, min_size=2, max_size=2, unique=True))
@settings(max_examples=40, deadline=None)
def test_shuffle_changes_with_the_seed(n, seeds):
    a, b = (MapDataset.range(n).shuffle(seed=s) for s in seeds)
    assert epoch(a, 0) != epoch(b, 0)
    a, b = (MapDataset.range(n).seed(s).shuffle() for s in seeds)
    assert epoch(a, 0) != epoch(b, 0)


@given(n=st.integers(2000, 5000), seed=seeds, e=st.integers(0, 100))
@settings(max_examples=15, deadline=None)
def test_shuffle_is_global_not_windowed(n, seed, e):
    # Each quarter of the output draws about a quarter of its elements from
    # each quarter of the input; a windowed shuffle keeps them near the diagonal.
    order = np.asarray(epoch(MapDataset.range(n).shuffle(seed=seed), e))
    quarter = n // 4
    counts = np.zeros((4, 4), dtype=int)
    for out_q in range(4):
        values = order[out_q * quarter : (out_q + 1) * quarter]
        counts[out_q] = np.bincount(np.minimum(values // quarter, 3), minlength=4)
    share = counts / quarter
    assert share.min() > 0.15, share
    assert share.max() < 0.35, share


def test_shuffle_spec_example():
    ds = MapDataset.range(5).shuffle(seed=0)
    assert set(ds) == {0, 1, 2, 3, 4}


def test_shuffle_passes_later_epochs_to_the_parent():
    # A random map before the shuffle draws new numbers in later epochs.
    ds = MapDataset.range(50).random_map(draw, seed=3).shuffle(seed=4)
    assert sorted(epoch(ds, 0)) != sorted(epoch(ds, 1))
    assert set(epoch(ds, 0)) == set(epoch(MapDataset.range(50).random_map(draw, seed=3), 0))


def test_shuffle_of_a_filtered_dataset_moves_the_none_positions():
    base = MapDataset.range(60).filter(not_multiple_of_3)
    ds = base.shuffle(seed=9)
    assert sum(x is None for x in epoch(ds, 0)) == 20
    assert sorted(x for x in ds) == sorted(x for x in base)


# -- repeat -------------------------------------------------------------------------------


def test_repeat_spec_examples():
    assert list(MapDataset.range(5).repeat(2)) == [0, 1, 2, 3, 4, 0, 1, 2, 3, 4]
    ds = MapDataset.range(5).repeat()
    assert len(ds) == sys.maxsize
    assert ds[11111] == 1


@pytest.mark.parametrize("num_epochs", [1, 2, 7])
def test_repeat_multiplies_the_length_and_only_the_length(num_epochs):
    base = MapDataset.source(list("abcd")).map(str.upper)
    ds = base.repeat(num_epochs)
    assert len(ds) == 4 * num_epochs
    assert list(ds) == list("ABCD") * num_epochs
    assert [ds[i] for i in range(50)] == [base[i] for i in range(50)]


def test_infinite_repeat_reads_any_index():
    base = MapDataset.source(list("abcdefg")).map(str.upper)
    ds = base.repeat()
    for index in (11111, 10**15 + 3, sys.maxsize - 1):
        assert ds[index] == base[index % 7]
    assert ds[-1] == base[(sys.maxsize - 1) % 7]


@given(n=st.integers(10, 100), seed=seeds)
@settings(max_examples=30, deadline=None)
def test_shuffle_then_repeat_reshuffles_each_epoch(n, seed):
    shuffled = MapDataset.range(n).shuffle(seed=seed)
    values = list(shuffled.repeat(2))
    first, second = values[:n], values[n:]
    assert sorted(first) == sorted(second) == list(range(n))
    assert first != second
    assert first == epoch(shuffled, 0)
    assert second == epoch(shuffled, 1)


# -- slicing across epochs ----------------------------------------------------------------


def test_sliced_shuffle_reads_later_epochs_of_its_parent():
    ds = MapDataset.range(20).seed(0).shuffle()[0::2]
    first, second = epoch(ds, 0), epoch(ds, 1)
    assert first != second
    assert set(second) <= set(range(20))
    assert len(set(second)) == 10


@given(
    n=st.integers(1, 60),
    seed=seeds,
    start=st.none() | st.integers(-70, 70),
    stop=st.none() | st.integers(-70, 70),
    step=st.none() | st.integers(-5, 5).filter(bool),
)
@settings(max_examples=60, deadline=None)
def test_epoch_e_of_a_slice_is_the_slice_of_epoch_e(n, seed, start, stop, step):
    parent = MapDataset.range(n).shuffle(seed=seed)
    sl = slice(start, stop, step)
    ds = parent[sl]
    for e in (0, 1, 7):
        assert epoch(ds, e) == epoch(parent, e)[sl]


# -- concatenate --------------------------------------------------------------------------


def test_concatenate_spec_example():
    ds = MapDataset.concatenate([MapDataset.range(3), MapDataset.range(3, 8)])
    assert list(ds) == [0, 1, 2, 3, 4, 5, 6, 7]
    assert len(ds) == 8


@given(lengths=st.lists(st.integers(0, 12), min_size=1, max_size=5))
@settings(max_examples=60, deadline=None)
def test_concatenate_values_and_length(lengths):
    parts = [MapDataset.range(100 * j, 100 * j + n) for j, n in enumerate(lengths)]
    ds = MapDataset.concatenate(parts)
    expected = [x for j, n in enumerate(lengths) for x in range(100 * j, 100 * j + n)]
    assert len(ds) == sum(lengths)
    assert list(ds) == expected
    assert [ds[i] for i in range(len(ds))] == expected


@given(lengths=st.lists(st.integers(0, 12), min_size=1, max_size=4), data=st.data())
@settings(max_examples=50, deadline=None)
def test_epoch_n_of_a_concatenation_is_epoch_n_of_each_component(lengths, data):
    if not sum(lengths):
        return
    parts = [
        MapDataset.range(100 * j, 100 * j + n).shuffle(seed=data.draw(seeds))
        for j, n in enumerate(lengths)
    ]
    ds = MapDataset.concatenate(parts)
    for e in (0, 1, 2, 10**6):
        expected = [x for part in parts if len(part) for x in epoch(part, e)]
        assert epoch(ds, e) == expected


def test_concatenate_may_end_with_an_infinite_dataset():
    ds = MapDataset.concatenate([MapDataset.range(3), MapDataset.range(10, 15).repeat()])
    assert len(ds) == sys.maxsize
    assert [ds[i] for i in range(10)] == [0, 1, 2, 10, 11, 12, 13, 14, 10, 11]
    assert ds[10**15] == 10 + (10**15 - 3) % 5


def test_concatenate_of_one_dataset_is_that_dataset():
    part = MapDataset.range(9).shuffle(seed=5)
    ds = MapDataset.concatenate([part])
    assert epoch(ds, 0) == epoch(part, 0)
    assert epoch(ds, 3) == epoch(part, 3)


# -- mix ----------------------------------------------------------------------------------


def test_mix_spec_example():
    assert list(MapDataset.mix([MapDataset.range(5), MapDataset.range(7, 10)])) == [
        0,
        7,
        1,
        8,
        2,
        9,
    ]


@given(
    lengths=st.lists(st.integers(1, 25), min_size=1, max_size=4),
    data=st.data(),
)
@settings(max_examples=80, deadline=None)
def test_mix_length_and_in_order_reads(lengths, data):
    weights = data.draw(st.lists(st.integers(1, 6), min_size=len(lengths), max_size=len(lengths)))
    parts = [MapDataset.range(1000 * j, 1000 * j + n) for j, n in enumerate(lengths)]
    ds = MapDataset.mix(parts, weights)
    total = sum(weights)
    expected_length = min(
        int(Fraction(n * total, w)) for n, w in zip(lengths, weights, strict=True) if w
    )
    assert len(ds) == expected_length
    values = [ds[i] for i in range(len(ds))]
    assert list(ds) == values
    for j, n in enumerate(lengths):
        mine = [x - 1000 * j for x in values if 1000 * j <= x < 1000 * (j + 1)]
        assert mine == list(range(len(mine))), "a component was not read in order"
        assert len(mine) <= n


@given(
    weights=st.sampled_from([(0.7, 0.3), (0.5, 0.5), (1, 2), (0.25, 0.75), (3, 1, 1)]),
    length=st.integers(1, 5000),
)
@settings(max_examples=40, deadline=None)
def test_mix_proportions_stay_within_one_element_of_the_share(weights, length):
    parts = [MapDataset.source([j]).repeat() for j in range(len(weights))]
    ds = MapDataset.mix(parts, list(weights))
    assert len(ds) == sys.maxsize
    prefix = [ds[i] for i in range(length)]
    assert list(ds[:length]) == prefix
    shares = [Fraction(w).limit_denominator(1000) for w in weights]
    for j, share in enumerate(shares):
        exact = length * share / sum(shares)
        assert abs(prefix.count(j) - exact) <= 1, (j, prefix.count(j), float(exact))


def test_mix_of_seven_tenths_and_three_tenths():
    parts = [MapDataset.source(["a"]).repeat(), MapDataset.source(["b"]).repeat()]
    ds = MapDataset.mix(parts, [0.7, 0.3])
    values = [ds[i] for i in range(10_000)]
    for length in range(1, 10_001, 37):
        assert abs(values[:length].count("a") - 0.7 * length) <= 1


# Reads past a mix's first epoch: test_mix_epochs.py.


def test_mix_of_repeated_components_is_infinite():
    ds = MapDataset.mix([MapDataset.range(5).repeat(), MapDataset.range(100, 103).repeat()], [1, 2])
    assert len(ds) == sys.maxsize
    assert ds[10**15] in set(range(5)) | {100, 101, 102}
    values = [ds[i] for i in range(300)]
    assert sum(value < 5 for value in values) == 100


def test_mix_of_one_dataset_is_that_dataset():
    part = MapDataset.range(6).shuffle(seed=1)
    ds = MapDataset.mix([part])
    assert epoch(ds, 0) == epoch(part, 0)
    assert epoch(ds, 2) == epoch(part, 2)


# -- select_from_datasets -----------------------------------------------------------------


def test_select_from_datasets_follows_the_selection_map():
    ds = MapDataset.select_from_datasets(
        [MapDataset.range(10), MapDataset.source(list("abcdefghij"))], Alternate(6)
    )
    assert len(ds) == 6
    assert list(ds) == [0, "a", 1, "b", 2, "c"]
    # The code's choice (its docstring): every epoch repeats the same choices.
    assert epoch(ds, 1) == [0, "a", 1, "b", 2, "c"]
    assert ds[-1] == "c"


# -- map, map_with_index, random_map, filter ----------------------------------------------


def test_map_spec_example():
    assert list(MapDataset.range(5).map(lambda x: x + 10)) == [10, 11, 12, 13, 14]


def test_map_transform_class_works_like_a_callable():
    ds = MapDataset.range(5)
    assert list(ds.map(AddOne())) == list(ds.map(add_one)) == [1, 2, 3, 4, 5]


def test_map_applies_to_later_epochs_of_the_parent():
    parent = MapDataset.range(10).shuffle(seed=2)
    ds = parent.map(twice_plus_one)
    assert epoch(ds, 4) == [2 * x + 1 for x in epoch(parent, 4)]


def test_map_with_index_spec_example():
    ds = MapDataset.source(["a", "b", "c", "d"]).map_with_index(lambda i, x: x + str(i))
    assert list(ds) == ["a0", "b1", "c2", "d3"]


def test_map_with_index_gets_the_dataset_index_including_epochs():
    parent = MapDataset.range(5).seed(3).shuffle()
    ds = parent.map_with_index(PairWithIndex())
    for index in (0, 4, 5, 13, 10**12 + 1):
        assert ds[index] == (index, parent[index])
    assert list(ds.map(lambda pair: pair[0])) == [0, 1, 2, 3, 4]


def test_random_map_spec_example():
    ds = MapDataset.range(5).random_map(lambda x, rng: x + rng.integers(5, 10), seed=0)
    assert set(ds).issubset(set(range(5, 15)))


def test_random_map_passes_a_numpy_generator():
    kinds = []

    def record(x, rng):
        kinds.append(type(rng))
        return x

    list(MapDataset.range(20).random_map(record, seed=1))
    MapDataset.range(20).random_map(record, seed=1)[3]
    assert kinds
    assert all(issubclass(kind, np.random.Generator) for kind in kinds)


@given(n=st.integers(1, 80), seed=seeds, data=st.data())
@settings(max_examples=40, deadline=None)
def test_random_map_ignores_iteration_history(n, seed, data):
    def build():
        return MapDataset.range(n).random_map(draw, seed=seed)

    alone = [build()[i] for i in range(n)]
    ds = build()
    order = data.draw(st.permutations(range(n)))
    permuted = {i: ds[i] for i in order}
    assert [permuted[i] for i in range(n)] == alone
    assert list(ds) == alone
    assert list(ds.to_iter_dataset(ReadOptions(num_threads=4, prefetch_buffer_size=3))) == alone
    assert ds.batch(n, batch_fn=list)[0] == alone
    assert [ds[i] for i in range(n - 1, -1, -1)][::-1] == alone
    # Reading other datasets' random elements in between changes nothing either.
    other = MapDataset.range(n).random_map(draw, seed=seed ^ 1)
    assert [(other[i], ds[i])[1] for i in range(n)] == alone


@given(seed=seeds)
@settings(max_examples=20, deadline=None)
def test_random_map_differs_by_index_epoch_and_seed(seed):
    ds = MapDataset.range(200).random_map(draw, seed=seed)
    first = epoch(ds, 0)
    assert len(set(first)) == 200, "two indices got the same random numbers"
    assert set(first).isdisjoint(epoch(ds, 1)), "epoch 1 repeated epoch 0's numbers"
    other = epoch(MapDataset.range(200).random_map(draw, seed=(seed + 1) % 2**32), 0)
    assert set(first).isdisjoint(other), "another seed gave the same numbers"


def test_random_map_transform_class_works_like_a_callable():
    ds = MapDataset.range(30)
    assert list(ds.random_map(AddNoise(), seed=5)) == list(ds.random_map(add_noise, seed=5))
    assert [x % 1000 for x in ds.random_map(AddNoise(), seed=5)] == list(range(30))


def test_filter_spec_example():
    ds = MapDataset.range(5).filter(lambda x: x % 2 == 0)
    assert ds[2] == 2
    assert ds[1] is None
    assert list(ds) == [0, 2, 4]
    assert len(ds) == 5


def test_filter_transform_class_works_like_a_callable():
    ds = MapDataset.range(9).filter(KeepOdd())
    assert list(ds) == [1, 3, 5, 7]
    assert [ds[i] for i in range(9, 12)] == [None, 1, None]


def _never_none(x):
    assert x is not None, "a later stage was called with the None of a filtered position"
    return x


LATER_STAGES = {
    "map": lambda ds: ds.map(_never_none),
    "map_with_index": lambda ds: ds.map_with_index(lambda i, x: _never_none(x)),
    "random_map": lambda ds: ds.random_map(lambda x, rng: _never_none(x), seed=1),
    "filter": lambda ds: ds.filter(lambda x: _never_none(x) is not None),
    "iter batch_fn": lambda ds: ds.to_iter_dataset().batch(
        3, batch_fn=lambda xs: [_never_none(x) for x in xs]
    ),
    "shuffle then map": lambda ds: ds.shuffle(seed=3).map(_never_none),
}


@pytest.mark.parametrize("stage", LATER_STAGES.values(), ids=LATER_STAGES.keys())
def test_stages_after_a_filter_never_see_none(stage):
    filtered = MapDataset.range(30).filter(lambda x: x % 6 < 3)
    ds = stage(filtered)
    if isinstance(ds, IterDataset):
        assert list(ds) == [[x, x + 1, x + 2] for x in range(0, 30, 6)]
        return
    singles = [ds[i] for i in range(2 * len(ds))]
    assert any(x is None for x in singles)
    assert any(x is not None for x in singles)
    assert list(ds) == [x for x in singles[: len(ds)] if x is not None]
    list(ds.to_iter_dataset().batch(4, batch_fn=list))


def test_filter_of_all_elements_reads_none_everywhere():
    ds = MapDataset.range(10).filter(lambda x: False).map(add_one)
    assert epoch(ds, 0) == [None] * 10
    with pytest.warns(UserWarning, match="dropped 10 of 10"):
        assert list(ds.to_iter_dataset().batch(4)) == []


# -- batch --------------------------------------------------------------------------------


def test_batch_spec_example():
    batches = list(MapDataset.range(5).batch(2))
    assert len(batches) == 3
    for actual, expected in zip(batches, [[0, 1], [2, 3], [4]], strict=True):
        assert_same(actual, np.array(expected))


def test_batch_lengths():
    assert len(MapDataset.range(5).batch(2)) == 3
    assert len(MapDataset.range(5).batch(2, drop_remainder=True)) == 2
    assert len(MapDataset.range(6).batch(2, drop_remainder=True)) == 3
    assert len(MapDataset.range(6).batch(7)) == 1
    assert len(MapDataset.range(6).batch(1)) == 6


def test_batch_drop_remainder():
    ds = MapDataset.range(5).batch(2, drop_remainder=True)
    values = list(ds)
    assert len(values) == 2
    assert_same(values[0], np.array([0, 1]))
    assert_same(values[1], np.array([2, 3]))
    assert_same(ds[2], np.array([0, 1]))


def test_a_batch_never_spans_two_epochs():
    ds = MapDataset.range(5).batch(2)
    assert_same(ds[2], np.array([4]))
    assert_same(ds[3], np.array([0, 1]))
    assert_same(ds[5], np.array([4]))


@given(
    n=st.integers(1, 40),
    size=st.integers(1, 9),
    drop=st.booleans(),
    seed=seeds,
)
@settings(max_examples=60, deadline=None)
def test_batch_b_of_epoch_e_holds_the_parent_elements_of_epoch_e(n, size, drop, seed):
    parent = MapDataset.range(n).shuffle(seed=seed)
    ds = parent.batch(size, drop_remainder=drop, batch_fn=list)
    chunks = [list(range(k, min(k + size, n))) for k in range(0, n, size)]
    if drop:
        chunks = [chunk for chunk in chunks if len(chunk) == size]
    assert len(ds) == len(chunks)
    for e in (0, 1, 5):
        want = [[parent[e * n + k] for k in chunk] for chunk in chunks]
        assert epoch(ds, e) == want
    assert list(ds) == epoch(ds, 0)


@pytest.mark.parametrize(
    "discarding",
    [
        lambda ds: ds.filter(lambda x: x not in {1, 2, 3}),
        lambda ds: ds.map(add_one).filter(lambda x: x % 2).shuffle(seed=1).map(add_one),
        lambda ds: MapDataset.mix([ds.filter(lambda x: x % 2), ds]),
        lambda ds: FlatMapMapDataset(ds, Twice()),
    ],
    ids=["filter", "filter, later stages", "mix of a filtered dataset", "flat map"],
)
def test_batch_after_a_stage_that_leaves_positions_empty_is_refused(discarding):
    # Batches would hold fewer than batch_size elements; Grain refuses this too.
    with pytest.raises(ValueError, match=r"cannot follow .*to_iter_dataset\(\)\.batch"):
        discarding(MapDataset.range(8)).batch(2)


def test_batch_then_filter_drops_whole_batches():
    ds = MapDataset.range(8).batch(2).filter(lambda b: b[0] != 2)
    assert ds[1] is None
    assert [b.tolist() for b in ds] == [[0, 1], [4, 5], [6, 7]]


def test_batch_fn_receives_a_list():
    received = []

    def batch_fn(elements):
        received.append(elements)
        return tuple(elements)

    ds = MapDataset.range(7).batch(3, batch_fn=batch_fn)
    assert list(ds) == [(0, 1, 2), (3, 4, 5), (6,)]
    assert ds[4] == (3, 4, 5)
    assert received
    assert all(type(elements) is list for elements in received)


def test_batch_of_an_infinite_dataset():
    ds = MapDataset.range(7).repeat().batch(3)
    assert len(ds) >= sys.maxsize // 3
    for k in (0, 1, 2, 3, 10**12):
        assert_same(ds[k], np.array([(3 * k + t) % 7 for t in range(3)]))


def test_batch_of_pytrees():
    ds = MapDataset.range(5).map(
        lambda i: {"x": np.full((2,), i, dtype=np.float32), "y": (i, float(i))}
    )
    batch = ds.batch(4)[0]
    assert set(batch) == {"x", "y"}
    assert batch["x"].shape == (4, 2)
    assert batch["x"].dtype == np.float32
    assert_same(batch["y"], (np.array([0, 1, 2, 3]), np.array([0.0, 1.0, 2.0, 3.0])))


def test_batch_of_batches():
    ds = MapDataset.range(12).batch(2).batch(3)
    assert len(ds) == 2
    assert_same(ds[1], np.arange(6, 12).reshape(3, 2))


# -- transforms as objects, and pickling ---------------------------------------------------


def pickled_pipeline():
    left = (
        MapDataset.source(list(range(40)))
        .seed(11)
        .shuffle()
        .map(AddOne())
        .filter(KeepOdd())
        .random_map(AddNoise())
        .map(twice_plus_one)
        .map_with_index(PairWithIndex())
    )
    right = MapDataset.range(100, 130).random_map(add_noise, seed=4).map(lambda_free_pair)
    mixed = MapDataset.mix([left, right], [2, 1])
    joined = MapDataset.concatenate([mixed[::2], mixed[1::2]])
    selected = MapDataset.select_from_datasets([joined, MapDataset.range(9)], Alternate(20))
    return selected.repeat(2)


def lambda_free_pair(x):
    return (-1, x)


def test_module_level_transforms_are_picklable():
    for transform in (AddOne(), KeepOdd(), AddNoise(), PairWithIndex(), Alternate(4)):
        copy = pickle.loads(pickle.dumps(transform))
        assert type(copy) is type(transform)


def test_a_pipeline_survives_pickling():
    ds = pickled_pipeline()
    copy = pickle.loads(pickle.dumps(ds))
    assert type(copy) is type(ds)
    assert len(copy) == len(ds)
    n = len(ds)
    expected = [ds[i] for i in range(3 * n)]
    assert [copy[i] for i in range(3 * n)] == expected
    assert list(copy) == list(ds)
    assert any(x is not None for x in expected)
