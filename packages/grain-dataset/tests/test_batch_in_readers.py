"""`to_iter_dataset(...).batch(n)`: the read-ahead's threads stack whole batches.

With the default batch_fn the batch stage asks its read-ahead parent for the
next batch whole (`_take_batch`): chunks are then read a batch at a time,
aligned to the batches, and stacked by the reader that read them, so the
consumer's thread no longer copies every element. What must hold: the same
batches, errors, states and restores as stacking in the consumer (a batch_fn
other than the default keeps the consumer path, the reference here), and
realignment after filtered positions.
"""

import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import grain_dataset as gd
from grain_dataset import assert_equal_output_after_checkpoint, stack
from grain_dataset.extension import batch_allocator, set_batch_allocator

pytestmark = pytest.mark.timeout(60)


def _element(i):
    # 192 KiB images: the read-ahead's chunks stay under a megabyte (5 elements), below a
    # batch of 8 or more, where batches are read whole; cheap small elements are read in
    # chunks of many batches and batched by the consumer.
    return {"image": np.full((256, 256, 3), i % 256, np.uint8), "label": i, "name": f"e{i}"}


def _by_consumer(values):
    """The default stacking, but not the default batch_fn: the consumer's path."""
    return stack(values)


def _pipeline(n, size, threads, drop_remainder=False, keep=None, fails_at=None, batch_fn=None):
    def element(i):
        if i == fails_at:
            raise KeyError(f"no record {i}")
        return _element(i)

    ds = gd.MapDataset.range(n).map(element)
    if keep is not None:
        ds = ds.filter(lambda x: x["label"] in keep)
    ds = ds.to_iter_dataset(gd.ReadOptions(num_threads=threads, prefetch_buffer_size=64))
    return ds.batch(size, drop_remainder=drop_remainder, batch_fn=batch_fn)


def _assert_same(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.keys() == w.keys()
        for key in w:
            assert g[key].dtype == w[key].dtype
            np.testing.assert_array_equal(g[key], w[key])


@pytest.mark.filterwarnings("ignore:the filters .* dropped")
@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(0, 90),
    size=st.integers(1, 12),
    threads=st.sampled_from([0, 1, 3]),
    drop_remainder=st.booleans(),
    dropped=st.sets(st.integers(0, 89), max_size=12),
)
def test_the_batches_are_those_of_the_consumers_path(n, size, threads, drop_remainder, dropped):
    keep = set(range(n)) - dropped if dropped else None
    ours = list(_pipeline(n, size, threads, drop_remainder, keep))
    want = list(_pipeline(n, size, threads, drop_remainder, keep, batch_fn=_by_consumer))
    _assert_same(ours, want)


@pytest.mark.parametrize("threads", [0, 2])
def test_states_restore_exactly(threads):
    keep = set(range(100)) - {7, 8, 30, 61}
    assert_equal_output_after_checkpoint(_pipeline(100, 8, threads, keep=keep), max_steps=20)


@pytest.mark.parametrize("threads", [0, 2])
def test_an_error_is_raised_at_the_batch_that_holds_it_and_the_next_call_meets_it_again(threads):
    def run(batch_fn):
        it = iter(_pipeline(40, 8, threads, fails_at=19, batch_fn=batch_fn))
        labels = [int(next(it)["label"][0]) for _ in range(2)]
        errors = []
        for _ in range(2):
            with pytest.raises(KeyError) as error:
                next(it)
            errors.append(str(error.value))
        return labels, errors, it.get_state()

    ours = run(None)
    assert ours[:2] == ([0, 8], ["'no record 19'"] * 2)
    assert ours == run(_by_consumer)


@pytest.mark.parametrize("threads", [0, 2])
def test_elements_that_do_not_stack_raise_the_consumers_error(threads):
    def ragged(i):
        return np.zeros(3 if i == 5 else 2)

    def run(batch_fn):
        ds = gd.MapDataset.range(12).map(ragged).to_iter_dataset(gd.ReadOptions(threads))
        it = iter(ds.batch(4, batch_fn=batch_fn))
        next(it)
        with pytest.raises(ValueError, match=r"same structure|shape") as error:
            next(it)
        return str(error.value)

    assert run(None) == run(_by_consumer)


def test_the_readers_stack_the_batches():
    stacked_in = []
    lock = threading.Lock()

    def allocator(shape, dtype):
        with lock:
            stacked_in.append(threading.current_thread().name)
        return None  # numpy's memory: only where the stacking ran is recorded

    previous = batch_allocator()
    set_batch_allocator(allocator)
    try:
        it = iter(_pipeline(64, 8, threads=2))
        it._parent._tuner._inline_wait = 10**6  # threads throughout, not the consumer's
        batches = list(it)
    finally:
        set_batch_allocator(previous)
    assert len(batches) == 8
    # Each batch's image (the leaf of a plain dtype that the allocator is asked for),
    # once for all of its chunks, the first batch's too: the consumer asks for whole
    # batches from its first call.
    assert stacked_in == ["grain-read"] * 8


