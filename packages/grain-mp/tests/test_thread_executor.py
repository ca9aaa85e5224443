"""Worker threads (`grain_mp._thread_executor`) as mp_prefetch's executor, beside processes.

The stream and the state are the executor's business only: the same pipeline
gives the same elements and states on threads as on processes (and as in one
process where the pipeline has no many-to-one step), and a checkpoint taken on
one restores on the other. Threads never pickle the pipeline, never copy an
element and leave no thread behind.
"""

import multiprocessing
import threading
import time

import numpy as np
import pytest

from grain_dataset import MapDataset, ReadOptions, config
from grain_index import IndexSampler, NoSharding, ShardOptions
from grain_mp import DataLoader, ElasticIterator, MultiprocessingOptions
from grain_mp._executor import executor_kind, gil_enabled

pytestmark = pytest.mark.timeout(60)


def _use(kind):
    config.update("py_worker_executor", kind)


def _double(x):
    return x * 2


def _keep(x):
    return x % 5 != 2


def _positional(n=60):
    # One to_iter_dataset over a MapDataset, then built-in stages: runs in position order.
    return MapDataset.range(n).seed(3).shuffle().map(_double).filter(_keep).to_iter_dataset()


def _per_worker(n=60):
    # Mixing two iterators is not positional: every worker runs the whole pipeline.
    left = MapDataset.range(n).seed(3).shuffle().to_iter_dataset()
    right = MapDataset.range(100, 100 + n).to_iter_dataset()
    return left.mix([left, right], weights=[2, 1]).map(_double).batch(4, drop_remainder=False)


PIPELINES = {
    "positional": lambda: _positional().batch(3),
    "per_worker": _per_worker,
    "sequential_slice": _positional,
}


def _prefetched(name, workers):
    options = MultiprocessingOptions(num_workers=workers, per_worker_buffer_size=2)
    return PIPELINES[name]().mp_prefetch(options, sequential_slice=name == "sequential_slice")


def _run(name, workers, kind, take=None, state=None):
    _use(kind)
    it = iter(_prefetched(name, workers))
    if state is not None:
        it.set_state(state)
    out = [next(it) for _ in range(take)] if take is not None else list(it)
    saved = it.get_state()
    it.close()
    return out, saved


def _same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.fixture(autouse=True)
def _forget_the_choice():
    yield
    config.reset("py_worker_executor")


def test_auto_runs_threads_exactly_where_the_gil_is_off(monkeypatch):
    monkeypatch.delenv("GRAIN_PY_WORKER_EXECUTOR")  # grain-mp's tests pin processes
    config.reset("py_worker_executor")
    assert executor_kind() == ("processes" if gil_enabled() else "threads")
    _use("threads")
    assert executor_kind() == "threads"
    _use("processes")
    assert executor_kind() == "processes"


@pytest.mark.parametrize("name", list(PIPELINES))
@pytest.mark.parametrize("workers", [1, 3])
def test_threads_give_the_processes_stream_and_states(name, workers):
    on_processes, end_p = _run(name, workers, "processes")
    on_threads, end_t = _run(name, workers, "threads")
    _same(on_threads, on_processes)
    assert end_t == end_p
    if name == "positional":  # runs in position order: the one-process output
        _same(on_threads, list(PIPELINES[name]()))


@pytest.mark.parametrize("name", list(PIPELINES))
@pytest.mark.parametrize(("first", "then"), [("processes", "threads"), ("threads", "processes")])
def test_a_checkpoint_taken_on_one_executor_continues_exactly_on_the_other(name, first, then):
    everything, _ = _run(name, 2, first)
    head, state = _run(name, 2, first, take=5)
    tail, _ = _run(name, 2, then, state=state)
    _same(head + tail, everything)


def test_threads_run_an_unpicklable_pipeline_without_copying_its_elements(monkeypatch):
    # spawn would pickle the pipeline for processes; threads never do.
    monkeypatch.setenv("GRAIN_MP_START_METHOD", "spawn")
    lock = threading.Lock()  # cannot be pickled
    arrays = [np.full((256, 256), i, np.float32) for i in range(12)]

    def lookup(i):
        with lock:
            return arrays[i]

    _use("threads")
    ds = MapDataset.range(12).map(lookup).to_iter_dataset()
    ds = ds.mp_prefetch(MultiprocessingOptions(num_workers=3))
    out = []
    for element in ds:
        assert multiprocessing.active_children() == []
        out.append(element)
    assert all(got is want for got, want in zip(out, arrays, strict=True))


