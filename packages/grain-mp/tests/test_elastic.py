"""ElasticIterator: exactly-once resume on other shard counts, batch sizes and worker counts.

The properties, over random pipelines (shuffle, filter with random keep ratios,
map, MapDataset.mix of filtered components) and random resizes at random
steps: every element of the epoch is delivered at most once, and all but the
last partial batch of each final shard are delivered; the same checkpoint
resumed twice gives the same streams.
"""

import collections
import functools
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grain_dataset import MapDataset, ReadOptions, UnverifiedStateWarning
from grain_index import ShardOptions, decode_runs, encode_runs
from grain_mp import ElasticIterator, MultiprocessingOptions
from grain_mp._elastic_plan import Plan, replan

pytestmark = [
    pytest.mark.timeout(120),
    # Low random keep ratios trip the dataset layer's warning about heavy filters.
    pytest.mark.filterwarnings("ignore:the filters .* dropped:UserWarning"),
]

_SETTINGS = settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)


def _keep(ratio, x):
    return (x * 2654435761) % 997 < ratio * 997


def _same(x):
    return x + 0


def _pipeline(seed, n, filter_ratio=None, mix=0, shuffle=True):
    """A pipeline of distinct ints: one source, or a mix of `mix` filtered sources."""

    def component(k, length, ratio):
        ds = MapDataset.range(10_000 * k, 10_000 * k + length)
        if shuffle:
            ds = ds.shuffle(seed=seed + k)
        if ratio is not None:
            ds = ds.filter(functools.partial(_keep, ratio))
        return ds.map(_same)

    if not mix:
        return component(0, n, filter_ratio)
    rng = np.random.default_rng(seed)
    parts = [component(k, n + 7 * k, rng.uniform(0.3, 1.0)) for k in range(mix)]
    return MapDataset.mix(parts, list(rng.uniform(0.2, 1.0, mix)))


def _iterators(ds, count, batch, workers=0, threads=0):
    mp = MultiprocessingOptions(num_workers=workers, per_worker_buffer_size=2) if workers else None
    return [
        ElasticIterator(
            ds,
            count * batch,
            ShardOptions(index, count),
            read_options=ReadOptions(num_threads=threads, prefetch_buffer_size=8),
            multiprocessing_options=mp,
        )
        for index in range(count)
    ]


def _run(iterators, steps, out):
    """`steps` synchronous steps (None: to the end); a shard that ended stays ended."""
    alive = set(range(len(iterators)))
    step = 0
    while alive and (steps is None or step < steps):
        for index in sorted(alive):
            try:
                batch = next(iterators[index])
            except StopIteration:
                alive.discard(index)
                continue
            assert len(batch) == iterators[index]._batch_size
            out[index].extend(np.asarray(batch).tolist())
        step += 1
    return [it.get_state() for it in iterators]


def _resume(ds, states, count, batch, workers=0, threads=0, steps=None):
    """The streams of `count` shards restored from `states` (None: fresh), and their states."""
    iterators = _iterators(ds, count, batch, workers, threads)
    if states is not None:
        for it in iterators:
            it.set_state(states)
    out = collections.defaultdict(list)
    try:
        new_states = _run(iterators, steps, out)
    finally:
        for it in iterators:
            it.close()
    return dict(out), new_states


def _check_exactly_once(ds, delivered, last_count, last_batch):
    epoch = collections.Counter(ds)  # iterating a MapDataset skips filtered positions
    got = collections.Counter(delivered)
    assert not got - epoch, f"delivered twice or never in the epoch: {got - epoch}"
    missing = sum((epoch - got).values())
    # Only each final shard's last, partial batch may be missing.
    assert missing <= last_count * (last_batch - 1)


resizes = st.lists(
    st.tuples(st.integers(1, 6), st.integers(1, 5), st.integers(0, 6), st.sampled_from([0, 2])),
    min_size=1,
    max_size=4,
)


@_SETTINGS
@given(
    seed=st.integers(0, 1000),
    n=st.integers(20, 160),
    kind=st.sampled_from(["plain", "filter", "mix"]),
    ratio=st.floats(0.05, 1.0),
    generations=resizes,
)
def test_every_element_exactly_once_across_resizes(seed, n, kind, ratio, generations):
    ds = _pipeline(seed, n, ratio if kind == "filter" else None, 3 if kind == "mix" else 0)
    delivered = []
    states = None
    for count, batch, steps, threads in generations:
        iterators = _iterators(ds, count, batch, threads=threads)
        if states is not None:
            for it in iterators:
                it.set_state(states)
        out = collections.defaultdict(list)
        states = _run(iterators, steps, out)
        delivered.extend(x for stream in out.values() for x in stream)
        for it in iterators:
            it.close()
    # The last run takes one element per shard and step, so that nothing may be missing.
    count = generations[-1][0]
    out, _ = _resume(ds, states, count, 1)
    delivered.extend(x for stream in out.values() for x in stream)
    _check_exactly_once(ds, delivered, count, 1)


