"""Grain's smaller experimental names: next index, cache, RngPool, closed iterators, config,
traceback filtering, monitoring."""

import threading
import traceback

import numpy as np
import pytest

import grain_dataset
from grain_dataset import (
    CacheIterDataset,
    DatasetOptions,
    MapDataset,
    ReadOptions,
    RepeatIterDataset,
    RngPool,
    ShapeDtypeStruct,
    ShapeDtypeStructProtocol,
    ThreadPrefetchDatasetIterator,
    ThreadPrefetchIterDataset,
    config,
    get_next_index,
    monitoring,
    set_next_index,
)

# -- get_next_index / set_next_index ------------------------------------------------------------

ONE_TO_ONE = {
    "to_iter_dataset": lambda: MapDataset.range(20).shuffle(seed=1).to_iter_dataset(),
    "no threads": lambda: MapDataset.range(20).to_iter_dataset(ReadOptions(num_threads=0)),
    "a MapDataset": lambda: MapDataset.range(20).map(lambda x: x * 3),
    "map": lambda: MapDataset.range(20).to_iter_dataset().map(lambda x: -x),
    "map_with_index": lambda: (
        MapDataset.range(20).to_iter_dataset().map_with_index(lambda i, x: (i, x))
    ),
    "random_map": lambda: (
        MapDataset.range(20)
        .to_iter_dataset()
        .random_map(lambda x, rng: (x, int(rng.integers(10**6))), seed=3)
    ),
    "thread prefetch": lambda: ThreadPrefetchIterDataset(
        MapDataset.range(20).to_iter_dataset().map(lambda x: x + 1), prefetch_buffer_size=4
    ),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("make", ONE_TO_ONE.values(), ids=ONE_TO_ONE.keys())
def test_next_index_counts_elements_and_a_jump_equals_reading_up_to_there(make):
    expected = list(make())
    for k in (0, 1, 7, 19, 20):
        it = iter(make())
        for _ in range(k):
            next(it)
        assert get_next_index(it) == k
        assert list(it) == expected[k:]
        jumped = iter(make())
        set_next_index(jumped, k)
        assert get_next_index(jumped) == k
        assert list(jumped) == expected[k:]
        jumped.close()


def test_next_index_of_a_batch_counts_batches():
    ds = MapDataset.range(10).to_iter_dataset().batch(4)
    it = iter(ds)
    next(it)
    assert get_next_index(it) == 1
    set_next_index(it, 2)
    assert next(it).tolist() == [8, 9]
    assert get_next_index(it) == 3


@pytest.mark.parametrize(
    "make",
    [
        lambda: MapDataset.range(9).to_iter_dataset().filter(lambda x: x % 2),
        lambda: grain_dataset.IterDataset.mix(
            [MapDataset.range(3).to_iter_dataset(), MapDataset.range(3).to_iter_dataset()]
        ),
    ],
    ids=["filter", "mix"],
)
def test_next_index_of_a_stage_without_one_is_not_implemented(make):
    it = iter(make())
    with pytest.raises(NotImplementedError, match="get_state"):
        get_next_index(it)
    with pytest.raises(NotImplementedError, match="get_state"):
        set_next_index(it, 1)


def test_set_next_index_checks_its_index():
    it = iter(MapDataset.range(5).to_iter_dataset())
    with pytest.raises(IndexError, match="past the end"):
        set_next_index(it, 6)
    with pytest.raises(ValueError, match="index"):
        set_next_index(it, -1)
    with pytest.raises(TypeError):
        get_next_index(MapDataset.range(3))


# -- CacheIterDataset ---------------------------------------------------------------------------


class CountingMap:
    def __init__(self):
        self.calls = 0

    def __call__(self, x):
        self.calls += 1
        return x * 10


def test_cache_reads_the_parent_once_and_serves_later_passes():
    counting = CountingMap()
    cached = CacheIterDataset(MapDataset.range(6).to_iter_dataset(ReadOptions(0)).map(counting))
    assert not cached.is_filled
    assert list(cached) == [0, 10, 20, 30, 40, 50]
    assert cached.is_filled
    assert counting.calls == 6
    assert list(RepeatIterDataset(cached, num_epochs=3)) == [0, 10, 20, 30, 40, 50] * 3
    assert counting.calls == 6


def test_cache_state_restores_exactly_before_and_after_filling():
    def make():
        return CacheIterDataset(MapDataset.range(8).shuffle(seed=2).to_iter_dataset())

    ds = make()
    expected = list(ds)  # fills
    for k in range(9):
        it = iter(ds)
        for _ in range(k):
            next(it)
        state = it.get_state()
        assert state["cache_filled"] is True
        assert state["position"] == k
        fresh = iter(make())  # another process: nothing cached
        fresh.set_state(state)
        assert list(fresh) == expected[k:]
        again = iter(ds)
        again.set_state(state)
        assert list(again) == expected[k:]


def test_an_iterator_restored_mid_pass_does_not_fill_the_cache():
    ds = CacheIterDataset(MapDataset.range(5).to_iter_dataset())
    first = iter(CacheIterDataset(MapDataset.range(5).to_iter_dataset()))
    next(first)
    next(first)
    it = iter(ds)
    it.set_state(first.get_state())
    assert list(it) == [2, 3, 4]
    assert not ds.is_filled
    assert list(ds) == [0, 1, 2, 3, 4]
    assert ds.is_filled


def test_cache_of_a_map_dataset_and_bad_parents():
    assert list(CacheIterDataset(MapDataset.range(3))) == [0, 1, 2]
    with pytest.raises(TypeError, match="parent"):
        CacheIterDataset([1, 2, 3])


# -- RngPool ------------------------------------------------------------------------------------


def test_rng_pool_streams_depend_only_on_seed_op_seed_and_index():
    pool = RngPool(seed=7)
    draws = {}
    for index in range(5):
        for op in (0, 3):
            rng = pool.acquire_rng(index, op_seed=op)
            draws[index, op] = rng.integers(0, 2**32, size=4).tolist()
            pool.release_rng(rng)  # the next acquire reuses this object
    assert len({tuple(v) for v in draws.values()}) == len(draws)
    other = RngPool(seed=7)
    assert other.acquire_rng(3, op_seed=3).integers(0, 2**32, size=4).tolist() == draws[3, 3]
    assert RngPool(seed=8).acquire_rng(3).integers(0, 2**32, size=4).tolist() != draws[3, 0]


def test_rng_pool_checks_its_arguments():
    with pytest.raises(ValueError, match="seed"):
        RngPool(-1)
    with pytest.raises(ValueError, match="index"):
        RngPool(1).acquire_rng(-1)
    with pytest.raises(TypeError, match="acquire_rng"):
        RngPool(1).release_rng(np.random.default_rng(0))


def test_shape_dtype_struct_protocol():
    assert isinstance(np.zeros((2, 3)), ShapeDtypeStructProtocol)
    assert isinstance(ShapeDtypeStruct((2,), np.int32), ShapeDtypeStructProtocol)
    assert not isinstance(3, ShapeDtypeStructProtocol)
    assert not isinstance([1, 2], ShapeDtypeStructProtocol)


# -- closed iterators ---------------------------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "make",
    [
        lambda: MapDataset.range(10).to_iter_dataset(),
        lambda: MapDataset.range(10),
        lambda: MapDataset.range(10).to_iter_dataset().batch(2),
        lambda: ThreadPrefetchIterDataset(
            MapDataset.range(10).to_iter_dataset(), prefetch_buffer_size=2
        ),
    ],
)
def test_next_on_a_closed_iterator_raises_and_its_state_still_resumes(make):
    it = iter(make())
    next(it)
    it.close()
    state = it.get_state()
    with pytest.raises(ValueError, match="closed iterator"):
        next(it)
    it.close()  # idempotent
    resumed = iter(make())
    resumed.set_state(state)
    assert [np.asarray(x).tolist() for x in resumed] == [
        np.asarray(x).tolist() for x in list(make())[1:]
    ]
    assert threading.active_count() < 40


