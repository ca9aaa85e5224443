"""DataLoader: same output for every worker_count, epochs, sharding, exact JSON state, errors."""

import itertools
import json
import multiprocessing
import time
import traceback

import numpy as np
import pytest

from grain_dataset import (
    Batch,
    FilterTransform,
    FlatMapTransform,
    IterDataset,
    MapTransform,
    MapWithIndex,
    RandomMapTransform,
    ReadOptions,
    assert_equal_output_after_checkpoint,
)
from grain_index import IndexSampler, NoSharding, RecordMetadata, ShardOptions
from grain_mp._data_loader import DataLoader, PyGrainDatasetIterator, describe_for_checkpoint
from grain_mp._operations import plan_operations

N = 60

# -- transforms (module level: workers run them) --------------------------------------------


class Double(MapTransform):
    def map(self, element):
        return element * 2


class AddNoise(RandomMapTransform):
    """Adds a random multiple of 1000, so the original stays readable as `x % 1000`."""

    def random_map(self, element, rng):
        return element + int(rng.integers(1, 1000)) * 1000


class Draw(RandomMapTransform):
    def random_map(self, element, rng):
        return (element, int(rng.integers(0, 2**62)))


class NotMultipleOf3(FilterTransform):
    def filter(self, element):
        return element % 3 != 0


class BatchSumOdd(FilterTransform):
    def filter(self, element):
        return int(np.sum(element)) % 2 == 1


class WithIndex(MapWithIndex):
    def map_with_index(self, index, element):
        return (index, element)


class Repeat(FlatMapTransform):
    """Element x becomes x % 3 copies of x (0 copies: it disappears)."""

    max_fan_out = 2

    def flat_map(self, element):
        return [element] * (element % 3)


class Unbatch(FlatMapTransform):
    """A batch of 2 becomes its first `batch[0] % 3` elements: 0, 1 or 2 outputs."""

    max_fan_out = 2

    def flat_map(self, element):
        return list(element)[: int(element[0]) % 3]


class ReturnsNone(MapTransform):
    def map(self, element):
        return None


class FailOn(MapTransform):
    def __init__(self, bad):
        self.bad = bad

    def map(self, element):
        if element == self.bad:
            raise KeyError(f"bad record {element}")
        return element


class Slow(MapTransform):
    def map(self, element):
        time.sleep(0.005)
        return element


# -- helpers ------------------------------------------------------------------------------


def _sampler(n=N, *, epochs=2, seed=0, shuffle=True, shard=None):
    return IndexSampler(
        num_records=n,
        shard_options=shard or NoSharding(),
        shuffle=shuffle,
        num_epochs=epochs,
        seed=seed,
    )


def _loader(operations=(), workers=0, *, source=None, sampler=None, **kwargs):
    return DataLoader(
        data_source=list(range(N)) if source is None else source,
        sampler=_sampler() if sampler is None else sampler,
        operations=operations,
        worker_count=workers,
        **kwargs,
    )


def _plain(element):
    """Elements as comparable Python values (batches are arrays)."""
    if isinstance(element, np.ndarray):
        return element.tolist()
    if isinstance(element, tuple):
        return tuple(_plain(e) for e in element)
    return element


def _read(iterable):
    return [_plain(e) for e in iterable]


def _no_children_left():
    deadline = time.monotonic() + 5
    while multiprocessing.active_children() and time.monotonic() < deadline:
        time.sleep(0.02)
    return not multiprocessing.active_children()


PIPELINES = {
    "none": [],
    "map": [Double()],
    "random_map": [AddNoise()],
    "filter": [NotMultipleOf3()],
    "batch": [Double(), Batch(7)],
    "random_map_filter_batch": [AddNoise(), NotMultipleOf3(), Batch(5)],
    "batch_then_filter": [Batch(4), BatchSumOdd(), Double()],
    "filter_batch_random_map": [NotMultipleOf3(), Batch(4, drop_remainder=True), AddNoise()],
    "map_with_index": [WithIndex()],
    "flat_map_batch": [Repeat(), Batch(3)],
    "batch_flat_map": [NotMultipleOf3(), Batch(2), Unbatch(), Batch(3)],
}


