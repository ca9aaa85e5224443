"""Statistics of a pipeline with worker processes: waiting on the workers is their work.

The stages before mp_prefetch run in the workers, where this process does not
track them; the time the consumer waits on the workers is the only measure of
that work here, so it competes with the stages that run in this process.
"""

import time

import pytest

from grain_dataset import MapDataset, ReadOptions, track_stats
from grain_mp import MultiprocessingOptions


def _slow(x):
    time.sleep(0.01)  # the workers' work: 10 ms an element
    return x


def _cheap(x):
    return x + 0  # microseconds of work in this process


@pytest.mark.timeout(120)
def test_the_workers_are_named_the_bottleneck_when_they_are():
    options = MultiprocessingOptions(num_workers=2, per_worker_buffer_size=2)
    # No read threads in the workers: their read-ahead would overlap the sleeps.
    ds = MapDataset.range(160).to_iter_dataset(ReadOptions(num_threads=0))
    ds = ds.map(_slow).mp_prefetch(options).map(_cheap)
    it = iter(ds)
    first = next(it)  # the start-up (worker processes) is not what is measured
    track_stats(it)
    rest = list(it)
    assert sorted([first, *rest]) == list(range(160))
    stats = it.stats()
    workers, cheap = stats.stages[-2], stats.stages[-1]
    assert workers.name.startswith("MultiprocessPrefetchIterDataset")
    assert workers.waits_on_readers
    assert workers.working
    assert not cheap.waits_on_background
    # 160 elements of 10 ms over 2 workers: about 0.8 s waited. _cheap's time is an
    # estimate from one call in 16, which a descheduled sample inflates 16-fold on a
    # loaded machine: it only has to stay below the workers'.
    assert workers.self_ns > 0.4e9
    assert workers.self_ns > cheap.self_ns
    assert stats.bottleneck is workers
    text = str(stats).splitlines()
    assert text[-1].startswith(f"bottleneck: stage {len(stats.stages) - 2} Multiprocess")
    assert "waiting on its workers" in text[-1]
    assert " wait " not in text[-3]  # its share is a percentage, as work


@pytest.mark.timeout(120)
def test_a_pipeline_whose_workers_do_everything_lists_only_the_workers():
    # Nothing runs after the workers' reader (no IterDataset stage): the only stage
    # listed is mp_prefetch, with every element.
    options = MultiprocessingOptions(num_workers=2)
    it = iter(MapDataset.range(64).map(_cheap).to_iter_dataset().mp_prefetch(options))
    track_stats(it)
    assert list(it) == list(range(64))
    (workers,) = it.stats().stages
    assert workers.name.startswith("MultiprocessPrefetchIterDataset")
    assert workers.elements == 64
