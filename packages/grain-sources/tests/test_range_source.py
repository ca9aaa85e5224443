"""RangeDataSource: the same integers as Python's range, exactly, whatever their size."""

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import grain
from grain_sources import RandomAccessDataSource, RangeDataSource

INT64_MAX = 2**63 - 1

ARGS = [
    (0, 10, 1),
    (0, 10, 3),
    (3, 4, 1),
    (-5, 5, 2),
    (10, 0, -1),
    (10, 0, -3),
    (10, -10, -7),
    (0, 0, 1),
    (5, 5, -1),
    (0, 10, -1),  # empty: stepping away from stop
    (10, 0, 1),  # empty
    (0, 1, 10**6),
    (7, 8, -1),  # empty
    (2**62 - 3, 2**62 + 3, 1),  # around the vectorized limit
    (INT64_MAX - 5, INT64_MAX + 6, 2),  # crosses int64
    (-INT64_MAX - 6, -INT64_MAX + 5, 3),
    (INT64_MAX + 10, INT64_MAX - 10, -4),
    (2**100, 2**100 + 50, 7),
    (-(2**100), -(2**100) - 50, -9),
    (0, 2**64, 2**60),
    (2**70, -(2**70), -(2**66)),
    (1, 2**200, 2**197),
]


def every(src):
    return [src[i] for i in range(len(src))]


@pytest.mark.parametrize(("start", "stop", "step"), ARGS)
def test_equals_python_range(start, stop, step):
    src = RangeDataSource(start, stop, step)
    expected = range(start, stop, step)
    assert len(src) == len(expected)
    assert (src.start, src.stop, src.step) == (start, stop, step)
    assert every(src) == list(expected)
    assert list(src) == list(expected)
    got = src.__getitems__(list(range(len(src))))
    assert got == list(expected)
    assert all(type(value) is int for value in every(src) + got)
    for index in range(-len(expected), 0):
        assert src[index] == expected[index]


@given(
    start=st.integers(-(2**70), 2**70),
    stop=st.integers(-(2**70), 2**70),
    step=st.integers(-(2**68), 2**68).filter(bool),
    data=st.data(),
)
@settings(max_examples=200, deadline=None)
def test_any_range_and_any_indices(start, stop, step, data):
    span = stop - start if step > 0 else start - stop
    if -(-span // abs(step)) > 10**6:  # keep lengths small (and within len()'s C limit)
        stop = start + step * data.draw(st.integers(0, 10**6)) + data.draw(st.integers(0, 1))
    expected = range(start, stop, step)
    src = RangeDataSource(start, stop, step)
    assert len(src) == len(expected)
    if not len(expected):
        assert src.__getitems__([]) == []
        return
    n = len(expected)
    indices = data.draw(st.lists(st.integers(-n, n - 1), max_size=50))
    want = [expected[i] for i in indices]
    assert src.__getitems__(indices) == want
    assert src.__getitems__(np.asarray(indices, dtype=np.int64)) == want
    assert [src[i] for i in indices] == want


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint16, np.uint64])
def test_getitems_with_arrays_equals_per_index(dtype):
    src = RangeDataSource(100, -50, -3)
    rng = np.random.default_rng(0)
    low = 0 if np.dtype(dtype).kind == "u" else -len(src)
    indices = rng.integers(low, len(src), size=200).astype(dtype)
    assert src.__getitems__(indices) == [src[int(i)] for i in indices]
    assert src.__getitems__(indices.tolist()) == [src[int(i)] for i in indices]


def test_getitems_of_nothing():
    assert RangeDataSource(0, 10).__getitems__([]) == []
    assert RangeDataSource(0, 10).__getitems__(np.array([], np.int64)) == []
    assert RangeDataSource(0, 0).__getitems__([]) == []


def test_negative_indices_count_from_the_end():
    src = RangeDataSource(3, 30, 4)
    assert src[-1] == 27
    assert src[-len(src)] == 3
    assert src.__getitems__([-1, -2, 0]) == [27, 23, 3]


def test_numpy_integers_are_accepted_as_arguments_and_indices():
    src = RangeDataSource(np.int64(2), np.int32(20), np.uint8(3))
    assert list(src) == list(range(2, 20, 3))
    assert src[np.int64(1)] == 5
    assert src[np.uint64(0)] == 2
    assert type(src.start) is int


# -- errors -----------------------------------------------------------------------------------


def test_step_zero():
    with pytest.raises(ValueError, match="`step`"):
        RangeDataSource(0, 10, 0)


@pytest.mark.parametrize(
    ("args", "name"),
    [
        ((0.0, 10), "start"),
        ((0, 10.0), "stop"),
        ((0, 10, 1.0), "step"),
        (("0", 10), "start"),
        ((0, None), "stop"),
        ((True, 10), "start"),
        ((0, False), "stop"),
        ((0, 10, True), "step"),
        ((0, 10, np.True_), "step"),
        ((0, 10, np.float64(1)), "step"),
    ],
)
def test_non_integer_arguments(args, name):
    with pytest.raises(TypeError, match=f"`{name}`"):
        RangeDataSource(*args)


