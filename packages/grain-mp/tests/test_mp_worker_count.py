"""mp_prefetch over positional pipelines: the output and the state ignore the worker count."""

import functools
import json
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grain_dataset import (
    DatasetOptions,
    IterDataset,
    MapDataset,
    ReadOptions,
    WithOptionsIterDataset,
)
from grain_dataset.extension import pipeline_fingerprint
from grain_mp import MultiprocessingOptions, multithread_prefetch

_SETTINGS = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)


def _options(workers):
    return MultiprocessingOptions(num_workers=workers, per_worker_buffer_size=2)


def _add(c, x):
    return x + c


def _keep(k, r, x):
    return int(np.sum(x)) % k != r


def _jitter(x, rng):
    return x + int(rng.integers(0, 100))


def _as_array(x):
    return np.full(3, x)


def _with_index(i, x):
    return x + 1000 * i


# One stage each: (level, name, arguments).
_MAP_STAGE = st.one_of(
    st.tuples(st.just("shuffle"), st.integers(0, 9)),
    st.tuples(st.just("filter"), st.integers(2, 4), st.integers(0, 1)),
    st.tuples(st.just("map"), st.integers(1, 9)),
    st.tuples(st.just("array")),
)
_ITER_STAGE = st.one_of(
    st.tuples(st.just("map"), st.integers(1, 9)),
    st.tuples(st.just("filter"), st.integers(2, 4), st.integers(0, 1)),
    st.tuples(st.just("random_map"), st.integers(0, 9)),
    st.tuples(st.just("map_with_index")),
    st.tuples(st.just("batch"), st.integers(1, 4), st.booleans()),
)
_PIPELINE = st.tuples(
    st.integers(0, 40),
    st.lists(_MAP_STAGE, max_size=3),
    st.sampled_from([0, 2]),
    st.lists(_ITER_STAGE, max_size=4),
)


def _build(spec):
    size, map_stages, threads, iter_stages = spec
    ds = MapDataset.range(size).seed(5)
    for stage in map_stages:
        if stage[0] == "shuffle":
            ds = ds.shuffle(seed=stage[1])
        elif stage[0] == "filter":
            ds = ds.filter(functools.partial(_keep, stage[1], stage[2]))
        elif stage[0] == "array":  # array elements: units are compared by identity
            ds = ds.map(_as_array)
        else:
            ds = ds.map(functools.partial(_add, stage[1]))
    it: IterDataset = ds.to_iter_dataset(ReadOptions(num_threads=threads))
    for stage in iter_stages:
        if stage[0] == "map":
            it = it.map(functools.partial(_add, stage[1]))
        elif stage[0] == "filter":
            it = it.filter(functools.partial(_keep, stage[1], stage[2]))
        elif stage[0] == "random_map":
            it = it.random_map(_jitter, seed=stage[1])
        elif stage[0] == "map_with_index":
            it = it.map_with_index(_with_index)
        else:
            it = it.batch(stage[1], drop_remainder=stage[2])
    return it


def _plain(values):
    return [np.asarray(value).tolist() for value in values]


@pytest.mark.timeout(60)
@_SETTINGS
@given(spec=_PIPELINE)
def test_the_output_is_the_one_process_output_for_every_worker_count(spec):
    ds = _build(spec)
    expected = _plain(ds)
    for workers in (1, 2, 4):
        assert _plain(ds.mp_prefetch(_options(workers))) == expected, workers


@pytest.mark.timeout(60)
@_SETTINGS
@given(
    spec=_PIPELINE,
    saved_with=st.sampled_from([0, 1, 2, 3]),
    restored_with=st.sampled_from([0, 1, 2, 4]),
    fraction=st.floats(0, 1),
)
def test_a_state_taken_with_w_workers_continues_exactly_with_v(
    spec, saved_with, restored_with, fraction
):
    ds = _build(spec)
    expected = _plain(ds)
    steps = int(fraction * len(expected))
    with iter(ds.mp_prefetch(_options(saved_with))) as it:
        head = _plain(next(it) for _ in range(steps))
        state = json.loads(json.dumps(it.get_state()))
    with iter(ds.mp_prefetch(_options(restored_with))) as resumed:
        resumed.set_state(state)
        assert head + _plain(resumed) == expected


@pytest.mark.timeout(60)
@pytest.mark.parametrize("counting", [False, True])
def test_array_elements_batched_in_the_workers(counting):
    # The common case (map, then batch in the workers by blocks), with array elements.
    ds = MapDataset.range(50).map(_as_array).to_iter_dataset()
    ds = (ds.random_map(_jitter, seed=2) if counting else ds).batch(4)
    assert _plain(ds.mp_prefetch(_options(3))) == _plain(ds)


@pytest.mark.timeout(60)
def test_the_state_is_the_plain_pipelines_state():
    ds = MapDataset.range(30).to_iter_dataset().random_map(_jitter, seed=1).batch(4)
    with iter(ds) as plain, iter(ds.mp_prefetch(_options(3))) as workers:
        for _ in range(3):
            assert next(plain).tolist() == next(workers).tolist()
        mine, theirs = plain.get_state(), workers.get_state()
        assert mine == theirs == {"parent": {"next_index": 12}, "index_for_rng": 12}


