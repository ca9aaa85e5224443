"""`iter_worker_slice`: a worker's pipeline reads its share, every other pipeline everything.

The slice travels with the pipeline's iterators (their shared context), so
iterators that the pipeline creates after `iter_worker_slice` returned read
it too, in any thread, while pipelines that the pipeline's transformations
build read all of their data.
"""

import threading

import pytest

from grain_dataset import (
    InterleaveIterDataset,
    IterDataset,
    MapDataset,
    ReadOptions,
    RepeatIterDataset,
)
from grain_dataset.extension import iter_worker_slice

INLINE = ReadOptions(num_threads=0)


def _inner(x):
    return x, list(MapDataset.range(4).to_iter_dataset(INLINE))


@pytest.mark.parametrize(
    ("index", "sequential", "expected"),
    [(0, False, [0, 3, 6, 9]), (1, False, [1, 4, 7]), (1, True, [4, 5, 6]), (2, True, [7, 8, 9])],
)
def test_strided_and_sequential_slices(index, sequential, expected):
    ds = MapDataset.range(10).to_iter_dataset()
    assert list(iter_worker_slice(ds, index, 3, sequential)) == expected


@pytest.mark.timeout(30)
@pytest.mark.parametrize("read_options", [INLINE, None])
def test_only_the_sliced_pipeline_reads_a_slice(read_options):
    ds = MapDataset.range(6).map(_inner).to_iter_dataset(read_options)
    it = iter_worker_slice(ds, 1, 2)
    first = next(it)
    # Other pipelines, before the worker's is used up and inside its transformations.
    assert list(MapDataset.range(5).to_iter_dataset()) == [0, 1, 2, 3, 4]
    out = [first, *it]
    assert out == [(x, [0, 1, 2, 3]) for x in (1, 3, 5)]


@pytest.mark.timeout(30)
def test_repeated_epochs_and_restored_states_keep_the_slice():
    ds = RepeatIterDataset(MapDataset.range(5).to_iter_dataset(INLINE), 3)
    it = iter_worker_slice(ds, 0, 2)
    out = [next(it) for _ in range(4)]
    state = it.get_state()
    out += list(it)
    assert out == [0, 2, 4] * 3
    restored = iter_worker_slice(ds, 0, 2)
    restored.set_state(state)
    assert list(restored) == out[4:]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("threads", [0, 2])
def test_datasets_an_interleave_opens_later_are_sliced(threads):
    # cycle_length=1: the second dataset opens only once the first is used up, long after
    # iter_worker_slice returned (and in an opening thread with threads).
    datasets = [MapDataset.range(6), MapDataset.range(10, 16).to_iter_dataset(INLINE)]
    ds = InterleaveIterDataset(datasets, cycle_length=1, num_make_iter_threads=threads)
    it = iter_worker_slice(ds, 1, 2)
    out = [next(it) for _ in range(4)]
    state = it.get_state()
    out += list(it)
    assert out == [1, 3, 5, 11, 13, 15]
    restored = iter_worker_slice(ds, 1, 2)
    restored.set_state(state)  # reopens the second dataset, sliced
    assert list(restored) == [13, 15]
    # The same dataset outside a worker reads everything.
    assert list(ds) == [0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15]


@pytest.mark.timeout(30)
def test_each_component_of_a_mix_reads_its_slice():
    first, second = MapDataset.range(8), MapDataset.range(100, 106)
    mixed = IterDataset.mix([first.to_iter_dataset(), second.to_iter_dataset()], [2, 1])
    by_hand = [first[1::2].to_iter_dataset(), second[1::2].to_iter_dataset()]
    expected = list(IterDataset.mix(by_hand, [2, 1]))
    assert len(expected) > 4
    assert list(iter_worker_slice(mixed, 1, 2)) == expected


@pytest.mark.timeout(30)
def test_the_slice_is_the_calling_threads_only():
    ds = MapDataset.range(6).to_iter_dataset(INLINE)
    seen = []

    class Probe(IterDataset):
        """Builds an iterator of another pipeline from another thread while being iterated."""

        def __init__(self, parent):
            super().__init__(parent)

        def __iter__(self):
            thread = threading.Thread(target=lambda: seen.append(list(ds)))
            thread.start()
            thread.join()
            return iter(self._parents[0])

    assert list(iter_worker_slice(Probe(ds), 0, 3)) == [0, 3]
    assert seen == [[0, 1, 2, 3, 4, 5]]


def test_bad_slices_are_refused():
    ds = MapDataset.range(3).to_iter_dataset()
    with pytest.raises(ValueError, match="index"):
        iter_worker_slice(ds, 2, 2)
    with pytest.raises(ValueError, match="count"):
        iter_worker_slice(ds, 0, 0)
    with pytest.raises(TypeError, match="sequential"):
        iter_worker_slice(ds, 0, 2, 1)
