"""Batches stacked straight into a worker's shared memory, sent without a second copy.

A worker installs `SegmentPool.empty` as the batch allocator: the default
batch_fn stacks large arrays into segments of their own, and `encode` lends
such an array's segment as it is when the array reaches it whole. Views and
arrays that a later stage replaced are copied as before; segments that are
never sent go back to the pool, and none outlives the pipeline (errors, early
close, SIGKILL). Outputs and states are those of the pipeline without workers.
"""

import os
import signal
import threading

import numpy as np
import pytest

import grain_dataset as gd
from grain_dataset import MapTransform
from grain_dataset.extension import batch_allocator
from grain_index import IndexSampler, NoSharding
from grain_mp import BatchOperation, DataLoader, MultiprocessingOptions, _mp_worker
from grain_mp._segment_pool import SegmentPool
from grain_mp._segment_reader import SegmentReader
from grain_mp._sweep import parse_segment_name, segment_exists, segment_names
from grain_mp._transport import MIN_SEGMENT_BYTES

pytestmark = pytest.mark.usefixtures("no_leaked_segments")

SHAPE = (32, 96, 96, 3)  # 864 KiB per batch of 32: above empty_min_bytes (512 KiB)


def _segment_of(array):
    """The /dev/shm segment this process maps `array` from (by /proc/self/maps), or None."""
    address = array.__array_interface__["data"][0]
    with open("/proc/self/maps") as maps:
        for line in maps:
            span, *rest = line.split()
            low, high = (int(x, 16) for x in span.split("-"))
            if low <= address < high:
                path = rest[-1] if len(rest) >= 5 else ""
                return path.rsplit("/", 1)[-1] if path.startswith("/dev/shm/") else None
    return None


def _image(index):
    return np.full(SHAPE[1:], index % 251, np.uint8)


def _with_segment(batch):
    """Runs in the worker: the batch, untouched, and the segment it was stacked into."""
    return batch, _segment_of(batch)


def _pool():
    pool = SegmentPool(owner_pid=os.getpid())
    return pool, SegmentReader(release=pool.reclaim)


# --- SegmentPool.empty and encode, in one process ---------------------------------


def test_an_array_of_empty_is_lent_in_its_own_segment_without_a_copy():
    pool, reader = _pool()
    with pool, reader:
        array = pool.empty(SHAPE, np.uint8)
        array[...] = 7
        payload = pool.encode({"image": array, "ids": np.arange(2048, dtype=np.int64)})
        element = reader.decode(payload, copy=False)
        # The decoded view maps the very segment the array was written in.
        assert _segment_of(element["image"]) == payload.segment == _segment_of(array)
        array[0, 0, 0, 0] = 9  # proof it is the same memory, not a copy of it
        assert element["image"][0, 0, 0, 0] == 9
        # The small array was copied into the room after the batch, in the same segment.
        assert payload.own == ()
        np.testing.assert_array_equal(element["ids"], np.arange(2048))


def test_two_arrays_of_empty_travel_in_two_segments():
    pool, reader = _pool()
    with pool, reader:
        a = pool.empty(SHAPE, np.uint8)
        b = pool.empty((SHAPE[0], 1 << 16), np.float32)
        a[...] = 1
        b[...] = 2.5
        payload = pool.encode((a, b))
        assert len(payload.names) == 2
        assert len(payload.own) == 1
        for copy in (False, True):
            if copy:
                a = pool.empty(SHAPE, np.uint8)
                a[...] = 1
                b = pool.empty((SHAPE[0], 1 << 16), np.float32)
                b[...] = 2.5
                payload = pool.encode((a, b))
            got = reader.decode(payload, copy=copy)
            assert got[0].shape == SHAPE
            assert (got[0] == 1).all()
            assert got[1].dtype == np.float32
            assert (got[1] == 2.5).all()
            del got
        reader.take_released()


@pytest.mark.parametrize(
    "later",
    [
        lambda batch: batch[1:],  # a view
        lambda batch: batch + 0,  # replaced by a new array
        lambda batch: batch.reshape(-1),  # reshaped: a view of another shape
        lambda batch: batch.T,  # transposed view
    ],
    ids=["slice", "replaced", "reshaped", "transposed"],
)
def test_views_and_replaced_arrays_are_copied(later):
    pool, reader = _pool()
    with pool, reader:
        batch = pool.empty(SHAPE, np.uint8)
        batch[...] = 3
        sent = later(batch)
        payload = pool.encode(sent)
        got = reader.decode(payload, copy=False)
        assert _segment_of(got) != _segment_of(batch)
        batch[...] = 4  # the worker's batch changes; what was sent does not
        assert got.shape == sent.shape
        assert (got == 3).all()


def test_an_array_sent_twice_is_copied_the_second_time():
    pool, reader = _pool()
    with pool, reader:
        batch = pool.empty(SHAPE, np.uint8)
        batch[...] = 5
        first, second = pool.encode(batch), pool.encode(batch)
        assert first.segment == _segment_of(batch)
        assert second.segment != first.segment
        assert not second.own
        assert (reader.decode(second) == 5).all()
        assert (reader.decode(first) == 5).all()