def test_a_with_block_closes_the_iterator():
    with iter(MapDataset.range(4).to_iter_dataset()) as it:
        assert next(it) == 0
    with pytest.raises(ValueError, match="closed"):
        next(it)


def test_thread_prefetch_iterator_takes_an_iterator():
    it = ThreadPrefetchDatasetIterator(iter(MapDataset.range(6).to_iter_dataset()), 2)
    assert [next(it) for _ in range(3)] == [0, 1, 2]
    state = it.get_state()
    other = ThreadPrefetchDatasetIterator(iter(MapDataset.range(6).to_iter_dataset()), 2)
    other.set_state(state)
    assert list(other) == [3, 4, 5]
    it.close()
    with pytest.raises(TypeError, match="ThreadPrefetchIterDataset"):
        ThreadPrefetchDatasetIterator(MapDataset.range(3).to_iter_dataset(), 2)
    with pytest.raises(ValueError, match="prefetch_buffer_size"):
        ThreadPrefetchDatasetIterator(iter(MapDataset.range(3)), -1)


# -- config, tracebacks, debug mode, monitoring ---------------------------------------------------


@pytest.fixture
def fresh_config():
    config.reset()
    yield config
    config.reset()


def test_config_update_get_and_attributes(fresh_config, monkeypatch):
    assert fresh_config.get_or_default("py_debug_mode") is False
    monkeypatch.setenv("GRAIN_PY_DEBUG_MODE", "1")
    assert fresh_config.py_debug_mode is True
    fresh_config.update("py_debug_mode", False)  # update wins over the environment
    assert fresh_config.get_or_default("py_debug_mode") is False
    fresh_config.update("py_traceback_filtering", "OFF")
    assert fresh_config.py_traceback_filtering == "off"
    assert fresh_config.describe()["tf_lookup_batch_size"]["has_effect"] is False