@pytest.mark.parametrize("index", [10, 11, 2**64, -11, -(2**70)])
def test_index_out_of_range(index):
    src = RangeDataSource(0, 10)
    with pytest.raises(IndexError, match=str(index)):
        src[index]
    with pytest.raises(IndexError, match=str(index)):
        src.__getitems__([0, index])


def test_empty_range_has_no_index():
    for src in [RangeDataSource(0, 0), RangeDataSource(0, 5, -1)]:
        for index in [0, -1]:
            with pytest.raises(IndexError):
                src[index]


@pytest.mark.parametrize("index", [True, False, np.True_, 1.0, "1", None, np.float32(0)])
def test_non_integer_index(index):
    with pytest.raises(TypeError, match="integer"):
        RangeDataSource(0, 10)[index]


@pytest.mark.parametrize("indices", [[1.0], np.array([0.5]), [True], np.array([True]), ["0"]])
def test_getitems_non_integer_indices(indices):
    with pytest.raises(TypeError, match="integer"):
        RangeDataSource(0, 10).__getitems__(indices)


# -- identity ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("start", "stop", "step"), [(0, 10, 1), (5, -5, -2), (2**90, 0, -(2**80))])
def test_repr_round_trips(start, stop, step):
    src = RangeDataSource(start, stop, step)
    text = repr(src)
    assert text == f"RangeDataSource(start={start}, stop={stop}, step={step})"
    assert eval(text, {"RangeDataSource": RangeDataSource}) == src


def test_equality_and_hash():
    a = RangeDataSource(0, 10, 2)
    assert a == RangeDataSource(0, 10, 2)
    assert hash(a) == hash(RangeDataSource(0, 10, 2))
    # The same integers, as range(0, 10, 2) == range(0, 9, 2).
    assert a == RangeDataSource(0, 9, 2)
    assert hash(a) == hash(RangeDataSource(0, 9, 2))
    assert a != RangeDataSource(0, 10, 3)
    assert a != RangeDataSource(1, 10, 2)
    assert RangeDataSource(0, 0) == RangeDataSource(5, 3, 7)  # both empty
    assert hash(RangeDataSource(0, 0)) == hash(RangeDataSource(5, 3, 7))
    assert a != range(0, 10, 2)
    assert a != [0, 2, 4, 6, 8]
    assert len({a, RangeDataSource(0, 10, 2), RangeDataSource(0, 11, 2)}) == 2


@pytest.mark.parametrize(("start", "stop", "step"), [(0, 10**9, 1), (2**100, -5, -(2**90))])
def test_pickle(start, stop, step):
    src = RangeDataSource(start, stop, step)
    blob = pickle.dumps(src)
    assert len(blob) < 500
    copy = pickle.loads(blob)
    assert copy == src
    assert (copy.start, copy.stop, copy.step) == (start, stop, step)
    assert copy[-1] == range(start, stop, step)[-1]
    assert copy.__getitems__([0, 1]) == src.__getitems__([0, 1])


def test_is_a_random_access_data_source():
    assert isinstance(RangeDataSource(0, 3), RandomAccessDataSource)


# -- in pipelines -----------------------------------------------------------------------------


def test_in_a_map_dataset():
    src = RangeDataSource(10, 110, 2)
    assert list(grain.MapDataset.source(src)) == list(range(10, 110, 2))
    ds = grain.MapDataset.source(src).shuffle(seed=0).map(lambda x: x * 10)
    values = [ds[i] for i in range(len(ds))]
    assert sorted(values) == [x * 10 for x in range(10, 110, 2)]
    assert values != sorted(values)
    batches = list(grain.MapDataset.source(src).batch(8))
    assert [int(x) for batch in batches for x in batch] == list(range(10, 110, 2))
    assert [len(batch) for batch in batches] == [8] * 6 + [2]


def test_a_range_longer_than_sys_maxsize_is_refused():
    with pytest.raises(ValueError, match=r"sys\.maxsize"):
        RangeDataSource(0, 2**80)


def test_getitems_with_a_python_int_beyond_int64_raises_index_error():
    source = RangeDataSource(0, 10)
    with pytest.raises(IndexError, match=str(2**63)):
        source.__getitems__([-1, 2**63])


def test_getitems_refuses_two_dimensional_indices():
    with pytest.raises(ValueError, match="one-dimensional"):
        RangeDataSource(0, 10).__getitems__(np.zeros((2, 2), np.int64))


def test_equality_with_another_type_is_not_implemented():
    assert RangeDataSource(0, 3).__eq__(range(3)) is NotImplemented
    assert RangeDataSource(0, 3) != range(3)