def test_a_segment_is_reused_only_once_both_sides_let_go():
    pool, reader = _pool()
    with pool, reader:
        kept = pool.empty(SHAPE, np.uint8)
        kept[...] = 1
        payload = pool.encode(kept)
        name = payload.segment
        assert (reader.decode(payload) == 1).all()
        # The parent is done with it (decoded by copy), but the worker still holds it.
        assert name in pool.names
        assert pool.lent == 0
        other = pool.empty(SHAPE, np.uint8)
        other[...] = 2
        assert _segment_of(other) != name
        assert (kept == 1).all()
        del other
        again = pool.empty(SHAPE, np.uint8)  # the segment of `other`, free again
        assert _segment_of(again) not in (None, name)
        del kept, again
        # Now the worker's array is gone too, and the first segment comes back.
        arrays = [pool.empty(SHAPE, np.uint8) for _ in range(2)]
        assert name in {_segment_of(array) for array in arrays}
        assert len(pool.names) == 2


def test_arrays_never_sent_return_their_segment_to_the_pool():
    pool, _ = _pool()
    with pool:
        for _ in range(20):
            array = pool.empty(SHAPE, np.uint8)
            array[...] = 1
            del array
        assert len(pool.names) == 1


def test_close_unlinks_segments_whose_arrays_were_never_sent():
    pool, _ = _pool()
    array = pool.empty(SHAPE, np.uint8)
    name = _segment_of(array)
    assert segment_exists(name)
    pool.close()
    assert not segment_exists(name)
    array[...] = 1  # still mapped: the array outlives the name safely
    assert pool.empty(SHAPE, np.uint8) is None


def test_empty_declines_small_arrays_and_object_dtypes():
    pool, _ = _pool()
    with pool:
        assert pool.empty((16,), np.uint8) is None
        assert pool.empty((MIN_SEGMENT_BYTES,), object) is None
        assert pool.empty_min_bytes == MIN_SEGMENT_BYTES // 2
        assert pool.empty((pool.empty_min_bytes,), np.uint8) is not None


@pytest.mark.timeout(60)
def test_threads_take_arrays_while_the_pool_encodes_and_takes_names_back():
    pool, reader = _pool()
    errors = []

    def stack(value):
        try:
            for _ in range(20):
                array = pool.empty(SHAPE, np.uint8)
                array[...] = value
                assert (array == value).all()
                del array
        except Exception as error:  # pragma: no cover - reported below
            errors.append(error)

    with pool, reader:
        threads = [threading.Thread(target=stack, args=(v,)) for v in range(6)]
        for thread in threads:
            thread.start()
        for round_ in range(40):
            batch = pool.empty(SHAPE, np.uint8)
            batch[...] = 200 + round_ % 50
            got = reader.decode(pool.encode(batch), copy=False)
            del batch
            assert (got == 200 + round_ % 50).all()
            del got
        for thread in threads:
            thread.join(30)
        assert not errors
        assert not any(thread.is_alive() for thread in threads)
        reader.take_released()


# --- through mp_prefetch's workers ---------------------------------------------------


def _batches(count, workers, *, then=None, iter_batch=False, **options):
    """Batches of `_image`s; `then` applies to the batched MapDataset, so it runs in the workers.

    With `iter_batch`, `IterDataset.batch` instead, and `then` applies after it;
    the whole pipeline then runs in one worker (``sequential_slice``), `then` included.
    """
    ds = gd.MapDataset.range(count).map(_image)
    if iter_batch:
        ds = ds.to_iter_dataset().batch(SHAPE[0])
        ds = ds if then is None else then(ds)
    else:
        ds = ds.batch(SHAPE[0])
        ds = (ds if then is None else then(ds)).to_iter_dataset()
    if workers:
        options = MultiprocessingOptions(num_workers=workers, **options)
        ds = ds.mp_prefetch(options, sequential_slice=iter_batch)
    return ds


@pytest.mark.timeout(120)
@pytest.mark.parametrize("iter_batch", [False, True], ids=["MapDataset.batch", "IterDataset.batch"])
@pytest.mark.parametrize("on", [True, False], ids=["stack_into_shm", "numpy_then_copy"])
def test_the_parent_views_the_segment_the_worker_stacked_into(monkeypatch, on, iter_batch):
    monkeypatch.setattr(_mp_worker, "_STACK_INTO_SHM", on)  # forked workers inherit it
    workers = 1 if iter_batch else 2
    then = lambda ds: ds.map(_with_segment)  # noqa: E731
    ds = _batches(6 * SHAPE[0], workers, then=then, iter_batch=iter_batch)
    want = list(_batches(6 * SHAPE[0], 0))
    got = []
    for (batch, worker_segment), expected in zip(ds, want, strict=True):
        assert batch.dtype == expected.dtype
        assert batch.shape == expected.shape
        np.testing.assert_array_equal(batch, expected)
        if on:  # no second copy: the parent maps the very segment the batch was stacked into
            assert worker_segment is not None
            assert _segment_of(batch) == worker_segment
        else:  # the hook absent: numpy memory in the worker, copied into a segment
            assert worker_segment is None
            assert _segment_of(batch) is not None
        got.append(batch)
    assert len(got) == 6
    assert batch_allocator() is None  # the parent never installs it