def test_a_batch_is_spread_over_the_readers():
    # Elements that wait (I/O): a batch's chunks are read by several threads at once,
    # each copying its elements into the batch's rows, instead of a batch per thread.
    readers = {}
    lock = threading.Lock()

    def element(i):
        time.sleep(0.002)
        with lock:
            readers[i] = threading.current_thread().ident
        return _element(i)

    ds = gd.MapDataset.range(64 * 6).map(element)
    it = iter(ds.to_iter_dataset(gd.ReadOptions(num_threads=8)).batch(64))
    batches = list(it)
    assert len(batches) == 6
    _assert_same(
        batches, [stack([_element(i) for i in range(b, b + 64)]) for b in range(0, 384, 64)]
    )
    assert it._parent._batch_size == 64  # taken whole, not batched by the consumer
    spread = [len({readers[i] for i in range(b, b + 64)}) for b in range(0, 384, 64)]
    assert max(spread[1:]) >= 3, spread


def test_a_filtered_position_realigns_the_batches():
    keep = set(range(400)) - {13}
    it = iter(_pipeline(400, 10, threads=2, keep=keep))
    reader, whole = it._parent, []
    take = reader._take_batch

    def counting(size, batch_fn):
        batch = take(size, batch_fn)
        whole.append(batch is not None)
        return batch

    reader._take_batch = counting
    flat = [x for batch in it for x in batch["label"].tolist()]
    assert flat == sorted(keep)
    # The batch holding 13 comes one by one, and so do those of the chunks already
    # read at the old bounds; the chunks read after come whole again, up to the last,
    # short batch (399 elements) and the call that ends the epoch.
    assert whole[0]
    assert not whole[1]
    assert all(whole[10:-2])
    assert whole[-2:] == [False, False]


def test_cheap_elements_are_read_in_chunks_of_many_batches_and_batched_by_the_consumer():
    ds = gd.MapDataset.range(20_000).to_iter_dataset(gd.ReadOptions(num_threads=2)).batch(8)
    it = iter(ds)
    got = [next(it) for _ in range(2000)]
    assert [int(b[0]) for b in got[:3]] == [0, 8, 16]
    assert it._parent._batch_size == 0  # off: the tuned chunks hold many batches
    assert it._parent._chunk > 8


@pytest.mark.filterwarnings("ignore:the filters .* dropped")
def test_batch_sized_chunks_stop_after_filtered_positions_in_batch_after_batch():
    from grain_dataset._threads._read_ahead import _BATCH_MISSES

    keep = set(range(0, 400, 2))  # every other position dropped
    it = iter(_pipeline(400, 10, threads=2, keep=keep))
    got = [next(it)["label"].tolist() for _ in range(_BATCH_MISSES + 2)]
    assert [x for batch in got for x in batch] == list(range(0, 20 * (_BATCH_MISSES + 2), 2))
    assert it._parent._batch_misses >= _BATCH_MISSES
    assert it._parent._batch_size == 0


class _Tracked(np.ndarray):
    """An image whose life is watched: weakrefs to plain ndarrays are not allowed."""


def test_a_batch_taken_whole_holds_no_element_alive_in_the_iterator():
    import gc
    import weakref

    alive = {}

    def element(i):
        tracked = np.full((256, 256, 3), i % 256, np.uint8).view(_Tracked)
        alive[i] = weakref.ref(tracked)
        return np.asarray(tracked)  # a plain ndarray (rows to stack) that keeps `tracked`

    ds = gd.MapDataset.range(64).map(element)
    ds = ds.to_iter_dataset(gd.ReadOptions(num_threads=2, prefetch_buffer_size=16)).batch(8)
    it = iter(ds)
    first = next(it)
    assert it._parent._batch_size == 8  # taken whole, stacked by the readers
    gc.collect()
    # The batch holds copies: the eight elements themselves are gone, not kept by the
    # iterator until the next chunk (a batch of memory more at the consumer's side).
    assert [alive[i]() is None for i in range(8)] == [True] * 8
    assert first[:, 0, 0, 0].tolist() == list(range(8))
    it.close()


def test_without_threads_the_consumer_batches_from_chunks_of_the_tuned_size():
    it = iter(_pipeline(64, 16, threads=0))
    batches = list(it)
    # In the consumer's thread anyway: batch-sized chunks would save no copy and hold
    # a batch of elements more, so chunks keep their megabyte bound.
    assert it._parent._batch_size == 0
    assert it._parent._chunk * 196_608 <= 1 << 20
    _assert_same(batches, list(_pipeline(64, 16, threads=0, batch_fn=_by_consumer)))