# -- the same output for every worker_count ---------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_output_is_the_same_for_0_and_2_workers(name):
    single = _read(_loader(PIPELINES[name], 0))
    assert single  # something to compare
    assert _read(_loader(PIPELINES[name], 2)) == single
    assert _no_children_left()


@pytest.mark.timeout(60)
def test_output_is_the_same_for_3_workers_and_a_large_buffer():
    ops = PIPELINES["random_map_filter_batch"]
    assert _read(_loader(ops, 3, worker_buffer_size=4)) == _read(_loader(ops, 0))


def test_plain_pipeline_reads_the_sampler_order():
    sampler = _sampler()
    expected = [sampler[k].record_key for k in range(len(sampler))]
    assert _read(_loader()) == expected


def test_filter_then_batch_makes_full_batches_of_the_survivors_in_order():
    sampler = _sampler()
    survivors = [k for k in (sampler[s].record_key for s in range(len(sampler))) if k % 3]
    batches = _read(_loader([NotMultipleOf3(), Batch(4)]))
    assert [x for batch in batches for x in batch] == survivors
    assert all(len(batch) == 4 for batch in batches[:-1])
    dropped = _read(_loader([NotMultipleOf3(), Batch(4, drop_remainder=True)]))
    assert dropped == batches[: len(survivors) // 4]


def test_batch_fn_is_used():
    out = _read(_loader([Batch(5, batch_fn=tuple)]))
    assert all(isinstance(batch, tuple) and len(batch) == 5 for batch in out)


# -- epochs and shuffling --------------------------------------------------------------------


def test_each_epoch_is_a_new_permutation_of_the_records():
    out = _read(_loader(sampler=_sampler(epochs=3)))
    epochs = [out[i * N : (i + 1) * N] for i in range(3)]
    assert len(out) == 3 * N
    for epoch in epochs:
        assert sorted(epoch) == list(range(N))
    assert epochs[0] != epochs[1] != epochs[2]
    assert epochs[0] != list(range(N))


def test_seed_decides_the_order_and_no_shuffle_is_sequential():
    assert _read(_loader(sampler=_sampler(seed=1))) != _read(_loader(sampler=_sampler(seed=2)))
    assert _read(_loader(sampler=_sampler(seed=1))) == _read(_loader(sampler=_sampler(seed=1)))
    assert _read(_loader(sampler=_sampler(shuffle=False))) == list(range(N)) * 2


def test_shards_of_the_sampler_partition_each_epoch():
    shards = [
        _read(_loader(sampler=_sampler(epochs=1, shard=ShardOptions(i, 3)))) for i in range(3)
    ]
    assert sorted(itertools.chain(*shards)) == list(range(N))


def test_loader_shard_options_interleave_the_sampler_steps():
    sampler = _sampler(epochs=1)
    full = _read(_loader(sampler=sampler))
    parts = [
        _read(_loader(sampler=_sampler(epochs=1), shard_options=ShardOptions(i, 4)))
        for i in range(4)
    ]
    assert parts == [full[i::4] for i in range(4)]
    odd = [
        len(_read(_loader(sampler=_sampler(n=10, epochs=1), shard_options=ShardOptions(i, 4))))
        for i in range(4)
    ]
    assert odd == [3, 3, 2, 2]
    even = [
        _read(
            _loader(
                sampler=_sampler(n=10, epochs=1),
                source=list(range(10)),
                shard_options=ShardOptions(i, 4, drop_remainder=True),
            )
        )
        for i in range(4)
    ]
    assert [len(part) for part in even] == [2, 2, 2, 2]


def test_sharding_twice_is_refused():
    with pytest.raises(ValueError, match="both the sampler"):
        _loader(sampler=_sampler(shard=ShardOptions(0, 2)), shard_options=ShardOptions(1, 2))


# -- record metadata -------------------------------------------------------------------------


def test_random_map_draws_from_the_records_rng_and_later_ones_continue_it():
    sampler = _sampler()
    out = _read(_loader([Draw(), Draw()]))
    for step, ((key, first), second) in enumerate(out):
        rng = sampler[step].rng
        assert key == sampler[step].record_key
        assert first == int(rng.integers(0, 2**62))
        assert second == int(rng.integers(0, 2**62))
    assert len({first for (_, first), _ in out}) == len(out)


def test_map_with_index_gets_the_global_index():
    sampler = _sampler(shard=ShardOptions(1, 3))
    out = _read(_loader([WithIndex()], sampler=sampler))
    assert out == [(sampler[k].index, sampler[k].record_key) for k in range(len(sampler))]
    assert [index for index, _ in out] == list(range(1, 3 * len(out), 3))


def test_random_map_needs_a_seeded_sampler():
    sampler = IndexSampler(num_records=N, shard_options=NoSharding())
    with pytest.raises(ValueError, match="seed"):
        _loader([AddNoise()], sampler=sampler)


# -- samplers and sources ----------------------------------------------------------------------


class EveryOther:
    """A custom sampler with only __getitem__: records 0, 2, 4, ... then IndexError."""

    def __init__(self, n):
        self.n = n

    def __getitem__(self, step):
        if step >= self.n:
            raise IndexError(step)
        return RecordMetadata(index=step, record_key=2 * step)


class Squares:
    """A source without __getitems__."""

    def __len__(self):
        return 1000

    def __getitem__(self, key):
        return key * key


class Counting:
    """A source that declares batched reads (__getitems__) and counts its calls."""

    batched_reads = True
    calls = 0

    def __len__(self):
        return N

    def __getitem__(self, key):
        raise AssertionError("__getitems__ should be used")

    def __getitems__(self, keys):
        Counting.calls += 1
        return [key + 0.5 for key in keys]


@pytest.mark.parametrize("n", [0, 1, 5, 29])
def test_a_custom_sampler_ends_where_it_raises_index_error(n):
    out = _read(_loader(sampler=EveryOther(n), source=Squares()))
    assert out == [(2 * k) ** 2 for k in range(n)]


def test_a_source_with_getitems_is_read_in_batches():
    Counting.calls = 0
    out = _read(_loader(source=Counting()))
    assert sorted(out) == sorted([k + 0.5 for k in range(N)] * 2)
    assert Counting.calls < len(out) / 4


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [0, 2])
def test_an_endless_sampler_keeps_going_and_restores(workers):
    loader = _loader([NotMultipleOf3(), Batch(4)], workers, sampler=_sampler(epochs=None))
    it = iter(loader)
    first = [_plain(next(it)) for _ in range(50)]  # 200 elements: several epochs
    state = it.get_state()
    more = [_plain(next(it)) for _ in range(5)]
    resumed = iter(loader)
    resumed.set_state(state)
    assert [_plain(next(resumed)) for _ in range(5)] == more
    # 40 of the 60 records survive the filter: 10 batches are one epoch, reshuffled each time.
    flat = [x for batch in first for x in batch]
    epochs = [flat[i * 40 : (i + 1) * 40] for i in range(5)]
    survivors = [x for x in range(N) if x % 3]
    assert all(sorted(epoch) == survivors for epoch in epochs)
    assert len({tuple(epoch) for epoch in epochs}) == 5
    resumed.close()
    it.close()


