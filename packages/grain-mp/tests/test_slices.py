"""mp_prefetch(sequential_slice=True) and multithread_prefetch: Grain's slicing, exact states.

Outputs pinned from Grain 0.2.18 (black box): with `sequential_slice`, worker w
of n reads the w-th contiguous slice (10 positions over 3 workers: [0..3],
[4..6], [7..9]) and the round robin gives 0, 4, 7, 1, 5, 8, 2, 6, 9, 3;
`grain.experimental.multithread_prefetch(ds, num_threads, buffer_size,
sequential_slice)` gives the outputs of mp_prefetch with as many workers, and
returns `ds` itself for 0 threads.
"""

import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grain_dataset import MapDataset
from grain_mp import MultiprocessingOptions, multithread_prefetch

GRAIN_SEQUENTIAL = {
    (10, 3): [0, 4, 7, 1, 5, 8, 2, 6, 9, 3],
    (10, 4): [0, 3, 6, 8, 1, 4, 7, 9, 2, 5],
    (7, 3): [0, 3, 5, 1, 4, 6, 2],
    (2, 3): [0, 1],
}


def _mp(ds, workers, sequential):
    return ds.mp_prefetch(MultiprocessingOptions(num_workers=workers), sequential_slice=sequential)


def _threads_left():
    return [t for t in threading.enumerate() if t.name.startswith("grain-multithread")]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("n", "workers"), sorted(GRAIN_SEQUENTIAL))
def test_sequential_slices_match_grain_with_processes_and_threads(n, workers):
    ds = MapDataset.range(n).to_iter_dataset()
    assert list(_mp(ds, workers, True)) == GRAIN_SEQUENTIAL[n, workers]
    assert list(multithread_prefetch(ds, workers, 2, True)) == GRAIN_SEQUENTIAL[n, workers]


@pytest.mark.timeout(60)
def test_strided_slices_keep_the_single_process_order():
    ds = MapDataset.range(10).to_iter_dataset()
    assert list(_mp(ds, 3, False)) == list(range(10))
    assert list(multithread_prefetch(ds, 3, 1)) == list(range(10))


def test_slicing_happens_before_to_iter_dataset_as_in_grain():
    filtered = MapDataset.range(10).filter(lambda x: x % 3 != 0).to_iter_dataset()
    assert list(multithread_prefetch(filtered, 2, 1, sequential_slice=True)) == [1, 5, 2, 7, 4, 8]
    batched = MapDataset.range(10).to_iter_dataset().batch(2)
    out = [b.tolist() for b in multithread_prefetch(batched, 2, 1)]
    assert out == [[0, 2], [1, 3], [4, 6], [5, 7], [8], [9]]


def test_zero_threads_is_the_dataset_itself():
    ds = MapDataset.range(3).to_iter_dataset()
    assert multithread_prefetch(ds, 0, 5) is ds
    assert multithread_prefetch(ds, 2, 0, sequential_slice=True) is not ds


@given(
    n=st.integers(0, 60),
    threads=st.integers(1, 7),
    sequential=st.booleans(),
    buffer=st.integers(0, 3),
)
@settings(max_examples=40, deadline=None)
def test_threads_partition_the_positions(n, threads, sequential, buffer):
    out = list(
        multithread_prefetch(MapDataset.range(n).to_iter_dataset(), threads, buffer, sequential)
    )
    assert sorted(out) == list(range(n))
    # Thread t's elements are out[t], out[t + threads], ... until it ends: in order.
    shares = [out[t::threads] for t in range(threads)]
    if not sequential:
        assert out == list(range(n))
    else:
        for share in filter(None, shares):
            assert share == list(range(share[0], share[0] + len(share)))
        sizes = [len(s) for s in shares]
        assert max(sizes) - min(sizes) <= 1
        assert sizes == sorted(sizes, reverse=True)


def _restores_at_every_point(make, points=None):
    expected = list(make())
    for point in points if points is not None else range(len(expected) + 1):
        it = iter(make())
        head = [next(it) for _ in range(point)]
        state = it.get_state()
        it.close()
        resumed = iter(make())
        resumed.set_state(state)
        assert head + list(resumed) == expected, f"restored at {point}"
        resumed.close()


@pytest.mark.parametrize("sequential", [False, True])
def test_thread_states_restore_exactly(sequential):
    ds = MapDataset.range(23).filter(lambda x: x % 4 != 1).to_iter_dataset().batch(2)
    ds = ds.map(lambda batch: batch.tolist())
    _restores_at_every_point(lambda: multithread_prefetch(ds, 3, 2, sequential))
    assert _threads_left_soon()


def _threads_left_soon():
    for _ in range(100):
        if not _threads_left():
            return True
        threading.Event().wait(0.02)
    return False


@pytest.mark.timeout(120)
def test_process_states_restore_exactly_with_sequential_slices_and_move_to_threads():
    ds = MapDataset.range(17).to_iter_dataset()
    _restores_at_every_point(lambda: _mp(ds, 3, True), [0, 1, 5, 16, 17])
    it = iter(_mp(ds, 3, True))
    head = [next(it) for _ in range(7)]
    state = it.get_state()
    it.close()
    resumed = iter(multithread_prefetch(ds, 3, 1, sequential_slice=True))
    resumed.set_state(state)
    assert head + list(resumed) == list(_mp(ds, 3, True))


@pytest.mark.timeout(60)
def test_a_state_of_the_other_slicing_is_refused():
    ds = MapDataset.range(10).to_iter_dataset()
    for make in (lambda s: _mp(ds, 2, s), lambda s: multithread_prefetch(ds, 2, 1, s)):
        it = iter(make(True))
        next(it)
        sequential_state = it.get_state()
        it.close()
        with pytest.raises(ValueError, match="sequential_slice"):
            iter(make(False)).set_state(sequential_state)
        plain = iter(make(False))
        next(plain)
        with pytest.raises(ValueError, match="sequential_slice"):
            iter(make(True)).set_state(plain.get_state())
        plain.close()


def test_an_error_in_a_thread_surfaces_in_order_and_the_threads_stop():
    def fail_on_5(x):
        if x == 5:
            raise KeyError("bad 5")
        return x

    it = iter(multithread_prefetch(MapDataset.range(10).map(fail_on_5).to_iter_dataset(), 2, 2))
    assert [next(it) for _ in range(5)] == [0, 1, 2, 3, 4]
    with pytest.raises(KeyError, match="bad 5"):
        next(it)
    it.close()
    assert _threads_left_soon()


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: multithread_prefetch(MapDataset.range(3), 2, 1), TypeError, "to_iter_dataset"),
        (
            lambda: multithread_prefetch(MapDataset.range(3).to_iter_dataset(), -1, 1),
            ValueError,
            "num_threads",
        ),
        (
            lambda: multithread_prefetch(MapDataset.range(3).to_iter_dataset(), 2, -1),
            ValueError,
            "buffer_size",
        ),
        (
            lambda: multithread_prefetch(MapDataset.range(3).to_iter_dataset(), 2.0, 1),
            TypeError,
            "num_threads",
        ),
        (
            lambda: multithread_prefetch(MapDataset.range(3).to_iter_dataset(), 2, 1, "yes"),
            TypeError,
            "sequential_slice",
        ),
        (
            lambda: _mp(MapDataset.range(3).to_iter_dataset(), 2, "yes"),
            TypeError,
            "sequential_slice",
        ),
    ],
)
def test_bad_arguments_are_named(call, error, match):
    with pytest.raises(error, match=match):
        call()