@pytest.mark.parametrize(
    ("name", "value", "match"),
    [
        ("no_such_option", 1, "Unrecognized config option"),
        ("py_debug_mode", "maybe", "must be a bool"),
        ("py_traceback_filtering", "sometimes", "must be one of"),
        ("tf_lookup_batch_size", 1.5, "must be an integer"),
    ],
)
def test_config_refuses_unknown_names_and_bad_values(fresh_config, name, value, match):
    with pytest.raises(ValueError, match=match):
        fresh_config.update(name, value)
    with pytest.raises(AttributeError):
        fresh_config.no_such_option  # noqa: B018


def _fails_on_3(x):
    if x == 3:
        raise KeyError("bad element 3")
    return x


def _raise_from_pipeline():
    ds = MapDataset.range(6).map(_fails_on_3).to_iter_dataset(ReadOptions(num_threads=2))
    with pytest.raises(KeyError) as info:
        list(ds)
    return info.value


@pytest.mark.timeout(60)
def test_tracebacks_show_the_users_frames_not_ours_unless_asked(fresh_config):
    error = _raise_from_pipeline()
    files = [frame.filename for frame in traceback.extract_tb(error.__traceback__)]
    assert not any("grain_dataset" in f for f in files), files
    assert any(f == __file__ for f in files)
    assert any("frames were removed" in note for note in error.__notes__)
    assert any("_fails_on_3" in line for line in traceback.format_exception(error))

    fresh_config.update("py_traceback_filtering", "off")
    error = _raise_from_pipeline()
    files = [frame.filename for frame in traceback.extract_tb(error.__traceback__)]
    assert any("grain_dataset" in f for f in files)
    assert not any("frames were removed" in note for note in getattr(error, "__notes__", []))

    fresh_config.update("py_traceback_filtering", "quiet_remove_frames")
    error = _raise_from_pipeline()
    assert not any("frames were removed" in note for note in error.__notes__)


def test_debug_mode_records_statistics_of_every_pipeline(fresh_config):
    plain = iter(MapDataset.range(50).to_iter_dataset().map(lambda x: x + 1))
    list(plain)
    assert plain.stats().stages == []
    fresh_config.update("py_debug_mode", True)
    it = iter(MapDataset.range(50).to_iter_dataset().map(lambda x: x + 1).batch(5))
    assert len(list(it)) == 10
    stats = it.stats()
    assert [stage.elements for stage in stats.stages][-1] == 10
    assert any(s is not None and s.stages[-1].elements == 10 for s in monitoring.pipeline_stats())