def test_an_empty_loader_ends_at_once():
    # IndexSampler needs records (as in Grain); a custom sampler may have none.
    assert _read(_loader(sampler=EveryOther(0), source=[])) == []


# -- state --------------------------------------------------------------------------------


def _restores_at_every_point(loader, other, points):
    expected = _read(loader)
    for point in points:
        it = iter(loader)
        head = [_plain(next(it)) for _ in range(point)]
        state = it.get_state()
        it.close()
        resumed = iter(other)
        resumed.set_state(state)
        assert head + _read(resumed) == expected, f"restored at {point}"


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_state_restores_exactly_at_every_point_in_process(name):
    loader = _loader(PIPELINES[name])
    _restores_at_every_point(loader, loader, range(len(_read(loader)) + 1))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_the_loader_is_one_engine_pipeline_that_passes_the_conformance_check(name):
    # The DataLoader's iterator is a Dataset pipeline (grain_mp._loader_pipeline): the
    # contract every stage meets holds for the whole loader too.
    pipeline = _loader(PIPELINES[name])._pipeline
    assert isinstance(pipeline, IterDataset)
    assert_equal_output_after_checkpoint(pipeline)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", ["random_map_filter_batch", "batch_flat_map", "map"])
def test_state_restores_with_workers_and_across_worker_counts(name):
    with_workers = _loader(PIPELINES[name], 2)
    total = len(_read(with_workers))
    points = sorted({0, 1, 2, 3, total // 2, total - 1, total})
    _restores_at_every_point(with_workers, with_workers, points)
    _restores_at_every_point(with_workers, _loader(PIPELINES[name], 0), points)
    _restores_at_every_point(_loader(PIPELINES[name], 0), with_workers, points[::2])
    assert _no_children_left()


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "name", ["filter_batch_random_map", "batch_then_filter", "batch_flat_map", "flat_map_batch"]
)
def test_one_and_four_workers_read_the_same_and_restore_into_each_other(name):
    single = _loader(PIPELINES[name], 0)
    one, four = _loader(PIPELINES[name], 1), _loader(PIPELINES[name], 4)
    assert _read(one) == _read(four) == _read(single)
    total = len(_read(single))
    _restores_at_every_point(four, one, [1, total // 2])
    _restores_at_every_point(one, four, [total // 3])
    _restores_at_every_point(four, single, [total - 1])
    assert _no_children_left()


def test_a_flat_map_after_a_filtered_batch_resumes_inside_an_element():
    loader = _loader(PIPELINES["batch_flat_map"])
    it = iter(loader)
    emitted = []
    for _ in it:
        # The flat map's own state (under the last batch): the outputs of its element
        # returned, Grain's key and values: 1 inside a 2-row element, 2 one used up (left
        # only when the next element is read).
        emitted.append(json.loads(it.get_state())["pipeline"]["next_index_in_buffer"])
    assert set(emitted) == {1, 2}


def test_state_is_small_json_bytes_naming_sampler_and_source():
    it = iter(_loader([NotMultipleOf3(), Batch(4)]))
    next(it)
    raw = it.get_state()
    assert isinstance(raw, bytes)
    state = json.loads(raw)
    assert state["sampler"] == repr(_sampler())
    assert state["data_source"] == "<class 'list'>"  # Grain's description; the length beside
    assert state["data_source_len"] == N
    assert state["version"] == 2
    # Grain's keys: the chunks of 4 steps that the batch of 4 after a filter reads; the
    # first batch took the first chunk, whose last sampler index is 3.
    assert (state["last_seen_indices"], state["last_worker_index"], state["worker_count"]) == (
        {"0": 3},
        -1,
        0,
    )
    assert len(raw) < 800
    rest = _read(it)
    for form in (raw, raw.decode(), state):
        resumed = iter(_loader([NotMultipleOf3(), Batch(4)]))
        resumed.set_state(form)
        assert _read(resumed) == rest


def test_state_before_the_first_element_and_after_the_end():
    loader = _loader([Batch(8)])
    it = iter(loader)
    assert json.loads(it.get_state())["last_seen_indices"] == {"0": -1}
    everything = _read(it)
    end = it.get_state()
    assert json.loads(end)["last_seen_indices"] == {"0": 2 * N - 1}
    resumed = iter(loader)
    resumed.set_state(end)
    assert _read(resumed) == []
    resumed.set_state(iter(loader).get_state())
    assert _read(resumed) == everything


def test_a_state_from_another_sampler_or_source_is_refused():
    it = iter(_loader())
    next(it)
    state = it.get_state()
    with pytest.raises(ValueError, match="sampler"):
        iter(_loader(sampler=_sampler(seed=5))).set_state(state)
    with pytest.raises(ValueError, match="data_source"):
        iter(_loader(source=list(range(N + 1)))).set_state(state)
    with pytest.raises(ValueError, match="shard_options"):
        iter(_loader(shard_options=ShardOptions(0, 2))).set_state(state)


def test_a_state_from_other_operations_or_garbage_is_refused():
    it = iter(_loader([Batch(4)]))
    next(it)
    with pytest.raises(ValueError, match="operations"):
        iter(_loader([Batch(3)])).set_state(it.get_state())
    target = iter(_loader())
    with pytest.raises(ValueError, match="JSON"):
        target.set_state(b"not json")
    with pytest.raises(ValueError, match="keys"):
        target.set_state({"next_index": 3})
    with pytest.raises(TypeError, match="get_state"):
        target.set_state(3)
    state = json.loads(iter(_loader()).get_state())
    state["last_seen_indices"] = {"0": 10**6}
    with pytest.raises(ValueError, match="past the end"):
        target.set_state(state)


def test_descriptions_ignore_addresses_and_generated_segment_names():
    class Plain:
        pass

    assert describe_for_checkpoint(Plain()) == describe_for_checkpoint(Plain())
    assert describe_for_checkpoint(list(range(10**5))) == "list(len=100000)"
    text = "SharedMemoryDataSource(len=5, name='psm_1a2b3c4d', bytes=64)"

    class Shm:
        def __repr__(self):
            return text

    assert describe_for_checkpoint(Shm()) == (
        "SharedMemoryDataSource(len=5, name='<segment>', bytes=64)"
    )

    class Long:
        def __repr__(self):
            return "x" * 5000

    assert len(describe_for_checkpoint(Long())) < 300


# -- arguments -------------------------------------------------------------------------------


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="worker_count"):
        _loader(workers=-1)
    with pytest.raises(TypeError, match="worker_count"):
        _loader(workers=1.5)
    with pytest.raises(ValueError, match="worker_buffer_size"):
        _loader(worker_buffer_size=0)
    with pytest.raises(TypeError, match=r"operations=\[transform\]"):
        _loader(Double())
    with pytest.raises(TypeError, match=r"operations\[1\]"):
        _loader([Double(), 5])  # any callable is an operation, as in Grain; 5 is not
    with pytest.raises(TypeError, match="data_source"):
        _loader(source=iter(range(N)))
    with pytest.raises(TypeError, match="sampler"):
        _loader(sampler=iter(range(N)))
    with pytest.raises(TypeError, match="shard_options"):
        _loader(shard_options=2)
    with pytest.raises(TypeError, match="read_options"):
        _loader(read_options={"num_threads": 2})
    with pytest.raises(TypeError, match="enable_profiling"):
        _loader(enable_profiling="yes")
    with pytest.raises(ValueError, match="`data_source` is empty"):
        _loader(source=[])

    class NoFanOut(FlatMapTransform):
        def flat_map(self, element):
            return [element]

    with pytest.raises(ValueError, match="max_fan_out"):
        _loader([NoFanOut()])


def test_read_options_and_profiling_are_accepted():
    loader = _loader([Double()], read_options=ReadOptions(num_threads=0, prefetch_buffer_size=0))
    assert _read(loader) == _read(_loader([Double()]))
    assert _read(_loader(enable_profiling=True)) == _read(_loader())


def test_the_plan_batches_in_workers_until_a_filter_comes_first():
    plan = plan_operations([Double(), Batch(4), BatchSumOdd()])
    assert (plan.unit, plan.tail, plan.steps_per_unit) == ("item", (), 4)
    plan = plan_operations([NotMultipleOf3(), Batch(4), Double()])
    assert (plan.unit, len(plan.worker), len(plan.tail), plan.chunk_size) == ("chunk", 1, 2, 4)
    plan = plan_operations([Double(), Repeat(), Batch(2)])
    assert (plan.unit, len(plan.worker), len(plan.tail)) == ("fan_out", 1, 1)
    assert plan_operations([AddNoise(), Batch(2)]).tail_metadata is False


# -- errors and processes ---------------------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [0, 2])
def test_an_operation_error_surfaces_at_its_element_and_stays_there(workers):
    loader = _loader([FailOn(bad=13)], workers, sampler=_sampler(shuffle=False))
    it = iter(loader)
    assert [next(it) for _ in range(13)] == list(range(13))
    with pytest.raises(KeyError, match="bad record 13") as info:
        next(it)
    assert "FailOn" in "\n".join(getattr(info.value, "__notes__", []))
    # Shown once, however many layers (workers, the loader) it crossed.
    shown = "".join(traceback.format_exception(info.value))
    assert shown.count("bad record 13") == 1, shown
    assert shown.count("grain: raised by the user function") == 1, shown
    assert shown.count("frames were removed") == 1, shown
    # Grain's keys: 13 records consumed, the last by worker 0 (12) and before it worker 1 (11).
    seen = {"0": 12} if workers == 0 else {"0": 12, "1": 11}
    assert json.loads(it.get_state())["last_seen_indices"] == seen
    with pytest.raises(KeyError, match="bad record 13"):
        next(it)
    it.close()
    assert _no_children_left()


class PassRecords:
    """A record operation that hands its Records on unchanged."""

    def __call__(self, records):
        yield from records


ERROR_PLACES = {
    "worker_side": lambda fail: [fail, NotMultipleOf3(), Batch(2)],
    "after_a_filtered_batch": lambda fail: [NotMultipleOf3(), Batch(2), Unbatch(), fail],
    "inside_a_parent_batch": lambda fail: [Repeat(), fail, Batch(3)],
    "before_a_record_operation": lambda fail: [
        NotMultipleOf3(),
        Batch(2),
        Unbatch(),
        fail,
        PassRecords(),
    ],
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("place", sorted(ERROR_PLACES))
def test_an_error_anywhere_leaves_the_state_before_its_element(place, workers):
    sampler = _sampler(shuffle=False)
    failing = _loader(ERROR_PLACES[place](FailOn(bad=13)), workers, sampler=sampler)
    passing = _loader(ERROR_PLACES[place](FailOn(bad=-1)), workers, sampler=sampler)
    expected = _read(passing)
    it = iter(failing)
    head = []
    while True:
        state = json.loads(it.get_state())
        try:
            head.append(_plain(next(it)))
        except KeyError:
            break
    assert json.loads(it.get_state()) == state
    with pytest.raises(KeyError, match="bad record 13"):
        next(it)
    it.close()
    resumed = iter(passing)
    resumed.set_state(state)
    assert head + _read(resumed) == expected
    assert _no_children_left()


def test_a_map_returning_none_is_an_error():
    with pytest.raises(ValueError, match="FilterTransform"):
        _read(_loader([ReturnsNone()]))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("how", ["break", "close", "with", "end"])
def test_no_worker_is_left_after_stopping(how):
    loader = DataLoader(
        data_source=list(range(2000)),
        sampler=_sampler(n=2000, epochs=1),
        operations=[Slow()],
        worker_count=2,
    )
    if how == "break":
        for _ in loader:
            assert multiprocessing.active_children()
            break
    elif how == "close":
        it = iter(loader)
        next(it)
        it.close()
        assert isinstance(it, PyGrainDatasetIterator)
    elif how == "with":
        with iter(loader) as it:
            next(it)
    else:
        small = _loader([Double()], 2)
        assert len(_read(small)) == 2 * N
    assert _no_children_left()


@pytest.mark.timeout(60)
def test_the_guides_in_memory_example_with_5_workers():
    from grain_sources import InMemoryDataSource

    source = InMemoryDataSource(range(5))
    sampler = IndexSampler(
        num_records=len(source), num_epochs=2, shard_options=NoSharding(), shuffle=True, seed=0
    )
    it = iter(DataLoader(data_source=source, sampler=sampler, worker_count=5))
    out = [next(it) for _ in range(len(source) * 2)]
    assert sorted(out[:5]) == sorted(out[5:]) == list(range(5))
    with pytest.raises(StopIteration):
        next(it)
    source.close()
    assert _no_children_left()
