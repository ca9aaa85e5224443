"""The worker slice belongs to the worker's pipeline, not to its process or thread.

A transformation that builds and iterates a small pipeline of its own inside
an mp_prefetch worker, a multithread_prefetch thread or a DataLoader worker
must read all of that pipeline's data; the worker's pipeline itself still
reads only its share. (With a process-wide slice, two workers' inner
``range(4)`` pipelines gave [0, 2] and [1, 3].)
"""

import pytest

from grain_dataset import InterleaveIterDataset, MapDataset, MapTransform, ReadOptions
from grain_index import IndexSampler, NoSharding
from grain_mp import MultiprocessingOptions, multithread_prefetch
from grain_mp._data_loader import DataLoader

INNER = list(range(4))


def _with_inner(x):
    return x, list(MapDataset.range(len(INNER)).to_iter_dataset())


class WithInner(MapTransform):
    def map(self, element):
        return _with_inner(element)


# Read in the worker's own thread (num_threads=0) and by read threads (default): a
# thread-wide slice shows in the first, a process-wide one in both.
READS = [pytest.param(ReadOptions(num_threads=0), id="inline"), pytest.param(None, id="threads")]
# The outer order: strided is the single-process order, sequential interleaves the halves.
ORDER = {False: [0, 1, 2, 3, 4, 5], True: [0, 3, 1, 4, 2, 5]}


def _outer(read_options):
    return MapDataset.range(6).map(_with_inner).to_iter_dataset(read_options)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("read_options", READS)
@pytest.mark.parametrize("sequential", [False, True])
def test_a_pipeline_inside_an_mp_prefetch_worker_reads_everything(read_options, sequential):
    ds = _outer(read_options).mp_prefetch(
        MultiprocessingOptions(num_workers=2), sequential_slice=sequential
    )
    out = list(ds)
    assert [x for x, _ in out] == ORDER[sequential]
    assert [inner for _, inner in out] == [INNER] * 6


@pytest.mark.timeout(60)
@pytest.mark.parametrize("read_options", READS)
@pytest.mark.parametrize("sequential", [False, True])
def test_a_pipeline_inside_a_multithread_prefetch_thread_reads_everything(read_options, sequential):
    out = list(multithread_prefetch(_outer(read_options), 2, 1, sequential))
    assert [x for x, _ in out] == ORDER[sequential]
    assert [inner for _, inner in out] == [INNER] * 6


@pytest.mark.timeout(60)
def test_a_pipeline_inside_a_data_loader_worker_reads_everything():
    sampler = IndexSampler(num_records=6, shard_options=NoSharding(), shuffle=False, num_epochs=1)
    loader = DataLoader(
        data_source=list(range(6)), sampler=sampler, operations=[WithInner()], worker_count=2
    )
    out = list(loader)
    assert [x for x, _ in out] == list(range(6))
    assert [inner for _, inner in out] == [INNER] * 6


@pytest.mark.timeout(60)
def test_the_worker_slice_still_reaches_the_iterators_a_worker_pipeline_creates_later():
    # Interleave opens its second dataset only when the first is used up (cycle_length=1),
    # in an opening thread or in the caller's; both are the worker's pipeline: sliced.
    for threads in (0, 1):
        ds = MapDataset.source([MapDataset.range(6), MapDataset.range(10, 16)])
        interleaved = InterleaveIterDataset(ds, cycle_length=1, num_make_iter_threads=threads)
        workers = list(interleaved.mp_prefetch(MultiprocessingOptions(num_workers=2)))
        in_threads = list(multithread_prefetch(interleaved, 2, 1))
        # Worker 0 reads 0, 2, 4, 10, 12, 14 and worker 1 the odd ones, taken in turn.
        expected = [0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15]
        assert workers == in_threads == expected, threads