@_SETTINGS
@given(
    seed=st.integers(0, 1000),
    kind=st.sampled_from(["filter", "mix"]),
    old=st.integers(1, 5),
    new=st.integers(1, 5),
    steps=st.integers(0, 5),
)
def test_the_same_checkpoint_resumes_to_the_same_streams(seed, kind, old, new, steps):
    ds = _pipeline(seed, 120, 0.5 if kind == "filter" else None, 2 if kind == "mix" else 0)
    iterators = _iterators(ds, old, 2)
    states = _run(iterators, steps, collections.defaultdict(list))
    first, _ = _resume(ds, json.loads(json.dumps(states)), new, 3)
    second, _ = _resume(ds, states, new, 3, threads=2)
    assert first == second


@_SETTINGS
@given(
    n=st.integers(10, 200),
    old=st.integers(1, 6),
    batch=st.integers(1, 4),
    new=st.integers(1, 6),
    new_batch=st.integers(1, 4),
    steps=st.integers(0, 6),
    which=st.integers(0, 5),
)
def test_one_to_one_any_one_shard_state_restores_all(n, old, batch, new, new_batch, steps, which):
    ds = _pipeline(3, n)
    iterators = _iterators(ds, old, batch)
    out = collections.defaultdict(list)
    states = _run(iterators, steps, out)
    if all(len(stream) == steps * batch for stream in out.values()):
        assert len({json.dumps({**s, "shard_index": 0}) for s in states}) == 1
    delivered = [x for stream in out.values() for x in stream]
    rest, _ = _resume(ds, states[which % old], new, new_batch)
    delivered.extend(x for stream in rest.values() for x in stream)
    _check_exactly_once(ds, delivered, new, new_batch)


def test_a_fresh_run_is_the_plain_sharded_pipeline():
    ds = _pipeline(5, 103, 0.6)
    for index in range(3):
        plain = ds[index::3].to_iter_dataset().batch(4, drop_remainder=True)
        elastic = _iterators(ds, 3, 4)[index]
        assert [b.tolist() for b in elastic] == [b.tolist() for b in plain]


def test_filter_pipelines_need_all_old_states_for_a_new_shard_count():
    ds = _pipeline(1, 100, 0.5)
    iterators = _iterators(ds, 4, 2)
    states = _run(iterators, 2, collections.defaultdict(list))
    it = _iterators(ds, 3, 2)[0]
    with pytest.raises(ValueError, match="needs the states of all 4 old shards"):
        it.set_state(states[0])
    with pytest.raises(ValueError, match="pass each of its 4 shards' states once"):
        it.set_state(states[:3])
    with pytest.raises(ValueError, match="pass each of its 4 shards' states once"):
        it.set_state([states[0], *states[:3]])
    same = _iterators(ds, 4, 2)[2]
    same.set_state(states[2])  # its own state, same shard count: fine
    assert same.get_state() == states[2]


def test_a_state_of_another_pipeline_is_refused():
    iterators = _iterators(_pipeline(1, 100, 0.5), 2, 2)
    states = _run(iterators, 2, collections.defaultdict(list))
    other = _iterators(_pipeline(2, 100, 0.5), 3, 2)[0]
    with pytest.raises(ValueError, match="different pipeline"):
        other.set_state(states)
    with pytest.raises(ValueError, match="different pipeline"):
        _iterators(_pipeline(2, 100, 0.5), 2, 2)[0].set_state(states[0])
    bare = [{k: v for k, v in s.items() if k != "grain_fingerprint"} for s in states]
    with pytest.warns(UnverifiedStateWarning):
        other.set_state(bare)


@pytest.mark.parametrize(
    ("state", "match"),
    [
        ({"next_index": 3}, "not an ElasticIterator state"),
        ("nope", "takes a state"),
        ([], "empty"),
    ],
)
def test_bad_states_say_what_is_wrong(state, match):
    it = _iterators(_pipeline(1, 50), 2, 2)[0]
    with pytest.raises((ValueError, TypeError), match=match):
        it.set_state(state)


def test_bad_arguments_say_what_is_wrong():
    ds = MapDataset.range(10)
    with pytest.raises(TypeError, match="unbatched, unsharded"):
        ElasticIterator(ds.to_iter_dataset(), 4, ShardOptions(0, 2))
    with pytest.raises(ValueError, match="not divisible by the shard count 3"):
        ElasticIterator(ds, 4, ShardOptions(0, 3))
    with pytest.raises(TypeError, match="ShardOptions"):
        ElasticIterator(ds, 4, (0, 2))