def test_worker_init_fn_runs_once_in_every_thread_before_its_elements():
    calls = []
    first_element_by_thread = {}

    def init(index, count):
        calls.append((index, count, threading.current_thread().name))

    def tag(x):
        first_element_by_thread.setdefault(threading.current_thread().name, len(calls))
        return x

    _use("threads")
    # No read threads: the map runs in the worker thread itself.
    ds = MapDataset.range(30).map(tag).to_iter_dataset(ReadOptions(num_threads=0))
    ds = ds.mp_prefetch(
        MultiprocessingOptions(num_workers=3), worker_init_fn=init, sequential_slice=True
    )
    assert sorted(ds) == list(range(30))
    assert sorted((index, count) for index, count, _ in calls) == [(0, 3), (1, 3), (2, 3)]
    for _, _, name in calls:
        assert first_element_by_thread[name] >= 1  # that thread ran the init, then mapped
    assert len({name for _, _, name in calls}) == 3
    assert threading.current_thread().name not in first_element_by_thread


def test_an_error_in_a_worker_thread_reaches_the_consumer_with_its_place(new_threads):
    def fail_on_13(x):
        if x == 13:
            raise KeyError(f"bad record {x}")
        return x

    _use("threads")
    ds = MapDataset.range(40).map(fail_on_13).to_iter_dataset()
    ds = ds.mp_prefetch(MultiprocessingOptions(num_workers=2), sequential_slice=False)
    seen = []
    with pytest.raises(KeyError, match="bad record 13") as info:
        seen.extend(ds)
    assert seen == list(range(13))
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert "grain worker 1 of 2 raised it on element 6 of its slice" in notes
    assert new_threads(5.0) == []


@pytest.mark.parametrize("how", ["close", "break", "del", "end"])
def test_no_worker_thread_is_left_after_stopping(how, new_threads):
    _use("threads")

    def slow(x):
        time.sleep(0.002)
        return x

    ds = MapDataset.range(400).map(slow).to_iter_dataset(ReadOptions(num_threads=2))
    ds = ds.mp_prefetch(MultiprocessingOptions(num_workers=3))
    it = iter(ds)
    if how == "end":
        assert len(list(it)) == 400
    else:
        next(it)
        assert new_threads()
        if how == "close":
            it.close()
        elif how == "del":
            del it
        else:
            for _ in it:
                break
            it.close()
    assert new_threads(5.0) == []


def _sampler(n, epochs=1, shard=None):
    return IndexSampler(
        num_records=n, shard_options=shard or NoSharding(), shuffle=True, num_epochs=epochs, seed=4
    )


def test_the_data_loader_runs_on_threads_with_the_processes_output_and_states():
    def loader():
        return DataLoader(
            data_source=list(range(50)), sampler=_sampler(50, epochs=2), worker_count=3
        )

    _use("processes")
    everything = [int(record) for record in loader()]
    it = iter(loader())
    head = [int(next(it)) for _ in range(17)]
    state = it.get_state()
    _use("threads")
    it = iter(loader())
    it.set_state(state)
    tail = [int(record) for record in it]
    assert head + tail == everything
    assert [int(record) for record in loader()] == everything


def test_elastic_iterator_runs_on_threads_with_the_processes_batches():
    ds = MapDataset.range(48).seed(2).shuffle().map(_double)

    def batches(kind):
        _use(kind)
        it = ElasticIterator(
            ds,
            4,
            ShardOptions(0, 1),
            multiprocessing_options=MultiprocessingOptions(num_workers=2),
        )
        return [np.asarray(b) for b in it]

    _same(batches("threads"), batches("processes"))


def test_close_from_another_thread_ends_a_next_that_waits_on_a_stuck_worker_thread(
    new_threads,
):
    release = threading.Event()

    def stuck(x):
        release.wait(30)
        return x

    _use("threads")
    ds = MapDataset.range(40).map(stuck).to_iter_dataset(ReadOptions(num_threads=0))
    iterator = iter(ds.mp_prefetch(MultiprocessingOptions(num_workers=2)))
    outcome = []

    def consume():
        try:
            next(iterator)
        except BaseException as error:
            outcome.append(error)

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    time.sleep(0.3)
    assert consumer.is_alive()  # waiting on a worker thread stuck in the map
    began = time.monotonic()
    iterator.close()
    consumer.join(10)
    assert not consumer.is_alive()
    assert time.monotonic() - began < 3
    assert len(outcome) == 1
    assert isinstance(outcome[0], ValueError)
    assert "closed" in str(outcome[0])
    release.set()  # the stuck threads return from the map, see the stop flag and end
    assert new_threads(5.0) == []