def test_stage_timing_option_lists_the_pipeline_in_monitoring(fresh_config):
    ds = grain_dataset.WithOptionsIterDataset(
        MapDataset.range(8).to_iter_dataset(),
        DatasetOptions(execution_tracking_mode="stage_timing", min_shm_size=1024),
    )
    it = iter(ds)
    list(it)
    listed = monitoring.pipeline_stats()
    assert any(stats.stages and stats.stages[-1].elements == 8 for stats in listed)


def test_monitoring_metrics_keep_values_per_label():
    counter = monitoring.Counter("/test/grain_extras/c", fields=[("stage", str)])
    counter.Increment("a")
    counter.IncrementBy(4, "a")
    assert counter.Get("a") == 5
    assert counter.Get("b") == 0
    with pytest.raises(ValueError, match="fields"):
        counter.Increment("a", "b")
    gauge = monitoring.Metric("/test/grain_extras/g", int)
    gauge.Set(3)
    assert gauge.Get() == 3
    events = monitoring.EventMetric(
        "/test/grain_extras/e",
        monitoring.Metadata(description="e", units=monitoring.Units.MILLISECONDS),
        bucketer=monitoring.Bucketer.PowersOf(2.0),
    )
    for value in (1.0, 3.0, 8.0):
        events.Record(value)
    dist = events.Get()
    assert (dist.count, dist.sum, dist.min, dist.max) == (3, 12.0, 1.0, 8.0)
    monitoring.record_bytes_read_and_latency("src", num_bytes=10, latency_ns=50, num_reads=2)
    snap = monitoring.snapshot()
    assert snap["/test/grain_extras/c"] == {"a": 5}
    assert snap["/grain/python/source/bytes_read"]["src"] >= 10
    with pytest.raises(ValueError, match="exists already"):
        monitoring.Metric("/test/grain_extras/c")
    assert monitoring.get_monitoring_root() is None


# -- Grain's exception types and dict mixtures ---------------------------------------------------


def test_iter_mix_takes_grains_dicts_of_datasets_and_weights():
    a = MapDataset.range(10).to_iter_dataset()
    b = MapDataset.range(100, 103).to_iter_dataset()
    by_name = list(grain_dataset.IterDataset.mix({"a": a, "b": b}, {"b": 1, "a": 2}))
    assert by_name == list(grain_dataset.IterDataset.mix([a, b], [2, 1]))
    assert list(grain_dataset.IterDataset.mix({"a": a, "b": b})) == list(
        grain_dataset.IterDataset.mix([a, b])
    )
    with pytest.raises(ValueError, match="keys"):
        grain_dataset.IterDataset.mix({"a": a, "b": b}, {"a": 1})
    # A list of weights goes with the dict's datasets in order, as in Grain.
    assert list(grain_dataset.IterDataset.mix({"a": a, "b": b}, [2, 1])) == by_name
    with pytest.raises(TypeError, match="dict"):
        grain_dataset.IterDataset.mix([a, b], {"a": 1, "b": 1})


@pytest.mark.parametrize("bad", [None, 3, "x", 1.5])
def test_slice_by_a_non_slice_raises_both_type_and_value_error(bad):
    # Grain raises ValueError here, this library TypeError: the error is both.
    for kind in (TypeError, ValueError):
        with pytest.raises(kind, match="slice"):
            MapDataset.range(5).slice(bad)


def test_out_of_range_positions_raise_index_error_as_in_grain():
    it = iter(MapDataset.range(5).to_iter_dataset())
    for state in ({"next_index": -1}, {"next_index": 6}):
        for kind in (IndexError, ValueError):
            with pytest.raises(kind):
                it.set_state(state)
    with pytest.raises(IndexError):
        set_next_index(it, -1)
    assert next(it) == 0


def test_batch_and_pad_of_no_list_and_bos_of_a_string_raise_value_error_too():
    with pytest.raises(ValueError, match="values"):
        grain_dataset.batch_and_pad(None, batch_size=2)
    with pytest.raises(ValueError, match="bos_handling"):
        grain_dataset.ConcatThenSplitIterDataset(
            MapDataset.range(3).to_iter_dataset(), length_struct={"x": 4}, bos_handling="x"
        )