def test_multi_epoch_resize_in_one_epoch_keeps_the_next_exact():
    epochs = 3
    base = _pipeline(4, 60, 0.7)
    ds = base.repeat(epochs)
    iterators = _iterators(ds, 4, 3)
    out = collections.defaultdict(list)
    states = _run(iterators, 3, out)  # in epoch 0
    delivered = [x for s in out.values() for x in s]
    rest, states = _resume(ds, states, 3, 2, steps=9)  # into epoch 1
    delivered.extend(x for s in rest.values() for x in s)
    again = _resume(ds, states, 5, 2)[0]
    assert again == _resume(ds, states, 5, 2)[0]
    delivered.extend(x for s in again.values() for x in s)
    per_epoch = collections.Counter(base)
    expected = collections.Counter({k: v * epochs for k, v in per_epoch.items()})
    got = collections.Counter(delivered)
    assert not got - expected
    assert sum((expected - got).values()) <= 5 * (2 - 1)


def test_the_state_stays_small_after_many_resizes():
    ds = _pipeline(9, 5000, 0.5)
    states = None
    sizes = []
    for count in [64, 48, 64, 7, 33, 64, 64, 50, 64, 64, 17, 64]:
        iterators = _iterators(ds, count, 2)
        if states is not None:
            for it in iterators:
                it.set_state(states)
        states = _run(iterators, 1, collections.defaultdict(list))
        sizes.append(len(json.dumps(states[0])))
    # A few integers per old shard: the band between the slowest and the fastest shard.
    assert max(sizes) < 64 * 40
    assert len(states[0]["leftovers"]) <= 2 * 64


def test_runs_round_trip():
    rng = np.random.default_rng(0)
    for _ in range(200):
        positions = rng.integers(0, 50, rng.integers(0, 30))
        positions = np.concatenate([positions, np.arange(3, 40, 4)])
        rng.shuffle(positions)
        assert decode_runs(encode_runs(positions)).tolist() == positions.tolist()
    assert encode_runs(np.arange(0, 40, 4)) == [[0, 4, 10]]


@given(
    taken=st.lists(st.integers(0, 12), min_size=1, max_size=7),
    owed=st.lists(st.integers(0, 5), max_size=12, unique=True),
)
@settings(deadline=None)
def test_replan_owes_exactly_what_no_shard_took(taken, owed):
    owed = [p + 1000 for p in owed]
    plan = Plan(frontier=2000, leftovers=np.asarray(owed, dtype=np.int64))
    count = len(taken)
    took = set()
    for shard, k in enumerate(taken):
        owed_s, fresh = plan.shard_positions(shard, count)
        sequence = [*owed_s.tolist(), *range(fresh, fresh + count * k, count)]
        took.update(sequence[:k])
    new = replan(plan, taken)
    again = set(new.leftovers.tolist())
    assert len(again) == len(new.leftovers)
    assert not again & took
    horizon = set(owed) | set(range(2000, new.frontier))
    assert again | took >= horizon
    assert again <= horizon


@pytest.mark.timeout(180)
def test_the_output_does_not_depend_on_the_number_of_workers():
    ds = _pipeline(11, 90, mix=2)
    reference, _ = _resume(ds, None, 2, 3, threads=2)
    for workers in (1, 2, 4):
        assert _resume(ds, None, 2, 3, workers, threads=2)[0] == reference


@pytest.mark.timeout(180)
def test_a_checkpoint_with_w_workers_restores_with_v_on_another_shard_count():
    ds = _pipeline(12, 120, 0.6)
    first, states = _resume(ds, None, 3, 2, 2, threads=2, steps=3)
    rest = {workers: _resume(ds, states, 2, 3, workers, threads=2)[0] for workers in (0, 1, 4)}
    assert rest[0] == rest[1] == rest[4]
    delivered = [x for s in first.values() for x in s] + [x for s in rest[0].values() for x in s]
    _check_exactly_once(ds, delivered, 2, 3)


def test_load_reads_every_old_process_file_on_another_process_count(tmp_path):
    import asyncio

    from grain_dataset.extension import state_to_text, write_state

    ds = _pipeline(13, 80, 0.5)
    iterators = _iterators(ds, 3, 2)
    out = collections.defaultdict(list)
    _run(iterators, 2, out)
    for index, it in enumerate(iterators):
        write_state(tmp_path, state_to_text(it.get_state(), it), (index, 3))
    single = _iterators(ds, 1, 1)[0]  # this process is 0 of 1: its own file is missing
    asyncio.run(single.load(tmp_path))
    rest = [x for batch in single for x in batch.tolist()]
    delivered = [x for s in out.values() for x in s] + rest
    _check_exactly_once(ds, delivered, 1, 1)
    assert sorted(delivered) == sorted(ds)
    (tmp_path / "process_1-of-3.json").unlink()
    with pytest.raises(FileNotFoundError, match=r"process_1-of-3\.json is missing"):
        asyncio.run(_iterators(ds, 1, 1)[0].load(tmp_path))