@pytest.mark.timeout(120)
@pytest.mark.parametrize("iter_batch", [False, True], ids=["MapDataset.batch", "IterDataset.batch"])
def test_outputs_and_states_are_those_without_workers(iter_batch):
    def pipeline(workers):
        ds = gd.MapDataset.range(10 * SHAPE[0]).shuffle(seed=3).map(_image)
        if iter_batch:  # positional: the block batches run in the workers, the map in the parent
            ds = ds.to_iter_dataset().batch(SHAPE[0])
        else:
            ds = ds.batch(SHAPE[0]).to_iter_dataset()
        ds = ds.map(lambda b: {"image": b, "sum": int(b.sum())})
        if workers:
            ds = ds.mp_prefetch(MultiprocessingOptions(num_workers=workers))
        return ds

    want = list(pipeline(0))
    iterator = iter(pipeline(2))
    for k, expected in enumerate(want[:5]):
        got = next(iterator)
        assert got["sum"] == expected["sum"] == int(got["image"].sum())
        np.testing.assert_array_equal(got["image"], expected["image"])
        assert got["image"].dtype == np.uint8, k
        assert got["image"].shape == SHAPE, k
    state = iterator.get_state()
    resumed = iter(pipeline(2))
    resumed.set_state(state)
    rest = list(resumed)
    assert [r["sum"] for r in rest] == [w["sum"] for w in want[5:]]
    plain = iter(pipeline(0))
    plain.set_state(state)  # a state of the workers' pipeline is the plain pipeline's
    assert [r["sum"] for r in plain] == [w["sum"] for w in want[5:]]


def _ours():
    me = os.getpid()
    return {name for name in segment_names() if (parse_segment_name(name) or (0,))[0] == me}


def _odd(batch):
    return int(batch[0, 0, 0, 0]) % 2 == 1


@pytest.mark.timeout(120)
def test_a_filter_and_an_early_close_leave_no_segment():
    got = list(_batches(12 * SHAPE[0], 2, then=lambda ds: ds.filter(_odd)))
    firsts = [i * SHAPE[0] % 251 for i in range(12)]
    assert [int(b[0, 0, 0, 0]) for b in got] == [f for f in firsts if f % 2]
    del got
    iterator = iter(_batches(12 * SHAPE[0], 2))
    next(iterator)
    iterator.close()
    assert _ours() == set()


def _fail_on_third(batch):
    if int(batch[0, 0, 0, 0]) == 2 * SHAPE[0] % 251:
        raise ValueError("third batch refused")
    return batch


@pytest.mark.timeout(120)
def test_an_error_after_stacking_leaves_no_segment():
    ds = _batches(8 * SHAPE[0], 1, then=lambda ds: ds.map(_fail_on_third))
    iterator = iter(ds)
    assert [int(next(iterator)[0, 0, 0, 0]) for _ in range(2)] == [0, SHAPE[0] % 251]
    with pytest.raises(ValueError, match="third batch refused"):
        next(iterator)
    iterator.close()
    assert _ours() == set()


def _killed_on_third(batch):
    if int(batch[0, 0, 0, 0]) == 2 * SHAPE[0] % 251:
        assert batch_allocator() is not None  # never in the test's own process
        os.kill(os.getpid(), signal.SIGKILL)
    return batch


@pytest.mark.timeout(120)
def test_a_worker_killed_holding_stacked_batches_leaves_no_segment():
    ds = _batches(8 * SHAPE[0], 2, then=lambda ds: ds.map(_killed_on_third))
    with pytest.raises(RuntimeError, match="SIGKILL"):
        for _ in ds:
            pass
    assert _ours() == set()


class _ImageOf(MapTransform):
    def map(self, element):
        return _image(element)


class _WithSegment(MapTransform):
    def map(self, element):
        return _with_segment(element)


@pytest.mark.timeout(120)
def test_the_data_loaders_batches_travel_in_the_segment_they_were_stacked_into():
    count = 4 * SHAPE[0]
    sampler = IndexSampler(num_records=count, shard_options=NoSharding(), num_epochs=1)
    loader = DataLoader(
        data_source=list(range(count)),
        sampler=sampler,
        operations=[_ImageOf(), BatchOperation(SHAPE[0]), _WithSegment()],
        worker_count=1,
    )
    firsts = []
    for batch, worker_segment in loader:
        assert batch.shape == SHAPE
        assert worker_segment is not None
        assert _segment_of(batch) == worker_segment
        firsts.append(int(batch[0, 0, 0, 0]))
    assert firsts == [k * SHAPE[0] % 251 for k in range(4)]
