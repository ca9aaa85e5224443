"""The batch allocator hook (`grain_dataset.extension.set_batch_allocator`).

The default batch_fn stacks equal C-ordered arrays into the memory the
installed allocator hands out; with none installed, or where it declines, numpy
allocates. The batches are the same either way: values, dtypes, shapes, order.
"""

import threading

import numpy as np
import pytest

import grain_dataset as gd
from grain_dataset.extension import batch_allocator, set_batch_allocator


class _Recorder:
    """Hands out numpy memory it remembers, from any thread; declines below `min_bytes`."""

    def __init__(self, min_bytes=0):
        self.min_bytes = min_bytes
        self.given = []
        self.lock = threading.Lock()

    def __call__(self, shape, dtype):
        if int(np.prod(shape)) * dtype.itemsize < self.min_bytes:
            return None
        out = np.empty(shape, dtype)
        with self.lock:
            self.given.append(out)
        return out

    def gave(self, array):
        return any(array is given for given in self.given)


@pytest.fixture
def install():
    """`install(allocator)`: installed for the test only."""
    previous = batch_allocator()

    def put(allocator):
        set_batch_allocator(allocator)
        return allocator

    yield put
    set_batch_allocator(previous)


def _elements(count):
    return [
        {
            "image": np.full((8, 8, 3), i, np.uint8),
            "label": i,
            "mask": np.arange(16, dtype=np.float32) + i,
            "text": f"t{i}",
            "pair": (np.int64(i), np.full(4, i, np.int16)),
        }
        for i in range(count)
    ]


def _assert_same(got, want):
    assert type(got) is type(want)
    if isinstance(want, dict):
        assert got.keys() == want.keys()
        for key in want:
            _assert_same(got[key], want[key])
    elif isinstance(want, tuple):
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            _assert_same(g, w)
    else:
        assert got.dtype == want.dtype
        assert got.shape == want.shape
        assert got.flags.c_contiguous == want.flags.c_contiguous
        np.testing.assert_array_equal(got, want)


def test_no_allocator_is_installed_by_default():
    assert batch_allocator() is None


def test_stacked_arrays_go_to_the_allocators_memory_with_the_same_batch(install):
    elements = _elements(5)
    want = gd.stack(elements)
    recorder = install(_Recorder())
    got = gd.stack(elements)
    _assert_same(got, want)
    # Every array stacked from equal arrays came from the allocator; scalars and
    # strings (converted, not stacked) did not.
    assert recorder.gave(got["image"])
    assert recorder.gave(got["mask"])
    assert recorder.gave(got["pair"][1])
    assert not recorder.gave(got["label"])
    assert not recorder.gave(got["text"])


def test_a_declining_allocator_leaves_the_memory_to_numpy(install):
    recorder = install(_Recorder(min_bytes=300))
    got = gd.stack(_elements(4))
    assert recorder.gave(got["image"])  # 4 * 192 bytes
    assert not recorder.gave(got["mask"])  # 4 * 64 bytes: declined
    assert len(recorder.given) == 1
    _assert_same(got, gd.stack(_elements(4)))


def test_arrays_of_other_shapes_never_reach_the_allocator(install):
    recorder = install(_Recorder())
    with pytest.raises(ValueError, match="same structure"):
        gd.stack([np.zeros(3), np.zeros(4)])
    assert recorder.given == []


def test_batch_stages_use_it_and_yield_what_they_yield_without(install):
    ds = gd.MapDataset.source(_elements(10)).to_iter_dataset().batch(4)
    want = list(ds)
    recorder = install(_Recorder())
    got = list(ds)
    assert len(got) == len(want) == 3
    for g, w in zip(got, want, strict=True):
        _assert_same(g, w)
    assert all(recorder.gave(batch["image"]) for batch in got)


@pytest.mark.timeout(60)
def test_read_ahead_threads_stack_into_it_concurrently(install):
    ds = gd.MapDataset.source(_elements(64)).batch(2)
    want = list(ds.to_iter_dataset())
    recorder = install(_Recorder())
    got = list(ds.to_iter_dataset(gd.ReadOptions(num_threads=4, prefetch_buffer_size=8)))
    for g, w in zip(got, want, strict=True):
        _assert_same(g, w)
    assert len({id(array) for array in recorder.given}) == len(recorder.given)
    assert all(recorder.gave(batch["image"]) for batch in got)


def test_set_returns_the_previous_allocator(install):
    first = install(_Recorder())
    assert set_batch_allocator(None) is first
    assert batch_allocator() is None


def test_a_non_callable_is_refused_with_the_fix():
    with pytest.raises(TypeError, match="must be a callable"):
        set_batch_allocator(42)
    assert batch_allocator() is None


@pytest.mark.parametrize(
    "bad",
    [
        lambda shape, dtype: np.empty(shape[1:], dtype),
        lambda shape, dtype: np.empty(shape, np.float64),
        lambda shape, dtype: [0] * shape[0],
        lambda shape, dtype: np.empty(shape[::-1], dtype).T,
    ],
    ids=["shape", "dtype", "not an array", "fortran order"],
)
def test_an_allocator_returning_the_wrong_memory_is_named(install, bad):
    install(bad)
    with pytest.raises(TypeError, match="batch allocator"):
        gd.stack([np.zeros((2, 3), np.int32)] * 3)