def _tokens(x):
    # Every token of element x is x + 1 (0 is padding): the packed rows tell who is in them.
    return {"tokens": np.full(1 + x % 5, x + 1, dtype=np.int32)}


def _packing():
    from grain_dataset import FirstFitPackIterDataset

    return functools.partial(FirstFitPackIterDataset, length_struct={"tokens": 8})


def _packed_run(ds, count, batch, states=None, steps=None, workers=0):
    mp = MultiprocessingOptions(num_workers=workers) if workers else None
    iterators = [
        ElasticIterator(
            ds,
            count * batch,
            ShardOptions(index, count),
            read_options=ReadOptions(num_threads=0),
            multiprocessing_options=mp,
            packing=_packing(),
        )
        for index in range(count)
    ]
    tokens = []
    alive = set(range(count))
    step = 0
    try:
        for it in iterators:
            if states is not None:
                it.set_state(states)
        while alive and (steps is None or step < steps):
            for index in sorted(alive):
                try:
                    rows = next(iterators[index])["tokens"]
                except StopIteration:
                    alive.discard(index)
                    continue
                assert rows.shape == (batch, 8)
                tokens.extend(rows[rows > 0].tolist())
            step += 1
        return tokens, [it.get_state() for it in iterators]
    finally:
        for it in iterators:
            it.close()


@settings(max_examples=15, deadline=None, derandomize=True)
@given(
    seed=st.integers(0, 1000),
    kind=st.sampled_from(["plain", "filter", "mix"]),
    generations=st.lists(
        st.tuples(st.integers(1, 4), st.integers(1, 4), st.integers(0, 4)), min_size=1, max_size=3
    ),
)
def test_packing_delivers_every_token_exactly_once_across_resizes(seed, kind, generations):
    ds = _pipeline(seed, 90, 0.5 if kind == "filter" else None, 2 if kind == "mix" else 0)
    ds = ds.map(_tokens)
    delivered, states = [], None
    for count, batch, steps in generations:
        tokens, states = _packed_run(ds, count, batch, states, steps)
        delivered.extend(tokens)
    # One bin per shard and step at the end: the last group is never a partial batch.
    tokens, _ = _packed_run(ds, generations[-1][0], 1, states)
    delivered.extend(tokens)
    epoch = collections.Counter(t for element in ds for t in element["tokens"].tolist())
    assert collections.Counter(delivered) == epoch


@pytest.mark.timeout(180)
def test_packing_does_not_depend_on_the_number_of_workers():
    ds = _pipeline(21, 80, 0.6).map(_tokens)
    reference = _packed_run(ds, 2, 3)[0]
    assert _packed_run(ds, 2, 3, workers=2)[0] == reference
    _, states = _packed_run(ds, 3, 2, steps=2, workers=2)
    assert _packed_run(ds, 2, 2, states)[0] == _packed_run(ds, 2, 2, states, workers=1)[0]


def test_packing_must_use_the_bins_it_is_given():
    from grain_dataset import FirstFitPackIterDataset

    def wrong(elements, num_packing_bins):
        return FirstFitPackIterDataset(
            elements, length_struct={"tokens": 8}, num_packing_bins=num_packing_bins + 1
        )

    ds = MapDataset.range(50).map(_tokens)
    it = ElasticIterator(ds, 2, ShardOptions(0, 1), packing=wrong)
    with pytest.raises(ValueError, match="num_packing_bins it is given"):
        for _ in it:
            pass
    it = ElasticIterator(ds, 2, ShardOptions(0, 1), packing=lambda e, num_packing_bins: e)
    with pytest.raises(TypeError, match="packing IterDataset over the dataset"):
        next(it)


@pytest.mark.slow
@pytest.mark.timeout(900)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10**6),
    n=st.integers(20, 400),
    kind=st.sampled_from(["plain", "filter", "mix"]),
    ratio=st.floats(0.05, 1.0),
    generations=st.lists(
        st.tuples(st.integers(1, 9), st.integers(1, 6), st.integers(0, 8), st.just(0)),
        min_size=1,
        max_size=8,
    ),
)
def test_soak_every_element_exactly_once_across_many_resizes(seed, n, kind, ratio, generations):
    test_every_element_exactly_once_across_resizes.hypothesis.inner_test(
        seed, n, kind, ratio, generations
    )
