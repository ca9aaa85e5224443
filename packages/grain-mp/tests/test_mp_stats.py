"""Statistics of a pipeline with worker processes: waiting on the workers is their work.

The stages before mp_prefetch run in the workers, where this process does not
track them; the time the consumer waits on the workers is the only measure of
that work here, so it competes with the stages that run in this process.
"""

import time

import pytest

from grain_dataset import MapDataset, track_stats
from grain_mp import MultiprocessingOptions


def _slow(x):
    time.sleep(0.01)  # the workers' work: 10 ms an element
    return x


def _cheap(x):
    began = time.perf_counter()
    while time.perf_counter() - began < 0.0002:  # 0.2 ms of work in this process
        pass
    return x


@pytest.mark.timeout(120)
def test_the_workers_are_named_the_bottleneck_when_they_are():
    options = MultiprocessingOptions(num_workers=2, per_worker_buffer_size=2)
    ds = MapDataset.range(80).to_iter_dataset().map(_slow).mp_prefetch(options).map(_cheap)
    it = iter(ds)
    first = next(it)  # the start-up (worker processes) is not what is measured
    track_stats(it)
    rest = list(it)
    assert sorted([first, *rest]) == list(range(80))
    stats = it.stats()
    workers, cheap = stats.stages[-2], stats.stages[-1]
    assert workers.name.startswith("MultiprocessPrefetchIterDataset")
    assert workers.waits_on_readers
    assert workers.working
    assert not cheap.waits_on_background
    # 80 elements of 10 ms over 2 workers: about 0.4 s waited, against 16 ms of _cheap.
    assert workers.self_ns > 5 * cheap.self_ns
    assert stats.bottleneck is workers
    text = str(stats).splitlines()
    assert text[-1].startswith(f"bottleneck: stage {len(stats.stages) - 2} Multiprocess")
    assert "waiting on its workers" in text[-1]
    assert " wait " not in text[-3]  # its share is a percentage, as work