def _per_worker_batches(size, workers, batch):
    """The round robin of the per-worker execution: worker w batches positions w::n."""
    streams = [
        [list(range(size))[w::workers][i : i + batch] for i in range(0, -(-size // workers), batch)]
        for w in range(workers)
    ]
    out = []
    for turn in range(max(len(s) for s in streams)):
        out += [s[turn] for s in streams if turn < len(s)]
    return out


@pytest.mark.timeout(60)
def test_a_per_worker_state_of_earlier_versions_continues_as_that_run_would():
    ds = MapDataset.range(20).to_iter_dataset().batch(2)
    mp = ds.mp_prefetch(_options(2))
    fingerprint = pipeline_fingerprint(mp)  # as a checkpoint of earlier versions held it
    # Worker 0 had returned batches [0, 2] and [4, 6], worker 1 [1, 3]: worker 1's turn.
    old = {
        "next_worker": 1,
        "parents": [{"next_index": 4}, {"next_index": 2}],
        "grain_fingerprint": fingerprint,
    }
    with iter(mp) as it:
        it.set_state(old)
        rest = [batch.tolist() for batch in it]
        assert set(it.get_state()) >= {"next_worker", "parents"}
        assert rest == _per_worker_batches(20, 2, 2)[3:]
        it.set_state({"next_index": 6, "grain_fingerprint": fingerprint})  # back in order
        assert [batch.tolist() for batch in it] == [[6, 7], *[[x, x + 1] for x in range(8, 20, 2)]]


@pytest.mark.timeout(60)
def test_a_pipeline_that_is_not_positional_keeps_slices_and_refuses_another_count():
    parts = [MapDataset.range(10).to_iter_dataset(), MapDataset.range(100, 110).to_iter_dataset()]
    ds = IterDataset.mix(parts, [0.5, 0.5]).batch(3)
    expected = sorted(np.concatenate(list(ds)).tolist())
    with iter(ds.mp_prefetch(_options(2))) as it:
        got = [batch.tolist() for batch in it]
    assert sorted(x for batch in got for x in batch) == expected
    with iter(ds.mp_prefetch(_options(2))) as it:
        next(it)
        state = it.get_state()
    assert set(state) >= {"next_worker", "parents"}
    other = iter(ds.mp_prefetch(_options(3)))
    with pytest.raises(ValueError, match="another number of workers"):
        other.set_state(state)
    other.close()


def _none_at_3(x):
    return None if x == 3 else x


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["random_map", "batch"])
def test_a_none_without_a_filter_under_a_counting_stage_or_batch_is_named(kind):
    ds = MapDataset.range(10).map(_none_at_3).to_iter_dataset()
    ds = ds.random_map(_jitter, seed=0) if kind == "random_map" else ds.batch(2)
    with pytest.raises(ValueError, match=r"position 3 .*\.filter"):
        list(ds.mp_prefetch(_options(2)))


@pytest.mark.timeout(60)
def test_the_filter_ratio_check_still_applies_in_workers():
    ds = MapDataset.range(400).to_iter_dataset().filter(functools.partial(_keep, 10, 0))
    ds = ds.filter(functools.partial(_keep, 2, 1)).filter(functools.partial(_keep, 5, 1))
    strict = WithOptionsIterDataset(
        ds.mp_prefetch(_options(2)), DatasetOptions(filter_raise_threshold_ratio=0.5)
    )
    with pytest.raises(ValueError, match="dropped"):
        list(strict)


def _with_pid(x):
    return (os.getpid(), x)


@pytest.mark.timeout(60)
def test_options_inside_the_workers_part_still_apply_and_keep_the_maps_there():
    ds = MapDataset.range(400).to_iter_dataset()
    ds = WithOptionsIterDataset(ds, DatasetOptions(filter_raise_threshold_ratio=0.5))
    tagged = list(ds.map(_with_pid).mp_prefetch(_options(2)))
    assert [x for _, x in tagged] == list(range(400))
    assert os.getpid() not in {pid for pid, _ in tagged}
    ds = ds.map(functools.partial(_add, 1)).filter(functools.partial(_keep, 10, 1))
    ds = ds.filter(functools.partial(_keep, 2, 0)).filter(functools.partial(_keep, 5, 0))
    with pytest.raises(ValueError, match="dropped"):
        list(ds.mp_prefetch(_options(2)))


@pytest.mark.timeout(60)
def test_multithread_states_continue_per_worker_and_in_order_states_stay_with_processes():
    ds = MapDataset.range(30).to_iter_dataset().filter(functools.partial(_keep, 4, 0)).batch(3)
    threads = multithread_prefetch(ds, 2, 1)
    with iter(threads) as it:
        head = [next(it).tolist() for _ in range(3)]
        state = it.get_state()
    whole = [b.tolist() for b in threads]  # per thread: not the one-process batches
    assert whole != _plain(ds)
    with iter(ds.mp_prefetch(_options(2))) as it:
        it.set_state(state)
        assert head + [b.tolist() for b in it] == whole
        it.set_state({"next_index": 0})
        in_order = it.get_state()
    with iter(threads) as it, pytest.raises(ValueError, match="next_worker"):
        it.set_state(in_order)


@pytest.mark.timeout(60)
def test_a_batch_in_the_workers_refuses_a_state_inside_one_of_its_batches():
    two = MapDataset.range(20).to_iter_dataset().batch(2)
    with iter(two) as it:
        next(it), next(it)
        state = it.get_state()  # 4 positions: inside the second batch of 3
    three = MapDataset.range(20).to_iter_dataset().batch(3)
    with iter(three.mp_prefetch(_options(2))) as it, pytest.raises(ValueError, match="multiple"):
        it.set_state(state)
    with iter(three) as plain:  # without workers, any position
        plain.set_state(state)
        assert next(plain).tolist() == [4, 5, 6]
